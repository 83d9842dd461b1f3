"""Inside the Transformer: what the paper's parts do with one sentence, for the page's tab and the `/inside` endpoint.

For one sentence and one model (ours, and each comparison model that returns its attention weights):
- the BPE pieces the model reads and writes, with their ids (section 3.4: one shared vocabulary and embedding);
- the positional encoding added to each source position, and how large the scaled embedding and the encoding each
  are there (sections 3.4 and 3.5);
- the attention weights of every kind, layer and head: encoder self-attention, masked decoder self-attention and
  cross-attention (sections 3.2.1-3.2.3), from one teacher-forced pass over the chosen translation;
- the beam search step by step (section 6.1 decodes with beam search and a length penalty), recorded from the model's
  own `generate()` with the engine's plan: a logits processor placed after every other one sees, at each step, the
  live beams and the log-probabilities the search ranks. `generate()` returns the finished hypotheses in the order of
  its length-penalised score, the first of which is the translation (the Translate tab's: the same plan, the same
  search; tests/test_inside.py checks the ids).

`inside_request` bounds a visitor's request like a translation (one sentence, cut to the sentence length the app
translates, inside a scheduler job with the request's budget and deadline); `inside_view` is the computation for one
model; the `plot_*` and `format_*` functions draw what it returns. Everything returned is plain JSON (lists, numbers,
strings), the weights rounded to `DECIMALS` places.
"""

import copy
import math
import warnings

import gradio as gr
import numpy as np
import torch
from matplotlib.figure import Figure
from transformers import LogitsProcessor, LogitsProcessorList

from modeling.length_bound import SourceLengthBound
from transformer_en_de.engine import Deadline, DecodingPlan, DecodingSettings, plan_decoding

from .limits import Limits
from .scheduler import Busy, Cancelled, FairScheduler
from .text_checks import (
    InputError,
    as_text,
    check_decoding,
    check_text,
    clip_text,
    split_long_sentence,
    split_sentences,
)
from .translation import available, budget_plan
from .translators import BackgroundTranslator, Translator

DECIMALS = 5  # of the weights and encodings returned: rows of attention still sum to 1 within 1e-3
ALTERNATIVES = 3  # next pieces shown for each live beam
KINDS = ("encoder_self", "decoder_self", "cross")
# The work of an inside view against the engine's estimate of the same decoding, which the scheduler counts for a
# translation: transformers' beam search (every beam runs to the end, where ours lets a finished sentence leave), the
# recording, and one teacher-forced pass with the attention weights. `python -m benchmarks.inside_view` measures it
# on the shipped model: about 1.3x the engine's own time for the sentence (at most 1.5x), and about half the
# estimate, an upper bound; counted as 1.5x the estimate, so an inside view is never counted below a translation.
WORK_FACTOR = 1.5
# Emoji and rare scripts are missing from matplotlib's default font; their labels show as boxes, which is enough.
warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")

# One line per picture: what the paper says it is, in a visitor's words.
CAPTIONS = {
    "pieces": "Section 3.4: the model reads and writes BPE pieces, each an id in one vocabulary; one learned embedding "
    "matrix turns each id into a vector (ours shares it between English, German and the output layer).",
    "positions": "Section 3.5: attention alone does not see word order, so a fixed pattern of sines and cosines, one "
    "wavelength per dimension, is added to the vector of each position. Section 3.4: the embedding is first multiplied "
    "by √d_model; the bars compare the size of the two parts.",
    "encoder_self": "Section 3.2.3: in the encoder every English piece reads every English piece (self-attention); "
    "section 3.2.1: each column is a softmax over the pieces it reads, so it sums to 1.",
    "decoder_self": "Section 3.2.3: in the decoder each German piece reads only itself and the pieces before it (the "
    "mask sets the later ones to zero: the empty triangle), so it cannot look at words not yet written.",
    "cross": "Section 3.2.3: encoder-decoder attention: each German piece (queries) reads the English pieces (keys and "
    "values from the encoder's output); section 3.2.1: softmax(QKᵀ/√d_k), one column per German piece.",
    "heads": "Section 3.2.2: h heads attend side by side, each with its own projections, and often look at different "
    "things.",
    "beams": "Section 6.1: the paper decodes with beam search (4 beams, length penalty α = 0.6): at each step only the "
    "best few partial translations live on; a finished one is scored by its log-probability divided by "
    "(its length)^α, so a higher α favours longer translations.",
}
KIND_TITLES = {
    "encoder_self": "encoder self-attention",
    "decoder_self": "decoder self-attention (masked)",
    "cross": "cross-attention",
}


