"""The decoding budget: the cost of a decoder step is measured for the model the app loads, on this machine, and a
request's plan follows that cost; the plan carries one length bound, and budget and plan import in one direction."""

import ast

import pytest
import torch
from conftest import ROOT, tiny_config

from modeling import TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import set_translation_defaults
from transformer_en_de.app import translation, translators
from transformer_en_de.app.serving.limits import Budget
from transformer_en_de.decoding.budget import decoding_seconds, least_seconds
from transformer_en_de.decoding.plan import DecodingSettings, LengthBound, plan_decoding

SENTENCES = [
    "A dog runs in the park.",
    "Two men play football on the grass near the lake.",
    "A woman in a red coat reads a book to three children.",
]
ASKED = DecodingSettings(num_beams=4, batch_size=8)
# Shapes far apart: a calibration under the CI's load tells them apart by a wide margin.
SHAPES = {
    "small": dict(d_model=32, encoder_layers=1, decoder_layers=1, num_attention_heads=4, d_ff=64),
    "large": dict(d_model=512, encoder_layers=6, decoder_layers=6, num_attention_heads=8, d_ff=2048),
}


@pytest.fixture(scope="module")
def loaded(tiny_tokenizer, tmp_path_factory):
    """A small and a large model of ours, saved and loaded as the app loads them (`load_translator`)."""
    systems = {}
    for name, shape in SHAPES.items():
        torch.manual_seed(0)
        model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, **shape)).eval()
        set_translation_defaults(model.generation_config, model.config)
        folder = tmp_path_factory.mktemp(name)
        model.save_pretrained(folder)
        tiny_tokenizer.save_pretrained(folder)
        systems[name] = translators.load_translator(str(folder), name)
    return systems


def test_two_models_of_different_size_get_the_step_cost_measured_for_each(loaded):
    small, large = loaded["small"].step_cost, loaded["large"].step_cost

    assert 0 < small.seconds(1) < large.seconds(1)
    assert large.seconds(32) > 3 * small.seconds(32)
    assert small.per_row >= 0 and large.per_row > 0


def test_a_requests_fewer_beams_follow_the_measured_cost(loaded):
    small, large = loaded["small"], loaded["large"]
    limits = plan_decoding(small.model, small.tokenizer, SENTENCES, ASKED).limits
    assert plan_decoding(large.model, large.tokenizer, SENTENCES, ASKED).limits == limits  # the same work to do
    needs = {name: decoding_seconds(list(limits), 4, 8, system.step_cost) for name, system in loaded.items()}
    budget = Budget(cpu_seconds=needs["small"], seconds=60)  # the small model's request at 4 beams, just

    plans = {
        name: translation.RequestPlan(translation.RequestContext(system), ASKED, budget).fit(SENTENCES)
        for name, system in loaded.items()
    }

    # The small model's request fits as asked; the same request to the large one, at its own cost, does not: it gets
    # fewer beams (or sentences), and the notice gives the large model's estimate.
    plan, seconds = plans["small"].plan, plans["small"].seconds
    assert (plan.num_beams, len(plan), plan.notices, seconds) == (4, 3, (), needs["small"])
    plan, seconds = plans["large"].plan, plans["large"].seconds
    assert plan.num_beams < 4 and len(plan) <= 3
    assert seconds == decoding_seconds(list(limits[: len(plan)]), plan.num_beams, 8, loaded["large"].step_cost)
    asked = f"This request needs about {needs['large']:.1f} s of CPU time (3 sentences x 4 beams); each request here"
    assert len(plan.notices) == 1 and plan.notices[0].startswith(f"{asked} gets {budget.cpu_seconds:g} s, so ")


def test_the_plan_carries_one_length_bound_that_admission_and_the_engine_read(loaded):
    small = loaded["small"]
    plan = plan_decoding(small.model, small.tokenizer, SENTENCES, ASKED)

    assert isinstance(plan.bound, LengthBound) and plan.bound == LengthBound.for_model(small.model, ASKED)
    assert plan.limits == plan.bound.limits([len(ids) for ids in plan.source_ids])
    # The generation config holds the search, not the bound: generate() finds none of its own to derive.
    assert not hasattr(plan.generation_config, "max_new_tokens_ratio")
    assert small.model.generation_config.max_new_tokens_ratio == 1.5  # the model's saved bound is left as it is
    # Admission's lower bound is the same bound at its shortest source.
    cost = small.step_cost
    assert least_seconds(small.model, 2, ASKED, cost) == decoding_seconds([plan.bound.limits([1])[0]] * 2, 1, 8, cost)


def test_plan_imports_nothing_of_the_budget():
    def imported(name: str) -> set[str]:
        tree = ast.parse((ROOT / "transformer_en_de" / "decoding" / f"{name}.py").read_text(encoding="utf-8"))
        return {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}

    assert not any("budget" in module for module in imported("plan"))
    assert "plan" in imported("budget")
