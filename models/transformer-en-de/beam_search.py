"""Beam search in which a finished sentence leaves the batch: the same search as `GenerationMixin._beam_search`.

transformers' beam search decodes every sentence of a batch until the last one is done, and reorders every layer's
cross-attention keys/values at each step. On a length-sorted corpus about a third of the sentence-steps belong to
sentences already done (Multi30k test, batches of 32, beam 4). This loop runs the same algorithm, step for step, with
transformers' own helpers for choosing and finishing beams, but
- a sentence leaves the batch as soon as it is done: four finished hypotheses (`early_stopping=True`), or no running
  beam that can still beat them; from then on transformers' loop no longer changes its hypotheses either;
- the cross-attention keys/values, the same for every beam of a sentence, are projected once per sentence (not once
  per beam) and only re-indexed when sentences leave;
- each step runs `TransformerMTDecoder.step`, the decoder's arithmetic on plain tensors (`DecodingState`) without the
  module machinery around it, unless hooks watch the decoder (then the decoder module runs, hooks and all).

Only rows of the batch change, never the arithmetic of a row, so the generated ids are the same (the parity tests
check `torch.equal`). Searches it does not cover (sampling, scores or attentions returned, several sequences per
sentence, logits processors or stopping criteria not known to treat each row on its own) stay with transformers.

This file imports only torch, transformers and its sibling `linear_kernel.py`, so it travels with the model code
to the Hub.
"""

import dataclasses

import torch
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.generation import logits_process
from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria
from transformers.modeling_outputs import BaseModelOutput

from .linear_kernel import linear, uses_packed_weights

