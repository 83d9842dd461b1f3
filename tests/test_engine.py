"""The translation engine's contract, with real tiny models (ours and a MarianMT), and the parity of our beam search
(finished sentences leave the batch) with transformers' own: `torch.equal` of the generated ids."""

import copy
import math

import pytest
import torch
from conftest import DATA_DIR, PAIRS, ROOT, tiny_config
from tiny_marian import build_tiny_marian
from transformers import MarianMTModel, MarianTokenizer

import modeling.modeling_transformer_mt as modeling_code
from modeling import TransformerMTForConditionalGeneration
from modeling.length_bound import SourceLengthBound, new_token_limits
from tokenizer import load_tokenizer
from transformer_en_de.engine import DecodingSettings, translate

SOURCES = [english for english, _ in PAIRS] + [
    "Two dogs.",
    "A very small boy in a green jacket runs after a red ball on the grass in the park near the lake.",
    "Men.",
    "A woman with a hat reads a book to three children on a bench.",
]


@pytest.fixture(scope="module")
def wide_model(tiny_tokenizer):
    """A tiny model of ours with wide random weights: its translations depend on the source and differ in length."""
    torch.manual_seed(0)
    return TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5)).eval()


@pytest.fixture(scope="module")
def marian(tmp_path_factory):
    folder = build_tiny_marian(tmp_path_factory.mktemp("tiny-marian"))
    return MarianMTModel.from_pretrained(folder).eval(), MarianTokenizer.from_pretrained(folder)


@pytest.fixture
def plain(wide_model):
    """The same model with transformers' beam search (every sentence decodes until the batch is done)."""
    model = copy.deepcopy(wide_model)
    model.drop_finished_sentences = False
    return model


# -- the engine's contract ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("num_beams", [1, 4])
def test_batched_results_come_back_in_input_order_equal_to_one_by_one(wide_model, tiny_tokenizer, num_beams):
    settings = DecodingSettings(num_beams=num_beams, batch_size=5)
    batched = translate(wide_model, tiny_tokenizer, SOURCES, settings)
    one_by_one = [translate(wide_model, tiny_tokenizer, [sentence], settings).translations[0] for sentence in SOURCES]
    assert [t.generated_ids for t in batched.translations] == [t.generated_ids for t in one_by_one]
    assert batched.texts == [t.text for t in one_by_one]
    assert len(set(batched.texts)) > 1  # the model's output depends on its input: a mix-up would show


def test_results_are_in_input_order_for_marian(marian):
    model, tokenizer = marian
    settings = DecodingSettings(num_beams=2, batch_size=3)
    batched = translate(model, tokenizer, SOURCES, settings).texts
    assert batched == [translate(model, tokenizer, [sentence], settings).texts[0] for sentence in SOURCES]


def test_greedy_and_beam_settings_reach_generate(wide_model, tiny_tokenizer):
    sentence = SOURCES[1]
    inputs = tiny_tokenizer([sentence], return_tensors="pt")
    for num_beams in (1, 3):
        run = translate(wide_model, tiny_tokenizer, [sentence], DecodingSettings(num_beams=num_beams))
        with torch.inference_mode():
            expected = wide_model.generate(**inputs, num_beams=num_beams, length_penalty=0.6, early_stopping=True)
        assert run.translations[0].generated_ids == [
            token for token in expected[0].tolist() if token != wide_model.config.pad_token_id
        ]


def test_model_defaults_are_the_saved_generation_config(wide_model, tiny_tokenizer):
    default = translate(wide_model, tiny_tokenizer, SOURCES[:4]).texts
    explicit = translate(wide_model, tiny_tokenizer, SOURCES[:4], DecodingSettings(num_beams=4, length_penalty=0.6))
    assert wide_model.generation_config.num_beams == 4
    assert default == explicit.texts


@pytest.mark.parametrize("which", ["ours", "marian"])
def test_every_model_is_bounded_per_sentence(which, wide_model, tiny_tokenizer, marian):
    model, tokenizer = (wide_model, tiny_tokenizer) if which == "ours" else marian
    ratio, offset = 0.5, 1
    run = translate(
        model,
        tokenizer,
        SOURCES,
        DecodingSettings(num_beams=2, max_new_tokens_ratio=ratio, max_new_tokens_offset=offset, batch_size=4),
    )
    for translation in run.translations:
        limit = math.ceil(ratio * len(translation.source_ids)) + offset
        assert translation.new_tokens <= limit
        assert translation.hit_length_bound == (translation.new_tokens >= limit)
    assert any(translation.hit_length_bound for translation in run.translations)  # random models run on


def test_long_sources_are_truncated_with_a_notice(wide_model, tiny_tokenizer):
    long_sentence = " ".join(["A dog runs in the park."] * 40)
    run = translate(wide_model, tiny_tokenizer, ["Two men are working.", long_sentence], DecodingSettings(num_beams=1))
    assert [t.source_truncated for t in run.translations] == [False, True]
    assert len(run.translations[1].source_ids) == tiny_tokenizer.model_max_length
    assert len(run.notices) == 1 and "sentence 2" in run.notices[0] and "64 tokens" in run.notices[0]


def test_progress_is_reported_after_each_batch(wide_model, tiny_tokenizer):
    calls = []
    translate(
        wide_model,
        tiny_tokenizer,
        SOURCES,
        DecodingSettings(num_beams=1, batch_size=5),
        progress=lambda done, total: calls.append((done, total)),
    )
    assert calls == [(5, 12), (10, 12), (12, 12)]


