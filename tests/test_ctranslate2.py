"""CTranslate2 behind the engine, with real tiny models (ours and a MarianMT): our converter
(`decoding/ctranslate2_backend.py`) computes what ours computes; the backend (`decoding/backends.py`)
gives the engine's greedy ids, bounds, notices and confidences; conversions are cached by the weights' fingerprint;
the app's translators load it. Skipped where the optional `ctranslate2` package is not installed."""

import math
import time

import pytest
import torch
from conftest import DATA_DIR, ROOT, tiny_config
from tiny_marian import build_tiny_marian

from modeling import TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import set_translation_defaults
from transformer_en_de.app import translators
from transformer_en_de.decoding import backends, ctranslate2_backend
from transformer_en_de.decoding.engine import DecodingSettings, confidences, translate
from transformer_en_de.decoding.loading import load_model

ctranslate2 = pytest.importorskip("ctranslate2")

SOURCES = [
    "A dog runs in the park.",
    "Two men are working.",
    "A girl in a red dress is smiling.",
    "The cat sleeps on the sofa.",
    "Three people ride bicycles.",
]
NEW_TOKENS = 12


def greedy_pairs(model, tokenizer, folder, sources=SOURCES, new_tokens=NEW_TOKENS):
    """(ours, CTranslate2's) greedy new tokens per source, without the start token and </s>."""
    translator = ctranslate2_backend.load(ctranslate2_backend.convert(model, tokenizer, folder))
    ids = tokenizer(sources)["input_ids"]
    theirs = ctranslate2_backend.translate_ids(translator, tokenizer, ids, beam_size=1, max_decoding_length=new_tokens)
    pairs = []
    for source_ids, other in zip(ids, theirs, strict=True):
        with torch.inference_mode():
            output = model.generate(
                torch.tensor([source_ids]), num_beams=1, max_new_tokens=new_tokens + 1, max_new_tokens_ratio=None
            )
        mine = [token for token in output[0, 1:].tolist() if token != model.config.eos_token_id]
        pairs.append((mine[:new_tokens], other[:new_tokens]))
    return pairs


@pytest.mark.parametrize("norm_placement", ["post", "pre"])
@pytest.mark.parametrize("layers", [(2, 2), (6, 1)], ids=["2+2", "deep encoder 6+1"])
def test_converted_model_writes_our_greedy_tokens(tiny_tokenizer, tmp_path, norm_placement, layers):
    torch.manual_seed(0)
    # Wide weights: the output changes with the input, so a weight mapped to the wrong place would show.
    config = tiny_config(
        tiny_tokenizer, init_std=0.5, norm_placement=norm_placement, encoder_layers=layers[0], decoder_layers=layers[1]
    )
    model = TransformerMTForConditionalGeneration(config).eval()
    pairs = greedy_pairs(model, tiny_tokenizer, tmp_path / "ct2")
    assert all(mine == other for mine, other in pairs), pairs
    assert len({tuple(mine) for mine, _ in pairs}) > 1


def test_the_shipped_model_converts_to_its_own_greedy_tokens_and_to_int8(tmp_path):
    """The shipped folder through our converter: CTranslate2 writes PyTorch's greedy
    tokens on real validation sentences, and its int8 conversion translates them nearly as well."""
    folder = ROOT / "models" / "transformer-en-de"
    model, tokenizer = load_model(str(folder))
    sources = (DATA_DIR / "val.en").read_text(encoding="utf-8").splitlines()[:16]
    pairs = greedy_pairs(model, tokenizer, tmp_path / "ct2", sources, new_tokens=40)
    assert all(mine == other for mine, other in pairs), pairs
    assert len({tuple(mine) for mine, _ in pairs}) == len(sources)  # real, different translations

    greedy = DecodingSettings(num_beams=1)
    float32 = translate(model, tokenizer, sources, greedy).texts
    converted = backends.convert_cached(str(folder), model, tokenizer, int8=True, cache=tmp_path / "cache")
    int8 = backends.CTranslate2Backend(converted, tokenizer, int8=True)
    try:
        quantized = translate(model, tokenizer, sources, greedy, backend=int8).texts
    finally:
        int8.close()
    assert all(quantized) and sum(a == b for a, b in zip(quantized, float32, strict=True)) >= len(sources) // 2