# ------------------------------------------------------------------------------------------------ the computation


class StepRecorder(LogitsProcessor):
    """Records what the search ranks at each step, changing nothing: the live beams (one row each) and the top of
    their next-piece log-probabilities after every processor before it (the length bound, the deadline).

    Only the top `keep` of each row are kept (a vocabulary-wide row per beam per step would be megabytes): every
    continuation the search keeps is among its row's top `2 * num_beams`, which `keep` must cover. Beam search hands
    its processors log-probabilities, which it sums as they are; greedy search hands them logits (`normalise`: they
    are turned into log-probabilities here, for the page only: greedy takes the largest either way)."""

    def __init__(self, keep: int, normalise: bool = False):
        self.keep, self.normalise = keep, normalise
        self.steps: list[tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = []  # (sequences, log-probs, piece ids)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        shown = scores.float().log_softmax(dim=-1) if self.normalise else scores.float()
        values, ids = shown.topk(min(self.keep, scores.shape[-1]), dim=-1)  # (rows, keep)
        self.steps.append((input_ids.detach().cpu().clone(), values.cpu(), ids.cpu()))
        return scores


def traced_search(model, plan: DecodingPlan, *, deadline: float | None = None, alternatives: int = ALTERNATIVES):
    """Decode the plan's one sentence with `generate()` as the engine does (its generation config, its length bound),
    recording each step. Returns (finished hypotheses in generate()'s order, each as ids from the start token to
    `</s>`; the recorder; whether the deadline cut the search)."""
    config = copy.copy(plan.generation_config)  # shallow: only the fields below differ
    eos_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    limit = plan.limits[0]
    config.max_new_tokens = limit
    config.return_dict_in_generate = True
    config.num_return_sequences = config.num_beams  # every finished hypothesis the search kept, best first
    recorder = StepRecorder(keep=max(alternatives, 2 * config.num_beams), normalise=config.num_beams == 1)
    processors = LogitsProcessorList([SourceLengthBound(torch.tensor([limit]), eos_id)])
    if deadline is not None:
        processors.append(Deadline(deadline, eos_id))
    processors.append(recorder)  # last: it sees the scores the search ranks
    source = torch.tensor([list(plan.source_ids[0])], device=model.device)
    model.eval()
    with torch.inference_mode():
        output = model.generate(
            input_ids=source,
            attention_mask=torch.ones_like(source),
            generation_config=config,
            logits_processor=processors,
        )
    hypotheses = [until_eos(row, eos_id) for row in output.sequences.tolist()]
    cut = deadline is not None and processors[1].stopped_at is not None
    return hypotheses, recorder, cut


def until_eos(ids: list[int], eos_id: int) -> list[int]:
    """The start token and the pieces up to and including the first `</s>` (generate() pads shorter rows)."""
    for position in range(1, len(ids)):
        if ids[position] == eos_id:
            return ids[: position + 1]
    return ids


def running_scores(recorder: StepRecorder) -> list[dict[tuple, tuple[int, float]]]:
    """For each step, each live beam's sequence -> (its row, its score): the sum of the log-probabilities the search
    gave its pieces, read from the recorded steps (the row of its prefix at the step before, and that row's
    log-probability of its last piece). At the first step every row holds the prompt; the search counts only the
    first (the others start at -1e9), so only it is kept."""
    steps: list[dict[tuple, tuple[int, float]]] = []
    for number, (sequences, _, _) in enumerate(recorder.steps):
        live: dict[tuple, tuple[int, float]] = {}
        for row, sequence in enumerate(sequences.tolist()):
            key = tuple(sequence)
            if key in live:
                continue
            if number == 0:
                live[key] = (row, 0.0)
                continue
            score = piece_score(recorder, steps[-1], number - 1, key)
            if score is not None:
                live[key] = (row, score)
        steps.append(live)
    return steps


def piece_score(recorder: StepRecorder, before: dict, step: int, sequence: tuple) -> float | None:
    """The score of `sequence`: its prefix's score at `step` plus that row's log-probability of its last piece."""
    if sequence[:-1] not in before:
        return None
    row, score = before[sequence[:-1]]
    _, values, ids = recorder.steps[step]
    found = (ids[row] == sequence[-1]).nonzero()
    return score + float(values[row, found[0, 0]]) if len(found) else None


def beam_steps(recorder: StepRecorder, hypotheses: list[list[int]], tokenizer, length_penalty: float, alternatives):
    """The search step by step (live beams with their text, score and best next pieces; hypotheses finished at that
    step) and the finished hypotheses with their scores before and after the length penalty."""
    scores = running_scores(recorder)
    finished = []
    for order, ids in enumerate(hypotheses):
        new = len(ids) - 1
        step = min(new, len(scores)) - 1
        log_probability = piece_score(recorder, scores[step], step, tuple(ids)) if step >= 0 else None
        finished.append(
            {
                "text": tokenizer.decode(ids, skip_special_tokens=True).strip(),
                "pieces": token_labels(tokenizer, ids[1:]),
                "ids": ids,
                "step": new,
                "log_probability": log_probability,
                # generate()'s own ranking (`sequences` comes sorted by it): log-probability / new pieces ** α
                "length_normalised": None if log_probability is None else log_probability / new**length_penalty,
                "rank": order + 1,
            }
        )
    by_log_probability = sorted(
        range(len(finished)), key=lambda index: -(finished[index]["log_probability"] or -math.inf)
    )
    for rank, index in enumerate(by_log_probability, start=1):
        finished[index]["rank_without_penalty"] = rank
    steps = []
    for number, live in enumerate(scores):
        sequences, values, ids = recorder.steps[number]
        beams = []
        for sequence, (row, score) in sorted(live.items(), key=lambda item: -item[1][1]):
            shown = [
                {"piece": label, "id": piece, "probability": math.exp(value)}
                for label, piece, value in zip(
                    token_labels(tokenizer, ids[row, :alternatives].tolist()),
                    ids[row, :alternatives].tolist(),
                    values[row, :alternatives].tolist(),
                    strict=True,
                )
                if value > -math.inf
            ]
            beams.append(
                {
                    "text": tokenizer.decode(sequence, skip_special_tokens=True).strip(),
                    "pieces": token_labels(tokenizer, list(sequence[1:])),
                    "score": score,
                    "next": shown,
                }
            )
        ended = [item["rank"] for item in finished if item["step"] == number + 1]
        steps.append({"step": number + 1, "beams": beams, "finished": ended})
    return steps, finished


def token_labels(tokenizer, ids: list[int]) -> list[str]:
    """Readable piece labels: word-initial pieces start with ▁ (SentencePiece's convention) for every tokenizer."""
    labels = []
    for token in tokenizer.convert_ids_to_tokens(ids):
        if token.startswith("▁") or token in tokenizer.all_special_tokens:
            labels.append(token)
            continue
        text = tokenizer.convert_tokens_to_string([token])  # byte-level pieces → text (" dog")
        labels.append("▁" + text[1:] if text.startswith(" ") else (text or token))
    return labels


def attention_weights(model, source_ids: list[int], generated_ids: list[int]) -> dict:
    """Every attention weight of one teacher-forced pass over the chosen translation, by kind, each
    [layers][heads][query][key]: the decoder reads generated_ids[:-1] (the start token and the pieces before `</s>`)."""
    source = torch.tensor([source_ids], device=model.device)
    with torch.inference_mode():
        output = model(
            input_ids=source,
            attention_mask=torch.ones_like(source),
            decoder_input_ids=torch.tensor([generated_ids[:-1]], device=model.device),
            output_attentions=True,
            use_cache=False,
        )
    tensors = {
        "encoder_self": output.encoder_attentions,
        "decoder_self": output.decoder_attentions,
        "cross": output.cross_attentions,
    }
    return {
        kind: torch.stack(layers)[:, 0].float().round(decimals=DECIMALS).tolist()  # (layers, heads, query, key)
        for kind, layers in tensors.items()
    }


def positional_encoding(model, source_ids: list[int]) -> dict:
    """The positional encodings added at the source positions, [positions][d_model], and per position the length of
    the scaled token embedding and of the encoding; empty where the model keeps no sinusoidal table (T5's relative
    positions)."""
    encoder = model.get_encoder()
    positions = getattr(encoder, "embed_positions", None)
    # Ours keeps the paper's table as `table`; MarianMT's sinusoidal embedding as `weight` (sines, then cosines).
    table = getattr(positions, "table", None)
    if table is None:
        table = getattr(positions, "weight", None)
    if table is None or not hasattr(encoder, "embed_tokens"):
        return {"positional_encoding": [], "embedding_norms": [], "positional_norms": [], "embed_scale": None}
    scale = float(getattr(encoder, "embed_scale", 1.0))
    with torch.inference_mode():
        encoding = table[: len(source_ids)].float()  # (S, d_model)
        embedded = encoder.embed_tokens(torch.tensor(source_ids, device=table.device)).float() * scale  # (S, d_model)
    return {
        "positional_encoding": encoding.round(decimals=DECIMALS).tolist(),
        "embedding_norms": embedded.norm(dim=-1).tolist(),
        "positional_norms": encoding.norm(dim=-1).tolist(),
        "embed_scale": scale,
    }


def inside_view(
    translator: Translator,
    sentence: str,
    settings: DecodingSettings = DecodingSettings(),
    *,
    plan: DecodingPlan | None = None,
    deadline: float | None = None,
    alternatives: int = ALTERNATIVES,
) -> dict:
    """Everything the tab shows for one sentence and one model (see the module docstring), as plain JSON: pieces and
    ids, positional encoding, attention, the beam search and the translation it chose."""
    model, tokenizer = translator.model, translator.tokenizer
    if plan is None:
        plan = plan_decoding(model, tokenizer, [sentence], settings)
    hypotheses, recorder, cut = traced_search(model, plan, deadline=deadline, alternatives=alternatives)
    chosen = hypotheses[0]
    source_ids = list(plan.source_ids[0])
    # Beam search divides by pieces^α (transformers' default α is 1.0 where a config leaves it unset); greedy does not.
    penalty = plan.generation_config.length_penalty
    length_penalty = (1.0 if penalty is None else penalty) if plan.num_beams > 1 else 0.0
    steps, finished = beam_steps(recorder, hypotheses, tokenizer, length_penalty, alternatives)
    config = model.config
    return {
        "model": translator.name,
        "source_tokens": token_labels(tokenizer, source_ids),
        "source_ids": source_ids,
        "target_tokens": token_labels(tokenizer, chosen[1:]),
        "target_ids": chosen[1:],
        "decoder_tokens": token_labels(tokenizer, chosen[:-1]),  # what the decoder reads: the queries of its attention
        **positional_encoding(model, source_ids),
        "attention": attention_weights(model, source_ids, chosen),
        "num_beams": plan.num_beams,
        "length_penalty": length_penalty,
        "beam_steps": steps,
        "finished": finished,
        "translation": tokenizer.decode(chosen, skip_special_tokens=True).strip(),
        "cut": cut,  # the request's deadline ended the search: the translation is what it had by then
        "d_model": getattr(config, "d_model", None),
    }


# ------------------------------------------------------------------------------------------------ the request


def one_sentence(text, limits: Limits) -> tuple[str, list[str]]:
    """The sentence the view follows (the first of the text, at most `limits.max_sentence_words` words: a longer one
    is translated in parts on the Translate tab, and the view follows its first part) and the notices saying so."""
    notices = []
    if isinstance(text, str):
        text, clipped = clip_text(text.strip(), limits.max_input_chars)
    text = check_text("" if text is None else text).strip()
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
    ours: Translator,
    comparisons: list[Translator | BackgroundTranslator],
    scheduler: FairScheduler,
    limits: Limits = Limits(),
    session: str | None = None,
    address: str | None = None,
    arrived: float | None = None,
) -> dict:
    """The inside view of the text's sentence for our model (its keys at the top level) and each comparison model
    (`comparisons`, one dict each, a `message` for one not loaded), with the request's `notices`; or only a
    `message` saying why there is none. Bounded like a translation: the same checks, plan and budget, one scheduler
    job of the estimated work, the search ended at the request's time limit."""
    try:
        beams, tokens = check_decoding(
            decoding, num_beams, max_new_tokens, max_beams=limits.max_beams, max_tokens=limits.max_new_tokens
        )
        sentence, notices = one_sentence(text, limits)
    except InputError as error:
        return {"message": str(error), "notices": []}
    if not sentence:
        return {"message": "Type an English sentence to look inside the Transformer.", "notices": []}
    systems = [ours, *comparisons]
    ready = sum(available(system)[0] is not None for system in systems)
    try:
        plan, settings = budget_plan(
            ours, [sentence], beams, tokens, limits.text, scheduler=scheduler, limits=limits, address=address
        )
        notices += [plan.notice] if plan.notice else []
        work = WORK_FACTOR * plan.cpu_seconds * ready
        with scheduler.job(
            session,
            limits.text.seconds,
            heavy=work > limits.ordinary_cpu_seconds,
            work=work,
            address=address,
            since=arrived,
        ) as job:
            views = []
            for system in systems:
                translator, why_not = available(system)
                if translator is None:
                    views.append({"model": system.name, "message": why_not})
                    continue
                views.append(inside_view(translator, sentence, settings, deadline=job.hard_deadline))
    except Busy as error:
        return {"message": str(error), "notices": []}
    except Cancelled:
        return {"message": "Cancelled: the page that asked for this view was closed.", "notices": []}
    if any(view.get("cut") for view in views):
        notices.append("The request reached its time limit: the search shown ended there.")
    return {"sentence": sentence, "notices": notices, **views[0], "comparisons": views[1:]}


