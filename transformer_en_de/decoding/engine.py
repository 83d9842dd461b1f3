"""The one translation engine: a list of sentences in, their translations out, with any seq2seq model.

Every path that translates goes through `run_plan` (most by `translate`): the app (each panel), compare.py, train.py's
scoring, average_checkpoints.py, the corpus translator and the benchmarks. So they cannot disagree, and the comparison
with pretrained models is fair: the same batching, the same decoding settings, the same length bound per sentence.

- One `DecodingSettings` per request decides how every system decodes; for each model `plan_decoding` makes it a
  `DecodingPlan` once (`plan.py`: the settings resolved against the model's saved ones into its generation config,
  each sentence as the model reads it, tokenized once, the length bound and each sentence's limit of new tokens, the
  backend). `run_plan` runs the plan as it is (`translate` is the two in one); a budget may replace a plan once before
  by one of less work (`budget.fit_budget`).
- Sentences are sorted by source length and decoded in batches (less padding); results come back in input order.
- `DecodingSettings` is the one definition of greedy, beam search and sampling.
- Two backends decode a plan: the model itself (PyTorch, `backend=None`) or CTranslate2 (`backend=` a
  `backends.CTranslate2Backend`), with the same bound per sentence, notices, progress and confidences; CTranslate2
  bounds a batch, so each sentence is cut at its own limit after it (exactly what the bound does for greedy search).
- Each sentence gets at most `ratio * (its source tokens) + offset` new tokens (the plan's `LengthBound`), inside
  its batch, for our model and for any other: the engine hands the plan's limits to every model's `generate()` as
  one logits processor, the one place the bound is applied (the plan's config carries no bound, so our generate()
  adds none).
- Our model's beam search lets each sentence leave its batch once it is done (`modeling/beam_search.py`): the ids of
  transformers' beam search, with less work; other models decode with transformers' own.
- Text typed in capitals is read in sentence case (`casing.normalise_case`, on by default, for every model): a model
  trained on sentence case loops on shouting; ordinary text is left as it is.
- A source longer than the model reads is truncated, and the result says so; `progress(done, total)` is called
  after each batch, and `should_stop()` before each, so that a caller can give up between batches.
- A `deadline` (a `time.monotonic()` time) ends the batch in progress at its next decoding step: every hypothesis is
  given `</s>`, so each sentence keeps what its search had written by then (marked `cut`), and no batch starts after.
  With CTranslate2 the deadline is checked between batches only (a batch runs to its end).
"""

import copy
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from modeling.length_bound import (
    SourceLengthBound,
    batch_new_tokens,
    force_eos,
    reached_limit,
    tokens_before_eos,
)

# The plan is made in plan.py; its names are also the engine's (every caller imports them from here).
from .plan import (
    DEFAULT_BATCH_SIZE,
    DecodingPlan,
    DecodingSettings,
    LengthBound,
    backend_name,
    generation_config_for,
    max_source_tokens,
    max_target_tokens,
    model_sources,
    plan_decoding,
    resolved_settings,
)


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
    plan: "DecodingPlan | None" = None  # what was asked: the resolved decoding, the limits, the backend

    @property
    def texts(self) -> list[str]:
        return [translation.text if translation else "" for translation in self.translations]

    @property
    def new_tokens(self) -> int:
        return sum(translation.new_tokens for translation in self.translations if translation)


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


class TurnPoint(LogitsProcessor):
    """Calls `at_each_step()` at every step of the search and changes nothing: where a caller that shares the CPU
    between requests lets this one wait for its turn, or stop (the callable raises). Passed to `generate()` like
    `Deadline`, so the reader of the call sees it."""

    def __init__(self, at_each_step: Callable[[], None]):
        self.at_each_step = at_each_step

    def select_sentences(self, sentences: torch.Tensor) -> "TurnPoint":
        return self

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.at_each_step()
        return scores


def step_processors(limits: list[int], eos_id: int, deadline: float | None, at_each_step) -> LogitsProcessorList:
    """What the engine adds to `generate()`'s own processors: the length bound per sentence, the deadline, the turn
    point at each step."""
    processors = LogitsProcessorList([SourceLengthBound(torch.tensor(limits), eos_id)])
    processors += [Deadline(deadline, eos_id)] if deadline is not None else []
    processors += [TurnPoint(at_each_step)] if at_each_step is not None else []
    return processors


def strip_generated(sequence: list[int], pad_id: int | None, eos_id: int | None) -> list[int]:
    """Start token + new tokens up to and including the first </s>; the padding after it dropped."""
    kept = [sequence[0]]
    for token in sequence[1:]:
        if token == pad_id and pad_id != eos_id:
            break
        kept.append(token)
        if token == eos_id:
            break
    return kept