def test_converted_logits_match_ours(tiny_tokenizer, tmp_path):
    """The log-probabilities of every token of a reference translation agree to float32 rounding."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5)).eval()
    translator = ctranslate2_backend.load(ctranslate2_backend.convert(model, tiny_tokenizer, tmp_path / "ct2"))
    source = tiny_tokenizer(SOURCES[0])["input_ids"]
    target = tiny_tokenizer(text_target="Ein Hund rennt im Park.")["input_ids"]
    tokens = tiny_tokenizer.convert_ids_to_tokens
    result = translator.score_batch([tokens(source)], [tokens(target[:-1])])[0]  # it adds the start and </s>
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([source]), labels=torch.tensor([target])).logits
    expected = torch.log_softmax(logits[0], dim=-1).gather(1, torch.tensor(target)[:, None]).squeeze(1)
    assert torch.allclose(torch.tensor(result.log_probs), expected, atol=1e-4)


# -- the backend behind the engine --------------------------------------------------------------------------------

ENGINE_SOURCES = SOURCES + [
    "Two dogs.",
    "A very small boy in a green jacket runs after a red ball on the grass in the park near the lake.",
    "Men.",
    "A WOMAN WITH A HAT READS A BOOK TO THREE CHILDREN.",
]


@pytest.fixture(autouse=True)
def conversion_cache(tmp_path, monkeypatch):
    """Conversions go to this test's folder, never to the user's cache."""
    monkeypatch.setenv(backends.CACHE_VARIABLE, str(tmp_path / "ct2-cache"))
    return tmp_path / "ct2-cache"


@pytest.fixture(scope="module")
def wide_dir(tiny_tokenizer, tmp_path_factory):
    """A saved tiny model of ours with wide random weights (its output depends on its input), decoding as a trained
    model ships (beam 4, length penalty 0.6, the bound per sentence)."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5)).eval()
    set_translation_defaults(model.generation_config, model.config)
    folder = tmp_path_factory.mktemp("wide")
    model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return build_tiny_marian(tmp_path_factory.mktemp("tiny-marian"))


def loaded(folder, **options):
    model, tokenizer = load_model(str(folder))
    return model, tokenizer, backends.load_backend(str(folder), model, tokenizer, **options)


@pytest.mark.parametrize("process", [True, False], ids=["worker", "in-process"])
@pytest.mark.parametrize("which", ["ours", "marian"])
def test_greedy_ids_bounds_and_notices_are_the_torch_backends(which, process, wide_dir, marian_dir):
    """Greedy search: the same ids, the same sentences stopped at their bound, the same notices (casing), for our
    model (our converter) and MarianMT (CTranslate2's TransformersConverter), CTranslate2 in a worker or here."""
    model, tokenizer, decoder = loaded(wide_dir if which == "ours" else marian_dir, process=process)
    try:
        # A tight bound: sentences of one batch reach different limits, which CTranslate2 alone cannot do per sentence.
        settings = DecodingSettings(num_beams=1, batch_size=3, max_new_tokens_ratio=0.5, max_new_tokens_offset=2)
        ours = translate(model, tokenizer, ENGINE_SOURCES, settings)
        theirs = translate(model, tokenizer, ENGINE_SOURCES, settings, backend=decoder)
    finally:
        decoder.close()
    assert [t.generated_ids for t in theirs.translations] == [t.generated_ids for t in ours.translations]
    assert [t.hit_length_bound for t in theirs.translations] == [t.hit_length_bound for t in ours.translations]
    assert theirs.texts == ours.texts and theirs.notices == ours.notices
    assert "sentence case" in theirs.notices[0]
    assert theirs.plan.backend == decoder.name and ours.plan.backend == "PyTorch"
    assert len({tuple(t.generated_ids) for t in ours.translations}) > 2  # the output depends on the input
    assert any(t.hit_length_bound for t in theirs.translations)
    assert len(set(theirs.plan.limits)) > 2  # limits differ inside a batch: each sentence cut at its own


