"""A length bound per sentence: no translation is longer than `ratio * (its source tokens) + offset` new tokens.

A translation is about as long as its source; one that runs far past it is looping ("Ein COGOGOGO...", a clause
repeated until the cap). A cap for the whole batch lets one such sentence keep every other sentence of its batch
decoding; this bound ends each hypothesis on its own, inside the batch, by forcing `</s>` once it reaches its limit.

Every piece of the bound's arithmetic is here, for our `generate()`, the translation engine (every model, PyTorch or
CTranslate2) and the app's estimate of a request's work: the limit of each sentence (`new_token_limits`), the cap
(`decoding_cap`, `decoding_bound`), where a batch ends (`batch_new_tokens`) and when a sentence reached its limit
(`tokens_before_eos`, `reached_limit`).

This file imports only torch and transformers, so it travels with the model code to the Hub.
"""

import math

import torch
from transformers import LogitsProcessor

# The defaults saved in the model's generation config as `max_new_tokens_ratio` and `max_new_tokens_offset`.
DEFAULT_RATIO = 1.5
DEFAULT_OFFSET = 10


def source_lengths(input_ids: torch.Tensor, attention_mask: torch.Tensor | None, pad_token_id: int | None):
    """Source tokens of each sentence (its `</s>` included, padding excluded): (batch,)."""
    if attention_mask is not None:
        return attention_mask.sum(dim=-1)
    if pad_token_id is None:
        return torch.full((input_ids.shape[0],), input_ids.shape[-1], device=input_ids.device)
    return (input_ids != pad_token_id).sum(dim=-1)


def decoding_cap(positions: int | None) -> int:
    """New tokens a decoder with `positions` positions can write: the start token takes one (unbounded without)."""
    return positions - 1 if positions else 1_000_000


def decoding_bound(
    generation_config,
    ratio: float | None = None,
    offset: int | None = None,
    max_new_tokens: int | None = None,
    positions: int | None = None,
) -> tuple[float, int, int]:
    """(ratio, offset, cap) when every model is bounded (the translation engine): those given, else the ones the
    generation config saves, else the defaults (a model that saves none, such as a pretrained one, gets the defaults);
    the cap never past what the decoder's `positions` leave room for."""
    saved_ratio, saved_offset = saved_bound(generation_config)
    ratio = ratio or saved_ratio or DEFAULT_RATIO
    offset = next(value for value in (offset, saved_offset, DEFAULT_OFFSET) if value is not None)
    room = decoding_cap(positions)
    cap = max_new_tokens or getattr(generation_config, "max_new_tokens", None) or room
    return ratio, offset, min(cap, room)


# What a caller of generate() may say about length: any of these replaces the saved bound (the bound is a default).
CALLER_LENGTHS = ("max_new_tokens", "max_length", "min_new_tokens", "min_length")


def generate_length_settings(
    generation_config, kwargs: dict, input_ids, pad_token_id: int | None, logits_processor=None
):
    """The per-sentence bound of one `generate()` call, as a `SourceLengthBound` (None: no bound), with `kwargs`
    (the call's) adjusted for it: its `max_new_tokens_ratio` / `max_new_tokens_offset` taken out, `max_new_tokens` set
    to the batch's longest limit.

    The bound saved in the generation config is a default: a call that passes a length (`CALLER_LENGTHS`) gets that
    length, as with any transformers model. A call that passes a ratio gets the bound in any case, capped by the
    call's `max_new_tokens` / `max_length` and no shorter than its `min_new_tokens`. A ratio of None is no bound. A
    call that brings its own `SourceLengthBound` among its `logits_processor` (a translation engine that bounds every
    model alike) is bounded by that one alone: one bound per call.
    """
    saved_ratio, saved_offset = saved_bound(generation_config)
    call_sets_ratio = kwargs.get("max_new_tokens_ratio") is not None
    ratio = kwargs.pop("max_new_tokens_ratio", saved_ratio)
    offset = kwargs.pop("max_new_tokens_offset", saved_offset) or 0
    # A caller's max_length (e.g. Seq2SeqTrainer's generation_max_length) replaces the saved max_new_tokens instead of
    # being overridden by it (transformers lets max_new_tokens win when both are set).
    if kwargs.get("max_length") is not None and kwargs.get("max_new_tokens") is None:
        kwargs["max_new_tokens"] = None
    call_sets_length = any(kwargs.get(name) is not None for name in CALLER_LENGTHS)
    brings_bound = any(getattr(processor, "bounds_each_sentence", False) for processor in logits_processor or [])
    if ratio is None or input_ids is None or brings_bound or (call_sets_length and not call_sets_ratio):
        return None
    if kwargs.get("max_new_tokens") is not None:
        cap = kwargs["max_new_tokens"]
    elif kwargs.get("max_length") is not None:
        cap = kwargs.pop("max_length") - 1  # the decoder start token takes one position
    else:
        cap = generation_config.max_new_tokens
    eos_token_id = kwargs.get("eos_token_id", generation_config.eos_token_id)  # the caller's end token wins
    if isinstance(eos_token_id, (list, tuple)):
        eos_token_id = eos_token_id[0]
    if eos_token_id is None:
        return None
    lengths = source_lengths(input_ids, kwargs.get("attention_mask"), pad_token_id)
    limits = new_token_limits(lengths, ratio, offset)
    minimum = kwargs.get("min_new_tokens")
    if minimum is not None:
        limits = limits.clamp(min=int(minimum) + 1)  # min_new_tokens come before the </s> the bound forces
    # The batch ends with its longest allowed sentence, or at the cap: the cap cuts, it forces no </s>.
    longest = batch_new_tokens(limits.tolist())
    kwargs["max_new_tokens"] = longest if cap is None else min(longest, int(cap))
    return SourceLengthBound(limits, eos_token_id)


