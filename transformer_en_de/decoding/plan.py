"""How a request decodes, planned once per model: the request's `DecodingSettings`, and each model's `DecodingPlan`.

A plan holds, each made once: the request's settings as asked (what every system's plan is made from), the model's
generation config (`generation_config_for`: the settings resolved against the model's saved ones, the one thing
`generate()` reads), the per-sentence length bound (`LengthBound`, resolved once against the model's saved bound) and
each sentence's limit of new tokens worked out from it. The engine hands those limits to `generate()` as a logits
processor (`engine.step_processors`), the one place the bound is applied, for every model; the config carries no bound
of its own, so our `generate()` derives none. This module imports nothing of the budget: what a plan costs, and the
plan that fits a request's time, is `budget.py`'s; running it is `engine.run_plan`.
"""

import copy
from dataclasses import dataclass, field, replace
from typing import NamedTuple

import torch

from modeling.length_bound import decoding_bound, decoding_cap, new_token_limits

from .casing import normalise_case

DEFAULT_BATCH_SIZE = 32
# A task prefix some models need in front of every source (T5 reads "translate English to German: ...").
TASK_PARAMS_KEY = "translation_en_to_de"


@dataclass(frozen=True)
class DecodingSettings:
    """How to decode. None means "the model's own" (its saved generation config), else the bound's defaults.

    num_beams: 1 is greedy search (or sampling with `do_sample`), more is beam search.
    length_penalty: beam search's length normalisation exponent (the paper: 0.6).
    max_new_tokens: a hard cap for every sentence, besides the bound (and the model's positions).
    max_new_tokens_ratio, max_new_tokens_offset: the per-sentence bound `ratio * source tokens + offset`; a huge
        ratio (1e6) turns it off, leaving only `max_new_tokens` for the whole batch.
    do_sample, top_k, top_p, temperature: sampling instead of search (back-translation uses it).
    batch_size: sentences per `generate()` call.
    normalise_case: read a sentence typed in capitals in sentence case (`casing.normalise_case`); other text is
        read as it is, so this changes nothing on Multi30k (no sentence there is in capitals).
    """

    num_beams: int | None = None
    length_penalty: float | None = None
    max_new_tokens: int | None = None
    max_new_tokens_ratio: float | None = None
    max_new_tokens_offset: int | None = None
    do_sample: bool = False
    top_k: int | None = None
    top_p: float | None = None
    temperature: float | None = None
    batch_size: int = DEFAULT_BATCH_SIZE
    normalise_case: bool = True

    def __post_init__(self):
        checks = {
            "num_beams": self.num_beams is None or self.num_beams >= 1,
            "max_new_tokens": self.max_new_tokens is None or self.max_new_tokens >= 1,
            "max_new_tokens_ratio": self.max_new_tokens_ratio is None or self.max_new_tokens_ratio > 0,
            "max_new_tokens_offset": self.max_new_tokens_offset is None or self.max_new_tokens_offset >= 0,
            "batch_size": self.batch_size >= 1,
            "top_p": self.top_p is None or 0 < self.top_p <= 1,
            "temperature": self.temperature is None or self.temperature > 0,
        }
        wrong = [name for name, ok in checks.items() if not ok]
        if wrong:
            raise ValueError(f"DecodingSettings: invalid {', '.join(f'{n}={getattr(self, n)!r}' for n in wrong)}.")


def source_prefix(model) -> str:
    """The task prefix the model expects in front of every source ("" for translation models)."""
    params = getattr(model.config, "task_specific_params", None) or {}
    return (params.get(TASK_PARAMS_KEY) or {}).get("prefix", "")


def max_source_tokens(model, tokenizer) -> int:
    """Source tokens the model reads: the smaller of the tokenizer's limit and the model's positions."""
    limits = [getattr(model.config, "max_position_embeddings", None), getattr(tokenizer, "model_max_length", None)]
    limits = [int(limit) for limit in limits if limit and limit < 1_000_000]  # "no limit" is a huge number
    return min(limits) if limits else 512


def max_target_tokens(model) -> int:
    """New tokens the decoder can write: its positions, less the start token (unbounded if it has none)."""
    return decoding_cap(getattr(model.config, "max_position_embeddings", None))