def systems_of(view: dict | None) -> list[dict]:
    """The per-model views of a request's result, ours first."""
    if not view or "model" not in view:
        return []
    return [{key: value for key, value in view.items() if key != "comparisons"}, *view.get("comparisons", [])]


# ------------------------------------------------------------------------------------------------ the pictures


def format_notices(view: dict | None) -> str:
    if not view:
        return ""
    lines = ([view["message"]] if view.get("message") else []) + view.get("notices", [])
    return "\n\n".join(f"⚠️ {as_text(line)}" for line in lines)


def format_pieces(view: dict) -> str:
    """The source and target pieces with their ids, as Markdown (pieces shown as text: a visitor's text is never
    rendered)."""
    if view.get("message"):
        return f"⚠️ {as_text(view['message'])}"

    def row(label: str, pieces: list[str], ids: list[int]) -> str:
        cells = " · ".join(f"{as_text(piece)} ({number})" for piece, number in zip(pieces, ids, strict=True))
        return f"**{label}** {cells}"

    return "\n\n".join(
        [
            f"**{as_text(view['model'])}**",
            row("English pieces (ids)", view["source_tokens"], view["source_ids"]),
            row("German pieces (ids)", view["target_tokens"], view["target_ids"]),
        ]
    )


# The pictures are laid out in inches before anything is drawn: matplotlib's layout engines measure every label of a
# figure to place it, which took most of a picture's time (3-5 s for the tab's first pictures on one core).
CELL = 0.17  # inches per token row or column: room for one 7-point label
FONT = 7  # points, of the token labels
MAX_WIDTH = 20.0  # inches of heatmap cells in one figure; more tokens get smaller cells (and labels)