def empty_source_bound(generation_config, kwargs: dict, input_ids, pad_token_id: int | None):
    """A bound of one token (the `</s>`) for the sentences of a `generate()` call that have nothing to translate (no
    token but `</s>` and padding: an empty string), so that they get an empty translation instead of whatever an
    untouched decoder writes; None when there is none, or when the call asks for a minimum length."""
    eos_token_id = kwargs.get("eos_token_id", generation_config.eos_token_id)
    if isinstance(eos_token_id, (list, tuple)):
        eos_token_id = eos_token_id[0] if eos_token_id else None
    if eos_token_id is None or not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
        return None
    if any(kwargs.get(name, getattr(generation_config, name, None)) for name in ("min_new_tokens", "min_length")):
        return None
    attention_mask = kwargs.get("attention_mask")
    if attention_mask is not None and attention_mask.dim() == 2:
        real = attention_mask.bool()
    elif pad_token_id is not None and pad_token_id != eos_token_id:
        real = input_ids != pad_token_id
    else:
        real = torch.ones_like(input_ids, dtype=torch.bool)
    empty = ~(real & (input_ids != eos_token_id)).any(dim=-1)  # (batch,)
    if not bool(empty.any()):
        return None
    limits = torch.where(empty.cpu(), 1, decoding_cap(None))  # the others: no limit from this bound
    return SourceLengthBound(limits, eos_token_id)


def saved_bound(generation_config) -> tuple[float | None, int | None]:
    """The bound a generation config saves, None for what it does not (a bare config saves neither)."""
    return (
        getattr(generation_config, "max_new_tokens_ratio", None),
        getattr(generation_config, "max_new_tokens_offset", None),
    )


def new_token_limits(lengths: torch.Tensor, ratio: float, offset: int, cap: int | None = None) -> torch.Tensor:
    """`ceil(ratio * length) + offset` new tokens per sentence (at least 1, at most `cap`): (batch,)."""
    limits = torch.tensor([math.ceil(ratio * int(length)) + int(offset) for length in lengths.tolist()])
    limits = limits.clamp(min=1)
    return limits if cap is None else limits.clamp(max=max(int(cap), 1))


def batch_new_tokens(limits: list[int]) -> int:
    """Where a batch ends: with its longest allowed sentence (the others are given `</s>` at their own limits)."""
    return max(int(limit) for limit in limits)


def tokens_before_eos(limit: int) -> int:
    """Tokens a sentence may write before the `</s>` its limit forces (the `</s>` counts in the limit)."""
    return max(int(limit) - 1, 0)


def reached_limit(new_tokens: int, limit: int) -> bool:
    """Whether a sentence that wrote `new_tokens` (its `</s>` included) stopped at its limit."""
    return new_tokens >= limit


def force_eos(scores: torch.FloatTensor, rows: torch.Tensor | None, eos_token_id: int) -> torch.FloatTensor:
    """`scores` in which the given rows (a boolean mask; every row when None) can choose nothing but `</s>`."""
    scores = scores.clone()
    rows = slice(None) if rows is None else rows
    scores[rows] = -math.inf
    scores[rows, eos_token_id] = 0.0
    return scores


class SourceLengthBound(LogitsProcessor):
    """Forces `</s>` for every hypothesis that has reached its sentence's limit of new tokens (the `</s>` counts).

    `limits` has one entry per sentence; the rows of a step are the sentence's beams (or returned sequences), so the
    limit of row r is `limits[r // (rows / sentences)]`. The first call sees the decoder prompt: its length is where
    new tokens start.
    """

    # How generate() recognises a call's own bound (`generate_length_settings`), whichever copy of this file (the
    # project's, or one a Hub folder carries) the caller's class came from.
    bounds_each_sentence = True

    def __init__(self, limits: torch.Tensor, eos_token_id: int):
        self.limits = limits
        self.eos_token_id = eos_token_id
        self.prompt_length: int | None = None

    def select_sentences(self, sentences: torch.Tensor) -> "SourceLengthBound":
        """The bound of a subset of the sentences (a beam search whose finished sentences leave the batch)."""
        selected = SourceLengthBound(self.limits[sentences.to(self.limits.device)], self.eos_token_id)
        selected.prompt_length = self.prompt_length
        return selected

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        generated = input_ids.shape[1] - self.prompt_length
        rows_per_sentence = input_ids.shape[0] // self.limits.shape[0]
        limits = self.limits.to(scores.device).repeat_interleave(rows_per_sentence)  # (rows,)
        must_end = limits <= generated + 1  # the token chosen now would be the last one allowed
        return force_eos(scores, must_end, self.eos_token_id) if must_end.any() else scores