def eos_id_of(config) -> int:
    """The end-of-sentence id a generation config stops at (the first, where it lists several)."""
    eos_id = config.eos_token_id
    return eos_id[0] if isinstance(eos_id, list) else eos_id


def _pad_id(model, tokenizer) -> int:
    for pad in (tokenizer.pad_token_id, model.config.pad_token_id):
        if pad is not None:
            return pad
    return 0


def _torch_batch(model, tokenizer, plan: DecodingPlan, indices: list[int], deadline: float | None, at_each_step=None):
    """Decode the sentences `indices` of `plan` with the model's generate(): (generated ids per sentence, the step
    at which the deadline ended the batch or None)."""
    rows = [list(plan.source_ids[index]) for index in indices]
    sources, mask = _padded(rows, _pad_id(model, tokenizer), left=tokenizer.padding_side == "left")
    config = plan.generation_config
    eos_id = eos_id_of(config)
    batch_limits = [plan.limits[index] for index in indices]
    processors = step_processors(batch_limits, eos_id, deadline, at_each_step)
    # The batch's cap on a shallow copy of the plan's config (only the cap differs per batch): generate() warns that a
    # generation argument passed beside a config is deprecated.
    config = copy.copy(config)
    config.max_new_tokens = batch_new_tokens(batch_limits)
    output = model.generate(
        input_ids=sources.to(model.device),
        attention_mask=mask.to(model.device),
        generation_config=config,
        logits_processor=processors,
    )
    # The step at which the deadline ended the batch (None if it did not): sentences still decoding then end with
    # the </s> it forced, one token after it.
    stopped_at = processors[1].stopped_at if deadline is not None else None
    return [strip_generated(row, config.pad_token_id, eos_id) for row in output.tolist()], stopped_at


def _ctranslate2_options(plan: DecodingPlan, backend, tokenizer, batch_limits: list[int]) -> dict:
    """`Translator.translate_batch` options doing what the plan's generation config does."""
    config = plan.generation_config
    tokens = tokenizer.convert_ids_to_tokens
    options = {
        "beam_size": config.num_beams,
        "length_penalty": config.length_penalty
        if config.num_beams > 1 and config.length_penalty is not None
        else 1.0,  # transformers' default too
        # CTranslate2 bounds a batch, not a sentence: the batch's longest limit, less the </s> the bound would force
        # (`_ctranslate2_generated` cuts each sentence at its own).
        "max_decoding_length": max(tokens_before_eos(batch_new_tokens(batch_limits)), 1),
        "min_decoding_length": 0,
        "max_input_length": 0,  # the plan has cut the sources already
        "return_end_token": True,
    }
    if config.do_sample:
        options.update(
            sampling_topk=config.top_k or 0,
            sampling_topp=config.top_p or 1.0,
            sampling_temperature=config.temperature or 1.0,
        )
    if getattr(config, "repetition_penalty", None) not in (None, 1.0):
        options["repetition_penalty"] = config.repetition_penalty
    if getattr(config, "no_repeat_ngram_size", None):
        options["no_repeat_ngram_size"] = config.no_repeat_ngram_size
    banned = [tokens(ids) for ids in getattr(config, "bad_words_ids", None) or []]
    banned = [sequence for sequence in banned if all(token in backend.target_vocabulary for token in sequence)]
    if banned:
        options["suppress_sequences"] = banned
    return options


def _ctranslate2_generated(ids: list[int], limit: int, start_id: int, eos_id: int) -> list[int]:
    """CTranslate2's new tokens as the engine's generated ids (start, tokens, </s>), cut at the sentence's limit as
    `SourceLengthBound` cuts: at most `limit - 1` tokens, then `</s>`."""
    ended = bool(ids) and ids[-1] == eos_id
    content = ids[:-1] if ended else ids
    return [start_id, *content[: tokens_before_eos(limit)], eos_id]


def _ctranslate2_batch(model, tokenizer, plan: DecodingPlan, indices: list[int], backend):
    rows = [list(plan.source_ids[index]) for index in indices]
    batch_limits = [plan.limits[index] for index in indices]
    options = _ctranslate2_options(plan, backend, tokenizer, batch_limits)
    hypotheses = backend.translate_batch([tokenizer.convert_ids_to_tokens(row) for row in rows], options)
    config = plan.generation_config
    start_id = config.decoder_start_token_id
    if start_id is None:
        start_id = model.config.decoder_start_token_id
    return [
        _ctranslate2_generated(tokenizer.convert_tokens_to_ids(tokens), limit, start_id, eos_id_of(config))
        for tokens, limit in zip(hypotheses, batch_limits, strict=True)
    ], None


