"""The one request pipeline (text and files): sentences through every system, by the one engine, within the request's
budget and turns; and the text tab's panels.

Every system (ours first, then the comparison models in the operator's order) translates the same sentences with the
same settings: the request's one plan (`plan.DecodingPlan`, made once in `plan_request` and narrowed to the request's
budget once by `budget.fit_budget`), so the panels compare like with like. A request asks the scheduler for room once
before anything costly (`admit`). The path of `num_beams` from the page to `generate()` is docs/decoding.md. A sentence
too long for the model (no full stop in many words) is translated in parts; a request that reaches its time limit
keeps what it has translated.
Our model's sentences are checked for being out of its depth (`out_of_depth.check_depth`).
"""

from dataclasses import dataclass, field

from transformer_en_de.decoding.backends import BackendError
from transformer_en_de.decoding.budget import fit_budget, least_seconds
from transformer_en_de.decoding.engine import (
    DecodingPlan,
    DecodingSettings,
    TranslationRun,
    confidences,
    plan_decoding,
    run_plan,
    sentence_numbers,
)
from transformer_en_de.evaluation import sentence_scores

from .out_of_depth import DepthCheck, check_depth
from .serving import Budget, Busy, Cancelled, FairScheduler, Limits
from .text_checks import (
    InputError,
    check_decoding,
    check_text,
    join_sentences,
    read_text,
    split_long_sentences,
    split_sentences,
)
from .translators import OURS_NAME, BackgroundTranslator, Translator

OUT_OF_DEPTH = (
    "Low confidence ({where}): {reason} Our model learned German from 29,000 descriptions of photos and nothing else; "
    "its German may sound fluent and still be wrong. {advice}"
)
TRUST_PRETRAINED = "Here, trust the pretrained model more."
NO_PRETRAINED = "No pretrained model is on this page to compare with."
# Models beside ours that are not known pretrained ones (`translators.known_pretrained`: a local folder, say)
NOT_PRETRAINED = "The models beside it are not known pretrained models: the page cannot say whether they know better."


def comparison_advice(others: list) -> str:
    """Whom to trust where our model is out of its depth, given the comparison systems that translated beside it
    (anything with `pretrained`): a known pretrained model, else none."""
    if any(other.pretrained for other in others):
        return TRUST_PRETRAINED
    return NOT_PRETRAINED if others else NO_PRETRAINED


@dataclass
class RequestContext:
    """What serves one visitor's request, and who sent it: the systems (ours first), the turns on the CPU, the limits,
    the session and when the request entered Gradio's queue (None: now)."""

    ours: Translator
    comparisons: list[Translator | BackgroundTranslator] = field(default_factory=list)
    scheduler: FairScheduler = field(default_factory=FairScheduler)
    limits: Limits = Limits()
    session: str | None = None
    arrived: float | None = None
    # Side work (a look inside, an arena battle: the page's games around translating) waits behind every waiting
    # translation, whoever sent it: many sessions' battles cannot slow another visitor's translation.
    side: bool = False

    @property
    def systems(self) -> list:
        return [self.ours, *self.comparisons]


@dataclass
class SystemOutput:
    """What one panel shows: the translation and its figures, or a message saying why there is none."""

    name: str
    translation: str = ""
    seconds: float | None = None
    new_tokens: int | None = None
    num_parameters: int | None = None
    scores: dict | None = None
    confidences: list[float | None] = field(default_factory=list)  # per sentence (`engine.confidences`)
    depth: list[DepthCheck] = field(default_factory=list)  # ours only: per sentence, out of its depth or not
    backend_name: str = ""
    message: str = ""
    notices: list[str] = field(default_factory=list)
    run: TranslationRun | None = None
    pretrained: bool = False  # a known pretrained model (`Translator.pretrained`)


@dataclass
class TextResult:
    sentences: list[str]
    outputs: list[SystemOutput]  # ours first, then each comparison model
    notices: list[str] = field(default_factory=list)  # about the request as a whole
    message: str = ""  # set when nothing was translated, and why


