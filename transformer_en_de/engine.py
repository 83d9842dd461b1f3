"""The one translation engine: a list of sentences in, their translations out, with any seq2seq model.

Every path that translates goes through `translate`: the app (each panel), compare.py, train.py's scoring,
average_checkpoints.py, the corpus translator and the benchmarks. So they cannot disagree, and the comparison with
pretrained models is fair: the same batching, the same decoding settings, the same length bound per sentence.

- Sentences are sorted by source length and decoded in batches (less padding); results come back in input order.
- `DecodingSettings` is the one definition of greedy, beam search and sampling.
- Each sentence gets at most `ratio * (its source tokens) + offset` new tokens (`modeling/length_bound.py`), inside
  its batch, for our model and for any other: the engine hands the same logits processor to every model.
- Our model's beam search lets each sentence leave its batch once it is done (`modeling/beam_search.py`): the ids of
  transformers' beam search, with less work; other models decode with transformers' own.
- Text typed in capitals is read in sentence case (`casing.normalise_case`, on by default, for every model): a model
  trained on sentence case loops on shouting; ordinary text is left as it is.
- A source longer than the model reads is truncated, and the result says so; `progress(done, total)` is called
  after each batch, and `should_stop()` before each, so that a caller can give up between batches.
- A `deadline` (a `time.monotonic()` time) ends the batch in progress at its next decoding step: every hypothesis is
  given `</s>`, so each sentence keeps what its search had written by then (marked `cut`), and no batch starts after.
"""

import copy
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from modeling.length_bound import SourceLengthBound, decoding_bound, force_eos, new_token_limits

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


@dataclass
class Translation:
    """One sentence's translation and what it took."""

    text: str
    source_ids: list[int]  # what the model read (after truncation), </s> included
    generated_ids: list[int]  # decoder start token, the new tokens, up to and including </s> when it was written
    source_truncated: bool = False  # the source was longer than the model reads
    hit_length_bound: bool = False  # decoding stopped at the sentence's limit instead of at </s>
    case_normalised: bool = False  # the sentence was typed in capitals and read in sentence case
    cut: bool = False  # the deadline ended decoding: the text is what the search had written by then

    @property
    def new_tokens(self) -> int:
        return max(len(self.generated_ids) - 1, 0)


@dataclass
class TranslationRun:
    """Translations in input order, with the time and the notices of the run."""

    translations: list[Translation]
    seconds: float
    # `should_stop` said stop or the deadline passed: the sentences not reached have no translation (None), and those
    # decoding at the deadline are `cut`.
    stopped_early: bool = False
    notices: list[str] = field(default_factory=list)

    @property
    def texts(self) -> list[str]:
        return [translation.text if translation else "" for translation in self.translations]

    @property
    def new_tokens(self) -> int:
        return sum(translation.new_tokens for translation in self.translations if translation)


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
    positions = getattr(model.config, "max_position_embeddings", None)
    return positions - 1 if positions else 1_000_000


def generation_config_for(model, settings: DecodingSettings):
    """The model's generation config with `settings` applied: the one place where decoding is configured."""
    config = copy.deepcopy(model.generation_config)
    config.max_length = None  # a checkpoint's max_length would clash (with a warning) with max_new_tokens
    if settings.num_beams is not None:
        config.num_beams = settings.num_beams
    if settings.length_penalty is not None:
        config.length_penalty = settings.length_penalty
    config.do_sample = settings.do_sample
    for name in ("top_k", "top_p", "temperature"):
        if getattr(settings, name) is not None:
            setattr(config, name, getattr(settings, name))
    if not config.do_sample:
        config.top_k = config.top_p = config.temperature = None  # sampling-only settings; transformers warns
    if config.num_beams == 1:  # greedy or sampling: beam-only settings do nothing, and transformers warns
        config.length_penalty, config.early_stopping = 1.0, False
    saved_cap = getattr(model.generation_config, "max_new_tokens", None)
    cap = settings.max_new_tokens or saved_cap or max_target_tokens(model)
    config.max_new_tokens = min(cap, max_target_tokens(model))
    # The bound is applied by the engine itself (the same processor for every model): not by our generate() too.
    config.max_new_tokens_ratio = None
    return config


def token_limits(model, tokenizer, sentences: list[str], settings: DecodingSettings = DecodingSettings()) -> list[int]:
    """Each sentence's limit of new tokens as `translate` applies it: the bound on its source as the model reads it
    (prefix, casing, truncation), within the cap."""
    if not sentences:
        return []
    sources, _ = model_sources(model, sentences, settings)
    return _token_limits(model, tokenizer, _source_lengths(tokenizer, sources), settings)


def _source_lengths(tokenizer, sources: list[str]) -> list[int]:
    """Each source's tokens, untruncated."""
    return [len(ids) for ids in encode(tokenizer, sources)["input_ids"]]


