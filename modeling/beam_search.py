"""Beam search in which a finished sentence leaves the batch: the same search, and the same ids, as transformers'.

transformers' beam search decodes every sentence of a batch until the last one is done. On a length-sorted corpus
about a third of the sentence-steps belong to sentences already done (Multi30k test, batches of 32, beam 4). This
loop runs the same algorithm, step for step and operation for operation (`advance`), and calls the model's `forward`
with transformers' cache at every step (so hooks, a compiled forward and the cache classes see every step), but a
sentence leaves the batch as soon as it is done: four finished hypotheses (`early_stopping=True`), or no running beam
that can still beat them; from then on transformers' loop no longer changes its hypotheses either. The cache drops
the rows of the sentences that left. And the first step, where every beam of a sentence holds the same prompt, runs
once per sentence and is repeated for its beams.

Only rows of the batch change, never the arithmetic of a row, so the generated ids are the same (the parity tests
check `torch.equal`). It reaches transformers through public ground only: `generate()` prepares the inputs, the
encoder output, the logits processors and the stopping criteria and hands them to this loop through its
`custom_generate` argument (a callable runs as the decoding loop); the loop itself uses the model's forward, the
cache classes, the processors and the criteria, none of transformers' private generation helpers, which change
between releases. Searches it does not cover (sampling, scores returned, several sequences per sentence, a cache of
fixed size such as a static cache; `search_runs_here`) stay with transformers' own loop; with logits processors or
stopping criteria not known to treat each row on its own, every sentence stays until the last is done.

This file imports only torch and transformers, so it travels with the model code to the Hub.
"""

import dataclasses

import torch
import transformers
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import GenerationMode
from transformers.modeling_outputs import BaseModelOutput

# Processors that treat each row (hypothesis) on its own: they give the same scores for a row in any batch.
ROW_WISE_PROCESSORS = tuple(
    getattr(transformers, name)
    for name in (
        "ForcedBOSTokenLogitsProcessor",
        "ForcedEOSTokenLogitsProcessor",
        "InfNanRemoveLogitsProcessor",
        "MinLengthLogitsProcessor",
        "MinNewTokensLengthLogitsProcessor",
        "NoBadWordsLogitsProcessor",
        "NoRepeatNGramLogitsProcessor",
        "RepetitionPenaltyLogitsProcessor",
        "SequenceBiasLogitsProcessor",
        "SuppressTokensAtBeginLogitsProcessor",
        "SuppressTokensLogitsProcessor",
    )
)
ROW_WISE_CRITERIA = (transformers.EosTokenCriteria, transformers.MaxLengthCriteria)
# What a generate() call may pass for our search to run it: anything else (a cache of one's own, a decoder mask, an
# assistant, a streamer, a decoding function) goes to transformers' loop.
OTHER_LOOP_ARGUMENTS = (
    "past_key_values",
    "cache",
    "decoder_attention_mask",
    "assistant_model",
    "streamer",
    "synced_gpus",
    "custom_generate",
    "prefix_allowed_tokens_fn",
    "negative_prompt_ids",
    "stopping_criteria",
)


def search_runs_here(generation_config, call_kwargs: dict) -> bool:
    """Whether generate() should hand its decoding loop to `compact_beam_search` (through its public
    `custom_generate` argument): a beam search, not sampled, one sequence per sentence returned as ids, with a cache
    that grows with the search. `generation_config` is the call's (the model's, updated with the call's arguments)."""
    return (
        generation_config.get_generation_mode() == GenerationMode.BEAM_SEARCH
        and not generation_config.return_dict_in_generate
        and generation_config.num_return_sequences in (None, 1)
        and not getattr(generation_config, "low_memory", None)
        and generation_config.use_cache is not False  # None: the default, a cache
        and generation_config.cache_implementation in (None, "dynamic")
        and not any(call_kwargs.get(name) for name in OTHER_LOOP_ARGUMENTS)
    )


def row_wise(logits_processor, stopping_criteria) -> bool:
    """Whether every processor and criterion treats each row on its own (or narrows to a subset of the sentences,
    `select_sentences`): then a finished sentence may leave the batch without changing the others' scores."""
    processors = logits_processor
    return all(
        type(processor) in ROW_WISE_PROCESSORS or hasattr(processor, "select_sentences") for processor in processors
    ) and all(type(criterion) in ROW_WISE_CRITERIA for criterion in stopping_criteria)