def available(system: Translator | BackgroundTranslator) -> tuple[Translator | None, str]:
    """The loaded translator, or None and the line saying why it is not there (yet)."""
    if isinstance(system, BackgroundTranslator):
        return system.translator, ("" if system.translator is not None else system.status())
    return system, ""


def planned_for(translator: Translator, plan: DecodingPlan) -> DecodingPlan:
    """The request's `plan` (made for our model) for another system: the same sentences and settings, planned for its
    model, tokenizer and backend."""
    backend = getattr(translator, "backend", None)
    return plan_decoding(translator.model, translator.tokenizer, list(plan.sentences), plan.settings, backend=backend)


def run_system(
    translator: Translator,
    plan: DecodingPlan,
    scheduler: FairScheduler,
    progress=None,
    *,
    deadline: float | None = None,
) -> SystemOutput:
    """One system's translations of its `plan` by the engine, taking turns on the CPU; at `deadline` (the request's
    time limit) the batch in progress ends and what was translated is kept. Turns are taken inside `generate()`, at
    each decoder step (the engine's `TurnPoint` calling `FairScheduler.checkpoint`): this request may wait there, or
    stop."""
    backend = getattr(translator, "backend", None)
    output = SystemOutput(
        name=translator.name,
        num_parameters=translator.num_parameters,
        backend_name=getattr(translator, "backend_name", "PyTorch"),
        pretrained=translator.pretrained,
    )
    sentences, settings = list(plan.sentences), plan.settings
    run = run_plan(
        translator.model,
        translator.tokenizer,
        plan,
        progress=progress,
        should_stop=scheduler.should_stop,
        deadline=deadline,
        at_each_step=scheduler.checkpoint,
        backend=backend,
    )
    output.run, output.seconds, output.new_tokens = run, run.seconds, run.new_tokens
    if run.stopped_early:
        output.notices.append(
            "The request reached its time limit (the CPU is shared with other visitors' requests): this is what was "
            "translated by then."
        )
    output.notices += [f"{notice[:1].upper()}{notice[1:]}" for notice in run.notices]
    bounded = [number + 1 for number, item in enumerate(run.translations) if item and item.hit_length_bound]
    if bounded:
        output.notices.append(
            f"Sentence {sentence_numbers(bounded)} stopped at its length limit ({run.plan.bound.text()}) before it "
            "ended: the translation is cut."
        )
    if settings.max_new_tokens and settings.max_new_tokens > translator.max_new_tokens:
        output.notices.append(f"This model writes at most {translator.max_new_tokens} new tokens (its positions).")
    # A forward pass per batch; between batches (CTranslate2 has no decoder hook) the CPU goes to whoever comes first
    output.confidences = confidences(
        translator.model, run.translations, settings.batch_size, backend=backend, should_stop=scheduler.should_stop
    )
    if translator.name == OURS_NAME:
        known = output.confidences + [None] * (len(sentences) - len(output.confidences))
        texts = run.texts + [""] * (len(sentences) - len(run.texts))
        output.depth = check_depth(sentences, known, texts)
    return output


def admit(context: RequestContext, count: int, settings: DecodingSettings) -> None:
    """Busy at once, before anything costly (tokenizing, planning), when a request of `count` sentences could not be
    admitted now: the scheduler's room asked for with the least the request can cost (`budget.least_seconds`)."""
    context.scheduler.check_room(least_seconds(context.ours.model, count, settings, context.ours.step_cost))


def plan_request(
    context: RequestContext, sentences: list[str], settings: DecodingSettings, budget: Budget, unit: str = "sentence"
) -> tuple[DecodingPlan, float]:
    """The request's one plan (our model's `DecodingPlan` of `sentences` with the request's `settings`), narrowed once
    to what fits `budget` (fewer beams, then only the first sentences) at the cost of a step measured for our model
    (`Translator.step_cost`), and its estimated CPU seconds (`budget.fit_budget`)."""
    ours = context.ours
    plan = plan_decoding(ours.model, ours.tokenizer, sentences, settings, backend=getattr(ours, "backend", None))
    return fit_budget(plan, budget.cpu_seconds, ours.step_cost, unit)