def translate(
    model, tokenizer, sentences: list[str], settings: DecodingSettings = DecodingSettings(), *, backend=None, **running
) -> TranslationRun:
    """Translate `sentences`: plan them (`plan_decoding`) and run the plan (`run_plan`, which takes `running`)."""
    plan = plan_decoding(model, tokenizer, sentences, settings, backend=backend)
    return run_plan(model, tokenizer, plan, backend=backend, **running)


def run_plan(
    model,
    tokenizer,
    plan: DecodingPlan,
    *,
    backend=None,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    deadline: float | None = None,
    at_each_step: Callable[[], None] | None = None,
) -> TranslationRun:
    """Decode `plan` (made for `model`) in length-sorted batches, as it is: nothing planned or tokenized again; the
    result is in input order (see the module docstring).

    `backend`: None decodes with `model` itself; a `backends.CTranslate2Backend` (of this model) decodes with
    CTranslate2, bounded and reported the same way (its deadline is checked between batches only).
    `should_stop` is asked between batches; `at_each_step` is called at every step of PyTorch's search (`TurnPoint`).
    """
    started = time.perf_counter()
    # A model's plan decodes with either of its backends (the sentences, limits and config are the model's): a worker
    # that stopped since the plan was made leaves it to PyTorch, and the run's plan says which decoded.
    if plan.backend != backend_name(backend):
        plan = replace(plan, backend=backend_name(backend))
    if not plan.sentences:
        return TranslationRun([], 0.0, plan=plan)
    results: list[Translation | None] = [None] * len(plan)
    order = sorted(range(len(plan)), key=lambda index: plan.source_lengths[index], reverse=True)
    batch_size = plan.settings.batch_size
    eos_id = eos_id_of(plan.generation_config)
    truncated = plan.truncated
    stopped = False
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(order), batch_size):
            if (should_stop is not None and should_stop()) or (deadline is not None and time.monotonic() > deadline):
                stopped = True
                break
            indices = order[start : start + batch_size]
            if backend is None:
                generated, stopped_at = _torch_batch(model, tokenizer, plan, indices, deadline, at_each_step)
            else:
                generated, stopped_at = _ctranslate2_batch(model, tokenizer, plan, indices, backend)
            texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
            for row, index in enumerate(indices):
                ids = generated[row]
                cut = stopped_at is not None and len(ids) - 1 == stopped_at + 1 and ids[-1] == eos_id
                results[index] = Translation(
                    text=texts[row].strip(),
                    source_ids=list(plan.source_ids[index]),
                    generated_ids=ids,
                    source_truncated=truncated[index],
                    hit_length_bound=not cut and reached_limit(len(ids) - 1, plan.limits[index]),
                    case_normalised=plan.recased[index],
                    cut=cut,
                )
            if progress is not None:
                progress(min(start + batch_size, len(order)), len(order))
            if stopped_at is not None:
                stopped = start + batch_size < len(order)  # batches left that will not start
                break
    seconds, ended_early = time.perf_counter() - started, stopped or any(result and result.cut for result in results)
    return TranslationRun(results, seconds, ended_early, run_notices(plan, results, stopped), plan=plan)


def run_notices(plan: DecodingPlan, results: list[Translation | None], stopped: bool) -> list[str]:
    """What a run says about its sentences, in words: those read in sentence case, those cut to what the model reads,
    those the deadline cut short, and where it stopped (None: a sentence not reached)."""
    notices = []
    capitals = [index + 1 for index, result in enumerate(results) if result and result.case_normalised]
    if capitals:
        notices.append(
            f"{_count(capitals, 'sentence')} typed in capitals and read in sentence case "
            f"(sentence {sentence_numbers(capitals)})."
        )
    truncated_numbers = [index + 1 for index, result in enumerate(results) if result and result.source_truncated]
    if truncated_numbers:
        notices.append(
            f"{_count(truncated_numbers, 'sentence')} longer than the {plan.source_limit} tokens the model reads and "
            f"cut there (sentence {sentence_numbers(truncated_numbers)})."
        )
    cut = [index + 1 for index, result in enumerate(results) if result and result.cut]
    if cut:
        notices.append(
            f"the deadline passed while decoding: {_count(cut, 'sentence')} cut short, translated as far as the "
            f"search had got (sentence {sentence_numbers(cut)})."
        )
    if stopped:
        done = sum(result is not None for result in results)
        notices.append(f"stopped after {done} of {len(plan)} sentences.")
    return notices