def _select_processors(logits_processor, sentences: torch.Tensor):
    """The processors for a subset of the sentences: per-sentence ones (the length bound) narrowed to them."""
    return [
        processor.select_sentences(sentences) if hasattr(processor, "select_sentences") else processor
        for processor in logits_processor
    ]


def model_cache(model_kwargs: dict) -> EncoderDecoderCache:
    """The cache generate() prepared (`cache`, `past_key_values` before transformers 5.3), else a new one."""
    cache = model_kwargs.get("cache", model_kwargs.get("past_key_values"))
    return cache if cache is not None else EncoderDecoderCache(DynamicCache(), DynamicCache())


def grows_with_the_search(cache) -> bool:
    """Whether rows can leave this cache: transformers' dynamic cache, not one of fixed size (static)."""
    return (
        isinstance(cache, EncoderDecoderCache)
        and type(cache.self_attention_cache) is DynamicCache
        and type(cache.cross_attention_cache) is DynamicCache
    )


class ForwardState:
    """What the search passes to the model's forward at each step, one row per running beam: the source (encoder
    output and mask) and transformers' cache, whose rows follow the beams and leave with their sentences."""

    def __init__(self, model, encoder_states: torch.Tensor, source_mask: torch.Tensor | None, cache):
        self.model = model
        self.encoder_states, self.source_mask, self.cache = encoder_states, source_mask, cache

    def logits(self, decoder_input_ids: torch.Tensor, rows: torch.Tensor | None = None) -> torch.Tensor:
        """The next-token logits, (rows, vocab), from the model's forward: of every row, or of these rows of the
        source only (`decoder_input_ids` then has one row for each of them)."""
        encoder_states, source_mask = self.encoder_states, self.source_mask
        if rows is not None:
            encoder_states = encoder_states.index_select(0, rows)
            source_mask = source_mask.index_select(0, rows) if source_mask is not None else None
        outputs = self.model(
            encoder_outputs=BaseModelOutput(last_hidden_state=encoder_states),
            attention_mask=source_mask,
            decoder_input_ids=decoder_input_ids,
            cache=self.cache,
            use_cache=True,
            return_dict=True,
        )
        return outputs.logits[:, -1, :]

    def first_step_logits(self, decoder_input_ids: torch.Tensor, num_beams: int) -> torch.Tensor:
        """The first step's logits, (rows, vocab), from one forward per sentence instead of one per beam.

        At the first step every beam of a sentence holds the same prompt and reads the same source, so their rows
        of every product are the same: the forward runs on each sentence's first beam (a beam-th of the
        cross-attention keys and values to project), and its logits and cache are repeated for the other beams.
        A cache that already holds something (one the caller passed) is one row per beam: every row runs."""
        if self.cache.get_seq_length() > 0 or self.cache.cross_attention_cache.get_seq_length() > 0:
            return self.logits(decoder_input_ids)
        first_beams = torch.arange(0, decoder_input_ids.shape[0], num_beams, device=decoder_input_ids.device)
        logits = self.logits(decoder_input_ids.index_select(0, first_beams), rows=first_beams)
        self.cache.batch_repeat_interleave(num_beams)
        return logits.repeat_interleave(num_beams, dim=0)

    def follow_beams(self, beam_idx: torch.Tensor) -> None:
        """Row i continues the tokens of row beam_idx[i]: only the self-attention cache differs between beams."""
        self.cache.self_attention_cache.reorder_cache(beam_idx)

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Only these rows of the source go on (the beams of the sentences still decoding); the self-attention cache
        is narrowed by the next `follow_beams`, whose indices are rows of this step's batch."""
        self.cache.cross_attention_cache.batch_select_indices(rows)
        self.encoder_states = self.encoder_states.index_select(0, rows)
        if self.source_mask is not None:
            self.source_mask = self.source_mask.index_select(0, rows)


