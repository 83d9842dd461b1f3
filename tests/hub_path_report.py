"""What a Hub user gets from a model folder, as one JSON line: run by any Python that has torch and transformers.

    python tests/hub_path_report.py FOLDER

Loads the folder with `trust_remote_code=True` (its own code, nothing of this project), then generates with the
folder's defaults (beam search), greedily, with a static cache (greedy and beam) and runs a training forward with
labels. tests/test_transformers_releases.py runs it under the lowest transformers release the project declares and
under the installed one, and compares the two reports. It imports only torch and transformers, from the standard
library json and sys, so that it runs in a virtual environment that has nothing else.
"""

import json
import sys

import torch
import transformers
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

SOURCES = [
    "Two dogs are playing in the snow.",
    "A man in a red jacket reads a newspaper on a bench.",
    "A little girl climbs into a wooden playhouse.",
    "People are walking down a busy city street at night while a musician plays the guitar for them.",
]
TARGETS = ["Zwei Hunde spielen im Schnee.", "Ein Mann in einer roten Jacke liest auf einer Bank Zeitung."]


def translations(ids: torch.Tensor, eos_token_id: int) -> list[list[int]]:
    """Each row up to its first end token: what a user decodes. Releases pad the rest differently (a static cache
    fills its whole length on some), so the reports compare translations, not padding."""
    rows = []
    for row in ids.tolist():
        rows.append(row[: row.index(eos_token_id, 1) + 1] if eos_token_id in row[1:] else row)
    return rows


def report(folder: str) -> dict:
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    batch = tokenizer(SOURCES, padding=True, return_tensors="pt")
    result = {
        "transformers": transformers.__version__,
        "model_class": f"{type(model).__module__.split('.')[0]}...{type(model).__name__}",
    }
    eos = model.generation_config.eos_token_id
    with torch.inference_mode():
        result["beam"] = translations(model.generate(**batch), eos)  # the folder's defaults: beam 4, its length bound
        result["greedy"] = translations(model.generate(**batch, num_beams=1), eos)
        result["static_greedy"] = translations(model.generate(**batch, num_beams=1, cache_implementation="static"), eos)
        result["static_beam"] = translations(model.generate(**batch, cache_implementation="static"), eos)
        result["one_by_one"] = [
            translations(model.generate(**tokenizer([source], return_tensors="pt")), eos)[0] for source in SOURCES[:2]
        ]
    training = tokenizer(SOURCES[:2], text_target=TARGETS, padding=True, return_tensors="pt")
    training["labels"] = training["labels"].masked_fill(training["labels"] == tokenizer.pad_token_id, -100)
    model.train()
    torch.manual_seed(0)
    model(**training).loss.backward()
    model.eval()
    with torch.no_grad():
        result["training_loss_eval_mode"] = round(float(model(**training).loss), 4)
    result["training_gradient_finite"] = bool(torch.isfinite(model.get_input_embeddings().weight.grad).all())
    return result


if __name__ == "__main__":
    print(json.dumps(report(sys.argv[1])))
