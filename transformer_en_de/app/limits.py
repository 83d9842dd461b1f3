"""How much work one request may take, and the plan that keeps a request within it.

Work is counted as the engine will spend it: for every sentence, beams x its new-token limit (the smaller of the
slider's maximum and the engine's bound `ratio * source tokens + offset`). A request over its budget is translated with
fewer beams, and if greedy search is still too much, only its first sentences (or lines) are; the plan says so in
words. A wall-clock limit per request, checked between engine batches, backs the estimate up.
"""

from dataclasses import dataclass

import torch

from modeling.length_bound import new_token_limits
from transformer_en_de.engine import DecodingSettings, length_bound, max_source_tokens, source_prefix


@dataclass(frozen=True)
class Budget:
    """What one request may take: token steps (sentences x beams x new tokens) and seconds on the clock (from its
    start, waiting for turns included; at 80% it stops between batches, at 100% in the middle of one)."""

    token_steps: int
    seconds: float


@dataclass(frozen=True)
class Limits:
    """Every limit of the app in one place (defaults measured on the shipped model, one CPU core)."""

    max_beams: int = 8
    max_new_tokens: int = 255
    max_input_chars: int = 3_000
    max_file_bytes: int = 1_000_000  # also the server's upload cap: a bigger upload is refused before it is stored
    max_file_lines: int = 2_000
    # 4,096 token steps is one 255-token sentence at 8 beams twice over: about 10 s of one core for our model.
    text: Budget = Budget(token_steps=4_096, seconds=25.0)
    file: Budget = Budget(token_steps=32_768, seconds=120.0)
    batch_size: int = 8  # sentences per engine batch: the granularity of the deadline and of cancellation
    concurrent_jobs: int = 8  # requests admitted at once; they take turns on the CPU (scheduler.py)
    queue_size: int = 32  # requests waiting beyond those; more are refused with Gradio's "queue is full"


@dataclass
class Plan:
    """How a request will be translated: with how many beams, how many of its sentences, and why if cut."""

    num_beams: int
    num_sentences: int
    token_steps: int
    notice: str = ""
    cut: bool = False


def token_limits(model, tokenizer, sentences: list[str], settings: DecodingSettings) -> list[int]:
    """Each sentence's new-token limit as the engine will apply it (the same helpers, the same bound)."""
    if not sentences:
        return []
    prefix = source_prefix(model)
    lengths = [len(ids) for ids in tokenizer([prefix + sentence for sentence in sentences])["input_ids"]]
    readable = max_source_tokens(model, tokenizer)
    ratio, offset = length_bound(model, settings)
    cap = settings.max_new_tokens
    return new_token_limits(torch.tensor([min(length, readable) for length in lengths]), ratio, offset, cap).tolist()


def plan_work(limits: list[int], num_beams: int, budget: Budget, unit: str = "sentence") -> Plan:
    """Fewer beams first, then fewer sentences, until the work fits `budget.token_steps`."""
    total = sum(limits)
    needed = num_beams * total
    if needed <= budget.token_steps:
        return Plan(num_beams, len(limits), needed)
    what = f"{len(limits):,} {unit}{'s' if len(limits) != 1 else ''} x {num_beams} beams"
    asked = f"This request needs about {needed:,} token steps ({what}); each request here gets {budget.token_steps:,}"
    beams = budget.token_steps // total if total else num_beams
    if beams >= 1:
        notice = f"{asked}, so it was translated with {beams} beam{'s' if beams > 1 else ''} instead of {num_beams}."
        return Plan(beams, len(limits), beams * total, notice, cut=True)
    kept, spent = 0, 0
    for limit in limits:
        if spent + limit > budget.token_steps and kept:
            break
        kept, spent = kept + 1, spent + limit
    notice = (
        f"{asked}, so only the first {kept:,} of {len(limits):,} {unit}s were translated, with greedy search. "
        f"Split the rest into smaller requests."
    )
    return Plan(1, kept, spent, notice, cut=True)
