"""The request behind the Inside tab and `/inside`: a visitor's sentence followed through every model on the page,
bounded like a translation and by size.

`inside_request` follows the text's first sentence (cut to the sentence length the app translates) through our model
and each comparison model that returns its attention weights, inside a scheduler job with the request's budget and
deadline; the numbers come from `transformer_en_de.inside.inside_view`, the same for a learner in a notebook. A view
is bounded by construction: a sentence of more than `MAX_PIECES` pieces is refused before any model runs, the
translation ends at `MAX_PIECES`, and the answer is at most `MAX_VIEW_BYTES` of JSON (a model whose view would pass it
is shown as one line, `within_bytes`).
"""

import json

from transformer_en_de.decoding.engine import DecodingPlan
from transformer_en_de.inside import MAX_PIECES, inside_view, too_many_pieces

from ..serving import Busy, Cancelled, Limits
from ..text_checks import InputError, check_decoding, read_text, split_long_sentence, split_sentences
from ..translation import RequestContext, available, budget_plan, planned_for, request_job

# The work of an inside view against the engine's estimate of the same decoding, which the scheduler counts for a
# translation: transformers' beam search (every beam runs to the end, where ours lets a finished sentence leave), the
# recording, and one teacher-forced pass with the attention weights. `python -m benchmarks.inside_view` measures it
# on the shipped model: about 1.3x the engine's own time for the sentence (at most 1.5x), and about half the
# estimate, an upper bound; counted as 1.5x the estimate, so an inside view is never counted below a translation.
WORK_FACTOR = 1.5
# The most JSON an answer of /inside may be (`json.dumps`, which writes at least as many bytes as any encoder Gradio
# uses). Our model's weights and encodings at the piece bound are at most 1.17 MB (3 layers of 4 heads: 147,456
# weights at 7 bytes, 64 x 256 encodings at 8; tests/test_inside_bounds.py computes it), 1.3 MB with the search at 8
# beams. Beside it MarianMT's 6 layers of 8 heads are at most 0.3 MB for a median caption (15 pieces) and 1 MB at 30
# pieces (99% of captions are 33 or fewer); past about 35 a comparison model may be shown as one line instead.
MAX_VIEW_BYTES = 2_000_000


def one_sentence(text, limits: Limits) -> tuple[str, list[str]]:
    """The sentence the view follows (the first of the text, at most `limits.max_sentence_words` words: a longer one
    is translated in parts on the Translate tab, and the view follows its first part) and the notices saying so."""
    notices = []
    text, _ = read_text(text, limits.max_input_chars)
    sentences, _ = split_sentences(text)
    if not sentences:
        return "", []
    if len(sentences) > 1:
        notices.append(f"The view follows one sentence: the first of the {len(sentences)} in the text.")
    parts = split_long_sentence(sentences[0], limits.max_sentence_words)
    if len(parts) > 1:
        notices.append(
            f"The sentence has {len(sentences[0].split())} words; the Translate tab translates it in parts of at most "
            f"{limits.max_sentence_words} words, and this view follows the first part."
        )
    return parts[0], notices


