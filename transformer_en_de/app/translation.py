"""The one request pipeline (text and files), and the text tab's panels.

Every system (ours first) translates the same sentences with the request's one plan, made for our model and fitted to
the request's budget once (`RequestPlan`), so that the panels compare like with like (docs/decoding.md). A request
asks the scheduler for room once before anything costly; one that reaches its time limit keeps what it has."""

from dataclasses import dataclass, field

from transformer_en_de.decoding import engine
from transformer_en_de.decoding.backends import BackendError
from transformer_en_de.decoding.budget import fit_budget, least_seconds
from transformer_en_de.decoding.engine import DecodingPlan, DecodingSettings, TranslationRun, confidences, plan_decoding
from transformer_en_de.evaluation import sentence_scores

from .out_of_depth import DepthCheck, check_depth
from .serving import Budget, Busy, Cancelled, FairScheduler, Limits
from .text_checks import InputError, check_decoding, check_reference, join_sentences, read_text, split_text
from .translators import OURS_NAME, System, Translator, models_beside

OUT_OF_DEPTH = (
    "Low confidence ({where}): {reason} Our model learned German from 29,000 descriptions of photos and nothing else; "
    "its German may sound fluent and still be wrong. {advice}"
)
TRUST_PRETRAINED = "Here, trust the pretrained model more."
NO_PRETRAINED = "No pretrained model is on this page to compare with."
NOT_PRETRAINED = "The models beside it are not known pretrained models: the page cannot say whether they know better."
# Whom to trust where our model is out of its depth, by what the models that translated beside it are (`models_beside`)
ADVICE = {"pretrained": TRUST_PRETRAINED, "other": NOT_PRETRAINED, "": NO_PRETRAINED}
CANCELLED = "Cancelled: the page that asked for this translation was closed."
TIME_LIMIT = (
    "The request reached its time limit (the CPU is shared with other visitors' requests): this is what was translated "
    "by then."
)


def why_stopped(error: InputError | Busy | Cancelled | BackendError) -> str:
    """The visitor's line for a request refused, cancelled, or whose decoder failed for good."""
    if isinstance(error, Cancelled):
        return CANCELLED
    return f"{error} Try again." if isinstance(error, BackendError) else str(error)


@dataclass
class RequestContext:
    """One request's systems (ours first), turns, limits, session, and arrival in Gradio's queue (None: now)."""

    ours: Translator
    comparisons: list[System] = field(default_factory=list)
    scheduler: FairScheduler = field(default_factory=FairScheduler)
    limits: Limits = Limits()
    session: str | None = None
    arrived: float | None = None
    side: bool = False  # side work (a look inside, a battle) waits behind every waiting translation

    @property
    def systems(self) -> list[System]:
        return [self.ours, *self.comparisons]


@dataclass
class SystemOutput:
    """What one panel shows: a system's run and its figures, or a message saying why there is none."""

    name: str
    translator: Translator | None = None  # None: not loaded, or the request stopped before it ran
    run: TranslationRun | None = None
    notices: list[str] = field(default_factory=list)
    confidences: list[float | None] = field(default_factory=list)  # per sentence (`engine.confidences`)
    depth: list[DepthCheck] = field(default_factory=list)  # ours only: per sentence, out of its depth or not
    translation: str = ""
    scores: dict | None = None
    message: str = ""


@dataclass
class TextResult:
    sentences: list[str]
    outputs: list[SystemOutput]  # ours first, then each comparison model
    notices: list[str] = field(default_factory=list)  # about the request as a whole
    message: str = ""  # set when nothing was translated, and why


def run_system(
    translator: Translator, plan: DecodingPlan, scheduler: FairScheduler, progress=None, *, deadline=None
) -> SystemOutput:
    """One system's translations of its `plan`, taking turns on the CPU at each decoder step; at `deadline` the batch
    in progress ends and what was translated is kept."""
    model, tokenizer = translator.model, translator.tokenizer
    shared = dict(backend=translator.backend, should_stop=scheduler.should_stop)
    run = engine.run_plan(
        model, tokenizer, plan, progress=progress, deadline=deadline, at_each_step=scheduler.checkpoint, **shared
    )
    output = SystemOutput(translator.name, translator, run, [TIME_LIMIT] if run.stopped_early else [])
    output.notices += [f"{notice[:1].upper()}{notice[1:]}" for notice in run.notices]
    bounded = [number + 1 for number, item in enumerate(run.translations) if item and item.hit_length_bound]
    if bounded:
        output.notices.append(
            f"Sentence {engine.sentence_numbers(bounded)} stopped at its length limit ({run.plan.bound.text()}) "
            "before it ended: the translation is cut."
        )
    if plan.settings.max_new_tokens and plan.settings.max_new_tokens > translator.max_new_tokens:
        output.notices.append(f"This model writes at most {translator.max_new_tokens} new tokens (its positions).")
    # A forward pass per batch; between batches (CTranslate2 has no decoder hook) the CPU goes to whoever comes first
    output.confidences = confidences(model, run.translations, plan.settings.batch_size, **shared)
    if translator.name == OURS_NAME:
        missing = len(plan.sentences) - len(run.texts)
        known = output.confidences + [None] * (len(plan.sentences) - len(output.confidences))
        output.depth = check_depth(list(plan.sentences), known, run.texts + [""] * missing)
    return output


