"""What the paper's parts do with one sentence inside a seq2seq model, as plain JSON: the numbers the app's Inside tab
draws (`transformer_en_de/app/inside_tab/`), and what a learner can print or plot from a notebook:

    from transformer_en_de.inside import inside_view
    model.set_attn_implementation("eager")   # attention weights (SDPA returns none)
    view = inside_view(model, tokenizer, "Two dogs are playing in the snow.")

For one sentence and one model (ours, MarianMT, T5, any transformers seq2seq model that returns its attention):
- the BPE pieces the model reads and writes, with their ids (section 3.4: one shared vocabulary and embedding);
- the positional encoding added to each source position, and how large the scaled embedding and the encoding each
  are there (sections 3.4 and 3.5);
- the attention weights of every kind, layer and head: encoder self-attention, masked decoder self-attention and
  cross-attention (sections 3.2.1-3.2.3), from one teacher-forced pass over the chosen translation;
- the beam search step by step (section 6.1 decodes with beam search and a length penalty), recorded from the model's
  own `generate()` with the engine's plan: a logits processor placed after every other one sees, at each step, the
  live beams and the log-probabilities the search ranks. `generate()` returns the finished hypotheses in the order of
  its length-penalised score, the first of which is the translation (the app's: the same plan, the same search;
  tests/test_inside.py checks the ids).
The weights and encodings are rounded to `DECIMALS` places, and a view is bounded by pieces (`MAX_PIECES` read and
written): its size grows with their square, times layers and heads.
"""

import copy
import math

import torch
from transformers import LogitsProcessor

from transformer_en_de.decoding.engine import (
    DecodingPlan,
    DecodingSettings,
    eos_id_of,
    plan_decoding,
    step_processors,
    strip_generated,
)

# Of the weights and encodings returned: a colour map has 256 steps, so 3 places draw the same picture as 7, and JSON
# of 3 places is at most 7 bytes a number ("0.123, "), not 20. Each row of weights still sums to 1 (`rounded_rows`).
DECIMALS = 3
# Pieces a view follows, read and written: the attention it returns grows with their square, times layers and heads.
# Multi30k captions are 15 pieces (median) and at most 50 English and 58 German in all its splits (our tokenizer,
# </s> included), so 64 shows every caption whole; the 29 rare-letter "words" that made views of 17-48 MB were 218-300.
MAX_PIECES = 64
ALTERNATIVES = 3  # next pieces shown for each live beam
KINDS = ("encoder_self", "decoder_self", "cross")


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


def traced_search(
    model,
    plan: DecodingPlan,
    *,
    deadline: float | None = None,
    at_each_step=None,
    alternatives: int = ALTERNATIVES,
    max_pieces: int | None = MAX_PIECES,
):
    """Decode the plan's one sentence with `generate()` as the engine does (its generation config, its length bound,
    here at most `max_pieces` new pieces), recording each step. Returns (finished hypotheses in generate()'s order,
    each as ids from the start token to `</s>`; the recorder; whether the deadline cut the search; whether the
    translation reached `max_pieces` short of the plan's own limit)."""
    config = copy.copy(plan.generation_config)  # shallow: only the fields below differ
    eos_id = eos_id_of(config)
    limit = plan.limits[0] if max_pieces is None else min(plan.limits[0], max_pieces)  # </s> forced there
    config.max_new_tokens = limit
    config.return_dict_in_generate = True
    config.num_return_sequences = config.num_beams  # every finished hypothesis the search kept, best first
    recorder = StepRecorder(keep=max(alternatives, 2 * config.num_beams), normalise=config.num_beams == 1)
    processors = step_processors([limit], eos_id, deadline, at_each_step)
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
    # generate() pads the rows that finished early: each is cut after its </s>, as the engine cuts its own
    hypotheses = [strip_generated(row, config.pad_token_id, eos_id) for row in output.sequences.tolist()]
    cut = deadline is not None and processors[1].stopped_at is not None
    return hypotheses, recorder, cut, limit < plan.limits[0] and len(hypotheses[0]) - 1 >= limit


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
    return {kind: rounded_rows(torch.stack(layers)[:, 0]) for kind, layers in tensors.items()}  # (L, heads, query, key)


