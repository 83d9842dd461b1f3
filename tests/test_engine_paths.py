"""One engine behind every path: the app's panels, compare.py, train.py's and average_checkpoints.py's scoring and the
corpus translator give identical translations for the same sentences and settings, for our model and MarianMT."""

import csv

import pytest
import torch
from conftest import DATA_DIR, tiny_config
from tiny_marian import build_tiny_marian

from modeling import TransformerMTForConditionalGeneration
from transformer_en_de.app.files import translate_file
from transformer_en_de.app.serving.scheduler import FairScheduler
from transformer_en_de.app.translation import RequestContext, run_system
from transformer_en_de.app.translators import load_translator
from transformer_en_de.comparison import fair_settings, score_system
from transformer_en_de.data import normalise_text
from transformer_en_de.decoding.engine import DecodingSettings, plan_decoding, translate
from transformer_en_de.decoding.loading import load_model
from transformer_en_de.evaluation import score_model
from translate_corpus import translate_corpus

NUM_LINES = 10
NUM_BEAMS, MAX_NEW_TOKENS = 2, 12
# What every path can be told: the beams and the cap (the bound per sentence is the engine's default, 1.5 x + 10).
SETTINGS = DecodingSettings(num_beams=NUM_BEAMS, max_new_tokens=MAX_NEW_TOKENS)


@pytest.fixture(scope="module")
def lines():
    sources = (DATA_DIR / "val.en").read_text(encoding="utf-8").splitlines()[:NUM_LINES]
    references = (DATA_DIR / "val.de").read_text(encoding="utf-8").splitlines()[:NUM_LINES]
    return sources, references


@pytest.fixture(scope="module", params=["ours", "marian"])
def model_dir(request, tiny_tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp(request.param)
    if request.param == "marian":
        return build_tiny_marian(folder)
    torch.manual_seed(0)
    # Wide random weights: unlike the 0.02 init, the output changes with the input, so a mix-up would show.
    TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5)).save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


def test_every_path_gives_the_engines_translations(model_dir, lines, tmp_path):
    sources, references = lines
    model, tokenizer = load_model(str(model_dir))
    expected = translate(model, tokenizer, sources, SETTINGS).texts
    assert len(set(expected)) > 2  # different sentences get different outputs, so a mix-up would show

    paths = {}
    row = score_system(
        str(model_dir), sources, references, fair_settings(num_beams=NUM_BEAMS, max_new_tokens=MAX_NEW_TOKENS)
    )
    paths["compare.py"] = row["translations"]
    paths["train.py / average_checkpoints.py"] = score_model(model, tokenizer, sources, references, SETTINGS)[0]

    translator = load_translator(str(model_dir), "model")
    plan = plan_decoding(translator.model, translator.tokenizer, sources, SETTINGS, backend=translator.backend)
    paths["app, text panels"] = run_system(translator, plan, FairScheduler()).run.texts
    source_file = tmp_path / "sources.en"
    source_file.write_text("\n".join(sources) + "\n", encoding="utf-8")
    result = translate_file(
        str(source_file),
        None,
        "beam search",
        NUM_BEAMS,
        MAX_NEW_TOKENS,
        context=RequestContext(translator),
        output_dir=tmp_path / "app",
    )
    with open(result.path, encoding="utf-8", newline="") as handle:
        paths["app, file panel"] = [row[-1] for row in csv.reader(handle, delimiter="\t")][1:]

    translate_corpus(str(model_dir), source_file, tmp_path / "corpus" / "val", "en", "de", SETTINGS)
    corpus = (tmp_path / "corpus" / "val.de").read_text(encoding="utf-8").splitlines()
    # The corpus file holds one translation per line: whitespace (line breaks included) is folded to single spaces.
    assert corpus == [normalise_text(text) for text in expected], "translate_corpus.py"

    for name, translations in paths.items():
        assert translations == expected, name
