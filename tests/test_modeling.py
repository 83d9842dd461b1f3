"""The Transformer as a Hugging Face model: shapes, masks, loss, caching, generation, attentions, saving, config."""

import copy
import json
import logging
import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from conftest import PAIRS, ROOT, tiny_config
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, AutoTokenizer, LogitsProcessorList
from transformers.cache_utils import DynamicCache, EncoderDecoderCache

from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration, TransformerMTModel
from modeling.length_bound import SourceLengthBound
from modeling.modeling_transformer_mt import label_smoothed_cross_entropy, set_translation_defaults, sinusoidal_table

SOURCES = [source for source, _ in PAIRS]
TARGETS = [target for _, target in PAIRS]


def make_batch(tokenizer, pairs=PAIRS):
    """Padded source + labels, with -100 on label padding (what DataCollatorForSeq2Seq produces)."""
    batch = tokenizer([s for s, _ in pairs], text_target=[t for _, t in pairs], padding=True, return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    return batch


@pytest.fixture(scope="module")
def trained_model(tiny_tokenizer):
    """Trained for 60 steps: outputs depend on the source and end (or not) at varied lengths, unlike a random init
    that repeats one token whatever it reads."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, dropout=0.0, label_smoothing=0.0))
    batch = make_batch(tiny_tokenizer)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(60):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    return model.eval()


@pytest.fixture(scope="module")
def sources(tiny_tokenizer):
    """Four sources of different lengths, right-padded."""
    return tiny_tokenizer(SOURCES[:4], padding=True, return_tensors="pt")


# ---------------------------------------------------------------------------------------------------------------------
# Forward pass: shapes, dtypes, loss


@torch.no_grad()
def test_forward_returns_logits_loss_encoder_output_and_attentions_of_the_right_shapes(tiny_model, tiny_tokenizer):
    config = tiny_model.config
    batch = make_batch(tiny_tokenizer)
    batch_size, source_length = batch["input_ids"].shape
    target_length = batch["labels"].shape[1]
    heads = config.num_attention_heads

    out = tiny_model(**batch, output_attentions=True)

    assert out.logits.shape == (batch_size, target_length, config.vocab_size)
    assert out.logits.dtype == torch.float32
    assert out.loss.shape == () and out.loss.dtype == torch.float32 and torch.isfinite(out.loss)
    assert out.encoder_last_hidden_state.shape == (batch_size, source_length, config.d_model)
    assert len(out.encoder_attentions) == config.encoder_layers
    assert len(out.decoder_attentions) == len(out.cross_attentions) == config.decoder_layers
    for weights in out.encoder_attentions:
        assert weights.shape == (batch_size, heads, source_length, source_length)
    for weights in out.decoder_attentions:
        assert weights.shape == (batch_size, heads, target_length, target_length)
    for weights in out.cross_attentions:
        assert weights.shape == (batch_size, heads, target_length, source_length)
    assert out.past_key_values is None  # labels given: scoring, no cache


def smoothed_cross_entropy_by_hand(logits, labels, epsilon):
    """(1 - eps) * NLL of the label + eps * mean NLL over the vocabulary, averaged over positions not marked -100."""
    log_probs = torch.log_softmax(logits.double(), dim=-1)
    kept = labels != -100
    nll = -log_probs[kept].gather(-1, labels[kept].unsqueeze(-1)).squeeze(-1)
    uniform = -log_probs[kept].mean(-1)
    return ((1 - epsilon) * nll + epsilon * uniform).mean()


@torch.no_grad()
@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_loss_is_plain_cross_entropy_whatever_the_configs_label_smoothing(tiny_tokenizer, epsilon):
    """As in every transformers model: smoothing belongs to training, so evaluation losses compare across models."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, label_smoothing=epsilon)).eval()
    batch = make_batch(tiny_tokenizer)

    out = model(**batch)

    expected = smoothed_cross_entropy_by_hand(out.logits, batch["labels"], 0.0)
    assert torch.allclose(out.loss.double(), expected, atol=1e-5)
    reference = F.cross_entropy(out.logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
    assert torch.allclose(out.loss, reference, atol=1e-6)


@torch.no_grad()
@pytest.mark.parametrize("epsilon", [0.0, 0.1, 0.3])
def test_training_loss_is_label_smoothed_cross_entropy(tiny_model, tiny_tokenizer, epsilon):
    batch = make_batch(tiny_tokenizer)
    logits = tiny_model(**batch).logits

    loss = label_smoothed_cross_entropy(logits, batch["labels"], epsilon)

    expected = smoothed_cross_entropy_by_hand(logits, batch["labels"], epsilon)
    assert torch.allclose(loss.double(), expected, atol=1e-5)
    reference = F.cross_entropy(
        logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100, label_smoothing=epsilon
    )
    assert torch.allclose(loss, reference, atol=1e-6)
    if epsilon:
        unsmoothed = smoothed_cross_entropy_by_hand(logits, batch["labels"], 0.0)
        assert not torch.allclose(loss.double(), unsmoothed, atol=1e-3)
    # With the Trainer's token count over accumulated micro-batches: the sum over this batch divided by that count.
    scored = int((batch["labels"] != -100).sum())
    summed = label_smoothed_cross_entropy(logits, batch["labels"], epsilon, num_items_in_batch=2 * scored)
    assert torch.allclose(summed, loss / 2, atol=1e-6)


@torch.no_grad()
def test_loss_ignores_label_positions_marked_minus_100(tiny_model, tiny_tokenizer):
    batch = make_batch(tiny_tokenizer)
    decoder_input_ids = tiny_model.prepare_decoder_input_ids_from_labels(batch["labels"])
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    labels = batch["labels"].clone()
    labels[:, -1] = -100  # also ignore the last position of the longest sentences
    # Changing the last decoder input changes the logits at the last position only (causality)...
    changed_decoder_input_ids = decoder_input_ids.clone()
    changed_decoder_input_ids[:, -1] = 7

    out = tiny_model(**inputs, decoder_input_ids=decoder_input_ids, labels=labels)
    changed = tiny_model(**inputs, decoder_input_ids=changed_decoder_input_ids, labels=labels)

    assert not torch.allclose(out.logits[:, -1], changed.logits[:, -1], atol=1e-3)
    # ...and the loss, which ignores that position, does not change;
    assert torch.allclose(out.loss, changed.loss, atol=1e-6)
    # it is the cross-entropy over exactly the unmarked positions,
    expected = smoothed_cross_entropy_by_hand(out.logits, labels, 0.0)
    assert torch.allclose(out.loss.double(), expected, atol=1e-5)
    # and scoring the last position as well gives a different loss.
    counted = tiny_model(**inputs, decoder_input_ids=decoder_input_ids, labels=batch["labels"]).loss
    assert not torch.allclose(out.loss, counted, atol=1e-4)


@torch.no_grad()
def test_labels_alone_drive_teacher_forcing(tiny_model, tiny_tokenizer):
    """With labels only, the decoder reads the labels shifted right behind the start token (-100 read as padding)."""
    batch = make_batch(tiny_tokenizer)
    shifted = tiny_model.prepare_decoder_input_ids_from_labels(batch["labels"])
    assert (shifted[:, 0] == tiny_model.config.decoder_start_token_id).all()
    real = batch["labels"][:, :-1] != -100
    assert torch.equal(shifted[:, 1:][real], batch["labels"][:, :-1][real])
    assert (shifted[:, 1:][~real] == tiny_model.config.pad_token_id).all()

    implicit = tiny_model(**batch).logits
    explicit = tiny_model(**batch, decoder_input_ids=shifted).logits
    assert torch.equal(implicit, explicit)


# ---------------------------------------------------------------------------------------------------------------------
# Masks: causality and padding


@torch.no_grad()
def test_changing_later_target_tokens_never_changes_earlier_logits(tiny_model, tiny_tokenizer):
    batch = make_batch(tiny_tokenizer)
    decoder_input_ids = tiny_model.prepare_decoder_input_ids_from_labels(batch["labels"])
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    logits = tiny_model(**inputs, decoder_input_ids=decoder_input_ids).logits
    generator = torch.Generator().manual_seed(0)
    for cut in (1, 4, decoder_input_ids.shape[1] - 1):
        changed = decoder_input_ids.clone()
        changed[:, cut:] = torch.randint(4, tiny_model.config.vocab_size, changed[:, cut:].shape, generator=generator)
        changed_logits = tiny_model(**inputs, decoder_input_ids=changed).logits
        assert torch.allclose(changed_logits[:, :cut], logits[:, :cut], atol=1e-5)
        assert not torch.allclose(changed_logits[:, cut:], logits[:, cut:], atol=1e-3)


@torch.no_grad()
def test_source_padding_changes_no_output_at_real_positions(tiny_model, tiny_tokenizer):
    alone = tiny_tokenizer(SOURCES[1:2], return_tensors="pt")  # the shortest source, no padding
    padded = tiny_tokenizer(SOURCES[1:3], padding=True, return_tensors="pt")  # padded to a longer neighbour
    length = alone["input_ids"].shape[1]
    assert padded["input_ids"].shape[1] > length
    assert torch.equal(padded["input_ids"][0, :length], alone["input_ids"][0])
    decoder_input_ids = tiny_tokenizer(TARGETS[1:3], padding=True, return_tensors="pt")["input_ids"]

    out_alone = tiny_model(**alone, decoder_input_ids=decoder_input_ids[:1])
    out_padded = tiny_model(**padded, decoder_input_ids=decoder_input_ids)

    encoded_alone, encoded_padded = out_alone.encoder_last_hidden_state, out_padded.encoder_last_hidden_state
    assert torch.allclose(encoded_padded[0, :length], encoded_alone[0], atol=1e-5)
    assert torch.allclose(out_padded.logits[0], out_alone.logits[0], atol=1e-5)

    # Without the attention mask the padding leaks in: the mask is what makes the outputs equal.
    unmasked = tiny_model(input_ids=padded["input_ids"], decoder_input_ids=decoder_input_ids)
    assert not torch.allclose(unmasked.logits[0], out_alone.logits[0], atol=1e-3)


@torch.no_grad()
def test_target_padding_changes_no_output_at_real_positions(tiny_model, tiny_tokenizer):
    source = tiny_tokenizer(SOURCES[:1], return_tensors="pt")
    decoder_input_ids = tiny_tokenizer(TARGETS[:1], return_tensors="pt")["input_ids"]
    length = decoder_input_ids.shape[1]
    pad = torch.full((1, 5), tiny_tokenizer.pad_token_id)
    padded_ids = torch.cat([decoder_input_ids, pad], dim=1)
    decoder_attention_mask = (padded_ids != tiny_tokenizer.pad_token_id).long()

    plain = tiny_model(**source, decoder_input_ids=decoder_input_ids, output_attentions=True)
    padded = tiny_model(
        **source, decoder_input_ids=padded_ids, decoder_attention_mask=decoder_attention_mask, output_attentions=True
    )

    assert torch.allclose(padded.logits[:, :length], plain.logits, atol=1e-5)
    assert torch.isfinite(padded.logits).all()
    for weights in padded.decoder_attentions:
        assert (weights[..., length:] == 0).all()  # no query, real or padding, reads a padded target key


# ---------------------------------------------------------------------------------------------------------------------
# Incremental decoding and generation


@torch.no_grad()
def test_cached_incremental_decoding_equals_the_full_forward_pass(trained_model, tiny_tokenizer):
    batch = make_batch(tiny_tokenizer, PAIRS[:4])
    decoder_input_ids = trained_model.prepare_decoder_input_ids_from_labels(batch["labels"])
    mask = batch["attention_mask"]
    full = trained_model(input_ids=batch["input_ids"], attention_mask=mask, decoder_input_ids=decoder_input_ids)

    encoder_outputs = trained_model.get_encoder()(batch["input_ids"], attention_mask=mask)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    step_logits = []
    for position in range(decoder_input_ids.shape[1]):
        step = trained_model(
            encoder_outputs=encoder_outputs,
            attention_mask=mask,
            decoder_input_ids=decoder_input_ids[:, position : position + 1],
            past_key_values=cache,
            use_cache=True,
        )
        cache = step.past_key_values
        step_logits.append(step.logits)
        assert cache.get_seq_length() == position + 1

    assert torch.allclose(torch.cat(step_logits, dim=1), full.logits, atol=1e-4)


@torch.no_grad()
@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_gives_the_same_ids_with_and_without_cache(trained_model, sources, num_beams):
    settings = dict(num_beams=num_beams, do_sample=False, max_new_tokens=20)
    cached = trained_model.generate(**sources, use_cache=True, **settings)
    uncached = trained_model.generate(**sources, use_cache=False, **settings)
    assert torch.equal(cached, uncached)
    # Not a degenerate model: the four sentences get different translations.
    assert len({tuple(row.tolist()) for row in cached}) == len(cached)


@torch.no_grad()
def greedy_translate(model, input_ids, attention_mask, max_new_tokens):
    """Readable greedy decoding: encode once, then append the most likely next token until every sentence has
    produced </s> or the length runs out; finished sentences are padded."""
    config = model.config
    encoder_outputs = model.get_encoder()(input_ids, attention_mask=attention_mask)
    output = torch.full((input_ids.shape[0], 1), config.decoder_start_token_id)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = model(
            encoder_outputs=encoder_outputs, attention_mask=attention_mask, decoder_input_ids=output, use_cache=False
        ).logits
        next_token = logits[:, -1].argmax(dim=-1)
        next_token = next_token.masked_fill(finished, config.pad_token_id)
        output = torch.cat([output, next_token[:, None]], dim=1)
        finished |= next_token == config.eos_token_id
        if finished.all():
            break
    return output


@torch.no_grad()
def test_generate_greedy_equals_a_greedy_decoder_written_by_hand(trained_model, tiny_tokenizer):
    sources = tiny_tokenizer(SOURCES, padding=True, return_tensors="pt")
    expected = greedy_translate(trained_model, sources["input_ids"], sources["attention_mask"], max_new_tokens=25)
    generated = trained_model.generate(**sources, num_beams=1, do_sample=False, max_new_tokens=25)
    assert torch.equal(generated, expected)
    # The oracle exercised both endings: some sentences stopped at </s>, and sentences finished at different steps.
    ended = (expected == trained_model.config.eos_token_id).any(dim=1)
    assert ended.any()
    assert len({int((row != trained_model.config.pad_token_id).sum()) for row in expected}) > 1


@torch.no_grad()
def test_sampling_with_a_fixed_seed_returns_valid_repeatable_ids(trained_model, sources):
    settings = dict(do_sample=True, num_beams=1, top_k=0, max_new_tokens=15)
    torch.manual_seed(123)
    first = trained_model.generate(**sources, **settings)
    torch.manual_seed(123)
    second = trained_model.generate(**sources, **settings)
    assert torch.equal(first, second)
    assert first.shape[0] == sources["input_ids"].shape[0] and 2 <= first.shape[1] <= 16
    assert (first[:, 0] == trained_model.config.decoder_start_token_id).all()
    assert ((first >= 0) & (first < trained_model.config.vocab_size)).all()


class _RecordWarnings(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@torch.no_grad()
def test_generate_length_bounds_give_no_clash_warning_and_stay_inside_the_positions(tiny_model, sources):
    handler = _RecordWarnings()
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with_new_tokens = tiny_model.generate(**sources, num_beams=1, max_new_tokens=5)
            with_max_length = tiny_model.generate(**sources, num_beams=1, max_length=7)
            # The untrained model never emits </s>: without the per-sentence bound, the cap must stop it at the last
            # position.
            unbounded = tiny_model.generate(**sources, num_beams=1, max_new_tokens_ratio=None)
    finally:
        library_logger.removeHandler(handler)
    messages = handler.messages + [str(warning.message) for warning in caught]
    assert not [message for message in messages if "max_length" in message or "max_new_tokens" in message]
    assert with_new_tokens.shape[1] == 1 + 5
    assert with_max_length.shape[1] == 7
    assert unbounded.shape[1] == tiny_model.config.max_position_embeddings


def source_limits(model, sources) -> list[int]:
    """Each sentence's saved bound: ceil(ratio * source tokens) + offset new tokens."""
    generation = model.generation_config
    ratio, offset = generation.max_new_tokens_ratio, generation.max_new_tokens_offset
    return [math.ceil(ratio * length) + offset for length in sources["attention_mask"].sum(dim=-1).tolist()]


def _lengths_up_to_eos(output: torch.Tensor, eos_token_id: int) -> list[int]:
    """New tokens of each row, up to and including its first </s> (the rest is padding)."""
    lengths = []
    for row in output.tolist():
        new = row[1:]
        lengths.append(new.index(eos_token_id) + 1 if eos_token_id in new else len(new))
    return lengths


@torch.no_grad()
@pytest.mark.parametrize("num_beams", [1, 3])
def test_default_generate_bounds_each_sentence_by_its_own_source_length(tiny_model, sources, num_beams):
    generation = tiny_model.generation_config
    ratio, offset = generation.max_new_tokens_ratio, generation.max_new_tokens_offset
    assert (ratio, offset) == (1.5, 10)  # the documented defaults, saved in generation_config.json
    source_lengths = sources["attention_mask"].sum(dim=-1).tolist()
    assert len(set(source_lengths)) > 1
    output = tiny_model.generate(**sources, num_beams=num_beams)  # untrained: it never chooses </s> itself
    limits = [min(math.ceil(ratio * length) + offset, generation.max_new_tokens) for length in source_lengths]
    assert _lengths_up_to_eos(output, tiny_model.config.eos_token_id) == limits
    assert output.shape[1] == 1 + max(limits)  # the batch stops with its longest allowed sentence


@torch.no_grad()
def test_length_bound_is_per_sentence_and_can_be_set_per_call(tiny_model, sources):
    output = tiny_model.generate(**sources, num_beams=1, max_new_tokens_ratio=1.0, max_new_tokens_offset=2)
    expected = [length + 2 for length in sources["attention_mask"].sum(dim=-1).tolist()]
    assert _lengths_up_to_eos(output, tiny_model.config.eos_token_id) == expected
    # each row alone gives the same tokens as inside the batch: the bound does not depend on the neighbours
    for row, length in enumerate(expected):
        alone = tiny_model.generate(
            input_ids=sources["input_ids"][row : row + 1, : sources["attention_mask"][row].sum()],
            num_beams=1,
            max_new_tokens_ratio=1.0,
            max_new_tokens_offset=2,
        )
        assert alone[0].tolist() == output[row, : 1 + length].tolist()


@torch.no_grad()
def test_a_call_that_brings_its_own_bound_is_bounded_by_it_alone(tiny_model, sources):
    """The translation engine passes each sentence's limit as a `SourceLengthBound` (one bound for every model): the
    saved bound steps aside, so a limit past it is reached, and nobody has to switch the saved one off."""
    saved = source_limits(tiny_model, sources)
    own = [limit + 3 for limit in saved]  # past the saved bound, inside the cap
    assert max(own) <= tiny_model.generation_config.max_new_tokens
    bound = SourceLengthBound(torch.tensor(own), tiny_model.config.eos_token_id)

    output = tiny_model.generate(**sources, num_beams=1, logits_processor=LogitsProcessorList([bound]))

    assert tiny_model.generation_config.max_new_tokens_ratio == 1.5  # the saved bound is still there
    assert _lengths_up_to_eos(output, tiny_model.config.eos_token_id) == own  # untrained: it never chooses </s>


def test_length_bound_round_trips_through_the_saved_generation_config(tiny_model, tmp_path):
    tiny_model.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "generation_config.json").read_text())
    assert saved["max_new_tokens_ratio"] == 1.5 and saved["max_new_tokens_offset"] == 10
    reloaded = TransformerMTForConditionalGeneration.from_pretrained(tmp_path)
    assert reloaded.generation_config.max_new_tokens_ratio == 1.5


@torch.no_grad()
def test_asking_for_more_tokens_than_the_positions_hold_fails_clearly(tiny_model, sources):
    positions = tiny_model.config.max_position_embeddings
    # The untrained model never emits </s>; the last new token is never fed back, so P + 1 needs position P.
    with pytest.raises(ValueError, match="longer than this model's max_position_embeddings"):
        tiny_model.generate(**sources, num_beams=1, max_new_tokens=positions + 1, max_new_tokens_ratio=None)
    long_source = torch.ones(1, positions + 1, dtype=torch.long)
    with pytest.raises(ValueError, match="Truncate the input"):
        tiny_model(input_ids=long_source, decoder_input_ids=long_source[:, :1])


# ---------------------------------------------------------------------------------------------------------------------
# Inputs a caller gets wrong: a clear answer each


def library_warnings(call) -> list[str]:
    """The warnings transformers' loggers give during `call()`. Its "once" warnings are cleared first (transformers'
    `warning_once` is an `lru_cache`), so that a warning an earlier test gave is given again."""
    logging.Logger.warning_once.cache_clear()
    handler = _RecordWarnings()
    library_logger = logging.getLogger("transformers")
    library_logger.addHandler(handler)
    try:
        call()
    finally:
        library_logger.removeHandler(handler)
    return handler.messages


@torch.no_grad()
@pytest.mark.parametrize("num_beams", [0, -1])
def test_num_beams_below_one_is_refused_with_the_allowed_range(tiny_model, sources, num_beams):
    with pytest.raises(ValueError, match=rf"num_beams must be at least 1 .*got {num_beams}\."):
        tiny_model.generate(**sources, num_beams=num_beams)
    config = copy.deepcopy(tiny_model.generation_config)
    config.num_beams = num_beams
    with pytest.raises(ValueError, match="num_beams must be at least 1"):
        tiny_model.generate(**sources, generation_config=config)


@torch.no_grad()
@pytest.mark.parametrize(
    "settings", [dict(num_beams=1), dict(num_beams=3), dict(do_sample=True, num_beams=1), dict(num_return_sequences=2)]
)
def test_an_empty_source_gets_an_empty_translation_beside_the_others(tiny_model, tiny_tokenizer, settings):
    """An empty string (tokenised to `</s>` alone) ends at once, alone or in a batch, in every search; the other
    sentences of its batch are decoded as without it. The untrained model never chooses `</s>` itself."""
    eos, start = tiny_model.config.eos_token_id, tiny_model.config.decoder_start_token_id
    batch = tiny_tokenizer(["", SOURCES[0], " "], padding=True, return_tensors="pt")
    assert batch["input_ids"][0, 0] == eos and batch["attention_mask"][0].sum() == 1
    torch.manual_seed(0)
    output = tiny_model.generate(**batch, **settings)
    rows_per_sentence = settings.get("num_return_sequences", 1)
    for row in output[:rows_per_sentence].tolist():
        assert row[:2] == [start, eos] and set(row[2:]) <= {tiny_model.config.pad_token_id, eos}  # beams pad with </s>
    assert tiny_tokenizer.batch_decode(output[:rows_per_sentence], skip_special_tokens=True) == [""] * rows_per_sentence
    torch.manual_seed(0)
    alone = tiny_model.generate(**tiny_tokenizer([""], return_tensors="pt"), **settings)
    assert alone[:, :2].tolist() == [[start, eos]] * rows_per_sentence
    # The others are decoded as ever: a space is not nothing, and the bound of each stays its own.
    for row in output[rows_per_sentence:].tolist():
        assert eos not in row[1:2]
    if not settings.get("do_sample"):
        others = tiny_model.generate(**tiny_tokenizer([SOURCES[0], " "], padding=True, return_tensors="pt"), **settings)
        assert torch.equal(output[rows_per_sentence:, : others.shape[1]], others)
    tiny_model.drop_finished_sentences = False  # transformers' own beam search: the same
    try:
        again = tiny_model.generate(**batch, **settings)
        assert torch.equal(again[:rows_per_sentence, :2], output[:rows_per_sentence, :2])
    finally:
        tiny_model.drop_finished_sentences = True


@torch.no_grad()
def test_an_empty_source_is_left_alone_when_the_call_asks_for_a_minimum_length(tiny_model, tiny_tokenizer):
    output = tiny_model.generate(**tiny_tokenizer([""], return_tensors="pt"), num_beams=1, min_new_tokens=3)
    assert tiny_model.config.eos_token_id not in output[0, 1:4].tolist()


@torch.no_grad()
def test_a_padded_batch_without_attention_mask_warns_as_transformers_models_do(trained_model, sources):
    """Without the mask the encoder attends to the padding (a short sentence's translation changes: the shipped model's
    test): transformers' own warning says so (`warn_if_padding_and_no_attention_mask`), from generate() and the
    forward alike."""
    padded = sources["input_ids"]
    assert (padded == trained_model.config.pad_token_id).any()
    settings = dict(num_beams=1, max_new_tokens=5)
    messages = library_warnings(lambda: trained_model.generate(padded, **settings))
    assert any("attention_mask" in message for message in messages), messages
    messages = library_warnings(lambda: trained_model.get_encoder()(padded))
    assert any("attention_mask" in message for message in messages), messages
    # With its mask, or with no padding, nothing is said.
    messages = library_warnings(lambda: trained_model.generate(**sources, **settings))
    unpadded = padded[:1, : int(sources["attention_mask"][0].sum())]
    messages += library_warnings(lambda: trained_model.generate(unpadded, **settings))
    assert not any("attention_mask" in message for message in messages), messages


# ---------------------------------------------------------------------------------------------------------------------
# generate(): transformers' contract (GenerationTesterMixin is only in transformers' repository, so these stand in)


@torch.no_grad()
def test_a_model_built_from_a_bare_config_decodes_greedily_like_any_transformers_model(trained_model, tiny_tokenizer):
    """The paper's beam 4 and the length bound are what a trained model ships (generation_config.json), not what
    the constructor imposes."""
    generation = trained_model.generation_config
    assert generation.num_beams in (None, 1) and not generation.do_sample  # None: transformers' default, 1
    assert getattr(generation, "max_new_tokens_ratio", None) is None
    sources = tiny_tokenizer(SOURCES, padding=True, return_tensors="pt")

    generated = trained_model.generate(**sources, max_new_tokens=25)

    expected = greedy_translate(trained_model, sources["input_ids"], sources["attention_mask"], max_new_tokens=25)
    assert torch.equal(generated, expected)


@torch.no_grad()
@pytest.mark.parametrize("num_beams", [1, 3])
def test_max_new_tokens_n_gives_n_new_tokens_and_forces_no_eos(tiny_model, sources, num_beams):
    """With the shipped decoding (length bound on): the cap ends decoding, as in any transformers model; only a
    sentence's own bound forces </s>. The untrained model never chooses </s> itself."""
    eos = tiny_model.config.eos_token_id
    limits = [math.ceil(1.5 * length) + 10 for length in sources["attention_mask"].sum(dim=-1).tolist()]
    assert min(limits) > 6

    short = tiny_model.generate(**sources, num_beams=num_beams, max_new_tokens=6)
    longer = tiny_model.generate(**sources, num_beams=num_beams, max_new_tokens=min(limits))

    assert short.shape[1] == 1 + 6
    assert not (short[:, 1:] == eos).any()
    if num_beams == 1:  # greedy: the first tokens do not depend on how many follow
        assert torch.equal(short, longer[:, : 1 + 6])


@torch.no_grad()
@pytest.mark.parametrize("model_name", ["trained_model", "tiny_model"])
def test_generate_continues_from_the_past_key_values_it_returned(model_name, request, sources):
    """Six tokens in one call equal three, then three more from the returned cache (GenerationTesterMixin's
    test_generate_continue_from_past_key_values), for a bare model and with the shipped decoding's bound on."""
    model = request.getfixturevalue(model_name)
    settings = dict(num_beams=1, do_sample=False, use_cache=True, return_dict_in_generate=True)

    at_once = model.generate(**sources, max_new_tokens=6, **settings).sequences
    first = model.generate(**sources, max_new_tokens=3, **settings)
    assert first.sequences.shape[1] == 1 + 3 and first.past_key_values.get_seq_length() == 3
    continued = model.generate(
        **sources,
        decoder_input_ids=first.sequences,
        past_key_values=first.past_key_values,
        max_new_tokens=3,
        **settings,
    ).sequences

    assert torch.equal(continued, at_once)


@torch.no_grad()
def test_a_callers_eos_token_id_wins_over_the_configs(tiny_model, sources):
    """The length bound ends each sentence with the end token of this call, not the config's."""
    config_eos = tiny_model.config.eos_token_id
    source_lengths = sources["attention_mask"].sum(dim=-1).tolist()
    limits = [math.ceil(1.5 * length) + 10 for length in source_lengths]
    unbounded = tiny_model.generate(**sources, num_beams=1, max_new_tokens_ratio=None, max_new_tokens=max(limits))
    callers_eos = min(set(range(3, tiny_model.config.vocab_size)) - set(unbounded.flatten().tolist()))  # never chosen

    output = tiny_model.generate(**sources, num_beams=1, eos_token_id=callers_eos)

    assert not (output[:, 1:] == config_eos).any()
    assert _lengths_up_to_eos(output, callers_eos) == limits


# ---------------------------------------------------------------------------------------------------------------------
# transformers' switches: outputs from the config, tuples, inputs_embeds, attention implementations, hooks


@torch.no_grad()
def test_output_switches_fall_back_to_the_config_and_an_argument_wins(tiny_tokenizer):
    config = tiny_config(tiny_tokenizer, output_attentions=True, output_hidden_states=True)
    model = TransformerMTForConditionalGeneration(config).eval()
    batch = make_batch(tiny_tokenizer, PAIRS[:2])

    out = model(**batch)

    assert len(out.encoder_attentions) == config.encoder_layers
    assert len(out.decoder_attentions) == len(out.cross_attentions) == config.decoder_layers
    assert len(out.encoder_hidden_states) == config.encoder_layers + 1  # the embeddings, then each layer's output
    assert len(out.decoder_hidden_states) == config.decoder_layers + 1
    assert torch.equal(out.encoder_hidden_states[-1], out.encoder_last_hidden_state)
    quiet = model(**batch, output_attentions=False, output_hidden_states=False)
    assert quiet.encoder_attentions is None and quiet.cross_attentions is None and quiet.decoder_hidden_states is None
    assert torch.allclose(quiet.logits, out.logits, atol=1e-5)  # SDPA without weights, eager with them


@torch.no_grad()
def test_return_dict_false_gives_a_tuple_from_the_argument_or_the_config(tiny_model, tiny_tokenizer):
    batch = make_batch(tiny_tokenizer, PAIRS[:2])
    as_dict = tiny_model(**batch)

    as_tuple = tiny_model(**batch, return_dict=False)
    base_tuple = tiny_model.model(
        input_ids=batch["input_ids"],
        decoder_input_ids=tiny_model.prepare_decoder_input_ids_from_labels(batch["labels"]),
        return_dict=False,
    )

    assert isinstance(as_tuple, tuple) and torch.equal(as_tuple[0], as_dict.loss)
    assert torch.equal(as_tuple[1], as_dict.logits)
    assert isinstance(base_tuple, tuple) and base_tuple[0].shape[-1] == tiny_model.config.d_model
    config = tiny_config(tiny_tokenizer, return_dict=False)
    assert isinstance(TransformerMTForConditionalGeneration(config).eval()(**batch), tuple)


@torch.no_grad()
def test_inputs_embeds_give_the_same_outputs_as_input_ids(tiny_model, tiny_tokenizer):
    batch = make_batch(tiny_tokenizer, PAIRS[:3])
    decoder_input_ids = tiny_model.prepare_decoder_input_ids_from_labels(batch["labels"])
    embeddings = tiny_model.get_input_embeddings()
    from_ids = tiny_model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], decoder_input_ids=decoder_input_ids
    )

    from_embeds = tiny_model(
        inputs_embeds=embeddings(batch["input_ids"]),
        attention_mask=batch["attention_mask"],
        decoder_inputs_embeds=embeddings(decoder_input_ids),
    )

    assert torch.equal(from_embeds.logits, from_ids.logits)
    with pytest.raises(ValueError, match="exactly one of input_ids and inputs_embeds"):
        tiny_model(
            input_ids=batch["input_ids"],
            inputs_embeds=embeddings(batch["input_ids"]),
            decoder_input_ids=decoder_input_ids,
        )


