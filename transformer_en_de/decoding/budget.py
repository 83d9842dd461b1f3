"""The decoding budget: what decoding a plan costs in CPU seconds, and the beams and sentences that fit in a time.

Work is counted as the engine will spend it, in CPU seconds of one core: the engine decodes length-sorted batches,
and a batch costs its steps (the largest new-token limit among its sentences, `DecodingPlan.limits`: the smaller of
the cap and the bound `ratio * source tokens + offset`) times the cost of one decoder step, a fixed part (the layers'
calls, the search's bookkeeping) plus a part per row (a beam of a sentence). The fixed part dominates small batches,
so one long sentence at 8 beams costs about as much per step as eight short ones. A plan over its CPU seconds is
narrowed once (`fit_budget`): fewer beams, and if greedy search is still too much, only its first sentences (or lines);
the plan says so in words. The clock backs the estimate up: past a request's time, the engine ends the batch in
progress and keeps what each sentence's search had written (`engine.run_plan(deadline=...)`).
"""

from dataclasses import dataclass

import torch

from modeling.length_bound import new_token_limits

from .plan import DecodingPlan, DecodingSettings, model_bound, plan_decoding


@dataclass(frozen=True)
class StepCost:
    """CPU seconds of one decoder step: `fixed + per_row * rows`. Measured on the model shipped in round 5 (d_model
    256, 3+3 layers), one thread: 4.6 ms + 0.24 ms per row over beams 1/4/8 x batches 1/8/32 of Multi30k val."""

    fixed: float = 0.005
    per_row: float = 0.00025


def decoding_seconds(limits: list[int], num_beams: int, batch_size: int, cost: StepCost = StepCost()) -> float:
    """Estimated CPU seconds to decode sentences with these new-token limits: batches as the engine makes them (the
    longest first), each running to its largest limit with every sentence in it (an upper bound: ours lets sentences
    leave when done)."""
    ordered = sorted(limits, reverse=True)
    seconds = 0.0
    for start in range(0, len(ordered), batch_size):
        batch = ordered[start : start + batch_size]
        seconds += batch[0] * (cost.fixed + cost.per_row * num_beams * len(batch))
    return seconds


def least_seconds(model, count: int, settings: DecodingSettings, cost: StepCost = StepCost()) -> float:
    """A lower bound of the estimate for `count` sentences, free to compute (nothing tokenized): greedy, each with the
    limit of the shortest source (one token), in the settings' batches."""
    shortest = new_token_limits(torch.ones(1), *model_bound(model, settings))
    return decoding_seconds([int(shortest[0])] * count, 1, settings.batch_size, cost)


def fitted_plan(
    model, tokenizer, sentences: list[str], settings: DecodingSettings, cpu_seconds: float, unit: str = "sentence",
    cost: StepCost = StepCost(), *, backend=None,
) -> tuple[DecodingPlan, float]:  # fmt: skip
    """A request's plan for `model` (`plan_decoding`) narrowed once to what fits `cpu_seconds` (`fit_budget`), and the
    estimate of what is left: planning a request in one call."""
    plan = plan_decoding(model, tokenizer, sentences, settings, backend=backend)
    return fit_budget(plan, cpu_seconds, unit, cost)


def fit_budget(
    plan: DecodingPlan, cpu_seconds: float, unit: str = "sentence", cost: StepCost = StepCost()
) -> tuple[DecodingPlan, float]:
    """`plan` narrowed once to what fits `cpu_seconds` (`fitting`, in the plan's batches), and the estimate of what
    is left."""
    batch_size = plan.settings.batch_size
    beams, count, notice = fitting(list(plan.limits), plan.num_beams, cpu_seconds, unit, batch_size=batch_size,
                                   cost=cost)  # fmt: skip
    if notice:
        plan = plan.narrowed(beams, count, notice)
    return plan, decoding_seconds(list(plan.limits), beams, batch_size, cost)


def fitting(
    limits: list[int], num_beams: int, cpu_seconds: float, unit: str = "sentence", *, batch_size: int = 8,
    cost: StepCost = StepCost(),
) -> tuple[int, int, str]:  # fmt: skip
    """(beams, sentences, notice): fewer beams first, then fewer sentences, until the estimate of decoding sentences
    with these new-token `limits` fits `cpu_seconds` (the first sentence is always kept: the clock ends it if need
    be); the notice says what was cut ("" if nothing)."""

    def estimate(kept: list[int], beams: int) -> float:
        return decoding_seconds(kept, beams, batch_size, cost)

    needed = estimate(limits, num_beams)
    if needed <= cpu_seconds:
        return num_beams, len(limits), ""
    what = f"{len(limits):,} {unit}{'s' if len(limits) != 1 else ''} x {num_beams} beams"
    asked = f"This request needs about {needed:.1f} s of CPU time ({what}); each request here gets {cpu_seconds:g} s"
    for beams in range(num_beams - 1, 0, -1):
        if estimate(limits, beams) <= cpu_seconds:
            notice = (
                f"{asked}, so it was translated with {beams} beam{'s' if beams > 1 else ''} instead of {num_beams}."
            )
            return beams, len(limits), notice
    # The most first sentences that fit (an estimate only grows with more sentences): a binary search.
    low, high = 1, len(limits)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if estimate(limits[:middle], 1) <= cpu_seconds else (low, middle - 1)
    notice = (
        f"{asked}, so only the first {low:,} of {len(limits):,} {unit}s were translated, with greedy search. "
        f"Split the rest into smaller requests."
    )
    return 1, low, notice


__all__ = ["StepCost", "decoding_seconds", "fit_budget", "fitted_plan", "fitting", "least_seconds"]