@dataclasses.dataclass
class Beams:
    """The search over the sentences still decoding, one row per sentence: (n, beams, ...), as transformers keeps it."""

    running_sequences: torch.Tensor  # (n, beams, max_length): the beams being extended
    running_beam_scores: torch.Tensor  # (n, beams)
    running_beam_indices: torch.Tensor  # (n, beams, max_length - prompt): the row each token came from
    sequences: torch.Tensor  # (n, beams, max_length): the best finished hypotheses so far
    beam_scores: torch.Tensor  # (n, beams), length-penalised
    beam_indices: torch.Tensor  # (n, beams, max_length - prompt)
    is_sent_finished: torch.Tensor  # (n, beams): which of them are real
    is_early_stop_heuristic_unsatisfied: torch.Tensor  # (n, 1): a running beam may still beat them

    @classmethod
    def start(cls, input_ids: torch.Tensor, num_beams: int, max_length: int, fill_value: int) -> "Beams":
        rows, prompt_length = input_ids.shape
        batch_size, device = rows // num_beams, input_ids.device
        shape = (batch_size, num_beams, max_length)
        running_sequences = torch.full(shape, fill_value, dtype=torch.int64, device=device)
        running_sequences[:, :, :prompt_length] = input_ids.view(batch_size, num_beams, prompt_length)
        running_beam_scores = torch.zeros((batch_size, num_beams), dtype=torch.float, device=device)
        running_beam_scores[:, 1:] = -1e9  # only the first beam's continuations at the first step
        running_beam_indices = torch.full(
            (batch_size, num_beams, max_length - prompt_length), -1, dtype=torch.int32, device=device
        )
        return cls(
            running_sequences=running_sequences,
            running_beam_scores=running_beam_scores,
            running_beam_indices=running_beam_indices,
            sequences=running_sequences.clone(),
            beam_scores=torch.full((batch_size, num_beams), -1e9, dtype=torch.float, device=device),
            beam_indices=running_beam_indices.clone(),
            is_sent_finished=torch.zeros((batch_size, num_beams), dtype=torch.bool, device=device),
            is_early_stop_heuristic_unsatisfied=torch.ones((batch_size, 1), dtype=torch.bool, device=device),
        )

    def keep(self, sentences: torch.Tensor) -> "Beams":
        """Only these sentences (indices of rows) go on."""
        return Beams(*(getattr(self, field.name)[sentences] for field in dataclasses.fields(self)))