def generation_config_for(model, settings: DecodingSettings):
    """The model's generation config with `settings` applied: the one place where the search is configured, and the
    one form of it that `generate()` reads. The length bound is not in it: the plan carries that (`LengthBound`)."""
    config = copy.deepcopy(model.generation_config)
    config.max_length = None  # a checkpoint's max_length would clash (with a warning) with max_new_tokens
    # Ours saves its bound in its config, for a Hub user's generate(); the plan's bound replaces it, so that generate()
    # finds no second one to derive.
    for name in SAVED_BOUND:
        if hasattr(config, name):
            delattr(config, name)
    if settings.num_beams is not None:
        config.num_beams = settings.num_beams
    if settings.length_penalty is not None:
        config.length_penalty = settings.length_penalty
    config.do_sample = settings.do_sample
    for name in ("top_k", "top_p", "temperature"):
        if getattr(settings, name) is not None:
            setattr(config, name, getattr(settings, name))
    return without_unused_settings(config)


# The bound as a generation config saves it (`modeling/length_bound.py`), besides its `max_new_tokens` (the cap).
SAVED_BOUND = ("max_new_tokens_ratio", "max_new_tokens_offset")


def without_unused_settings(config):
    """`config` without the settings its search does not use (transformers warns about each)."""
    if not config.do_sample:
        config.top_k = config.top_p = config.temperature = None  # sampling-only settings
    if config.num_beams == 1:  # greedy or sampling: beam-only settings do nothing
        config.length_penalty, config.early_stopping = 1.0, False
    return config


class LengthBound(NamedTuple):
    """Each sentence's limit of new tokens: `ceil(ratio * its source tokens) + offset`, at most `cap`
    (`modeling/length_bound.py`). Resolved once per plan (`for_model`) and carried by it."""

    ratio: float
    offset: int
    cap: int

    @classmethod
    def for_model(cls, model, settings: DecodingSettings) -> "LengthBound":
        """The bound `settings` ask of `model`: theirs, else the model's saved one, else the defaults; the cap never
        past the decoder's positions (`length_bound.decoding_bound`)."""
        positions = getattr(model.config, "max_position_embeddings", None)
        bound = decoding_bound(
            model.generation_config,
            settings.max_new_tokens_ratio,
            settings.max_new_tokens_offset,
            settings.max_new_tokens,
            positions,
        )
        return cls(*bound)

    def limits(self, source_lengths: list[int]) -> tuple[int, ...]:
        """The limit of new tokens of each sentence of `source_lengths` tokens (as the model reads them)."""
        if not source_lengths:
            return ()
        limits = new_token_limits(torch.tensor(source_lengths), self.ratio, self.offset, self.cap)
        return tuple(int(limit) for limit in limits.tolist())

    def text(self) -> str:
        """The bound in words, for a notice: "1.5 × its source tokens + 10, at most 255"."""
        return f"{self.ratio:g} × its source tokens + {self.offset}, at most {self.cap}"


def decoding_record(plan: "DecodingPlan") -> dict:
    """The plan's decoding as a plain record (what a score and a vote store): its generation config, its bound and the
    settings neither holds (the casing, the batches)."""
    config, settings = plan.generation_config, plan.settings
    return {
        "num_beams": config.num_beams,
        "length_penalty": config.length_penalty,
        "do_sample": config.do_sample,
        "top_k": config.top_k,
        "top_p": config.top_p,
        "temperature": config.temperature,
        "max_new_tokens": plan.bound.cap,
        "max_new_tokens_ratio": plan.bound.ratio,
        "max_new_tokens_offset": plan.bound.offset,
        "normalise_case": settings.normalise_case,
        "batch_size": settings.batch_size,
    }


def resolved_settings(model, settings: DecodingSettings = DecodingSettings()) -> dict:
    """The decoding `translate` will use for `model`, the model's saved defaults filled in (what a score records): the
    record of a plan of no sentences (nothing tokenized)."""
    return decoding_record(plan_decoding(model, None, [], settings))