def budget_plan(
    context: RequestContext, sentences: list[str], settings: DecodingSettings, budget: Budget, unit: str = "sentence"
) -> tuple[DecodingPlan, float]:
    """A request of `sentences` admitted (`admit`) and planned (`plan_request`): a text's, a look inside."""
    admit(context, len(sentences), settings)
    return plan_request(context, sentences, settings, budget, unit)


def run_systems(
    context: RequestContext, plan: DecodingPlan, work: float, budget: Budget, on_batch=None
) -> list[SystemOutput]:
    """Every system's output of the request's `plan` (a message for one not loaded) inside one scheduler job of `work`
    estimated CPU seconds per loaded system (`request_job`); `on_batch(number, done, total)` reports progress. Raises
    Busy or Cancelled."""
    outputs = []
    with request_job(context, work, budget) as job:
        for number, system in enumerate(context.systems):
            translator, why_not = available(system)
            if translator is None:
                outputs.append(SystemOutput(name=system.name, message=why_not))
                continue
            progress = None if on_batch is None else (lambda done, total, number=number: on_batch(number, done, total))
            own = plan if number == 0 else planned_for(translator, plan)  # ours first: the plan was made for it
            outputs.append(run_system(translator, own, context.scheduler, progress, deadline=job.hard_deadline))
    return outputs


def request_job(context: RequestContext, work: float, budget: Budget, *, side: bool = False):
    """The request's scheduler job: `work` estimated CPU seconds per loaded system (heavy past the ordinary lane's
    limit; `side` work, a look inside, comes after translations whatever its size), its time limit `budget.seconds`
    counted from when the request arrived."""
    ready = sum(available(system)[0] is not None for system in context.systems)
    return context.scheduler.job(
        context.session, budget.seconds, work=ready * work, side=side or context.side, since=context.arrived
    )


def depth_notice(output: SystemOutput, outputs: list[SystemOutput]) -> str:
    """The out-of-depth notice for our output ("" if no sentence is flagged): the advice to trust a pretrained model
    only where one has translated beside it (`comparison_advice`)."""
    flagged = [number + 1 for number, check in enumerate(output.depth) if check.flagged]
    if not flagged:
        return ""
    first = output.depth[flagged[0] - 1]
    where = f"{first.score:.0%}" if len(output.depth) == 1 else f"sentence {sentence_numbers(flagged)}"
    compared = [other for other in outputs if other is not output and other.translation]
    return OUT_OF_DEPTH.format(where=where, reason=first.reason, advice=comparison_advice(compared))


def check_reference(reference, limits: Limits) -> tuple[str, str]:
    """(reference, notice): a reference too long to score is dropped, and the notice says so; InputError for one that
    is not text."""
    if reference is None:
        return "", ""
    if not isinstance(reference, str):
        return check_text(reference, "reference"), ""  # raises: not a string
    lines = reference.count("\n") + 1
    if len(reference) > limits.max_reference_chars or lines > limits.max_reference_lines:
        return "", (
            f"The reference has {len(reference):,} characters on {lines:,} lines; references of up to "
            f"{limits.max_reference_chars:,} characters and {limits.max_reference_lines:,} lines are scored here, so "
            "there are no scores. Use the File tab for longer texts."
        )
    return check_text(reference, "reference").strip(), ""


def score(output: SystemOutput, reference: str, scheduler: FairScheduler) -> str:
    """Sentence BLEU/chrF of the output against the reference, unless the request must stop first; a notice if not."""
    if scheduler.should_stop():  # a turn point like a decoder step: past the time limit or cancelled, no scores
        return f"{output.name}: not scored, the request reached its time limit."
    output.scores = sentence_scores(output.translation, reference)
    return ""


def translate_text(
    text: str | None,
    decoding: str,
    num_beams: int,
    max_new_tokens: int,
    reference: str | None = "",
    *,
    context: RequestContext,
) -> TextResult:
    """Translate `text` (one or more sentences) with every system, decoding as the page's controls say
    (`check_decoding`); sentence BLEU/chrF against `reference` if given (`translate_with_settings`)."""
    try:
        settings = check_decoding(decoding, num_beams, max_new_tokens, context.limits)
    except InputError as error:
        return TextResult([], [SystemOutput(name=system.name) for system in context.systems], message=str(error))
    return translate_with_settings(text, settings, reference, context=context)