def confidences(
    model,
    translations: list[Translation | None],
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    backend=None,
    should_stop=None,
) -> list:
    """Each translation's confidence: the geometric mean of the probabilities the model gives its own tokens, `</s>`
    included (a teacher-forced pass over the source and generated ids; None for a sentence not translated). The same
    measure for every model, from its own probabilities. A `</s>` the engine forced (at the length bound or the
    deadline) was not the model's choice and is left out. With a CTranslate2 `backend`, its `score_batch` computes
    the same probabilities from the converted weights. `should_stop()`, when given, is asked before each batch (as
    `translate` asks it): a turn point for a caller that shares the CPU, and True to stop (the rest stay None)."""
    results: list[float | None] = [None] * len(translations)

    def chosen(item: Translation) -> int:
        """How many of the new tokens the model chose (all but a forced `</s>`)."""
        return item.new_tokens - (1 if item.hit_length_bound or item.cut else 0)

    done = [index for index, item in enumerate(translations) if item is not None and chosen(item) > 0]
    pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
    eos = eos_id_of(model.generation_config)
    model.eval()
    with torch.inference_mode():
        for start in range(0, len(done), batch_size):
            if should_stop is not None and should_stop():
                break
            indices = done[start : start + batch_size]
            items = [translations[index] for index in indices]
            if backend is not None:
                means = _ctranslate2_confidences(backend, items, [chosen(item) for item in items], eos)
            else:
                means = _torch_confidences(model, items, [chosen(item) for item in items], pad)
            for index, mean in zip(indices, means, strict=True):
                results[index] = mean
    return results


def _torch_confidences(model, items: list[Translation], counts: list[int], pad: int) -> list[float]:
    sources, source_mask = _padded([item.source_ids for item in items], pad)  # (B, S)
    targets, _ = _padded([item.generated_ids for item in items], pad)  # (B, T + 1)
    _, mask = _padded([item.generated_ids[1 : 1 + count] for item, count in zip(items, counts, strict=True)], pad)
    mask = torch.nn.functional.pad(mask, (0, targets.shape[1] - 1 - mask.shape[1]))  # (B, T): the tokens chosen
    logits = model(
        input_ids=sources.to(model.device),
        attention_mask=source_mask.to(model.device),
        decoder_input_ids=targets[:, :-1].to(model.device),
        use_cache=False,
    ).logits  # (B, T, vocab)
    picked = logits.float().log_softmax(-1).gather(-1, targets[:, 1:, None].to(model.device))[..., 0]  # (B, T)
    return ((picked * mask).sum(-1) / mask.sum(-1)).exp().tolist()


def _ctranslate2_confidences(backend, items: list[Translation], counts: list[int], eos: int) -> list[float]:
    """`Translator.score_batch` on the forced target: it adds the start token and `</s>` itself."""
    tokens = backend.tokens
    targets = [item.generated_ids[1:-1] if item.generated_ids[-1] == eos else item.generated_ids[1:] for item in items]
    scores = backend.score_batch([tokens(item.source_ids) for item in items], [tokens(ids) for ids in targets])
    return [math.exp(sum(row[:count]) / count) for row, count in zip(scores, counts, strict=True)]


def _padded(rows: list[list[int]], pad: int, left: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """The rows padded to one length (on the right, or the left), and the mask of their real positions."""
    width = max(len(row) for row in rows)
    fill = [[pad] * (width - len(row)) for row in rows]
    if left:
        return (
            torch.tensor([gap + row for gap, row in zip(fill, rows, strict=True)]),
            torch.tensor([[0] * len(gap) + [1] * len(row) for gap, row in zip(fill, rows, strict=True)]),
        )
    return (
        torch.tensor([row + gap for gap, row in zip(fill, rows, strict=True)]),
        torch.tensor([[1] * len(row) + [0] * len(gap) for gap, row in zip(fill, rows, strict=True)]),
    )


def _count(items: list, noun: str) -> str:
    return f"{len(items)} {noun}{'' if len(items) == 1 else 's'} {'was' if len(items) == 1 else 'were'}"


def sentence_numbers(numbers: list[int], shown: int = 10) -> str:
    """Sentence numbers for a notice: "3, 7, 12", the first `shown` of them and how many more."""
    more = len(numbers) - shown
    return ", ".join(map(str, numbers[:shown])) + (f" and {more} more" if more > 0 else "")


__all__ = [
    "Deadline",
    "DecodingPlan",
    "DecodingSettings",
    "LengthBound",
    "confidences",
    "eos_id_of",
    "Translation",
    "TranslationRun",
    "generation_config_for",
    "max_source_tokens",
    "max_target_tokens",
    "model_sources",
    "plan_decoding",
    "resolved_settings",
    "run_plan",
    "sentence_numbers",
    "strip_generated",
    "translate",
]