def test_should_stop_is_asked_before_each_batch(wide_model, tiny_tokenizer):
    asked = []

    def should_stop():
        asked.append(True)
        return len(asked) > 1  # let the first batch through

    run = translate(
        wide_model, tiny_tokenizer, SOURCES, DecodingSettings(num_beams=1, batch_size=5), should_stop=should_stop
    )
    assert run.stopped_early and len(asked) == 2
    assert sum(t is not None for t in run.translations) == 5
    assert run.notices == ["stopped after 5 of 12 sentences."]
    assert run.texts.count("") >= 7  # sentences not reached have no translation


def test_no_sentences_is_an_empty_run(wide_model, tiny_tokenizer):
    run = translate(wide_model, tiny_tokenizer, [])
    assert run.translations == [] and run.texts == [] and not run.stopped_early


@pytest.mark.parametrize(
    "field, value",
    [
        ("num_beams", 0),
        ("max_new_tokens", 0),
        ("max_new_tokens_ratio", 0.0),
        ("max_new_tokens_offset", -1),
        ("batch_size", 0),
        ("top_p", 1.5),
        ("temperature", 0.0),
    ],
)
def test_decoding_settings_reject_invalid_values(field, value):
    with pytest.raises(ValueError, match=field):
        DecodingSettings(**{field: value})


# -- our beam search: finished sentences leave the batch, the ids stay the same -----------------------------------


def _generate(model, tokenizer, sources, **options):
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    with torch.inference_mode():
        return model.generate(**batch, **options)


@pytest.mark.parametrize(
    "options",
    [
        dict(num_beams=4, length_penalty=0.6, early_stopping=True),
        dict(num_beams=3, length_penalty=1.0, early_stopping=False),
        dict(num_beams=2, length_penalty=0.0, early_stopping="never"),
        dict(num_beams=4, length_penalty=0.6, early_stopping=True, max_new_tokens_ratio=None, max_new_tokens=12),
        dict(num_beams=4, early_stopping=True, no_repeat_ngram_size=2, bad_words_ids=[[5], [7]]),
    ],
)
def test_beam_search_gives_the_ids_of_transformers_beam_search(wide_model, plain, tiny_tokenizer, options, monkeypatch):
    calls = []
    search = modeling_code.compact_beam_search
    monkeypatch.setattr(modeling_code, "compact_beam_search", lambda *a, **k: calls.append(1) or search(*a, **k))
    ours = _generate(wide_model, tiny_tokenizer, SOURCES, **options)
    assert calls, "the search fell back to transformers' loop: nothing was compared"
    theirs = _generate(plain, tiny_tokenizer, SOURCES, **options)
    assert torch.equal(ours, theirs)


def test_sentences_leave_the_batch_at_different_steps(wide_model, plain, tiny_tokenizer):
    """With the per-sentence bound, short sources end early and long ones run on: the case the loop is for."""
    limits = new_token_limits(
        tiny_tokenizer(SOURCES, return_tensors="pt", padding=True)["attention_mask"].sum(-1), 0.5, 2
    )
    assert limits.min() < limits.max()
    options = dict(num_beams=4, max_new_tokens_ratio=0.5, max_new_tokens_offset=2)
    ours = _generate(wide_model, tiny_tokenizer, SOURCES, **options)
    assert torch.equal(ours, _generate(plain, tiny_tokenizer, SOURCES, **options))
    assert ours.shape[1] - 1 == limits.max()


def test_engine_translations_match_transformers_beam_search(wide_model, plain, tiny_tokenizer):
    settings = DecodingSettings(num_beams=4, batch_size=6)
    ours = translate(wide_model, tiny_tokenizer, SOURCES, settings).translations
    theirs = translate(plain, tiny_tokenizer, SOURCES, settings).translations
    assert [t.generated_ids for t in ours] == [t.generated_ids for t in theirs]


def test_searches_it_does_not_cover_stay_with_transformers(wide_model, plain, tiny_tokenizer):
    options = dict(num_beams=4, num_return_sequences=2, output_scores=True, return_dict_in_generate=True)
    ours = _generate(wide_model, tiny_tokenizer, SOURCES[:3], **options)
    theirs = _generate(plain, tiny_tokenizer, SOURCES[:3], **options)
    assert torch.equal(ours.sequences, theirs.sequences) and ours.sequences.shape[0] == 6


def test_length_bound_narrows_to_a_subset_of_sentences():
    bound = SourceLengthBound(torch.tensor([3, 5, 7]), eos_token_id=2)
    bound.prompt_length = 1
    narrowed = bound.select_sentences(torch.tensor([0, 2]))
    assert narrowed.limits.tolist() == [3, 7] and narrowed.prompt_length == 1


@pytest.mark.slow
def test_shipped_model_beam_search_parity_on_multi30k():
    folder = ROOT / "models" / "transformer-en-de"
    model = TransformerMTForConditionalGeneration.from_pretrained(folder).eval()
    tokenizer = load_tokenizer(folder)
    plain = copy.deepcopy(model)
    plain.drop_finished_sentences = False
    sources = (DATA_DIR / "val.en").read_text(encoding="utf-8").splitlines()[:64]
    ours = translate(model, tokenizer, sources).translations
    theirs = translate(plain, tokenizer, sources).translations
    assert [t.generated_ids for t in ours] == [t.generated_ids for t in theirs]


def test_beam_search_follows_weight_updates(tiny_tokenizer):
    """The output projection kept between calls is rebuilt when the weights change (training, loading)."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5)).eval()
    plain = copy.deepcopy(model)
    plain.drop_finished_sentences = False
    _generate(model, tiny_tokenizer, SOURCES[:3], num_beams=3)
    with torch.no_grad():
        for changed in (model, plain):
            changed.get_output_embeddings().weight.mul_(-1.5)
    options = dict(num_beams=3)
    assert torch.equal(
        _generate(model, tiny_tokenizer, SOURCES, **options), _generate(plain, tiny_tokenizer, SOURCES, **options)
    )
