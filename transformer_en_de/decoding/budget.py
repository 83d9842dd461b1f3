"""The decoding budget: what decoding a plan costs in CPU seconds, and the plan of less work that fits in a time.

Work is counted as the engine will spend it: the engine decodes length-sorted batches, and a batch costs its steps
(the largest new-token limit among its sentences, `DecodingPlan.limits`, from the plan's `LengthBound`) times the cost
of one decoder step, a fixed part (the layers' calls, the search's bookkeeping) plus a part per row (a beam of a
sentence). The fixed part dominates small batches, so one long sentence at 8 beams costs about as much per step as
eight short ones. The cost of a step is the served model's, measured on the machine that serves it when the app loads
it (`StepCost.measure`). A plan over its CPU seconds is replaced once by a plan of less work (`fit_budget`): fewer
beams, and if greedy search is still too much, only its first sentences (or lines); the plan says so in words. The
clock backs the estimate up: past a request's time, the engine ends the batch in progress and keeps what each
sentence's search had written (`engine.run_plan(deadline=...)`).

This module reads plans (`plan.py`); plan.py imports nothing of it.
"""

import math
import time
from dataclasses import dataclass
from typing import NamedTuple

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from .plan import DecodingPlan, DecodingSettings, LengthBound, generation_config_for

# The searches a calibration times (sentences, beams): one greedy sentence, where the fixed part is nearly all of a
# step, and a batch of 8 sentences at 4 beams, 32 rows, where the part per row shows.
CALIBRATION_SEARCHES = ((1, 1), (8, 4))


@dataclass(frozen=True)
class StepCost:
    """CPU seconds of one decoder step: `fixed + per_row * rows`, of one model on one machine (`measure`).

    The defaults are the round-5 model's (d_model 256, 3+3 layers, one thread): only what a caller that measured
    nothing gets."""

    fixed: float = 0.005
    per_row: float = 0.00025

    @classmethod
    def measure(cls, model, *, steps: int = 8, repeats: int = 2, source_tokens: int = 16) -> "StepCost":
        """`model`'s cost of a step on this machine, from its own searches (`CALIBRATION_SEARCHES`) run through
        `generate()` as the engine runs them, `steps` steps each, the fastest of `repeats`: for the shipped model 0.85 s
        of CPU in one thread on a 2-core machine loaded 8 per core (with two threads there, 4 s: they wait on each
        other), less on a quiet one.

        Measured when the app loads the model rather than stored with the folder by the scoring command: the budget
        is spent on the machine that serves (a Space's CPU is not the one that scored the folder), with the model as
        the app prepares it (its attention, int8), and a folder from the Hub that was never scored gets a cost too.
        Timed in CPU seconds of the calling thread, the budget's unit: other processes busy at start do not make
        every later request look dearer (on a machine loaded 8 per core, wall time read 3-4x the CPU time, and the
        CPU time of two calibrations differed by under 1%).
        """
        (few_rows, few_rows_seconds), (many_rows, many_rows_seconds) = [
            (sentences * beams, _seconds_per_step(model, sentences, beams, steps, repeats, source_tokens))
            for sentences, beams in CALIBRATION_SEARCHES
        ]
        per_row = max(many_rows_seconds - few_rows_seconds, 0.0) / (many_rows - few_rows)
        return cls(fixed=max(few_rows_seconds - per_row * few_rows, 0.0), per_row=per_row)

    def seconds(self, rows: int) -> float:
        """Seconds of one step of a batch of `rows` rows (sentences x beams)."""
        return self.fixed + self.per_row * rows


class _NeverEnds(LogitsProcessor):
    """Forbids `</s>`: a timed search runs every step it is given (each sentence its own row, like the length bound)."""

    def __init__(self, eos_token_id: int):
        self.eos_token_id = eos_token_id

    def select_sentences(self, sentences: torch.Tensor) -> "_NeverEnds":
        return self

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()
        scores[:, self.eos_token_id] = -math.inf
        return scores


