"""The request behind the Inside tab and `/inside`, and where its answer is kept. Bounded like a translation (the same
checks, plan, budget and scheduler job) and by size: a sentence of more than `MAX_PIECES` pieces is refused before any
model runs, the translation ends at `MAX_PIECES`, the answer is at most `MAX_VIEW_BYTES` of JSON (a model past it shown
as one line). The page redraws from a copy on the server (another kind, layer or head runs no model): `ViewStore`."""

import json
import secrets
import threading
import time
import zlib
from collections import OrderedDict

from transformer_en_de.inside import MAX_PIECES, inside_view, too_many_pieces

from ..serving import Busy, Cancelled, Limits
from ..text_checks import InputError, check_decoding, read_text, split_long_sentence, split_sentences
from ..translation import RequestContext, RequestPlan

# A view's work against the engine's estimate of the same decoding: transformers' beam search, the recording and a
# teacher-forced pass take at most 1.5x the engine's own time, about half its estimate (`benchmarks.inside_view`).
WORK_FACTOR = 1.5
# The most JSON an answer may be: ours at the piece bound is at most 1.3 MB with 8 beams (tests/test_inside_bounds.py);
# MarianMT's 6 layers of 8 heads 1 MB at 30 pieces: past about 35 a comparison model may be shown as one line.
MAX_VIEW_BYTES = 2_000_000
# The views kept: compressed (our 1.3 MB view is 0.24 MB), the least recently used dropped first.
VIEWS_KEPT, VIEW_STORE_BYTES, VIEW_SECONDS = 64, 32_000_000, 900.0
EXPIRED = {
    "message": f"This view is no longer kept (the server keeps the latest {VIEWS_KEPT}, each {VIEW_SECONDS / 60:g} "
    "minutes after its last use): press Look inside again.",
}


def one_sentence(text, limits: Limits) -> tuple[str, list[str]]:
    """The text's first sentence, cut to its first part as the Translate tab cuts a long one; the notices saying so."""
    text, _ = read_text(text, limits.max_input_chars)
    sentences, _ = split_sentences(text)
    if not sentences:
        raise InputError("Type an English sentence to look inside the Transformer.")
    notices = []
    if len(sentences) > 1:
        notices.append(f"The view follows one sentence: the first of the {len(sentences)} in the text.")
    parts = split_long_sentence(sentences[0], limits.max_sentence_words)
    if len(parts) > 1:
        notices.append(
            f"The sentence has {len(sentences[0].split())} words; the Translate tab translates it in parts of at most "
            f"{limits.max_sentence_words} words, and this view follows the first part."
        )
    return parts[0], notices


def inside_request(text, decoding, num_beams, max_new_tokens, *, context: RequestContext) -> dict:
    """Our model's view of the text's sentence (at the top level), each comparison model's in `comparisons` (a
    `message` for one not loaded), and the request's `notices`; or only a `message` saying why there is none."""
    limits = context.limits
    try:
        settings = check_decoding(decoding, num_beams, max_new_tokens, limits)
        sentence, notices = one_sentence(text, limits)
        request = RequestPlan(context, settings, limits.text).admit(1).fit([sentence])
        systems = [(system.name, system.translator, system.status()) for system in context.systems]
        own_plans = [translator and request.for_system(translator) for _, translator, _ in systems]  # before any run
        problems = [
            too_many_pieces(own, MAX_PIECES, name) for (name, *_), own in zip(systems, own_plans, strict=True) if own
        ]
        if any(problems):
            raise InputError(next(filter(None, problems)))
        with request.job(WORK_FACTOR * request.seconds, side=True) as job:
            bounds = dict(deadline=job.hard_deadline, at_each_step=context.scheduler.checkpoint, max_pieces=MAX_PIECES)
            views = [
                inside_view(translator.model, translator.tokenizer, sentence, name=translator.name, plan=own, **bounds)
                if translator is not None
                else {"model": name, "message": why_not}
                for (name, translator, why_not), own in zip(systems, own_plans, strict=True)
            ]
    except (InputError, Busy) as error:
        return {"message": str(error), "notices": []}
    except Cancelled:
        return {"message": "Cancelled: the page that asked for this view was closed.", "notices": []}
    notices += request.plan.notices
    if any(view.get("cut") for view in views):
        notices.append("The request reached its time limit: the search shown ended there.")
    if any(view.get("reached_bound") for view in views):
        notices.append(f"The view follows at most {MAX_PIECES} pieces of translation: the search shown ended there.")
    return within_bytes({"sentence": sentence, "notices": notices, "comparisons": []}, views)


def within_bytes(envelope: dict, views: list[dict]) -> dict:
    """The answer (ours at its top level, the others as `comparisons`) in at most `MAX_VIEW_BYTES` of JSON: every model
    counted as the line that would replace it, then each, ours first, shown whole where there is room."""
    sizes = [len(json.dumps(view)) for view in views]
    lines = [
        {
            "model": view["model"],
            "message": f"{view['model']}: this sentence's numbers ({size / 1e6:.1f} MB) would take the answer past its "
            f"bound of {MAX_VIEW_BYTES / 1e6:g} MB: look inside a shorter sentence to see them.",
        }
        for view, size in zip(views, sizes, strict=True)
    ]
    used = len(json.dumps(envelope)) + sum(len(json.dumps(line)) + 2 for line in lines)
    shown = []
    for view, size, line in zip(views, sizes, lines, strict=True):
        grown = size - len(json.dumps(line))
        fits = "message" in view or used + grown <= MAX_VIEW_BYTES
        used += grown if fits else 0
        shown.append(view if fits else line)
    return {**envelope, **shown[0], "comparisons": shown[1:]}


class ViewStore:
    """Views on the server, each under its session's id (a random one without a session), so that view after view of
    one session replaces its own and never pushes out another's."""

    def __init__(self, max_views=VIEWS_KEPT, max_bytes=VIEW_STORE_BYTES, seconds=VIEW_SECONDS, clock=time.monotonic):
        self.max_views, self.max_bytes, self.seconds, self.clock = max_views, max_bytes, seconds, clock
        self.views: OrderedDict[str, tuple[bytes, float]] = OrderedDict()  # id -> (compressed JSON, last use)
        self.bytes = 0
        self.lock = threading.Lock()

    def put(self, view: dict, session: str | None = None) -> str:
        """Keep `view` in place of the session's earlier one; its id."""
        data, view_id = zlib.compress(json.dumps(view).encode(), 1), session or secrets.token_urlsafe(16)
        with self.lock:
            self.bytes += len(data) - len(self.views.pop(view_id, (b"", 0))[0])
            self.views[view_id] = (data, self.clock())
            self.drop_old()
        return view_id

    def get(self, view_id: str | None) -> dict | None:
        """The view, its time started again; None for no id, `EXPIRED` for one no longer kept."""
        if not view_id:
            return None
        with self.lock:
            self.drop_old()
            if view_id not in self.views:
                return EXPIRED
            data, _ = self.views.pop(view_id)
            self.views[view_id] = (data, self.clock())
        return json.loads(zlib.decompress(data))

    def drop_old(self) -> None:  # the lock held
        now = self.clock()
        while self.views and (
            len(self.views) > self.max_views
            or self.bytes > self.max_bytes
            or now - next(iter(self.views.values()))[1] > self.seconds
        ):
            self.bytes -= len(self.views.popitem(last=False)[1][0])
