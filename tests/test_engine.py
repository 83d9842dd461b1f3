"""The translation engine's contract, with real tiny models (ours and a MarianMT), and the parity of our beam search
(finished sentences leave the batch) with transformers' own: `torch.equal` of the generated ids."""

import copy
import math
import time
from dataclasses import replace

import pytest
import torch
from conftest import DATA_DIR, PAIRS, ROOT, tiny_config
from tiny_marian import build_tiny_marian
from transformers import MarianMTModel, MarianTokenizer

import modeling.modeling_transformer_mt as modeling_code
from modeling import TransformerMTForConditionalGeneration
from modeling.length_bound import SourceLengthBound, new_token_limits
from modeling.modeling_transformer_mt import set_translation_defaults
from tokenizer import load_tokenizer
from transformer_en_de.decoding import engine
from transformer_en_de.decoding.budget import StepCost, decoding_seconds, fit_budget
from transformer_en_de.decoding.engine import DecodingSettings, plan_decoding, run_plan, translate
from transformer_en_de.decoding.int8 import int8_dynamic

SOURCES = [english for english, _ in PAIRS] + [
    "Two dogs.",
    "A very small boy in a green jacket runs after a red ball on the grass in the park near the lake.",
    "Men.",
    "A woman with a hat reads a book to three children on a bench.",
]