def translate_with_settings(
    text: str | None, settings: DecodingSettings, reference: str | None = "", *, context: RequestContext
) -> TextResult:
    """Translate `text` with every system and the request's checked `settings` (the page's controls', or the
    arena's own); sentence BLEU/chrF against `reference` if given.

    Every field is bounded before any work (the text cut to `limits.max_input_chars`, a reference past its limits not
    scored); the estimate of the work (decoding for every system, and scoring) decides the request's lane.
    """
    limits, scheduler = context.limits, context.scheduler
    result = TextResult([], [SystemOutput(name=system.name) for system in context.systems])
    try:
        text, clipped = read_text(text, limits.max_input_chars)
        result.notices += [clipped] if clipped else []
        reference, too_long = check_reference(reference, limits)
        result.notices += [too_long] if too_long else []
    except InputError as error:
        result.message, result.notices = str(error), []
        return result
    if not text:
        result.message, result.notices = "Type an English sentence (or several) to translate.", []
        return result
    sentences, separators, in_parts = split_long_sentences(*split_sentences(text), limits.max_sentence_words)
    result.sentences = sentences
    result.notices += [in_parts] if in_parts else []
    try:
        plan, seconds = budget_plan(context, sentences, settings, limits.text)
        result.notices += list(plan.notices)
        kept = list(plan.sentences)
        work = seconds + 2 * len(reference) * limits.score_seconds_per_char
        outputs = run_systems(context, plan, work, limits.text)
    except Busy as error:  # refused before any work: the long requests are all in flight
        result.message, result.notices, result.sentences = str(error), [], []
        return result
    except Cancelled:
        result.message = "Cancelled: the page that asked for this translation was closed."
        return result
    except BackendError as error:  # what decodes failed for good (a worker that died again): one line, no traceback
        result.message, result.notices, result.sentences = f"{error} Try again.", [], []
        return result
    for output in outputs:
        if output.run is None:
            continue
        output.translation = join_sentences(output.run.texts, separators[: len(kept)])
        if reference:
            output.notices += [notice for notice in [score(output, reference, scheduler)] if notice]
    notice = depth_notice(outputs[0], outputs)
    outputs[0].notices[:0] = [notice] if notice else []
    result.outputs = outputs
    return result


def format_details(output: SystemOutput) -> str:
    """A panel's Markdown: latency, tokens, parameters, scores and notices; or why there is no translation."""
    if output.message:
        return f"⚠️ {output.message}"
    if output.seconds is None:
        return ""
    lines = [
        f"**Latency** {output.seconds:.2f} s · **Tokens generated** {output.new_tokens} · "
        f"**Parameters** {output.num_parameters / 1e6:.2f}M · **Backend** {output.backend_name}"
    ]
    scores = [check.score for check in output.depth] if output.depth else output.confidences
    shown = [c for c in scores if c is not None and c == c]  # nan: a sentence not translated
    if shown:
        values = " · ".join(f"{c:.0%}" for c in shown[:10]) + (" …" if len(shown) > 10 else "")
        lines.append(f"**Confidence{' per sentence' if len(output.confidences) > 1 else ''}** {values}")
    if output.scores:
        lines.append(f"**Sentence BLEU** {output.scores['bleu']:.2f} · **chrF** {output.scores['chrf']:.2f}")
    lines += [f"⚠️ {notice}" for notice in output.notices]
    return "\n\n".join(lines)


def format_notice(result: TextResult) -> str:
    """The request's own notices (and its message), one line each."""
    return "\n\n".join(f"⚠️ {line}" for line in ([result.message] if result.message else []) + result.notices)


__all__ = [
    "RequestContext",
    "SystemOutput",
    "TextResult",
    "format_details",
    "format_notice",
    "run_system",
    "translate_text",
    "translate_with_settings",
]