def gather_beams(tensor: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The rows `indices` (n, k) of each sentence's beams in `tensor` (n, beams, ...): (n, k, ...)."""
    indices = indices.reshape(*indices.shape, *(1,) * (tensor.dim() - indices.dim()))
    return torch.take_along_dim(tensor, indices, dim=1)


def advance(beams: Beams, log_probs: torch.Tensor, stopping_criteria, settings: dict, cur_len: int):
    """One step of transformers' beam search (`GenerationMixin._beam_search`, not sampled), from the log-probabilities
    of every beam's next token (n, beams * vocab), beam scores added. Returns the beams after it and which sentences are
    done: nothing can enter their finished hypotheses any more.

    The same operations in the same order as transformers' loop (5.0 to 5.24 alike), so that ties and roundings fall
    the same way: the ids are transformers' (the parity tests compare them with `torch.equal`).
    """
    n, num_beams, beams_to_keep = log_probs.shape[0], settings["num_beams"], settings["beams_to_keep"]
    prompt_length, length_penalty = settings["decoder_prompt_len"], settings["length_penalty"]
    early_stopping, step = settings["early_stopping"], cur_len - prompt_length

    # The best `beams_to_keep` continuations over all beams of a sentence: (1 + end tokens) * beams of them, so that
    # `num_beams` can go on even if the others end here.
    topk_log_probs, topk_indices = torch.topk(log_probs, k=beams_to_keep)  # (n, K)
    vocab_size = log_probs.shape[-1] // num_beams
    topk_beams = topk_indices // vocab_size  # which beam each continues
    topk_sequences = gather_beams(beams.running_sequences, topk_beams)  # (n, K, max_length)
    topk_sequences[:, :, cur_len] = topk_indices % vocab_size
    topk_beam_indices = gather_beams(beams.running_beam_indices, topk_beams)
    # Rows of the batch as generate() numbers them: sentence * beams + beam.
    topk_beam_indices[:, :, step] = topk_beams + torch.arange(n, device=log_probs.device).view(-1, 1) * num_beams
    hits = stopping_criteria(topk_sequences[:, :, : cur_len + 1].reshape(n * beams_to_keep, -1), None)
    hits = hits.view(n, beams_to_keep)  # (n, K): the continuation ends here (end token or length)

    # The running beams of the next step: the best continuations that did not end.
    running_log_probs = topk_log_probs + hits.to(torch.float32) * -1.0e9
    next_beams = torch.topk(running_log_probs, k=num_beams)[1]  # (n, beams)
    running_sequences = gather_beams(topk_sequences, next_beams)
    running_beam_scores = gather_beams(running_log_probs, next_beams)
    running_beam_indices = gather_beams(topk_beam_indices, next_beams)

    # The finished hypotheses: the best `num_beams` of those kept so far and those among the top `num_beams`
    # continuations that ended now, scored with the length penalty.
    just_finished = hits & settings["top_num_beam_mask"][None, :]
    finished_scores = topk_log_probs / ((cur_len + 1 - prompt_length) ** length_penalty)
    full = torch.all(beams.is_sent_finished, dim=-1, keepdim=True) & (early_stopping is True)
    finished_scores += full.to(torch.float32) * -1.0e9
    finished_scores += (~beams.is_early_stop_heuristic_unsatisfied).to(torch.float32) * -1.0e9
    finished_scores += (~just_finished) * -1.0e9
    merged_scores = torch.cat((beams.beam_scores, finished_scores), dim=1)
    best = torch.topk(merged_scores, k=num_beams)[1]  # (n, beams)
    sequences = gather_beams(torch.cat((beams.sequences, topk_sequences), dim=1), best)
    beam_scores = gather_beams(merged_scores, best)
    beam_indices = gather_beams(torch.cat((beams.beam_indices, topk_beam_indices), dim=1), best)
    is_sent_finished = gather_beams(torch.cat((beams.is_sent_finished, just_finished), dim=1), best)

    # Can the best running beam still beat the worst finished hypothesis? (transformers' heuristic: its score at the
    # next length, or at the longest length with early_stopping="never" and a positive penalty.)
    if early_stopping == "never" and length_penalty > 0.0:
        best_length = settings["max_length"] - prompt_length
    else:
        best_length = cur_len + 1 - prompt_length
    best_running = running_beam_scores[:, :1] / (best_length**length_penalty)
    worst_finished = torch.where(is_sent_finished, torch.min(beam_scores, dim=1, keepdim=True)[0], -1.0e9)
    improvable = beams.is_early_stop_heuristic_unsatisfied & torch.any(
        best_running > worst_finished, dim=-1, keepdim=True
    )

    done = ~improvable[:, 0]
    if early_stopping is True:
        done = done | is_sent_finished.all(dim=-1)
    if bool(hits.all()):  # every candidate hit the length limit: the search ends for all
        done = torch.ones_like(done)
    beams = Beams(
        running_sequences,
        running_beam_scores,
        running_beam_indices,
        sequences,
        beam_scores,
        beam_indices,
        is_sent_finished,
        improvable,
    )
    return beams, done


def special_tokens(generation_config) -> tuple[int | None, list[int] | None]:
    """(padding id, end ids) as `generate()` uses them: the end token pads when no padding token is set."""
    eos_token_id = generation_config.eos_token_id
    if isinstance(eos_token_id, int):
        eos_token_id = [eos_token_id]
    eos_token_id = list(eos_token_id) if eos_token_id is not None else None
    pad_token_id = generation_config.pad_token_id
    if pad_token_id is None and eos_token_id:
        pad_token_id = eos_token_id[0]
    return pad_token_id, eos_token_id


def compact_beam_search(
    model, input_ids, logits_processor, stopping_criteria, generation_config, drop_finished: bool = True, **model_kwargs
):
    """transformers' beam search (not sampled) for an encoder-decoder, whose finished sentences leave the batch.

    input_ids: (batch * beams, prompt) decoder prompts; model_kwargs: what `generate()` prepared, with
    `encoder_outputs` and `attention_mask` already repeated for the beams. With `drop_finished=False` every sentence
    stays until the last is done, as in transformers' loop (for logits processors or stopping criteria that may read
    the whole batch). Returns the best sequence per sentence, (batch, prompt + new tokens), padded like transformers
    pads it.
    """
    num_beams = generation_config.num_beams
    pad_token_id, eos_token_id = special_tokens(generation_config)
    rows, cur_len = input_ids.shape
    prompt_length, device = cur_len, input_ids.device

    # As in transformers: keep (1 + number of end tokens) * beams candidates, so that beams can always continue.
    n_eos_tokens = len(eos_token_id) if eos_token_id is not None else 0
    beams_to_keep = max(2, 1 + n_eos_tokens) * num_beams
    top_num_beam_mask = torch.zeros(beams_to_keep, dtype=torch.bool, device=device)
    top_num_beam_mask[:num_beams] = True
    settings = dict(
        num_beams=num_beams,
        beams_to_keep=beams_to_keep,
        top_num_beam_mask=top_num_beam_mask,
        decoder_prompt_len=prompt_length,
        length_penalty=generation_config.length_penalty,
        early_stopping=generation_config.early_stopping,
        max_length=generation_config.max_length,
    )
    # transformers' fill value, precedence included: a padding id of 0 gives way to the end token.
    fill_value = pad_token_id or eos_token_id[0] if eos_token_id is not None else -1
    beams = Beams.start(input_ids, num_beams, generation_config.max_length, fill_value)
    # The results of the sentences that have left the batch, in batch order.
    final_sequences, final_beam_indices = beams.sequences[:, 0].clone(), beams.beam_indices[:, 0].clone()

    sentences = torch.arange(rows // num_beams, device=device)  # which sentences the running rows belong to
    encoder_states = model_kwargs["encoder_outputs"].last_hidden_state  # (n * beams, S, d_model)
    state = ForwardState(model, encoder_states, model_kwargs.get("attention_mask"), model_cache(model_kwargs))
    processors = list(logits_processor)
    decoder_input_ids = input_ids  # the whole prompt first, then one token per step

    logits = state.first_step_logits(decoder_input_ids, num_beams)  # once per sentence: its beams are alike
    while True:
        logits = logits.to(dtype=torch.float32)  # (n * beams, vocab)

        n = sentences.shape[0]
        flat_running_sequences = beams.running_sequences[:, :, :cur_len].reshape(n * num_beams, cur_len)
        log_probs = torch.nn.functional.log_softmax(logits, dim=-1)
        for processor in processors:
            log_probs = processor(flat_running_sequences, log_probs)
        log_probs = log_probs.reshape(n, num_beams, -1).add_(beams.running_beam_scores[:, :, None])  # in place
        beams, done = advance(beams, log_probs.reshape(n, -1), stopping_criteria, settings, cur_len)
        # The rows (of this step's batch) whose keys/values each running beam continues.
        beam_idx = beams.running_beam_indices[..., cur_len - prompt_length].reshape(-1).long()  # (n * beams,)
        cur_len += 1

        if not drop_finished:
            done = done if bool(done.all()) else torch.zeros_like(done)  # all leave together, at the end
        if bool(done.any()):
            final_sequences[sentences[done]] = beams.sequences[done, 0]
            final_beam_indices[sentences[done]] = beams.beam_indices[done, 0]
            keep = (~done).nonzero().squeeze(-1)  # (n',)
            if keep.numel() == 0:
                break
            sentences, beams = sentences[keep], beams.keep(keep)
            state.keep_rows((keep[:, None] * num_beams + torch.arange(num_beams, device=device)).reshape(-1))
            beam_idx = beam_idx.view(-1, num_beams)[keep].reshape(-1)
            processors = _select_processors(logits_processor, sentences)
        # Every beam of a sentence reads the same source: only the self-attention keys/values follow the beams.
        state.follow_beams(beam_idx)
        decoder_input_ids = beams.running_sequences[:, :, cur_len - 1].reshape(-1, 1)
        logits = state.logits(decoder_input_ids)

    # As transformers does: cut the padding columns that no returned sequence reached.
    generated = (final_beam_indices + 1).bool().sum(dim=1).max()
    return final_sequences[:, : prompt_length + generated]