# Processors that treat each row (hypothesis) on its own: they give the same scores for a row in any batch.
ROW_WISE_PROCESSORS = tuple(
    getattr(logits_process, name)
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
ROW_WISE_CRITERIA = (EosTokenCriteria, MaxLengthCriteria)


def compact_search_covers(
    generation_config, logits_processor, stopping_criteria, synced_gpus: bool, model_kwargs: dict
) -> bool:
    """Whether `compact_beam_search` runs this search exactly; if not, transformers' `_beam_search` should."""
    processors_known = all(
        type(processor) in ROW_WISE_PROCESSORS or hasattr(processor, "select_sentences")
        for processor in logits_processor
    )
    return (
        processors_known
        and all(type(criterion) in ROW_WISE_CRITERIA for criterion in stopping_criteria)
        and not generation_config.do_sample
        and not generation_config.return_dict_in_generate
        and not generation_config.low_memory
        and generation_config.num_return_sequences in (None, 1)
        and not synced_gpus
        and model_kwargs.get("use_cache", True)
        and isinstance(model_kwargs.get("encoder_outputs"), BaseModelOutput)
        and model_kwargs.get("decoder_attention_mask") is None
    )


def _select_processors(logits_processor, sentences: torch.Tensor):
    """The processors for a subset of the sentences: per-sentence ones (the length bound) narrowed to them."""
    return [
        processor.select_sentences(sentences) if hasattr(processor, "select_sentences") else processor
        for processor in logits_processor
    ]


def _output_layer(model):
    """hidden states (rows, d_model) -> logits (rows, vocab), multiplied as the model's forward multiplies them."""
    layer = model.get_output_embeddings()
    if type(layer) is not torch.nn.Linear or uses_packed_weights(layer.weight):
        return lambda hidden_states: linear(layer, hidden_states)
    # BLAS: a plain matmul by the transposed weight, kept contiguous, is faster at every step than F.linear's
    # transposed view, with the same results.
    output_projection, output_bias = _transposed_output_projection(model), layer.bias  # (d_model, vocab)

    def project(hidden_states: torch.Tensor) -> torch.Tensor:
        logits = torch.mm(hidden_states, output_projection)
        return logits if output_bias is None else logits + output_bias

    return project


def _transposed_output_projection(model) -> torch.Tensor:
    """The output projection's weight (tied to the embedding, (vocab, d_model)) as a contiguous (d_model, vocab),
    kept until the weight changes (its version counts in-place updates such as optimizer steps and loading)."""
    weight = model.get_output_embeddings().weight
    key = (weight.data_ptr(), weight._version, weight.dtype, weight.device)
    cached = model.__dict__.get("_transposed_output_projection")
    if cached is None or cached[0] != key:
        cached = (key, weight.detach().t().contiguous())
        model.__dict__["_transposed_output_projection"] = cached
    return cached[1]


def cross_attention_memory(decoder, encoder_states: torch.Tensor, num_beams: int) -> tuple[list, list]:
    """Each layer's cross-attention keys and values, (n * beams, h, S, d_k): projected once per sentence (not once per
    beam), then repeated for its beams. `encoder_states` is (n * beams, S, d_model), as generate() repeated it."""
    sources = encoder_states[::num_beams]  # (n, S, d_model)
    keys, values = [], []
    for layer in decoder.layers:
        attention = layer.cross_attn
        keys.append(attention._split_heads(linear(attention.k_proj, sources)).repeat_interleave(num_beams, 0))
        values.append(attention._split_heads(linear(attention.v_proj, sources)).repeat_interleave(num_beams, 0))
    return keys, values


class DecodingState:
    """What the decoder remembers during the search, as plain tensors, one row per running beam.

    Per layer: the self-attention keys and values of the tokens so far (extended at every step, reordered to follow
    the beams) and the cross-attention keys and values of the source, projected once per sentence (not once per beam)
    and only re-indexed when sentences leave. `TransformerMTDecoder.step` reads and extends it.
    """

    def __init__(self, decoder, encoder_states: torch.Tensor, source_mask: torch.Tensor | None, num_beams: int):
        self.decoder = decoder
        self.cross_keys, self.cross_values = cross_attention_memory(decoder, encoder_states, num_beams)
        self.source_mask = source_mask  # (n * beams, S), 1 for real tokens
        self.keys: list[torch.Tensor | None] = [None] * len(decoder.layers)  # (n * beams, h, length, d_k)
        self.values: list[torch.Tensor | None] = [None] * len(decoder.layers)
        self.length = 0

    def step(self, input_ids: torch.Tensor) -> torch.Tensor:
        """The decoder's hidden states for `input_ids`, (rows, T) -> (rows, T, d_model), remembered for the next."""
        return self.decoder.step(input_ids, self)

    def append(self, layer: int, keys: torch.Tensor, values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.keys[layer] is not None:
            keys = torch.cat([self.keys[layer], keys], dim=-2)
            values = torch.cat([self.values[layer], values], dim=-2)
        self.keys[layer], self.values[layer] = keys, values
        return keys, values

    def follow_beams(self, beam_idx: torch.Tensor) -> None:
        """Row i continues the tokens of row beam_idx[i]: only the self-attention memory differs between beams."""
        self.keys = [keys.index_select(0, beam_idx) for keys in self.keys]
        self.values = [values.index_select(0, beam_idx) for values in self.values]

    def keep_rows(self, rows: torch.Tensor) -> None:
        """Only these rows go on (the beams of the sentences still decoding), before `follow_beams` renumbers them."""
        self.cross_keys = [keys.index_select(0, rows) for keys in self.cross_keys]
        self.cross_values = [values.index_select(0, rows) for values in self.cross_values]
        if self.source_mask is not None:
            self.source_mask = self.source_mask.index_select(0, rows)


def _records_outputs_only(hook) -> bool:
    """transformers' output recorders (installed for good by the first call that asks for attentions or hidden
    states) do nothing unless a forward call asks them to; beam search never does."""
    return getattr(hook, "__module__", None) == "transformers.utils.output_capturing"


def _decoder_is_watched(decoder) -> bool:
    """Whether a hook would see the decoder's modules run (the app's scheduler, a user's probe): then the search
    calls the decoder module at every step instead of `TransformerMTDecoder.step`."""
    module_hooks = torch.nn.modules.module
    if module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks:
        return True
    return any(
        not _records_outputs_only(hook)
        for module in decoder.modules()
        for hook in (*module._forward_hooks.values(), *module._forward_pre_hooks.values())
    )


class ModuleDecodingState:
    """The same memory in transformers' cache object, for steps that call the decoder module (and its hooks); the
    same methods as `DecodingState`."""

    def __init__(self, decoder, encoder_states: torch.Tensor, source_mask: torch.Tensor | None, num_beams: int):
        self.decoder, self.encoder_states, self.source_mask = decoder, encoder_states, source_mask
        self.cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        cross_keys, cross_values = cross_attention_memory(decoder, encoder_states, num_beams)
        for index, (keys, values) in enumerate(zip(cross_keys, cross_values, strict=True)):
            self.cache.cross_attention_cache.update(keys, values, index)
            self.cache.is_updated[index] = True

    def step(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.decoder(
            input_ids,
            self.encoder_states,
            encoder_attention_mask=self.source_mask,
            past_key_values=self.cache,
            return_dict=True,
        ).last_hidden_state

    def follow_beams(self, beam_idx: torch.Tensor) -> None:
        self.cache.self_attention_cache.reorder_cache(beam_idx)

    def keep_rows(self, rows: torch.Tensor) -> None:
        self.cache.cross_attention_cache.reorder_cache(rows)
        self.encoder_states = self.encoder_states[rows]
        if self.source_mask is not None:
            self.source_mask = self.source_mask[rows]


def decoding_state(model, encoder_states: torch.Tensor, source_mask: torch.Tensor | None, num_beams: int):
    """The state whose `step(input_ids)` gives the decoder's hidden states: plain tensors unless hooks watch."""
    decoder = model.get_decoder()
    watched = _decoder_is_watched(decoder) or decoder.training
    return (ModuleDecodingState if watched else DecodingState)(decoder, encoder_states, source_mask, num_beams)


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


def advance(model, beams: Beams, log_probs: torch.Tensor, stopping_criteria, settings: dict, cur_len: int):
    """One step of transformers' beam search with its own helpers, from the log-probabilities of every beam's next
    token (n, beams * vocab), beam scores added. Returns the beams after it and which sentences are done: nothing can
    enter their finished hypotheses any more (the conditions of `_update_finished_beams`)."""
    n, num_beams, beams_to_keep = log_probs.shape[0], settings["num_beams"], settings["beams_to_keep"]
    prompt_length, length_penalty = settings["decoder_prompt_len"], settings["length_penalty"]
    topk_log_probs, topk_running_sequences, topk_running_beam_indices = model._get_top_k_continuations(
        accumulated_log_probs=log_probs,
        running_sequences=beams.running_sequences,
        running_beam_indices=beams.running_beam_indices,
        cur_len=cur_len,
        decoder_prompt_len=prompt_length,
        do_sample=False,
        beams_to_keep=beams_to_keep,
        num_beams=num_beams,
        batch_size=n,
    )
    hits = stopping_criteria(topk_running_sequences[:, :, : cur_len + 1].reshape(n * beams_to_keep, -1), None)
    hits = hits.view(n, beams_to_keep)
    running_sequences, running_beam_scores, running_beam_indices = model._get_running_beams_for_next_iteration(
        topk_log_probs=topk_log_probs,
        topk_running_sequences=topk_running_sequences,
        topk_running_beam_indices=topk_running_beam_indices,
        next_token_hits_stopping_criteria=hits,
        num_beams=num_beams,
    )
    sequences, beam_scores, beam_indices, is_sent_finished = model._update_finished_beams(
        sequences=beams.sequences,
        topk_running_sequences=topk_running_sequences,
        beam_scores=beams.beam_scores,
        topk_log_probs=topk_log_probs,
        beam_indices=beams.beam_indices,
        topk_running_beam_indices=topk_running_beam_indices,
        is_early_stop_heuristic_unsatisfied=beams.is_early_stop_heuristic_unsatisfied,
        is_sent_finished=beams.is_sent_finished,
        next_token_hits_stopping_criteria=hits,
        top_num_beam_mask=settings["top_num_beam_mask"],
        num_beams=num_beams,
        cur_len=cur_len,
        decoder_prompt_len=prompt_length,
        length_penalty=length_penalty,
        early_stopping=settings["early_stopping"],
    )
    is_early_stop_heuristic_unsatisfied = model._check_early_stop_heuristic(
        is_early_stop_heuristic_unsatisfied=beams.is_early_stop_heuristic_unsatisfied,
        running_beam_scores=running_beam_scores,
        beam_scores=beam_scores,
        is_sent_finished=is_sent_finished,
        cur_len=cur_len + 1,
        max_length=settings["max_length"],
        decoder_prompt_len=prompt_length,
        early_stopping=settings["early_stopping"],
        length_penalty=length_penalty,
    )
    done = ~is_early_stop_heuristic_unsatisfied[:, 0]
    if settings["early_stopping"] is True:
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
        is_early_stop_heuristic_unsatisfied,
    )
    return beams, done


def compact_beam_search(model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs):
    """`GenerationMixin._beam_search` for an encoder-decoder whose finished sentences leave the batch.

    input_ids: (batch * beams, prompt) decoder prompts; model_kwargs: what `generate()` prepared, with
    `encoder_outputs` and `attention_mask` already repeated for the beams. Returns the best sequence per sentence,
    (batch, prompt + new tokens), padded like transformers pads it.
    """
    num_beams = generation_config.num_beams
    pad_token_id = generation_config._pad_token_tensor
    eos_token_id = generation_config._eos_token_tensor
    rows, cur_len = input_ids.shape
    prompt_length, device = cur_len, input_ids.device

    # As in transformers: keep (1 + number of end tokens) * beams candidates, so that beams can always continue.
    n_eos_tokens = eos_token_id.shape[0] if eos_token_id is not None else 0
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
    fill_value = pad_token_id or eos_token_id[0] if eos_token_id is not None else -1
    beams = Beams.start(input_ids, num_beams, generation_config.max_length, fill_value)
    # The results of the sentences that have left the batch, in batch order.
    final_sequences, final_beam_indices = beams.sequences[:, 0].clone(), beams.beam_indices[:, 0].clone()

    sentences = torch.arange(rows // num_beams, device=device)  # which sentences the running rows belong to
    encoder_states = model_kwargs["encoder_outputs"].last_hidden_state  # (n * beams, S, d_model)
    state = decoding_state(model, encoder_states, model_kwargs.get("attention_mask"), num_beams)
    processors = list(logits_processor)
    output_layer = _output_layer(model)
    decoder_input_ids = input_ids  # the whole prompt first, then one token per step

    while True:
        hidden_states = state.step(decoder_input_ids)  # (n * beams, T, d_model)
        logits = output_layer(hidden_states[:, -1, :]).to(dtype=torch.float32)  # (n * beams, vocab)

        n = sentences.shape[0]
        flat_running_sequences = beams.running_sequences[:, :, :cur_len].reshape(n * num_beams, cur_len)
        log_probs = torch.nn.functional.log_softmax(logits, dim=-1)
        for processor in processors:
            log_probs = processor(flat_running_sequences, log_probs)
        log_probs = log_probs.reshape(n, num_beams, -1).add_(beams.running_beam_scores[:, :, None])  # in place
        beams, done = advance(model, beams, log_probs.reshape(n, -1), stopping_criteria, settings, cur_len)
        # The rows (of this step's batch) whose keys/values each running beam continues.
        beam_idx = beams.running_beam_indices[..., cur_len - prompt_length].reshape(-1).long()  # (n * beams,)
        cur_len += 1

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

    # As transformers does: cut the padding columns that no returned sequence reached.
    generated = (final_beam_indices + 1).bool().sum(dim=1).max()
    return final_sequences[:, : prompt_length + generated]