def label_inches(labels: list[str], fontsize: float) -> float:
    """Room for the longest label, in inches: DejaVu Sans (matplotlib's font) averages about 0.6 em a character, and
    0.7 leaves room for wide ones, so no label is measured."""
    return 0.7 * fontsize / 72 * max((len(label) for label in labels), default=1)


def title_inches(title: str) -> float:
    """The width of a figure that holds its 10-point title on one line (about 0.6 em a character in running text),
    with a margin on either side."""
    return 0.2 + 0.6 * 10 / 72 * len(title)


def cell_and_font(columns: int, rows: int) -> tuple[float, float]:
    """(inches per cell, label points) for a grid of `columns` x `rows` cells: CELL, smaller past MAX_WIDTH."""
    cell = min(CELL, MAX_WIDTH / max(columns, 1), MAX_WIDTH / max(rows, 1))
    return cell, min(FONT, max(4.0, 0.8 * 72 * cell))


def inches_to_figure(figure: Figure, left: float, bottom: float, width: float, height: float) -> list[float]:
    """A box given in inches from the figure's lower left corner, as the fractions `add_axes` takes."""
    figure_width, figure_height = figure.get_size_inches()
    return [left / figure_width, bottom / figure_height, width / figure_width, height / figure_height]


def plot_positions(view: dict) -> Figure | None:
    """The positional encoding over source positions x dimensions and, on the same rows, the length of the scaled
    embedding and of the encoding added at each position."""
    table = np.asarray(view.get("positional_encoding") or [])
    if not table.size:
        return None
    labels = [f"{n} {label}" for n, label in enumerate(view["source_tokens"])]
    cell, font = cell_and_font(1, len(labels))
    left, heat, bars, top, bottom = 0.4 + label_inches(labels, font), 5.0, 2.0, 0.75, 0.55
    rows = cell * len(labels)
    title = f"{view['model']}: positional encoding added at each position"
    width = max(left + heat + 1.0 + bars + 0.35, title_inches(title))  # room for the last number under the bars
    figure = Figure(figsize=(width, top + max(rows, 1.0) + bottom), dpi=100)
    base = bottom + max(rows, 1.0) - rows  # a short sentence's rows sit under the title
    axes = figure.add_axes(inches_to_figure(figure, left, base, heat, rows))
    image = axes.imshow(table, aspect="auto", cmap="RdBu_r", vmin=-1.0, vmax=1.0, interpolation="nearest")
    axes.set_yticks(range(len(labels)), labels, fontsize=font)
    axes.set_xlabel(f"dimension (0 … {table.shape[1] - 1})", fontsize=8)
    axes.set_ylabel("source position", fontsize=8)
    axes.tick_params(axis="x", labelsize=7)
    figure.colorbar(image, cax=figure.add_axes(inches_to_figure(figure, left + heat + 0.1, base, 0.12, rows)))
    lengths = figure.add_axes(inches_to_figure(figure, left + heat + 1.0, base, bars, rows), sharey=axes)
    positions = np.arange(len(labels))
    scale = view["embed_scale"]
    lengths.barh(positions - 0.2, view["embedding_norms"], height=0.4, label=f"embedding × √d_model ({scale:.1f})")
    lengths.barh(positions + 0.2, view["positional_norms"], height=0.4, label="positional encoding")
    lengths.tick_params(axis="y", labelleft=False)
    lengths.tick_params(axis="x", labelsize=7)
    lengths.set_xlabel("length (L2)", fontsize=8)
    figure.legend(loc="upper right", fontsize=7, ncols=1, frameon=False)
    figure.text(0.1 / width, 1 - 0.12 / figure.get_size_inches()[1], title, fontsize=10, va="top")
    return figure