@dataclass(frozen=True)
class DecodingPlan:
    """One system's part of a request, made once (`plan_decoding`) and run as it is (`run_plan`): its sentences as the
    model reads them (tokenized once), the length bound and each sentence's limit of new tokens, the request's
    `DecodingSettings` (what each system's plan is made from), the generation config made from them (the one place
    num_beams and the rest become what `generate()` reads), and the backend that decodes. A budget may replace it once
    by a plan of less work (`with_less_work`: fewer beams, only its first sentences)."""

    sentences: tuple[str, ...]  # as given
    sources: tuple[str, ...]  # as the model reads them: its task prefix, the casing applied
    recased: tuple[bool, ...]  # typed in capitals and read in sentence case
    source_ids: tuple[tuple[int, ...], ...]  # what the model reads (cut at `source_limit`), </s> included
    source_lengths: tuple[int, ...]  # tokens before the cut
    source_limit: int  # tokens the model reads
    settings: DecodingSettings  # the request's, as asked (or with the budget's beams)
    bound: LengthBound  # each sentence's limit of new tokens, as a rule
    limits: tuple[int, ...]  # new tokens each sentence may take: `bound.limits` of what the model reads
    generation_config: object = field(repr=False, compare=False)  # the model's, the settings applied
    backend: str = "PyTorch"  # what decodes it: "PyTorch", "CTranslate2 float32", "CTranslate2 int8"
    notices: tuple[str, ...] = ()  # why the plan does less than asked, in words (a budget's)

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def truncated(self) -> list[bool]:
        return [length > self.source_limit for length in self.source_lengths]

    @property
    def num_beams(self) -> int:
        return self.generation_config.num_beams

    def with_less_work(self, num_beams: int, count: int, notice: str) -> "DecodingPlan":
        """This plan with `num_beams` and only its first `count` sentences (nothing tokenized or resolved again), and
        why: the request's settings say the beams for the other systems, the config for this one."""
        config = copy.deepcopy(self.generation_config)
        config.num_beams = num_beams
        first = {name: getattr(self, name)[:count] for name in _PER_SENTENCE}
        return replace(
            self,
            **first,
            settings=replace(self.settings, num_beams=num_beams),
            generation_config=without_unused_settings(config),
            notices=(*self.notices, notice),
        )


_PER_SENTENCE = ("sentences", "sources", "recased", "source_ids", "source_lengths", "limits")


def plan_decoding(
    model, tokenizer, sentences: list[str], settings: DecodingSettings = DecodingSettings(), *, backend=None
) -> DecodingPlan:
    """The plan of translating `sentences` with `model` (see `DecodingPlan`), the sentences tokenized in one call."""
    sources, recased = model_sources(model, sentences, settings)
    limit = max_source_tokens(model, tokenizer)
    ids = encode(tokenizer, sources)["input_ids"] if sources else []
    lengths = [len(row) for row in ids]
    long = [index for index, length in enumerate(lengths) if length > limit]
    if long:  # cut as the tokenizer cuts (its special tokens kept), only where needed
        cut = encode(tokenizer, [sources[index] for index in long], truncation=True, max_length=limit)["input_ids"]
        for index, row in zip(long, cut, strict=True):
            ids[index] = row
    bound = LengthBound.for_model(model, settings)
    return DecodingPlan(
        sentences=tuple(sentences),
        sources=tuple(sources),
        recased=tuple(recased),
        source_ids=tuple(tuple(row) for row in ids),
        source_lengths=tuple(lengths),
        source_limit=limit,
        settings=settings,
        bound=bound,
        limits=bound.limits([min(length, limit) for length in lengths]),
        generation_config=generation_config_for(model, settings),
        backend=backend_name(backend),
    )


def backend_name(backend) -> str:
    """What decodes: "PyTorch" for the model itself (None), else the backend's name."""
    return "PyTorch" if backend is None else backend.name


def encode(tokenizer, texts: list[str], **kwargs):
    """The tokenizer's encoding of typed text: a "</s>", "<pad>" or tag token written in it is read as the characters
    it is, never as that special token (a visitor's "</s>" would end the source in the middle)."""
    return tokenizer(texts, split_special_tokens=True, **kwargs)


def model_sources(model, sentences: list[str], settings: DecodingSettings) -> tuple[list[str], list[bool]]:
    """What the model reads for each sentence (its task prefix, the casing applied), and which were recased."""
    prefix = source_prefix(model)
    read = [normalise_case(sentence) if settings.normalise_case else sentence for sentence in sentences]
    return [prefix + text for text in read], [text != sentence for text, sentence in zip(read, sentences, strict=True)]
