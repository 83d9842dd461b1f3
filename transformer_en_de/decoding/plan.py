"""How a request decodes, planned once per model: the request's `DecodingSettings`, and each model's `DecodingPlan`.

A plan holds a decoding in two forms, each setting once in each: the request's settings as asked (what every system's
plan is made from) and the model's generation config (`generation_config_for`: the settings resolved against the
model's saved ones, the length bound included, the one thing `generate()` reads). Each sentence's limit of new tokens
is worked out once, here, from the bound the config holds (`modeling/length_bound.py`); the engine hands those limits
to `generate()` as a logits processor (`engine.step_processors`), the one place the bound is applied, for every model.
What a plan costs, and the beams and sentences that fit in a time, is `budget.py`'s; running it is `engine.run_plan`.
"""

import copy
from dataclasses import dataclass, field, replace

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
    """The model's generation config with `settings` applied and its length bound resolved (`model_bound`): the one
    place where decoding is configured, and the one form of it that `generate()`, the plan and a record read."""
    config = copy.deepcopy(model.generation_config)
    config.max_length = None  # a checkpoint's max_length would clash (with a warning) with max_new_tokens
    # The bound every model is held to (ours saves its own; any other gets the defaults), resolved once: the engine
    # applies it (`engine.step_processors`), and our generate() leaves a call that brings it alone.
    config.max_new_tokens_ratio, config.max_new_tokens_offset, config.max_new_tokens = model_bound(model, settings)
    if settings.num_beams is not None:
        config.num_beams = settings.num_beams
    if settings.length_penalty is not None:
        config.length_penalty = settings.length_penalty
    config.do_sample = settings.do_sample
    for name in ("top_k", "top_p", "temperature"):
        if getattr(settings, name) is not None:
            setattr(config, name, getattr(settings, name))
    return without_unused_settings(config)


def without_unused_settings(config):
    """`config` without the settings its search does not use (transformers warns about each)."""
    if not config.do_sample:
        config.top_k = config.top_p = config.temperature = None  # sampling-only settings
    if config.num_beams == 1:  # greedy or sampling: beam-only settings do nothing
        config.length_penalty, config.early_stopping = 1.0, False
    return config


def model_bound(model, settings: DecodingSettings) -> tuple[float, int, int]:
    """(ratio, offset, cap) of the per-sentence bound for `model` (`length_bound.decoding_bound`)."""
    return decoding_bound(
        model.generation_config,
        settings.max_new_tokens_ratio,
        settings.max_new_tokens_offset,
        settings.max_new_tokens,
        getattr(model.config, "max_position_embeddings", None),
    )


def config_bound(config) -> tuple[float, int, int]:
    """(ratio, offset, cap) of the bound a generation config made by `generation_config_for` holds."""
    return config.max_new_tokens_ratio, config.max_new_tokens_offset, config.max_new_tokens


def decoding_record(config, settings: DecodingSettings) -> dict:
    """The decoding as a plain record (what a score and a vote store), read from the generation config that does it
    (`generation_config_for`) and the settings it does not hold (the casing, the batches)."""
    ratio, offset, cap = config_bound(config)
    return {
        "num_beams": config.num_beams,
        "length_penalty": config.length_penalty,
        "do_sample": config.do_sample,
        "top_k": config.top_k,
        "top_p": config.top_p,
        "temperature": config.temperature,
        "max_new_tokens": cap,
        "max_new_tokens_ratio": ratio,
        "max_new_tokens_offset": offset,
        "normalise_case": settings.normalise_case,
        "batch_size": settings.batch_size,
    }


def resolved_settings(model, settings: DecodingSettings = DecodingSettings()) -> dict:
    """The decoding `translate` will use for `model`, the model's saved defaults filled in (what a score records): a
    plan's record (`decoding_record`) without the sentences."""
    return decoding_record(generation_config_for(model, settings), settings)


@dataclass(frozen=True)
class DecodingPlan:
    """One system's part of a request, made once (`plan_decoding`) and run as it is (`run_plan`): its sentences as the
    model reads them (tokenized once), each sentence's limit of new tokens, the request's `DecodingSettings` (what
    each system's plan is made from), the generation config made from them (the one place num_beams and the rest, the
    bound included, become what `generate()` reads), and the backend that decodes. A budget may narrow it once
    (`narrowed`: fewer beams, only its first sentences)."""

    sentences: tuple[str, ...]  # as given
    sources: tuple[str, ...]  # as the model reads them: its task prefix, the casing applied
    recased: tuple[bool, ...]  # typed in capitals and read in sentence case
    source_ids: tuple[tuple[int, ...], ...]  # what the model reads (cut at `source_limit`), </s> included
    source_lengths: tuple[int, ...]  # tokens before the cut
    source_limit: int  # tokens the model reads
    settings: DecodingSettings  # the request's, as asked (or as narrowed)
    limits: tuple[int, ...]  # new tokens each sentence may take (`modeling.length_bound.new_token_limits`)
    generation_config: object = field(repr=False, compare=False)  # the model's, the settings and bound applied
    backend: str = "PyTorch"  # what decodes it: "PyTorch", "CTranslate2 float32", "CTranslate2 int8"
    notices: tuple[str, ...] = ()  # what narrowed the plan, in words (a budget's)

    def __len__(self) -> int:
        return len(self.sentences)

    @property
    def truncated(self) -> list[bool]:
        return [length > self.source_limit for length in self.source_lengths]

    @property
    def num_beams(self) -> int:
        return self.generation_config.num_beams

    @property
    def bound(self) -> tuple[float, int, int]:
        """(ratio, offset, cap) of each sentence's limit, as the generation config holds them."""
        return config_bound(self.generation_config)

    def bound_text(self) -> str:
        """The bound in words, for a notice: "1.5 × its source tokens + 10, at most 255"."""
        ratio, offset, cap = self.bound
        return f"{ratio:g} × its source tokens + {offset}, at most {cap}"

    def narrowed(self, num_beams: int, count: int, notice: str) -> "DecodingPlan":
        """This plan with `num_beams` and only its first `count` sentences (nothing tokenized or resolved again), and
        why: the request's settings say the beams for the other systems, the config for this one."""
        config = copy.deepcopy(self.generation_config)
        config.num_beams = num_beams
        first = {name: getattr(self, name)[:count] for name in _PER_SENTENCE}
        return replace(
            self, **first, settings=replace(self.settings, num_beams=num_beams),
            generation_config=without_unused_settings(config), notices=(*self.notices, notice),
        )  # fmt: skip


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
    config = generation_config_for(model, settings)
    read = torch.tensor([min(length, limit) for length in lengths], dtype=torch.long)
    limits = new_token_limits(read, *config_bound(config)).tolist() if lengths else []
    return DecodingPlan(
        sentences=tuple(sentences),
        sources=tuple(sources),
        recased=tuple(recased),
        source_ids=tuple(tuple(row) for row in ids),
        source_lengths=tuple(lengths),
        source_limit=limit,
        settings=settings,
        limits=tuple(int(value) for value in limits),
        generation_config=config,
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