def chosen_layer_and_head(view: dict, kind: str, layer: int, head: int | None) -> tuple[int, int | None, int, int]:
    """(layer, head or None for all, layers, heads) within the model's own sizes: a layer or head past them is its
    last (the controls go as far as the largest model on the page)."""
    weights = view["attention"][kind]
    layers, heads = len(weights), len(weights[0])
    return min(max(layer, 0), layers - 1), None if head is None else min(max(head, 0), heads - 1), layers, heads


def attention_axes(view: dict, kind: str) -> tuple[list[str], list[str], str, str]:
    """(query labels, key labels, x label, y label): queries along the bottom, the pieces they read down the side."""
    source, decoder = view["source_tokens"], view["decoder_tokens"]
    if kind == "encoder_self":
        return source, source, "source tokens (reading)", "source tokens (read)"
    if kind == "decoder_self":
        return decoder, decoder, "generated tokens (reading)", "generated tokens (read)"
    return decoder, source, "generated tokens", "source tokens"


def plot_attention_heads(view: dict, kind: str, layer: int, head: int | None) -> Figure | None:
    """One head's weights, or every head of the layer in rows of four: viridis from 0 to the largest weight shown,
    queries along the bottom and the pieces they read down the side; the side's labels once per row of heads."""
    if view.get("message"):
        return None
    layer, head, layers, heads = chosen_layer_and_head(view, kind, layer, head)
    queries, keys, xlabel, ylabel = attention_axes(view, kind)
    shown = [head] if head is not None else list(range(heads))
    matrices = [np.asarray(view["attention"][kind][layer][number]).T for number in shown]  # (keys, queries)
    columns = min(len(shown), 4)
    rows = math.ceil(len(shown) / columns)
    cell, font = cell_and_font(columns * len(queries), rows * len(keys))
    panel_width, panel_height = cell * len(queries), cell * len(keys)
    # A narrow panel (a short translation) has an axis label wider than itself: the gap takes what spills over, so
    # that neighbouring labels neither meet each other nor run into the next heatmap.
    gap = max(0.15, label_inches([xlabel], 8) - panel_width + 0.1)
    left = 0.4 + label_inches(keys, font)
    under = 0.45 + label_inches(queries, font)  # each row's query labels and axis label
    above = 0.25  # each panel's "head n"
    panels = left + columns * panel_width + (columns - 1) * gap
    height = 0.35 + rows * (above + panel_height + under)
    which = f"head {head + 1} of {heads}" if head is not None else f"all {heads} heads"
    title = f"{view['model']}: {KIND_TITLES[kind]}, layer {layer + 1} of {layers}, {which}"
    width = max(panels + 0.85, title_inches(title))  # the colour bar and its numbers right of the panels
    figure = Figure(figsize=(width, height), dpi=100)
    top = max(float(matrix.max()) for matrix in matrices)
    for index, (number, matrix) in enumerate(zip(shown, matrices, strict=True)):
        row, column = divmod(index, columns)
        bottom = height - 0.35 - (row + 1) * (above + panel_height + under) + under
        axes = figure.add_axes(
            inches_to_figure(figure, left + column * (panel_width + gap), bottom, panel_width, panel_height)
        )
        image = axes.imshow(matrix, aspect="auto", cmap="viridis", vmin=0.0, vmax=top, interpolation="nearest")
        axes.set_xticks(range(len(queries)), queries, rotation=90, fontsize=font)
        axes.set_xlabel(xlabel, fontsize=8)
        axes.set_title(f"head {number + 1}", fontsize=9, pad=3)
        if column == 0:
            axes.set_yticks(range(len(keys)), keys, fontsize=font)
            axes.set_ylabel(ylabel, fontsize=8)
        else:
            axes.set_yticks([])
        if index == 0:
            bar = inches_to_figure(figure, panels + 0.1, bottom, 0.12, panel_height)
    figure.colorbar(image, cax=figure.add_axes(bar))
    figure.text(0.1 / width, 1 - 0.08 / height, title, fontsize=10, va="top")
    return figure