@dataclass
class RequestPlan:
    """A request's one plan, made in the order its costs come: room asked of the scheduler once, before anything
    costly (`admit`: Busy at once); our model's plan of the sentences, fitted once to the budget (`fit`); the same
    sentences and settings for each other system (`for_system`); one scheduler job for them all (`job`)."""

    context: RequestContext
    settings: DecodingSettings
    budget: Budget
    unit: str = "sentence"  # what the budget's notice counts ("line" for a file)
    plan: DecodingPlan | None = None  # ours, once fitted
    seconds: float = 0.0  # its estimated CPU seconds

    def admit(self, count: int) -> "RequestPlan":
        ours = self.context.ours
        self.context.scheduler.check_room(least_seconds(ours.model, count, self.settings, ours.step_cost))
        return self

    def fit(self, sentences: list[str]) -> "RequestPlan":
        ours = self.context.ours
        plan = plan_decoding(ours.model, ours.tokenizer, sentences, self.settings, backend=ours.backend)
        self.plan, self.seconds = fit_budget(plan, self.budget.cpu_seconds, ours.step_cost, self.unit)
        return self

    def for_system(self, translator: Translator) -> DecodingPlan:
        if translator is self.context.ours:
            return self.plan
        sentences = list(self.plan.sentences)
        return plan_decoding(
            translator.model, translator.tokenizer, sentences, self.plan.settings, backend=translator.backend
        )

    def job(self, work: float, *, side: bool = False):
        """The request's scheduler job: `work` CPU seconds per loaded system, its time limit from arrival."""
        context = self.context
        ready = sum(system.translator is not None for system in context.systems)
        side = side or context.side
        return context.scheduler.job(
            context.session, self.budget.seconds, work=ready * work, side=side, since=context.arrived
        )


def run_systems(request: RequestPlan, reference_chars=0, on_batch=None) -> list[SystemOutput]:
    """Every system's output of the request's plan (a message for one not loaded) in one scheduler job, with the
    scoring against a reference; `on_batch(number, done, total)` reports progress. Busy or Cancelled."""
    context = request.context
    work = request.seconds + 2 * reference_chars * context.limits.score_seconds_per_char  # BLEU and chrF each read it
    outputs = []
    with request.job(work) as job:
        for number, system in enumerate(context.systems):
            if system.translator is None:
                outputs.append(SystemOutput(name=system.name, message=system.status()))
                continue
            progress = None if on_batch is None else (lambda done, total, number=number: on_batch(number, done, total))
            plan = request.for_system(system.translator)
            outputs.append(run_system(system.translator, plan, context.scheduler, progress, deadline=job.hard_deadline))
    return outputs


def depth_notice(output: SystemOutput, outputs: list[SystemOutput]) -> str:
    """The out-of-depth notice for our output ("" if no sentence is flagged)."""
    flagged = [number + 1 for number, check in enumerate(output.depth) if check.flagged]
    if not flagged:
        return ""
    first = output.depth[flagged[0] - 1]
    where = f"{first.score:.0%}" if len(output.depth) == 1 else f"sentence {engine.sentence_numbers(flagged)}"
    compared = [other.translator for other in outputs if other is not output and other.translation]
    return OUT_OF_DEPTH.format(where=where, reason=first.reason, advice=ADVICE[models_beside(compared)])


def translate_text(
    text, decoding, num_beams=None, max_new_tokens=None, reference: str | None = "", *, context: RequestContext
) -> TextResult:
    """Translate `text` with every system, scored against `reference`: `decoding`, `num_beams`, `max_new_tokens` are
    the page's controls, or `decoding` is checked settings (the arena's). Every field is bounded before any work; a
    request refused or stopped has an empty panel per system and a message saying why."""
    limits = context.limits
    try:
        settings = decoding
        if not isinstance(decoding, DecodingSettings):
            settings = check_decoding(decoding, num_beams, max_new_tokens, limits)
        text, clipped = read_text(text, limits.max_input_chars)
        reference, too_long = check_reference(reference, limits)
        if not text:
            raise InputError("Type an English sentence (or several) to translate.")
        sentences, separators, in_parts = split_text(text, limits.max_sentence_words)
        request = RequestPlan(context, settings, limits.text).admit(len(sentences)).fit(sentences)
        outputs = run_systems(request, len(reference))
    except (InputError, Busy, Cancelled, BackendError) as error:  # BackendError: a worker died again
        return TextResult(
            [], [SystemOutput(name=system.name) for system in context.systems], message=why_stopped(error)
        )
    plan = request.plan
    result = TextResult(sentences, outputs, [line for line in (clipped, too_long, in_parts, *plan.notices) if line])
    for output in result.outputs:
        if output.run is None:
            continue
        output.translation = join_sentences(output.run.texts, separators[: len(plan.sentences)])
        if reference and context.scheduler.should_stop():  # a turn point like a decoder step: past the time limit
            output.notices.append(f"{output.name}: not scored, the request reached its time limit.")
        elif reference:
            output.scores = sentence_scores(output.translation, reference)
    notice = depth_notice(result.outputs[0], result.outputs)
    result.outputs[0].notices[:0] = [notice] if notice else []
    return result


def format_details(output: SystemOutput) -> str:
    """A panel's Markdown: latency, tokens, parameters, scores and notices; or why there is no translation."""
    if output.message:
        return f"⚠️ {output.message}"
    if output.run is None:
        return ""
    run, translator = output.run, output.translator
    lines = [
        f"**Latency** {run.seconds:.2f} s · **Tokens generated** {run.new_tokens} · "
        f"**Parameters** {translator.num_parameters / 1e6:.2f}M · **Backend** {translator.backend_name}"
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
