"""The shape benchmark: outputs held to given lengths through the model's own beam search, and the whole script."""

import subprocess
import sys

import pytest
import torch
from conftest import ROOT
from transformers import LogitsProcessorList

from benchmarks.shape_speed import HeldLength, load, new_tokens_of, parse_shape

SHIPPED = ROOT / "models" / "transformer-en-de"
SOURCES = ["A dog runs in the park.", "Two men are working.", "A woman reads a book.", "The cat sleeps on the sofa."]


def test_every_beam_of_every_sentence_ends_where_it_is_held(tiny_model, tiny_tokenizer):
    # Lengths that differ, so that the beam search lets sentences leave the batch at different steps (the processor is
    # narrowed to the ones left); 1 is an output of </s> alone.
    batch = tiny_tokenizer(SOURCES, padding=True, return_tensors="pt")
    for held in ([3, 7, 1, 12], [12, 12, 12, 12], [5, 2, 9, 4]):
        processor = HeldLength(torch.tensor(held), tiny_model.generation_config.eos_token_id)
        with torch.inference_mode():
            output = tiny_model.generate(**batch, logits_processor=LogitsProcessorList([processor]))
        assert new_tokens_of(output, tiny_model.generation_config.eos_token_id) == held
    with torch.inference_mode():
        free = tiny_model.generate(**batch)
    assert new_tokens_of(free, tiny_model.generation_config.eos_token_id) != [3, 7, 1, 12]  # the hold did it


def test_shapes_are_read_or_refused_in_one_line():
    assert parse_shape("12x2") == {"encoder_layers": 12, "decoder_layers": 2}
    assert parse_shape("6x1:d_ff=2048,num_attention_heads=8") == {
        "encoder_layers": 6,
        "decoder_layers": 1,
        "d_ff": 2048,
        "num_attention_heads": 8,
    }
    for bad in ("6y1", "6x", "6x1:d_ff", "x"):
        with pytest.raises(ValueError, match="a shape is ENCxDEC"):
            parse_shape(bad)


@pytest.mark.skipif(not (SHIPPED / "model.safetensors").is_file(), reason="the shipped model is not in this checkout")
def test_a_shape_can_set_its_decoding_as_well_as_its_layers():
    shipped = load("shipped shape", str(SHIPPED))
    fewer_beams = load("6x2:num_beams=2,length_penalty=1.0", str(SHIPPED))
    assert (fewer_beams.config.encoder_layers, fewer_beams.config.decoder_layers) == (6, 2)
    assert (fewer_beams.generation_config.num_beams, fewer_beams.generation_config.length_penalty) == (2, 1.0)
    # Everything else is the shipped model's: its decoding's other settings and the config's other fields.
    assert shipped.generation_config.num_beams == 4
    assert fewer_beams.generation_config.max_new_tokens_ratio == shipped.generation_config.max_new_tokens_ratio
    assert fewer_beams.config.d_model == shipped.config.d_model
    with pytest.raises(SystemExit, match="neither the config nor the generation config has a field 'beams'"):
        load("6x1:beams=2", str(SHIPPED))


@pytest.mark.skipif(not (SHIPPED / "model.safetensors").is_file(), reason="the shipped model is not in this checkout")
def test_the_script_times_a_shape_against_the_shipped_model_at_its_lengths():
    command = [
        sys.executable,
        "-m",
        "benchmarks.shape_speed",
        "1x1",
        "--candidate",
        str(SHIPPED),
        "--sentences",
        "32",
        "--batch1",
        "2",
        "--rounds",
        "1",
    ]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    table = [line.strip("| ").split(" | ") for line in done.stdout.splitlines() if line.startswith("| ")]
    assert table[0] == ["model", "weights", "parameters", "batch 32", "ratio", "batch 1", "ratio"]
    rows = {row[0]: row for row in table[1:]}
    reference, shipped_shape = f"{SHIPPED} (its weights)", "shipped shape, random weights"
    assert set(rows) == {reference, shipped_shape, "1x1", str(SHIPPED)}
    # Each is compared with its own kind: the trained ones with the shipped weights, the random ones with the shipped
    # shape's random weights.
    assert [rows[name][1] for name in (reference, shipped_shape, "1x1", str(SHIPPED))] == [
        "trained",
        "random",
        "random",
        "trained",
    ]
    assert rows[reference][4] == rows[shipped_shape][4] == rows[reference][6] == rows[shipped_shape][6] == "1.00x"
    assert float(rows["1x1"][3]) > 0 and rows["1x1"][4].endswith("x")
    # A 1+1 model has fewer parameters than the shipped 3+3; the same folder as a candidate, or its shape, as many.
    parameters = {name: float(row[2].rstrip("M")) for name, row in rows.items()}
    assert parameters["1x1"] < parameters[str(SHIPPED)] == parameters[reference] == parameters[shipped_shape]

    refused = subprocess.run(
        [sys.executable, "-m", "benchmarks.shape_speed", "6y1"], capture_output=True, text=True, cwd=ROOT, timeout=60
    )
    assert refused.returncode != 0 and "a shape is ENCxDEC" in refused.stderr


@pytest.mark.skipif(not (SHIPPED / "model.safetensors").is_file(), reason="the shipped model is not in this checkout")
def test_a_candidate_of_other_tokens_is_refused_before_any_timing(tiny_model_dir):
    command = [sys.executable, "-m", "benchmarks.shape_speed", "6x1", "--candidate", str(tiny_model_dir)]
    refused = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert refused.returncode != 0 and "its tokenizer is not the reference's" in refused.stderr