@pytest.fixture(scope="module")
def wide_model(tiny_tokenizer):
    """A tiny model of ours with wide random weights: its translations depend on the source and differ in length.
    It decodes as a trained model ships (beam 4, length penalty 0.6, the length bound)."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5)).eval()
    set_translation_defaults(model.generation_config, model.config)
    return model


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


# -- casing: text typed in capitals is read in sentence case, for every model -------------------------------------


@pytest.mark.parametrize("which", ["ours", "marian"])
def test_capitals_are_read_in_sentence_case(which, wide_model, tiny_tokenizer, marian):
    model, tokenizer = (wide_model, tiny_tokenizer) if which == "ours" else marian
    settings = DecodingSettings(num_beams=2, max_new_tokens=12)
    shouting = translate(model, tokenizer, ["A DOG RUNS IN THE PARK.", "Two men are working."], settings)
    typed = translate(model, tokenizer, ["A dog runs in the park.", "Two men are working."], settings)

    assert [t.generated_ids for t in shouting.translations] == [t.generated_ids for t in typed.translations]
    assert shouting.translations[0].source_ids == typed.translations[0].source_ids
    assert [t.case_normalised for t in shouting.translations] == [True, False]
    assert shouting.notices == ["1 sentence was typed in capitals and read in sentence case (sentence 1)."]
    as_typed = translate(model, tokenizer, ["A DOG RUNS IN THE PARK."], DecodingSettings(normalise_case=False))
    assert as_typed.translations[0].source_ids != typed.translations[0].source_ids
    assert not as_typed.translations[0].case_normalised and as_typed.notices == []


def test_ordinary_text_is_read_as_typed(wide_model, tiny_tokenizer):
    sources = SOURCES + ["The USA is big.", "OK"]  # a few capitals are not shouting
    settings = DecodingSettings(num_beams=2, batch_size=5)
    normalised = translate(wide_model, tiny_tokenizer, sources, settings)
    as_typed = translate(
        wide_model, tiny_tokenizer, sources, DecodingSettings(num_beams=2, batch_size=5, normalise_case=False)
    )
    assert [t.generated_ids for t in normalised.translations] == [t.generated_ids for t in as_typed.translations]
    assert not any(t.case_normalised for t in normalised.translations) and normalised.notices == []


@pytest.mark.parametrize("which", ["ours", "marian"])
def test_special_tokens_typed_as_text_are_read_as_text(which, wide_model, tiny_tokenizer, marian):
    model, tokenizer = (wide_model, tiny_tokenizer) if which == "ours" else marian
    typed = "A dog </s> runs <pad> on the grass."
    run = translate(model, tokenizer, [typed], DecodingSettings(num_beams=2, max_new_tokens=8))
    source_ids = run.translations[0].source_ids
    assert source_ids.index(tokenizer.eos_token_id) == len(source_ids) - 1  # the source ends at its end only
    assert tokenizer.pad_token_id not in source_ids
    if which == "ours":  # byte-level BPE: every character is in the vocabulary
        assert tokenizer.decode(source_ids, skip_special_tokens=True) == typed


# -- a deadline ends the batch in progress and keeps what the search had written ----------------------------------


class StepClock:
    """`time.monotonic()` one second later at every call: the engine asks once before each batch and once at each
    decoding step, so a deadline of d ends the first batch when d - 1 new tokens are written."""

    perf_counter = staticmethod(time.perf_counter)

    def __init__(self):
        self.now = 0.0

    def monotonic(self) -> float:
        self.now += 1.0
        return self.now


@pytest.mark.parametrize("which", ["ours", "marian"])
def test_deadline_in_greedy_search_keeps_the_tokens_written(which, wide_model, tiny_tokenizer, marian, monkeypatch):
    model, tokenizer = (wide_model, tiny_tokenizer) if which == "ours" else marian
    settings = DecodingSettings(num_beams=1, max_new_tokens_ratio=1e6, max_new_tokens=20, batch_size=5)
    free = translate(model, tokenizer, SOURCES, settings).translations
    monkeypatch.setattr(engine, "time", StepClock())

    run = translate(model, tokenizer, SOURCES, settings, deadline=4.0)  # ends the first batch at 3 new tokens

    first_batch = sorted(range(len(SOURCES)), key=lambda i: len(free[i].source_ids), reverse=True)[:5]
    eos = model.generation_config.eos_token_id
    for index, (translation, expected) in enumerate(zip(run.translations, free, strict=True)):
        if index not in first_batch:
            assert translation is None  # no batch starts after the deadline
        elif translation.cut:  # the search's 3 tokens, then the </s> that ended it
            assert translation.generated_ids == expected.generated_ids[:4] + [eos] and translation.new_tokens == 4
        else:  # it had ended before
            assert translation.generated_ids == expected.generated_ids and expected.new_tokens <= 3
    assert any(t.cut for t in run.translations if t) and run.stopped_early
    assert any("the deadline passed while decoding" in notice for notice in run.notices)
    assert run.notices[-1] == f"stopped after 5 of {len(SOURCES)} sentences."


@pytest.mark.parametrize("which", ["ours", "marian"])
def test_the_turn_point_is_called_at_every_step_and_may_stop_the_search(which, wide_model, tiny_tokenizer, marian):
    # What shares the CPU between requests acts where a reader sees it: a logits processor the engine hands generate()
    # (`TurnPoint`), called once a step; one that raises stops the search there, and nothing is kept.
    model, tokenizer = (wide_model, tiny_tokenizer) if which == "ours" else marian
    settings = DecodingSettings(num_beams=4, max_new_tokens_ratio=1e6, max_new_tokens=6, batch_size=len(SOURCES))
    steps = []
    run = translate(model, tokenizer, SOURCES, settings, at_each_step=lambda: steps.append(1))
    assert len(steps) == max(translation.new_tokens for translation in run.translations)

    class Left(Exception):
        pass

    def leave():
        raise Left

    with pytest.raises(Left):
        translate(model, tokenizer, SOURCES, settings, at_each_step=leave)


def test_deadline_in_beam_search_keeps_the_sentences_done(wide_model, tiny_tokenizer, monkeypatch):
    """Short sources end early (the bound), long ones still run at the deadline: those end where they are."""
    settings = DecodingSettings(num_beams=4, max_new_tokens_ratio=0.5, max_new_tokens_offset=2, batch_size=12)
    free = translate(wide_model, tiny_tokenizer, SOURCES, settings).translations
    steps = 6
    assert min(t.new_tokens for t in free) <= steps < max(t.new_tokens for t in free)
    monkeypatch.setattr(engine, "time", StepClock())

    run = translate(wide_model, tiny_tokenizer, SOURCES, settings, deadline=steps + 1.0)

    for translation, expected in zip(run.translations, free, strict=True):
        if expected.new_tokens <= steps:  # it had ended before
            assert translation.generated_ids == expected.generated_ids and not translation.cut
        else:
            assert translation.cut and translation.new_tokens == steps + 1 and not translation.hit_length_bound
            assert translation.generated_ids[-1] == wide_model.generation_config.eos_token_id
    assert run.stopped_early and sum(t.cut for t in run.translations) > 1


def test_deadline_in_transformers_beam_search_ends_the_batch(marian, monkeypatch):
    model, tokenizer = marian
    settings = DecodingSettings(num_beams=3, max_new_tokens_ratio=1e6, max_new_tokens=30, batch_size=len(SOURCES))
    free = translate(model, tokenizer, SOURCES, settings).translations
    monkeypatch.setattr(engine, "time", StepClock())

    run = translate(model, tokenizer, SOURCES, settings, deadline=4.0)

    assert all(t is not None for t in run.translations) and any(t.cut for t in run.translations)
    for translation, expected in zip(run.translations, free, strict=True):
        assert translation.new_tokens <= 4
        if translation.cut:
            assert translation.generated_ids[-1] == model.generation_config.eos_token_id
        else:
            assert translation.generated_ids == expected.generated_ids


def test_no_deadline_changes_nothing(wide_model, tiny_tokenizer):
    settings = DecodingSettings(num_beams=4, batch_size=5)
    later = translate(wide_model, tiny_tokenizer, SOURCES, settings, deadline=time.monotonic() + 3600)
    assert [t.generated_ids for t in later.translations] == [
        t.generated_ids for t in translate(wide_model, tiny_tokenizer, SOURCES, settings).translations
    ]
    assert not later.stopped_early and not any(t.cut for t in later.translations)


def test_one_plan_per_request_cut_to_the_budget_without_tokenizing_again(wide_model, tiny_tokenizer, monkeypatch):
    calls, copies, processors = [], [], []
    tokenize_call = type(tiny_tokenizer).__call__
    monkeypatch.setattr(type(tiny_tokenizer), "__call__", lambda *a, **k: calls.append(1) or tokenize_call(*a, **k))
    asked = DecodingSettings(batch_size=4)
    plan = plan_decoding(wide_model, tiny_tokenizer, SOURCES, asked)
    assert len(calls) == 1  # every sentence tokenized once, in one call
    assert (plan.num_beams, plan.generation_config.length_penalty, plan.backend) == (4, 0.6, "PyTorch")
    # The plan holds the bound as resolved (the model's own ratio and offset, kept): the engine applies it.
    assert plan.bound == (1.5, 10, 63)  # the cap: the tiny model's 64 positions, less the start token
    lengths = torch.tensor([len(ids) for ids in plan.source_ids])
    assert list(plan.limits) == new_token_limits(lengths, 1.5, 10, 63).tolist()
    assert 63 in plan.limits and plan.truncated == [False] * len(SOURCES)

    # A budget too small for 4 beams: fewer beams, then only the first sentences; the plan replaced once, and says so.
    cost = StepCost(fixed=0.005, per_row=0.00025)
    within_budget, seconds = fit_budget(plan, 0.1, cost)  # in the plan's batches of 4
    assert within_budget.num_beams == 1 and len(within_budget) < len(SOURCES)
    assert seconds == decoding_seconds(list(within_budget.limits), 1, 4, cost)  # the estimate of what is left
    assert within_budget.settings == replace(asked, num_beams=1)
    assert within_budget.generation_config.length_penalty == 1.0
    assert within_budget.bound == plan.bound
    kept = len(within_budget)
    assert within_budget.limits == plan.limits[:kept] and within_budget.source_ids == plan.source_ids[:kept]
    assert len(within_budget.notices) == 1 and "with greedy search" in within_budget.notices[0]
    # Run as it is: nothing tokenized or planned again; generate() gets the plan's config, only the batch's cap set,
    # and the plan's limits as one length bound.
    monkeypatch.setattr(engine, "plan_decoding", lambda *a, **k: pytest.fail("planned again"))
    generate = type(wide_model).generate

    def seen_generate(self, *args, **kwargs):
        copies.append(kwargs["generation_config"])
        processors.append(kwargs["logits_processor"])
        return generate(self, *args, **kwargs)

    monkeypatch.setattr(type(wide_model), "generate", seen_generate)
    run = run_plan(wide_model, tiny_tokenizer, within_budget)

    def but_the_cap(config):
        return {name: value for name, value in vars(config).items() if name != "max_new_tokens"}

    assert len(calls) == 1 and copies
    assert all(but_the_cap(config) == but_the_cap(within_budget.generation_config) for config in copies)
    assert not any(hasattr(config, "max_new_tokens_ratio") for config in copies)  # generate() derives no bound
    bounds = [[p for p in batch if isinstance(p, SourceLengthBound)] for batch in processors]
    assert sorted(limit for batch in bounds for bound in batch for limit in bound.limits.tolist()) == sorted(
        within_budget.limits
    )
    assert all(len(batch) == 1 for batch in bounds)
    assert run.plan.settings is within_budget.settings and run.plan.num_beams == 1
    monkeypatch.undo()
    again = translate(wide_model, tiny_tokenizer, list(within_budget.sentences), within_budget.settings)
    assert run.texts == again.texts


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


@pytest.mark.parametrize("keep_output_layer", [False, True])
def test_dynamically_quantized_model_decodes_through_our_beam_search_with_transformers_ids(
    wide_model, tiny_tokenizer, keep_output_layer, monkeypatch
):
    """int8 linears (`precision.int8_dynamic`, torch's quantize_dynamic) have no weight tensor to multiply by: the
    decoding step and the output layer call them as modules, and the ids are transformers' loop's on the same model.
    Sentence by sentence: dynamic quantization scales activations by the range of the whole batch, so the rows that
    share a batch (which our search changes as sentences leave) change the numbers."""
    int8 = int8_dynamic(wide_model, keep_output_layer=keep_output_layer)
    assert type(int8.get_decoder().layers[0].feed_forward.fc1) is not torch.nn.Linear
    assert isinstance(int8.lm_head, torch.nn.Linear) == keep_output_layer  # float (our OutputProjection), or int8
    calls = []
    search = modeling_code.compact_beam_search
    monkeypatch.setattr(modeling_code, "compact_beam_search", lambda *a, **k: calls.append(1) or search(*a, **k))
    ours = [_generate(int8, tiny_tokenizer, [source]) for source in SOURCES[:4]]
    assert len(calls) == 4, "the search fell back to transformers' loop: nothing was compared"
    int8.drop_finished_sentences = False
    theirs = [_generate(int8, tiny_tokenizer, [source]) for source in SOURCES[:4]]
    assert all(torch.equal(mine, other) for mine, other in zip(ours, theirs, strict=True))
    assert len({ids.shape[1] for ids in ours}) > 1  # translations of different lengths


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
    first_and_third = bound.select_sentences(torch.tensor([0, 2]))
    assert first_and_third.limits.tolist() == [3, 7] and first_and_third.prompt_length == 1


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