@pytest.mark.parametrize("num_beams", [1, 3])
def test_every_sentence_is_bounded_on_its_own(num_beams, wide_dir):
    model, tokenizer, decoder = loaded(wide_dir)
    ratio, offset = 0.5, 1
    settings = DecodingSettings(num_beams=num_beams, max_new_tokens_ratio=ratio, max_new_tokens_offset=offset)
    try:
        run = translate(model, tokenizer, ENGINE_SOURCES, settings, backend=decoder)
    finally:
        decoder.close()
    limits = run.plan.limits
    for translation, limit in zip(run.translations, limits, strict=True):
        assert limit == math.ceil(ratio * len(translation.source_ids)) + offset
        assert translation.new_tokens <= limit
        assert translation.hit_length_bound == (translation.new_tokens >= limit)
        assert translation.generated_ids[-1] == model.config.eos_token_id
    assert len(set(limits)) > 2 and any(t.hit_length_bound for t in run.translations)


@pytest.mark.parametrize("which", ["ours", "marian"])
def test_confidences_from_score_batch_are_the_torch_ones(which, wide_dir, marian_dir):
    model, tokenizer, decoder = loaded(wide_dir if which == "ours" else marian_dir)
    try:
        settings = DecodingSettings(num_beams=2, batch_size=4, max_new_tokens_ratio=0.5, max_new_tokens_offset=2)
        run = translate(model, tokenizer, ENGINE_SOURCES, settings, backend=decoder)
        translations = run.translations[:-1] + [None]  # a sentence not translated has none
        theirs = confidences(model, translations, batch_size=3, backend=decoder)
    finally:
        decoder.close()
    ours = confidences(model, translations, batch_size=3)
    assert theirs[-1] is None and ours[-1] is None
    assert theirs[:-1] == pytest.approx(ours[:-1], abs=1e-4)
    assert len(set(round(value, 3) for value in ours[:-1])) > 2
    assert any(t.hit_length_bound for t in translations if t)  # forced </s> left out on both sides


def test_scoring_confidences_with_ctranslate2_asks_should_stop_between_batches(wide_dir):
    # CTranslate2 has no decoder hook where another visitor's request could take the CPU: scoring a 2,000-line file
    # must still hand it over between its batches, and stop there when told to.
    model, tokenizer, decoder = loaded(wide_dir)
    asked = []
    try:
        run = translate(model, tokenizer, ENGINE_SOURCES, DecodingSettings(num_beams=1, batch_size=2), backend=decoder)
        scored = confidences(
            model,
            run.translations,
            batch_size=2,
            backend=decoder,
            should_stop=lambda: asked.append(1) or len(asked) > 1,
        )
    finally:
        decoder.close()
    assert len(asked) == 2  # before the first batch (go on), before the second (stop)
    assert all(value is not None for value in scored[:2]) and all(value is None for value in scored[2:])


def test_truncation_progress_should_stop_and_deadline_between_batches(wide_dir, tiny_tokenizer):
    model, tokenizer, decoder = loaded(wide_dir)
    long_sentence = " ".join(["A dog runs in the park."] * 40)
    sources = [*ENGINE_SOURCES, long_sentence]
    settings = DecodingSettings(num_beams=1, batch_size=4)
    calls, asked = [], []
    try:
        run = translate(model, tokenizer, sources, settings, backend=decoder, progress=lambda *c: calls.append(c))
        stopped = translate(
            model,
            tokenizer,
            sources,
            settings,
            backend=decoder,
            should_stop=lambda: asked.append(1) or len(asked) > 1,
        )
        late = translate(model, tokenizer, sources, settings, backend=decoder, deadline=time.monotonic() - 1)
    finally:
        decoder.close()
    assert calls == [(4, 10), (8, 10), (10, 10)]
    assert run.translations[-1].source_truncated and len(run.translations[-1].source_ids) == 64
    assert any("longer than the 64 tokens" in notice for notice in run.notices)
    assert stopped.stopped_early and sum(t is not None for t in stopped.translations) == 4
    assert late.stopped_early and late.translations == [None] * len(sources)
    assert late.notices == [f"stopped after 0 of {len(sources)} sentences."]


# -- conversion, cached --------------------------------------------------------------------------------------------