def _seconds_per_step(model, sentences: int, num_beams: int, steps: int, repeats: int, source_tokens: int) -> float:
    """CPU seconds per step of `generate()` searching `sentences` sources of `source_tokens` tokens with `num_beams`,
    `steps` steps long (the encoder's pass shared among them, as in a request); the fastest of `repeats`, after one
    run that warms the model up."""
    config = generation_config_for(model, DecodingSettings(num_beams=num_beams))  # a copy of the model's
    config.max_new_tokens = steps
    eos_id = config.eos_token_id[0] if isinstance(config.eos_token_id, list) else config.eos_token_id
    # Ordinary tokens (past the special ones at the start of a vocabulary), ended by </s>: a sentence the model reads.
    words = torch.arange(source_tokens - 1) % max(model.config.vocab_size - 8, 1) + 8
    source = torch.cat([words, torch.tensor([eos_id])]).repeat(sentences, 1).to(model.device)  # (B, S)
    fastest = math.inf
    model.eval()
    with torch.inference_mode():
        for run in range(repeats + 1):
            started = time.thread_time()
            model.generate(
                input_ids=source,
                attention_mask=torch.ones_like(source),
                generation_config=config,
                logits_processor=LogitsProcessorList([_NeverEnds(eos_id)]),
            )
            if run:  # the first run warms the model up
                fastest = min(fastest, time.thread_time() - started)
    return fastest / steps


def decoding_seconds(limits: list[int], num_beams: int, batch_size: int, cost: StepCost) -> float:
    """Estimated seconds to decode sentences with these new-token limits: batches as the engine makes them (the
    longest first), each running to its largest limit with every sentence in it (an upper bound: ours lets sentences
    leave when done)."""
    ordered = sorted(limits, reverse=True)
    seconds = 0.0
    for start in range(0, len(ordered), batch_size):
        batch = ordered[start : start + batch_size]
        seconds += batch[0] * cost.seconds(num_beams * len(batch))
    return seconds


def least_seconds(model, count: int, settings: DecodingSettings, cost: StepCost) -> float:
    """A lower bound of the estimate for `count` sentences, free to compute (nothing tokenized): greedy, each with the
    limit the model's bound gives the shortest source (one token), in the settings' batches."""
    shortest = LengthBound.for_model(model, settings).limits([1])[0]
    return decoding_seconds([shortest] * count, 1, settings.batch_size, cost)


class WorkThatFits(NamedTuple):
    """The beams and the first sentences of a request that fit its CPU seconds, and what was cut in words ("" if
    nothing)."""

    num_beams: int
    sentences: int
    notice: str


def work_that_fits(
    limits: list[int], num_beams: int, cpu_seconds: float, unit: str = "sentence", *, batch_size: int, cost: StepCost
) -> WorkThatFits:
    """Fewer beams first, then fewer sentences, until the estimate of decoding sentences with these new-token `limits`
    fits `cpu_seconds` (the first sentence is always kept: the clock ends it if need be)."""

    def estimate(kept: list[int], beams: int) -> float:
        return decoding_seconds(kept, beams, batch_size, cost)

    needed = estimate(limits, num_beams)
    if needed <= cpu_seconds:
        return WorkThatFits(num_beams, len(limits), "")
    what = f"{len(limits):,} {unit}{'s' if len(limits) != 1 else ''} x {num_beams} beams"
    asked = f"This request needs about {needed:.1f} s of CPU time ({what}); each request here gets {cpu_seconds:g} s"
    for beams in range(num_beams - 1, 0, -1):
        if estimate(limits, beams) <= cpu_seconds:
            notice = (
                f"{asked}, so it was translated with {beams} beam{'s' if beams > 1 else ''} instead of {num_beams}."
            )
            return WorkThatFits(beams, len(limits), notice)
    # The most first sentences that fit (an estimate only grows with more sentences): a binary search.
    low, high = 1, len(limits)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if estimate(limits[:middle], 1) <= cpu_seconds else (low, middle - 1)
    notice = (
        f"{asked}, so only the first {low:,} of {len(limits):,} {unit}s were translated, with greedy search. "
        f"Split the rest into smaller requests."
    )
    return WorkThatFits(1, low, notice)


def fit_budget(
    plan: DecodingPlan, cpu_seconds: float, cost: StepCost, unit: str = "sentence"
) -> tuple[DecodingPlan, float]:
    """`plan`, or once the plan of less work that fits `cpu_seconds` (`work_that_fits`, in the plan's batches), and
    the estimate of what it costs."""
    batch_size = plan.settings.batch_size
    fits = work_that_fits(list(plan.limits), plan.num_beams, cpu_seconds, unit, batch_size=batch_size, cost=cost)
    if fits.notice:
        plan = plan.with_less_work(fits.num_beams, fits.sentences, fits.notice)
    return plan, decoding_seconds(list(plan.limits), fits.num_beams, batch_size, cost)


__all__ = ["StepCost", "WorkThatFits", "decoding_seconds", "fit_budget", "least_seconds", "work_that_fits"]
