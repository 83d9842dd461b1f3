"""The committed default model: loads like a Hub download and translates Multi30k test sentences above a BLEU floor."""

import logging
import math

import pytest
import torch
from conftest import DATA_DIR, ROOT
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from transformer_en_de.evaluation import corpus_scores, read_eval_results

SHIPPED = ROOT / "models" / "transformer-en-de"
NUM_SENTENCES = 200
# The shipped model scores well above this on these sentences (see README, Results); a broken model, tokenizer or
# decoding scores near zero.
BLEU_FLOOR = 30.0


@pytest.fixture(scope="module")
def shipped():
    assert (SHIPPED / "model.safetensors").is_file(), f"the default model is missing at {SHIPPED}"
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(SHIPPED, trust_remote_code=True).eval()
    return model, tokenizer


def test_shipped_folder_is_small_and_complete():
    size = sum(path.stat().st_size for path in SHIPPED.rglob("*") if path.is_file())
    assert size < 60 * 1024**2
    for name in (
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "README.md",
        "eval_results.json",
        "modeling_transformer_mt.py",
        "configuration_transformer_mt.py",
    ):
        assert (SHIPPED / name).is_file(), name
    assert not list(SHIPPED.glob("checkpoint-*"))


def test_shipped_folder_runs_the_code_of_modeling():
    """The folder carries its own copy of modeling/ (the Hub loads that copy): today's code, byte for byte."""
    modeling_files = [path for path in (ROOT / "modeling").glob("*.py") if path.name != "__init__.py"]
    project_code = {path.name: path.read_bytes() for path in modeling_files}
    shipped_code = {path.name: path.read_bytes() for path in SHIPPED.glob("*.py")}
    assert sorted(shipped_code) == sorted(project_code), "its files are not modeling/'s: run `make shipped-code`"
    stale = [name for name in project_code if shipped_code[name] != project_code[name]]
    assert not stale, f"models/transformer-en-de has stale copies of {stale}: run `make shipped-code`"


def test_shipped_generation_config_bounds_each_sentence(shipped):
    model, tokenizer = shipped
    generation = model.generation_config
    # The search the folder saves is the one its record scored (eval_results.json, written by the scoring command).
    decoding = read_eval_results(SHIPPED)["decoding"]
    assert generation.num_beams == decoding["num_beams"] >= 2
    assert generation.length_penalty == decoding["length_penalty"]
    assert generation.max_new_tokens_ratio > 0 and generation.max_new_tokens_offset >= 0
    # An all-caps sentence made the model loop until the 255-token cap; now it stops at its own limit.
    batch = tokenizer(
        ["A MAN IN A BLUE SHIRT IS STANDING ON A LADDER CLEANING WINDOWS.", "A dog runs."],
        return_tensors="pt",
        padding=True,
    )
    with torch.inference_mode():
        output = model.generate(**batch, num_beams=1)
    lengths = batch["attention_mask"].sum(dim=-1).tolist()
    limit = math.ceil(generation.max_new_tokens_ratio * max(lengths)) + generation.max_new_tokens_offset
    assert output.shape[1] - 1 <= limit < generation.max_new_tokens


def test_shipped_model_answers_inputs_a_caller_gets_wrong(shipped):
    """num_beams below 1: a ValueError that names the range; an empty string: an empty translation; a padded batch
    without its attention_mask: transformers' warning (a short sentence beside a long one translates otherwise)."""
    model, tokenizer = shipped
    long = "Two men are working on a long road near the river and a small girl watches them."
    batch = tokenizer(["A dog.", long], return_tensors="pt", padding=True)
    with torch.inference_mode():
        with pytest.raises(ValueError, match=r"num_beams must be at least 1 \(1: greedy"):
            model.generate(**batch, num_beams=0)
        empty = model.generate(**tokenizer(["", "A dog."], return_tensors="pt", padding=True))
        assert tokenizer.batch_decode(empty, skip_special_tokens=True)[0] == ""
        messages = []
        handler = logging.Handler(logging.WARNING)
        handler.emit = lambda record: messages.append(record.getMessage())
        logging.Logger.warning_once.cache_clear()  # transformers warns once per process: this test's call warns again
        logging.getLogger("transformers").addHandler(handler)
        try:
            unmasked = model.generate(batch["input_ids"])
        finally:
            logging.getLogger("transformers").removeHandler(handler)
        masked = model.generate(**batch)
    assert any("attention_mask" in message for message in messages), messages
    assert not torch.equal(unmasked, masked)  # what the warning is for


@pytest.mark.slow
def test_shipped_model_bleu_on_test_2016_flickr(shipped):
    model, tokenizer = shipped
    sources = (DATA_DIR / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()[:NUM_SENTENCES]
    references = (DATA_DIR / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()[:NUM_SENTENCES]
    hypotheses = []
    with torch.inference_mode():
        for start in range(0, len(sources), 50):
            batch = tokenizer(sources[start : start + 50], return_tensors="pt", padding=True)
            ids = model.generate(**batch, num_beams=4, max_new_tokens=96)
            hypotheses += tokenizer.batch_decode(ids, skip_special_tokens=True)
    scores = corpus_scores(hypotheses, references)
    print(f"shipped model on the first {NUM_SENTENCES} test sentences: {scores}")
    assert scores["bleu"] >= BLEU_FLOOR, scores


@pytest.mark.slow
def test_shipped_model_reads_capitals_by_itself(shipped):
    """Through generate() alone (no casing step of the engine), text typed in capitals translates about as well as
    the same text as typed: the shipped model was trained with case augmentation (93% on 300 val sentences)."""
    model, tokenizer = shipped
    sources = (DATA_DIR / "val.en").read_text(encoding="utf-8").splitlines()[:100]
    references = [line.lower() for line in (DATA_DIR / "val.de").read_text(encoding="utf-8").splitlines()[:100]]

    def lowercased_bleu(texts):
        hypotheses = []
        with torch.inference_mode():
            for start in range(0, len(texts), 50):
                batch = tokenizer(texts[start : start + 50], return_tensors="pt", padding=True)
                hypotheses += tokenizer.batch_decode(model.generate(**batch), skip_special_tokens=True)
        return corpus_scores([text.lower() for text in hypotheses], references)["bleu"]

    as_typed, capitals = lowercased_bleu(sources), lowercased_bleu([text.upper() for text in sources])
    print(f"lowercased BLEU on the first 100 val sentences: {as_typed} as typed, {capitals} in capitals")
    assert as_typed >= BLEU_FLOOR and capitals >= 0.85 * as_typed