def test_conversion_is_cached_and_redone_when_the_weights_change(wide_dir, conversion_cache, tmp_path):
    folder = tmp_path / "model"
    model, tokenizer = load_model(str(wide_dir))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    first = backends.convert_cached(str(folder), model, tokenizer)
    made = (first / "model.bin").stat().st_mtime_ns
    assert first.is_relative_to(conversion_cache) and not any(folder.glob("ctranslate2-*"))
    assert backends.convert_cached(str(folder), *load_model(str(folder))) == first  # the same weights: reused
    assert (first / "model.bin").stat().st_mtime_ns == made
    int8 = backends.convert_cached(str(folder), model, tokenizer, int8=True)
    assert int8 != first and "int8" in int8.name

    with torch.no_grad():
        model.get_output_embeddings().weight[5] += 1.0  # changed weights, saved in the same folder
    model.save_pretrained(folder)
    second = backends.convert_cached(str(folder), *load_model(str(folder)))
    assert second != first and (second / "model.bin").is_file()
    assert not first.exists() and int8.exists()  # the stale float32 conversion is gone; the int8 one is another kind


def test_a_missing_package_or_folder_is_one_line(tmp_path, tiny_tokenizer):
    with pytest.raises(backends.BackendError, match="unknown backend 'onnx'"):
        backends.resolve_backend("onnx")
    assert backends.resolve_backend("auto") == "ctranslate2"
    with pytest.raises(backends.BackendError, match="cannot load") as error:
        backends.CTranslate2Backend(tmp_path, tiny_tokenizer)
    assert "\n" not in str(error.value)


# -- the app's translators ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("backend", "int8", "name"),
    [
        ("torch", False, "PyTorch"),
        ("ctranslate2", False, "CTranslate2 float32"),
        ("auto", True, "CTranslate2 int8"),
    ],
)
def test_translators_load_with_a_backend(backend, int8, name, wide_dir):
    translator = translators.load_translator(str(wide_dir), "ours", backend=backend, int8=int8)
    assert translator.backend_name == name
    assert (translator.backend is None) == (backend == "torch")
    assert translator.model.config.d_model == 32  # the torch model is there for the Inside tab either way
    greedy = DecodingSettings(num_beams=1)
    run = translate(translator.model, translator.tokenizer, SOURCES, greedy, backend=translator.backend)
    if translator.backend is not None:
        translator.backend.close()
    assert run.plan.backend == name
    if not int8:  # float32: the ids of the model itself
        assert run.texts == translate(translator.model, translator.tokenizer, SOURCES, greedy).texts


def test_comparison_model_lists_and_why_one_is_missing(tmp_path):
    for none in ("", "  ", "none", "None", [""], [], None):
        assert translators.parse_model_list(none) == []
    assert translators.parse_model_list(["a/b,c", " d "]) == ["a/b", "c", "d"]
    assert translators.parse_model_list("a/b, ./c  d") == ["a/b", "./c", "d"]

    empty = translators.BackgroundTranslator("", "nothing")
    offline = translators.BackgroundTranslator("Helsinki-NLP/opus-mt-en-de", "MarianMT")
    missing = translators.BackgroundTranslator(str(tmp_path / "opus-mt"), "opus")
    deadline = time.monotonic() + 60
    while not all(system.done for system in (empty, offline, missing)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert empty.error == "nothing is not on this page: failed to load: no model id was given."
    assert offline.error == (
        "MarianMT (Helsinki-NLP/opus-mt-en-de) is not on this page: the Hugging Face Hub is offline and the model is "
        "not cached"
    )
    assert missing.error.startswith("opus (opus-mt) is not on this page: failed to load: ")
    assert str(tmp_path) not in missing.error and "\n" not in missing.error


def test_why_a_model_is_missing_names_no_server_path():
    cache = "/root/.cache/transformer_en_de/ctranslate2/opus-mt-en-de/ctranslate2-float32-0123/model.bin"
    full = RuntimeError(f"could not be loaded: [Errno 28] No space left on device: '{cache}'")
    line = translators.why_not_loaded("MarianMT", "Helsinki-NLP/opus-mt-en-de", full)
    assert line == (
        "MarianMT (Helsinki-NLP/opus-mt-en-de) is not on this page: failed to load: [Errno 28] No space left on "
        "device: 'model.bin'"
    )
    missing = FileNotFoundError(2, "No such file or directory", "/srv/app/.venv/lib/python3.11/site-packages/t5.py")
    assert "/" not in translators.why_not_loaded("t5-small", "t5-small", missing)
    assert translators.without_paths("a </s> in en/de, at https://huggingface.co/x/y") == (
        "a </s> in en/de, at https://huggingface.co/x/y"
    )