def inside_request(
    text,
    decoding,
    num_beams,
    max_new_tokens,
    *,
    context: RequestContext,
) -> dict:
    """The inside view of the text's sentence for our model (its keys at the top level) and each comparison model
    (`comparisons`, one dict each, a `message` for one not loaded), with the request's `notices`; or only a
    `message` saying why there is none. Bounded like a translation: the same checks, plan and budget, one scheduler
    job of the estimated work, the search ended at the request's time limit; and by size: a sentence any model reads
    in more than `MAX_PIECES` pieces is refused before any model runs, the answer is at most `MAX_VIEW_BYTES`."""
    limits = context.limits
    try:
        settings = check_decoding(decoding, num_beams, max_new_tokens, limits)
        sentence, notices = one_sentence(text, limits)
    except InputError as error:
        return {"message": str(error), "notices": []}
    if not sentence:
        return {"message": "Type an English sentence to look inside the Transformer.", "notices": []}
    try:
        plan, seconds = budget_plan(context, [sentence], settings, limits.text)
        notices += list(plan.notices)
        systems = model_plans(context, plan)
        problems = [too_many_pieces(read, MAX_PIECES, translator.name) for _, translator, _, read in systems if read]
        if any(problems):
            return {"message": next(problem for problem in problems if problem), "notices": []}
        with request_job(context, WORK_FACTOR * seconds, limits.text, side=True) as job:
            views = [
                {"model": name, "message": why_not}
                if translator is None
                else inside_view(
                    translator.model,
                    translator.tokenizer,
                    sentence,
                    name=translator.name,
                    plan=model_plan,
                    deadline=job.hard_deadline,
                    at_each_step=context.scheduler.checkpoint,
                    max_pieces=MAX_PIECES,
                )
                for name, translator, why_not, model_plan in systems
            ]
    except Busy as error:
        return {"message": str(error), "notices": []}
    except Cancelled:
        return {"message": "Cancelled: the page that asked for this view was closed.", "notices": []}
    if any(view.get("cut") for view in views):
        notices.append("The request reached its time limit: the search shown ended there.")
    if any(view.get("reached_bound") for view in views):
        notices.append(f"The view follows at most {MAX_PIECES} pieces of translation: the search shown ended there.")
    return within_bytes({"sentence": sentence, "notices": notices, "comparisons": []}, views)


def model_plans(context: RequestContext, plan: DecodingPlan) -> list[tuple]:
    """Per model on the page, (its name, its translator or None, the line saying why not, its plan of the request's
    sentence: the pieces it reads), made before any model runs; ours is the request's `plan`."""
    systems = []
    for number, system in enumerate(context.systems):
        translator, why_not = available(system)
        own = None if translator is None else plan if number == 0 else planned_for(translator, plan)
        systems.append((system.name, translator, why_not, own))
    return systems


def json_bytes(value) -> int:
    """Bytes of `value` as JSON."""
    return len(json.dumps(value))


def within_bytes(envelope: dict, views: list[dict]) -> dict:
    """The answer (`envelope` with ours at its top level and the others as its `comparisons`) in at most
    `MAX_VIEW_BYTES` of JSON: every model first counted as the line that would replace it (`too_big`), then each in
    turn, ours first, shown whole where the rest leaves room. A dict's or list's JSON is its parts' with ", " between,
    so the count is the answer's bytes, or a few more."""
    sizes = [json_bytes(view) for view in views]
    lines = [too_big(view, size) for view, size in zip(views, sizes, strict=True)]
    used = json_bytes(envelope) + sum(json_bytes(line) + 2 for line in lines)
    shown = []
    for view, size, line in zip(views, sizes, lines, strict=True):
        grown = size - json_bytes(line)
        fits = "message" in view or used + grown <= MAX_VIEW_BYTES
        used += grown if fits else 0
        shown.append(view if fits else line)
    return {**envelope, **shown[0], "comparisons": shown[1:]}


def too_big(view: dict, size: int) -> dict:
    """The line shown for a model whose view (`size` bytes of JSON) would take the answer past `MAX_VIEW_BYTES`."""
    return {
        "model": view["model"],
        "message": f"{view['model']}: this sentence's numbers ({size / 1e6:.1f} MB) would take the answer past its "
        f"bound of {MAX_VIEW_BYTES / 1e6:g} MB: look inside a shorter sentence to see them.",
    }


def systems_of(view: dict | None) -> list[dict]:
    """The per-model views of a request's result, ours first."""
    if not view or "model" not in view:
        return []
    return [{key: value for key, value in view.items() if key != "comparisons"}, *view.get("comparisons", [])]


__all__ = ["MAX_VIEW_BYTES", "WORK_FACTOR", "inside_request", "systems_of", "within_bytes"]