def _token_limits(model, tokenizer, full_lengths: list[int], settings: DecodingSettings) -> list[int]:
    """The limits of sources of these lengths (before truncation)."""
    readable = torch.tensor([min(length, max_source_tokens(model, tokenizer)) for length in full_lengths])
    decoding = resolved_settings(model, settings)
    return new_token_limits(
        readable, decoding["max_new_tokens_ratio"], decoding["max_new_tokens_offset"], decoding["max_new_tokens"]
    ).tolist()


class Deadline(LogitsProcessor):
    """Once `time.monotonic()` passes `deadline`, forces `</s>` for every hypothesis: the batch ends at that step.

    Beam search then returns, for each sentence, its best hypothesis among those finished, the ones just ended
    included. `stopped_at` is the number of new tokens written when the deadline passed (None while it has not).
    """

    def __init__(self, deadline: float, eos_token_id: int):
        self.deadline = deadline
        self.eos_token_id = eos_token_id
        self.prompt_length: int | None = None
        self.stopped_at: int | None = None

    def select_sentences(self, sentences: torch.Tensor) -> "Deadline":
        """The same deadline for any subset of the sentences (our beam search, whose finished sentences leave)."""
        return self

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        if self.stopped_at is None:
            if time.monotonic() <= self.deadline:
                return scores
            self.stopped_at = input_ids.shape[1] - self.prompt_length
        return force_eos(scores, None, self.eos_token_id)


def resolved_settings(model, settings: DecodingSettings = DecodingSettings()) -> dict:
    """The decoding `translate` will use for `model`, the model's saved defaults filled in (what a score records)."""
    config = generation_config_for(model, settings)
    ratio, offset = decoding_bound(
        model.generation_config, settings.max_new_tokens_ratio, settings.max_new_tokens_offset
    )  # the settings', else the model's saved ones, else the defaults
    return {
        "num_beams": config.num_beams,
        "length_penalty": config.length_penalty,
        "do_sample": config.do_sample,
        "top_k": config.top_k,
        "top_p": config.top_p,
        "temperature": config.temperature,
        "max_new_tokens": config.max_new_tokens,
        "max_new_tokens_ratio": ratio,
        "max_new_tokens_offset": offset,
        "normalise_case": settings.normalise_case,
        "batch_size": settings.batch_size,
    }


def _strip_generated(sequence: list[int], pad_id: int | None, eos_id: int | None) -> list[int]:
    """Start token + new tokens up to and including the first </s>; the padding after it dropped."""
    kept = [sequence[0]]
    for token in sequence[1:]:
        if token == pad_id and pad_id != eos_id:
            break
        kept.append(token)
        if token == eos_id:
            break
    return kept


def encode(tokenizer, texts: list[str], **kwargs):
    """The tokenizer's encoding of typed text: a "</s>", "<pad>" or tag token written in it is read as the characters
    it is, never as that special token (a visitor's "</s>" would end the source in the middle)."""
    return tokenizer(texts, split_special_tokens=True, **kwargs)


def translate(
    model,
    tokenizer,
    sentences: list[str],
    settings: DecodingSettings = DecodingSettings(),
    *,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    deadline: float | None = None,
) -> TranslationRun:
    """Translate `sentences` in length-sorted batches; the result is in input order (see the module docstring)."""
    started = time.perf_counter()
    results: list[Translation | None] = [None] * len(sentences)
    if not sentences:
        return TranslationRun([], 0.0)
    sources, recased = model_sources(model, sentences, settings)
    limit = max_source_tokens(model, tokenizer)
    full_lengths = _source_lengths(tokenizer, sources)
    limits = _token_limits(model, tokenizer, full_lengths, settings)
    order = sorted(range(len(sources)), key=lambda index: full_lengths[index], reverse=True)
    generation_config = generation_config_for(model, settings)
    eos_id = generation_config.eos_token_id
    eos_id = eos_id[0] if isinstance(eos_id, list) else eos_id
    pad_id = generation_config.pad_token_id
    stopped = False
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), settings.batch_size):
            if (should_stop is not None and should_stop()) or (deadline is not None and time.monotonic() > deadline):
                stopped = True
                break
            indices = order[start : start + settings.batch_size]
            batch = encode(
                tokenizer,
                [sources[index] for index in indices],
                return_tensors="pt",
                padding=True,
                truncation=True,
                max_length=limit,
            ).to(model.device)
            batch_limits = [limits[index] for index in indices]
            batch_config = copy.copy(generation_config)
            batch_config.max_new_tokens = max(batch_limits)  # the batch ends with its longest allowed sentence
            processors = LogitsProcessorList([SourceLengthBound(torch.tensor(batch_limits), eos_id)])
            if deadline is not None:
                processors.append(Deadline(deadline, eos_id))
            output = model.generate(**batch, generation_config=batch_config, logits_processor=processors)
            # The step at which the deadline ended the batch (None if it did not): sentences still decoding then end
            # with the </s> it forced, one token after it.
            stopped_at = processors[-1].stopped_at if deadline is not None else None
            texts = tokenizer.batch_decode(output, skip_special_tokens=True)
            for row, index in enumerate(indices):
                generated = _strip_generated(output[row].tolist(), pad_id, eos_id)
                source_ids = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
                cut = stopped_at is not None and len(generated) - 1 == stopped_at + 1 and generated[-1] == eos_id
                results[index] = Translation(
                    text=texts[row].strip(),
                    source_ids=source_ids,
                    generated_ids=generated,
                    source_truncated=full_lengths[index] > limit,
                    hit_length_bound=not cut and len(generated) - 1 >= batch_limits[row],
                    case_normalised=recased[index],
                    cut=cut,
                )
            if progress is not None:
                progress(min(start + settings.batch_size, len(order)), len(order))
            if stopped_at is not None:
                stopped = start + settings.batch_size < len(order)  # batches left that will not start
                break
    notices = []
    capitals = [index + 1 for index, result in enumerate(results) if result and result.case_normalised]
    if capitals:
        notices.append(
            f"{_count(capitals, 'sentence')} typed in capitals and read in sentence case "
            f"(sentence {sentence_numbers(capitals)})."
        )
    truncated = [index + 1 for index, result in enumerate(results) if result and result.source_truncated]
    if truncated:
        notices.append(
            f"{_count(truncated, 'sentence')} longer than the {limit} tokens the model reads and cut there "
            f"(sentence {sentence_numbers(truncated)})."
        )
    cut = [index + 1 for index, result in enumerate(results) if result and result.cut]
    if cut:
        notices.append(
            f"the deadline passed while decoding: {_count(cut, 'sentence')} cut short, translated as far as the "
            f"search had got (sentence {sentence_numbers(cut)})."
        )
    if stopped:
        done = sum(result is not None for result in results)
        notices.append(f"stopped after {done} of {len(sentences)} sentences.")
    return TranslationRun(results, time.perf_counter() - started, stopped or bool(cut), notices)