@torch.no_grad()
def test_sdpa_is_the_default_and_eager_agrees_and_gives_attention_weights(tiny_model, tiny_tokenizer, tiny_model_dir):
    batch = make_batch(tiny_tokenizer, PAIRS[:4])
    assert tiny_model.config._attn_implementation == "sdpa"
    eager = TransformerMTForConditionalGeneration.from_pretrained(tiny_model_dir, attn_implementation="eager").eval()
    assert eager.config._attn_implementation == "eager"

    sdpa_out = tiny_model(**batch)
    eager_out = eager(**batch)
    with_weights = tiny_model(**batch, output_attentions=True)  # asked for: that call runs eager, even under sdpa

    assert torch.allclose(sdpa_out.logits, eager_out.logits, atol=1e-5)
    assert torch.allclose(with_weights.logits, sdpa_out.logits, atol=1e-5)
    assert len(with_weights.cross_attentions) == tiny_model.config.decoder_layers
    assert all(weights is not None for weights in with_weights.cross_attentions)


@torch.no_grad()
@pytest.mark.parametrize("rows", [1, 4, 16, 17, 64])
def test_the_output_projection_is_the_tied_linear_layer_for_any_number_of_rows(tiny_model, rows):
    """For a few rows the output projection multiplies as W · hᵀ (faster there, the same product); for more it is
    nn.Linear itself. Either way: the embedding's weight, forward hooks called, the logits of h · Wᵀ."""
    head = tiny_model.get_output_embeddings()
    assert isinstance(head, torch.nn.Linear) and head.weight is tiny_model.get_input_embeddings().weight
    hidden = torch.randn(rows, 1, tiny_model.config.d_model)
    seen = []
    hook = head.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    try:
        logits = head(hidden)
    finally:
        hook.remove()
    expected = F.linear(hidden, head.weight)
    assert seen == [(rows, 1, tiny_model.config.vocab_size)] and logits.shape == expected.shape
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    if rows > head.FEW_ROWS:
        assert torch.equal(logits, expected)