def rounded_rows(weights: torch.Tensor) -> list:
    """Rows of attention weights (softmaxes) to `DECIMALS` places that still sum to 1, as the page says they do: each
    weight rounded down, then the units a row is short of 1 added to its weights that lost most (the largest
    remainder method). Every weight stays within one unit of its value; a masked weight (0) stays 0."""
    unit = 10**DECIMALS
    scaled = weights.double() * unit
    down = scaled.floor()
    short = (unit - down.sum(dim=-1, keepdim=True)).round().clamp(0, weights.shape[-1])  # (..., 1)
    rank = (scaled - down).argsort(dim=-1, descending=True, stable=True).argsort(dim=-1)  # 0: the largest remainder
    return ((down + (rank < short).double()) / unit).tolist()


def rounded(tensor: torch.Tensor) -> list:
    """The tensor as nested lists of numbers with `DECIMALS` places. Rounded in float64: a float32 rounded to 0.123 is
    0.12300000339746475 as a Python float, which JSON writes in full."""
    return tensor.double().round(decimals=DECIMALS).tolist()


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
        "positional_encoding": rounded(encoding),
        "embedding_norms": embedded.norm(dim=-1).tolist(),
        "positional_norms": encoding.norm(dim=-1).tolist(),
        "embed_scale": scale,
    }


def inside_view(
    model,
    tokenizer,
    sentence: str,
    settings: DecodingSettings = DecodingSettings(),
    *,
    name: str = "",
    plan: DecodingPlan | None = None,
    deadline: float | None = None,
    at_each_step=None,
    alternatives: int = ALTERNATIVES,
    max_pieces: int | None = MAX_PIECES,
) -> dict:
    """What `model` does with one sentence (see the module docstring), as plain JSON under the model's `name`: pieces
    and ids, positional encoding, attention, the beam search and the translation it chose. The model must return its
    attention weights (`model.set_attn_implementation("eager")`: SDPA returns none). A sentence of more than
    `max_pieces` pieces is refused (ValueError, before the model runs) and the translation ends at `max_pieces`
    (`reached_bound`); None lifts the bound, for a notebook's own long sentence."""
    if plan is None:
        plan = plan_decoding(model, tokenizer, [sentence], settings)
    problem = too_many_pieces(plan, max_pieces, name or type(model).__name__)
    if problem:
        raise ValueError(problem)
    hypotheses, recorder, cut, reached_bound = traced_search(
        model, plan, deadline=deadline, at_each_step=at_each_step, alternatives=alternatives, max_pieces=max_pieces
    )
    chosen = hypotheses[0]
    source_ids = list(plan.source_ids[0])
    # Beam search divides by pieces^α (transformers' default α is 1.0 where a config leaves it unset); greedy does not.
    penalty = plan.generation_config.length_penalty
    length_penalty = (1.0 if penalty is None else penalty) if plan.num_beams > 1 else 0.0
    steps, finished = beam_steps(recorder, hypotheses, tokenizer, length_penalty, alternatives)
    config = model.config
    return {
        "model": name or type(model).__name__,
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
        "reached_bound": reached_bound,  # the translation ended at max_pieces, short of the model's own limit
        "d_model": getattr(config, "d_model", None),
    }


def too_many_pieces(plan: DecodingPlan, max_pieces: int | None, name: str) -> str:
    """The line refusing the plan's sentence when `name` reads it in more than `max_pieces` pieces, else ""."""
    pieces = plan.source_lengths[0]  # before the model's own cut at its positions
    if max_pieces is None or pieces <= max_pieces:
        return ""
    return (
        f"{name} reads this sentence as {pieces} pieces; the inside view follows sentences of at most {max_pieces} "
        "(a caption is 15 to 30): look inside a shorter one."
    )