def confidences(model, translations: list[Translation | None], batch_size: int = DEFAULT_BATCH_SIZE) -> list:
    """Each translation's confidence: the geometric mean of the probabilities the model gives its own tokens, `</s>`
    included (a teacher-forced pass over the source and generated ids; None for a sentence not translated). The same
    measure for every model, from its own probabilities. A `</s>` the engine forced (at the length bound or the
    deadline) was not the model's choice and is left out."""
    results: list[float | None] = [None] * len(translations)

    def chosen(item: Translation) -> int:
        """How many of the new tokens the model chose (all but a forced `</s>`)."""
        return item.new_tokens - (1 if item.hit_length_bound or item.cut else 0)

    done = [index for index, item in enumerate(translations) if item is not None and chosen(item) > 0]
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(done), batch_size):
            indices = done[start : start + batch_size]
            items = [translations[index] for index in indices]
            sources, source_mask = _padded([item.source_ids for item in items], pad)  # (B, S)
            targets, _ = _padded([item.generated_ids for item in items], pad)  # (B, T + 1)
            _, mask = _padded([item.generated_ids[1 : 1 + chosen(item)] for item in items], pad)  # (B, <= T)
            mask = torch.nn.functional.pad(mask, (0, targets.shape[1] - 1 - mask.shape[1]))  # (B, T): the tokens chosen
            logits = model(
                input_ids=sources.to(model.device),
                attention_mask=source_mask.to(model.device),
                decoder_input_ids=targets[:, :-1].to(model.device),
                use_cache=False,
            ).logits  # (B, T, vocab)
            picked = logits.float().log_softmax(-1).gather(-1, targets[:, 1:, None].to(model.device))[..., 0]  # (B, T)
            means = (picked * mask).sum(-1) / mask.sum(-1)
            for index, mean in zip(indices, means.exp().tolist(), strict=True):
                results[index] = mean
    return results


def _padded(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows padded to one length, and the mask of their real positions."""
    width = max(len(row) for row in rows)
    ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows])
    return ids, torch.tensor([[1] * len(row) + [0] * (width - len(row)) for row in rows])


def model_sources(model, sentences: list[str], settings: DecodingSettings) -> tuple[list[str], list[bool]]:
    """What the model reads for each sentence (its task prefix, the casing applied), and which were recased."""
    prefix = source_prefix(model)
    read = [normalise_case(sentence) if settings.normalise_case else sentence for sentence in sentences]
    return [prefix + text for text in read], [text != sentence for text, sentence in zip(read, sentences, strict=True)]


def _count(items: list, noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'} {'was' if len(items) == 1 else 'were'}"


def sentence_numbers(numbers: list[int], shown: int = 10) -> str:
    """Sentence numbers for a notice: "3, 7, 12", the first `shown` of them and how many more."""
    more = len(numbers) - shown
    return ", ".join(map(str, numbers[:shown])) + (f" and {more} more" if more > 0 else "")


__all__ = [
    "Deadline",
    "DecodingSettings",
    "confidences",
    "Translation",
    "TranslationRun",
    "generation_config_for",
    "max_source_tokens",
    "model_sources",
    "sentence_numbers",
    "token_limits",
    "translate",
]