@torch.no_grad()
def test_every_beam_search_step_runs_the_models_forward(tiny_model, sources):
    """Our beam search (finished sentences leave the batch) calls the model's `forward` at every step, as
    transformers' own loop does (`drop_finished_sentences = False`): a hook on the model, on the decoder or a compiled
    forward sees each step, and both give the same ids."""
    steps = {"decoder": 0, "model": 0}
    hooks = [
        tiny_model.get_decoder().register_forward_hook(lambda *_: steps.__setitem__("decoder", steps["decoder"] + 1)),
        tiny_model.register_forward_hook(lambda *_: steps.__setitem__("model", steps["model"] + 1)),
    ]
    try:
        output = tiny_model.generate(**sources, num_beams=3, max_new_tokens=5)
        ours = dict(steps)
        tiny_model.drop_finished_sentences = False
        steps.update(decoder=0, model=0)
        assert torch.equal(tiny_model.generate(**sources, num_beams=3, max_new_tokens=5), output)
        theirs = dict(steps)
    finally:
        tiny_model.drop_finished_sentences = True
        for hook in hooks:
            hook.remove()
    new_tokens = output.shape[1] - 1
    assert ours == {"decoder": new_tokens, "model": new_tokens}
    assert theirs == {"decoder": new_tokens, "model": new_tokens}