def format_beam_search(view: dict) -> str:
    """The search step by step and the finished hypotheses before and after the length penalty, as Markdown."""
    if view.get("message"):
        return f"⚠️ {as_text(view['message'])}"
    alpha = view["length_penalty"]
    lines = [f"**{as_text(view['model'])}**: {view['num_beams']} beam{'s' if view['num_beams'] > 1 else ''}, length "
             f"penalty α = {alpha:g}. Score: the sum of the log-probabilities of the pieces so far."]  # fmt: skip
    for step in view["beam_steps"]:
        lines.append(f"**Step {step['step']}**")
        rows = ["| beam | text so far | score | next pieces (probability) |", "|---|---|---|---|"]
        for number, beam in enumerate(step["beams"], start=1):
            choices = ", ".join(f"{as_text(item['piece'])} {item['probability']:.0%}" for item in beam["next"])
            rows.append(f"| {number} | {as_text(beam['text']) or '(start)'} | {beam['score']:.2f} | {choices} |")
        lines.append("\n".join(rows))
        if step["finished"]:
            ended = ", ".join(f"#{rank}" for rank in step["finished"])
            lines.append(f"Finished here (ending with `</s>`): hypothesis {ended} below.")
    lines.append("**Finished hypotheses**, in the order the search ranks them (log-probability ÷ pieces^α):")
    rows = [
        "| # | translation | pieces | log-probability | its rank | ÷ pieces^α |",
        "|---|---|---|---|---|---|",
    ]
    for item in view["finished"]:
        mark = " ✔ chosen" if item["rank"] == 1 else ""
        log_probability = "" if item["log_probability"] is None else f"{item['log_probability']:.3f}"
        normalised = "" if item["length_normalised"] is None else f"{item['length_normalised']:.3g}"
        rows.append(
            f"| {item['rank']}{mark} | {as_text(item['text'])} | {item['step']} | {log_probability} | "
            f"{item['rank_without_penalty']} | {normalised} |"
        )
    lines.append("\n".join(rows))
    reordered = any(item["rank"] != item["rank_without_penalty"] for item in view["finished"])
    lines.append(
        "The length penalty reordered the finished hypotheses." if reordered
        else "The length penalty kept the order of the log-probabilities."
    )  # fmt: skip
    return "\n\n".join(lines)