@torch.no_grad()
@pytest.mark.parametrize("norm_placement", ["post", "pre"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_our_beam_search_gives_transformers_ids_with_either_attention(
    tiny_tokenizer, norm_placement, attention, sources
):
    """Sentences leaving the batch change no row's arithmetic: the ids of transformers' `_beam_search`, with a
    length bound that ends sentences at different steps."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, norm_placement=norm_placement)).eval()
    set_translation_defaults(model.generation_config, model.config)
    model.set_attn_implementation(attention)
    settings = dict(num_beams=3, max_new_tokens_ratio=1.0, max_new_tokens_offset=1)
    ours = model.generate(**sources, **settings)
    model.drop_finished_sentences = False
    assert torch.equal(model.generate(**sources, **settings), ours)


@torch.no_grad()
def test_the_first_step_runs_once_per_sentence_with_transformers_ids(tiny_model, sources):
    """At the first step every beam of a sentence is the same: our search runs that forward on one row per sentence
    (a prompt of several tokens, padded sources) and then one row per beam; the ids are transformers' loop's."""
    prompt = torch.tensor([[tiny_model.config.decoder_start_token_id, 5, 9]]).repeat(4, 1)
    settings = dict(num_beams=3, max_new_tokens=6, decoder_input_ids=prompt)
    rows = []
    hook = tiny_model.get_decoder().register_forward_hook(
        lambda module, args, kwargs, output: rows.append(output.last_hidden_state.shape[:2]), with_kwargs=True
    )
    try:
        ours = tiny_model.generate(**sources, **settings)
    finally:
        hook.remove()
    assert rows[0] == (4, 3)  # the sentences, the whole prompt
    assert rows[1] == (4 * 3, 1)  # then every beam, one token
    tiny_model.drop_finished_sentences = False
    try:
        assert torch.equal(tiny_model.generate(**sources, **settings), ours)
    finally:
        tiny_model.drop_finished_sentences = True
    assert torch.equal(ours[:, :3], prompt)


@torch.no_grad()
def test_a_static_cache_is_left_to_transformers_beam_search_and_gives_the_same_ids(tiny_model, sources):
    """Rows cannot leave a cache of fixed size: with `cache_implementation="static"` transformers' loop runs, and
    the ids are those of the dynamic cache, in greedy and beam search alike."""
    for num_beams in (1, 3):
        dynamic = tiny_model.generate(**sources, num_beams=num_beams)
        static = tiny_model.generate(**sources, num_beams=num_beams, cache_implementation="static")
        assert torch.equal(static, dynamic)


@torch.no_grad()
def test_a_callers_length_replaces_the_saved_bound_in_greedy_and_beam_search(tiny_model, sources):
    """The saved per-sentence bound is a default: `min_new_tokens` and `max_new_tokens` of the call win, with no
    "Unfeasible length constraints" warning, in greedy and beam search alike."""
    limits = source_limits(tiny_model, sources)
    maximum = max(limits) + 8
    for num_beams in (1, 3):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            output = tiny_model.generate(
                **sources, num_beams=num_beams, min_new_tokens=max(limits) + 4, max_new_tokens=maximum
            )
        new_tokens = (output[:, 1:] != tiny_model.config.pad_token_id).sum(dim=-1)
        assert output.shape[1] - 1 <= maximum
        assert int(new_tokens.min()) >= max(limits) + 4  # past every sentence's saved bound


@torch.no_grad()
def test_forward_exports_with_torch_export_and_the_program_gives_the_same_logits(tiny_model, tiny_tokenizer):
    """What a deployment exports is the forward pass (one decoding step, or a scoring pass); our beam search is
    Python around it and is not what `torch.export` captures (see the test above)."""
    batch = make_batch(tiny_tokenizer, PAIRS[:2])
    inputs = dict(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        decoder_input_ids=tiny_model.prepare_decoder_input_ids_from_labels(batch["labels"]),
        use_cache=False,
    )

    program = torch.export.export(tiny_model, args=(), kwargs=inputs)

    assert torch.allclose(program.module()(**inputs).logits, tiny_model(**inputs).logits, atol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# Attention weights


@torch.no_grad()
def test_output_attentions_returns_exact_masked_softmax_weights(trained_model, tiny_tokenizer):
    batch = make_batch(tiny_tokenizer, PAIRS[:4])
    decoder_input_ids = trained_model.prepare_decoder_input_ids_from_labels(batch["labels"])
    inputs = dict(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    source_padding = batch["attention_mask"] == 0  # (B, S)
    assert source_padding.any()

    with_weights = trained_model(**inputs, decoder_input_ids=decoder_input_ids, output_attentions=True)
    without = trained_model(**inputs, decoder_input_ids=decoder_input_ids)

    assert without.encoder_attentions is None and without.cross_attentions is None
    assert torch.allclose(with_weights.logits, without.logits, atol=1e-5)
    assert torch.allclose(with_weights.encoder_last_hidden_state, without.encoder_last_hidden_state, atol=1e-5)
    config = trained_model.config
    assert len(with_weights.encoder_attentions) == config.encoder_layers
    assert len(with_weights.decoder_attentions) == len(with_weights.cross_attentions) == config.decoder_layers
    every_layer = with_weights.encoder_attentions + with_weights.decoder_attentions + with_weights.cross_attentions
    for weights in every_layer:
        assert torch.allclose(weights.sum(dim=-1), torch.ones(weights.shape[:-1]), atol=1e-5)
        assert (weights >= 0).all()
    key_is_padding = source_padding[:, None, None, :]  # (B, 1, 1, S)
    for weights in with_weights.encoder_attentions + with_weights.cross_attentions:
        assert (weights.masked_select(key_is_padding) == 0).all()
        assert (weights.masked_select(~key_is_padding) > 0).all()
    target_length = decoder_input_ids.shape[1]
    future = torch.ones(target_length, target_length, dtype=torch.bool).triu(diagonal=1)  # (T, T), key j > query i
    for weights in with_weights.decoder_attentions:
        assert (weights.masked_select(future) == 0).all()
        assert (weights.masked_select(~future) > 0).all()


# ---------------------------------------------------------------------------------------------------------------------
# Saving and loading


def assert_same_model_after_round_trip(original, loaded, tokenizer):
    batch = make_batch(tokenizer, PAIRS[:3])
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, original(**batch).logits)
    shared = loaded.model.shared.weight
    assert loaded.lm_head.weight is shared
    assert loaded.model.encoder.embed_tokens.weight is shared
    assert loaded.model.decoder.embed_tokens.weight is shared
    config = loaded.config
    fresh_table = sinusoidal_table(config.max_position_embeddings, config.d_model)
    for stack in (loaded.model.encoder, loaded.model.decoder):
        assert torch.equal(stack.embed_positions.table, fresh_table)
    for field in (
        "num_beams",
        "length_penalty",
        "early_stopping",
        "max_length",
        "max_new_tokens",
        "decoder_start_token_id",
        "bos_token_id",
        "eos_token_id",
        "pad_token_id",
    ):
        assert getattr(loaded.generation_config, field) == getattr(original.generation_config, field), field


def test_save_and_load_round_trip_keeps_outputs_tied_weights_positions_and_generation_config(
    tiny_model, tiny_tokenizer, tiny_model_dir
):
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tiny_model_dir).eval()
    assert isinstance(loaded, TransformerMTForConditionalGeneration)
    assert loaded.config.to_diff_dict() == tiny_model.config.to_diff_dict()
    assert_same_model_after_round_trip(tiny_model, loaded, tiny_tokenizer)
    assert loaded.generation_config.num_beams == 4 and loaded.generation_config.length_penalty == 0.6
    # One stored copy of the embedding matrix; the fixed position table is rebuilt, not stored.
    with safe_open(tiny_model_dir / "model.safetensors", "pt") as weights:
        stored = set(weights.keys())
    assert "model.shared.weight" in stored
    assert not stored & {"lm_head.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight"}
    assert not [key for key in stored if "embed_positions" in key]


def test_a_checkpoint_without_the_shared_embedding_loads_it_initialised_and_reports_it_missing(tiny_model, tmp_path):
    """Nothing stays on the meta device: the encoder's and decoder's embeddings are their own modules, tied to the
    shared matrix by parameter, so loading sees the shared key missing instead of taking an alias for it."""
    tiny_model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["model.shared.weight"]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})

    loaded, info = TransformerMTForConditionalGeneration.from_pretrained(tmp_path, output_loading_info=True)

    assert "model.shared.weight" in info["missing_keys"]
    assert not [name for name, tensor in loaded.state_dict().items() if tensor.is_meta]
    shared = loaded.model.shared.weight
    assert torch.isfinite(shared).all() and shared.std() > 0  # initialised, not left empty
    for alias in (loaded.model.encoder.embed_tokens, loaded.model.decoder.embed_tokens, loaded.lm_head):
        assert alias.weight is shared
    assert torch.equal(
        loaded.model.encoder.layers[0].feed_forward.fc1.weight,
        tiny_model.model.encoder.layers[0].feed_forward.fc1.weight,
    )


# A folder saved by the code before encoder and decoder had embedding modules of their own (one
# `model.shared.weight`, no aliases stored), with what that code generated from it: see the fixture's script.
OLD_LAYOUT = ROOT / "tests" / "fixtures" / "old-layout-model"


@torch.no_grad()
def test_a_folder_saved_in_the_old_layout_loads_every_weight_and_translates_as_before():
    with safe_open(OLD_LAYOUT / "model.safetensors", "pt") as weights:
        stored = set(weights.keys())
    assert "model.shared.weight" in stored and not [key for key in stored if "embed_tokens" in key]
    with safe_open(OLD_LAYOUT / "outputs_of_the_old_code.safetensors", "pt") as outputs:
        old_ids, old_logits = outputs.get_tensor("generated_ids"), outputs.get_tensor("logits")

    model, info = TransformerMTForConditionalGeneration.from_pretrained(OLD_LAYOUT, output_loading_info=True)
    tokenizer = AutoTokenizer.from_pretrained(OLD_LAYOUT)
    encoded = tokenizer([pair[0] for pair in PAIRS[:3]], return_tensors="pt", padding=True)

    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    ids = model.eval().generate(**encoded)
    assert torch.equal(ids, old_ids)
    assert tokenizer.batch_decode(ids, skip_special_tokens=True) == [pair[1] for pair in PAIRS[:3]]
    torch.testing.assert_close(model(**encoded, decoder_input_ids=ids).logits, old_logits, rtol=1e-5, atol=1e-5)


def test_pre_norm_variant_round_trips_too(tiny_tokenizer, tmp_path):
    torch.manual_seed(1)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, norm_placement="pre")).eval()
    assert model.model.encoder.final_norm is not None and model.model.decoder.final_norm is not None
    model.save_pretrained(tmp_path)

    loaded = TransformerMTForConditionalGeneration.from_pretrained(tmp_path).eval()

    assert loaded.config.norm_placement == "pre"
    assert_same_model_after_round_trip(model, loaded, tiny_tokenizer)


# ---------------------------------------------------------------------------------------------------------------------
# Configuration and Auto classes


@pytest.mark.parametrize(
    "overrides, message",
    [
        (dict(d_model=30, num_attention_heads=4), "divisible by num_attention_heads"),
        (dict(norm_placement="sandwich"), "norm_placement must be one of"),
        (dict(vocab_size=100, pad_token_id=100), r"pad_token_id \(100\) must lie inside the vocabulary"),
        (dict(eos_token_id=-1), "eos_token_id"),
        (dict(dropout=1.0), r"dropout must lie in \[0, 1\)"),
        (dict(attention_dropout=-0.1), "attention_dropout must lie in"),
        (dict(label_smoothing=1.5), "label_smoothing must lie in"),
        (dict(encoder_layers=0), "encoder_layers must be a positive integer"),
        (dict(d_model=33, num_attention_heads=3), "must be even"),
    ],
)
def test_a_bad_config_raises_a_clear_error(overrides, message):
    with pytest.raises(ValueError, match=message):
        TransformerMTConfig(**overrides)


def test_a_bad_saved_config_fails_loading_with_the_same_error(tiny_model_dir, tmp_path):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    config["num_attention_heads"] = 5
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="divisible by num_attention_heads"):
        AutoConfig.from_pretrained(tmp_path)


def test_auto_classes_know_the_model_type(tiny_tokenizer):
    config = AutoConfig.for_model(
        "transformer_mt",
        vocab_size=len(tiny_tokenizer),
        d_model=32,
        num_attention_heads=4,
        d_ff=64,
        encoder_layers=1,
        decoder_layers=1,
    )
    assert type(config) is TransformerMTConfig
    assert type(AutoModelForSeq2SeqLM.from_config(config)) is TransformerMTForConditionalGeneration
    assert type(AutoModel.from_config(config)) is TransformerMTModel


def test_saved_folder_carries_auto_map_and_the_modeling_code(tiny_model_dir):
    config = json.loads((tiny_model_dir / "config.json").read_text())
    assert config["model_type"] == "transformer_mt"
    assert config["auto_map"] == {
        "AutoConfig": "configuration_transformer_mt.TransformerMTConfig",
        "AutoModel": "modeling_transformer_mt.TransformerMTModel",
        "AutoModelForSeq2SeqLM": "modeling_transformer_mt.TransformerMTForConditionalGeneration",
    }
    for code_file in ("configuration_transformer_mt.py", "modeling_transformer_mt.py"):
        assert (tiny_model_dir / code_file).is_file()
    assert (tiny_model_dir / "generation_config.json").is_file()
    assert (tiny_model_dir / "tokenizer.json").is_file()


# ---------------------------------------------------------------------------------------------------------------------
# Gradient checkpointing


@pytest.mark.parametrize("norm_placement", ["post", "pre"])
def test_gradient_checkpointing_gives_the_same_loss_and_gradients(tiny_tokenizer, norm_placement):
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, norm_placement=norm_placement))
    model.train()  # dropout on: the recomputation must replay the same dropout masks
    batch = make_batch(tiny_tokenizer)

    def loss_and_gradients():
        model.zero_grad()
        torch.manual_seed(1)
        loss = model(**batch).loss
        loss.backward()
        return loss.detach(), {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}

    plain_loss, plain_gradients = loss_and_gradients()
    model.gradient_checkpointing_enable()
    layers = [*model.model.encoder.layers, *model.model.decoder.layers]
    assert all(layer.gradient_checkpointing for layer in layers)
    checkpointed_loss, checkpointed_gradients = loss_and_gradients()

    assert torch.equal(plain_loss, checkpointed_loss)
    assert plain_gradients.keys() == checkpointed_gradients.keys() and len(plain_gradients) > 10
    for name, gradient in plain_gradients.items():
        torch.testing.assert_close(checkpointed_gradients[name], gradient, rtol=1e-5, atol=1e-7, msg=name)
    model.gradient_checkpointing_disable()
    assert not any(layer.gradient_checkpointing for layer in layers)