def draw_inside(view: dict | None, kind, layer, head, count: int) -> list:
    """The tab's outputs for `count` models: the notices, then per model its pieces and positional encoding, then
    `draw_attention`'s, then per model its beam search. A model with nothing to draw has its pictures hidden."""
    views = padded(view, count)
    pieces = [format_pieces(item) if item else "" for item in views]
    positions = [shown(plot_positions(item) if item and not item.get("message") else None) for item in views]
    beams = [format_beam_search(item) if item else "" for item in views]
    return [format_notices(view), *pieces, *positions, *draw_attention(view, kind, layer, head, count), *beams]


def draw_attention(view: dict | None, kind, layer, head, count: int) -> list:
    """Per model the attention picked by the page's controls, as sent (`kind`, `layer` from 1, `head` from 1 or 0 for
    all: anything else draws cross-attention, layer 1, all heads), then its caption."""
    kind = kind if kind in KINDS else "cross"
    try:
        layer, head = int(layer) - 1, int(head) - 1 if int(head) > 0 else None
    except (TypeError, ValueError, OverflowError):
        layer, head = 0, None
    views = padded(view, count)
    attention = [shown(plot_attention_heads(item, kind, layer, head) if item else None) for item in views]
    caption = CAPTIONS[kind] + (f" {CAPTIONS['heads']}" if head is None else "") if views[0] else ""
    return [*attention, caption]


def padded(view: dict | None, count: int) -> list[dict]:
    """The per-model views of `view`, `count` of them ({} for a model with none)."""
    return (systems_of(view) + [{} for _ in range(count)])[:count]


def shown(figure: Figure | None) -> gr.Plot:
    """A plot's new value, hidden when there is nothing to draw (a comparison model not on the page)."""
    return gr.Plot(value=figure, visible=figure is not None)


__all__ = [
    "draw_attention",
    "draw_inside",
    "CAPTIONS",
    "KINDS",
    "StepRecorder",
    "attention_weights",
    "format_beam_search",
    "format_notices",
    "format_pieces",
    "inside_request",
    "inside_view",
    "plot_attention_heads",
    "plot_positions",
    "positional_encoding",
    "systems_of",
    "traced_search",
]
