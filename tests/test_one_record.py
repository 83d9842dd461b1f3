"""One record: the shipped folder's eval_results.json, written by the command that scored it, is the source of every
figure shown for the model (README, its card, the space card, the Corpus tab, the arena's BLEU column), and each score
names the decoding it was made with. These tests fail when a figure drifts from the record, and show every label
following a change of the folder's saved search."""

import json
import re
import shutil

import pytest
from conftest import ROOT
from transformers import AutoConfig

from transformer_en_de.app.corpus_report import bleu_by_model, corpus_table
from transformer_en_de.evaluation import decoding_label, read_eval_results, write_eval_results
from transformer_en_de.publishing.model_card import write_model_card

SHIPPED = ROOT / "models" / "transformer-en-de"
CARD_COMMAND = "python -m transformer_en_de.publishing.model_card models/transformer-en-de"


def folder_config(folder):
    return AutoConfig.from_pretrained(folder, trust_remote_code=True, local_files_only=True)


@pytest.fixture(scope="module")
def record():
    return read_eval_results(SHIPPED)


def test_the_folder_saves_the_search_its_record_scored(record):
    saved = json.loads((SHIPPED / "generation_config.json").read_text())
    for name in ("num_beams", "length_penalty", "max_new_tokens_ratio", "max_new_tokens_offset"):
        assert saved[name] == record["decoding"][name], name


def test_readme_figures_are_the_records(record):
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    test, val = record["scores"]["test_2016_flickr"], record["scores"]["val"]
    row = re.search(r"^\| \*\*ours, `models/transformer-en-de`\*\* \| (.*) \|$", readme, re.M)
    assert row, "README's results table has no row for the shipped model"
    cells = [cell.strip(" *") for cell in row.group(1).split("|")]
    assert cells[0] == f"{test['bleu']:.2f} / {test['chrf']:.2f}"
    assert cells[1] == f"{val['bleu']:.2f} / {val['chrf']:.2f}"
    assert cells[2] == f"{record['num_parameters'] / 1e6:.1f}M"
    assert f"The shipped model ({test['bleu']:.2f} on test_2016_flickr)" in readme
    assert f"`models/transformer-en-de` ({record['num_parameters'] / 1e6:.1f}M parameters" in readme
    decoding = record["decoding"]
    said = re.findall(r"beam (\d+)(?:,| and) (?:the paper's )?length penalty ([\d.]+)", readme)
    assert said, "README does not say how the shipped model decodes"
    assert all(
        (int(beams), float(penalty)) == (decoding["num_beams"], decoding["length_penalty"]) for beams, penalty in said
    ), said


def test_space_card_names_the_records_size(record):
    space_card = (ROOT / "space_card.md").read_text(encoding="utf-8")
    assert f"{record['num_parameters'] / 1e6:.1f}M parameters" in space_card


def test_the_model_card_is_written_from_the_record(tmp_path):
    copy = tmp_path / SHIPPED.name
    shutil.copytree(SHIPPED, copy, ignore=shutil.ignore_patterns("model.safetensors"))
    write_model_card(copy, config=folder_config(copy))
    assert (copy / "README.md").read_text() == (SHIPPED / "README.md").read_text(), (
        f"models/transformer-en-de/README.md is not what its eval_results.json says: run `{CARD_COMMAND}`"
    )


def test_every_label_follows_the_folders_saved_beams(tmp_path, record):
    """The scoring command writes the decoding beside the scores; change the folder's beams and record it, and the
    card, the Corpus tab and the arena's BLEU say the new width; change only the folder, and the tab says its scores
    were made with the other."""
    copy = tmp_path / SHIPPED.name
    shutil.copytree(SHIPPED, copy, ignore=shutil.ignore_patterns("model.safetensors"))
    saved = json.loads((copy / "generation_config.json").read_text())
    saved["num_beams"] = 2
    (copy / "generation_config.json").write_text(json.dumps(saved))

    summary, rows = corpus_table(copy, tmp_path / "no-comparison.json")
    assert "now decodes with beam 2, length penalty 0.6, not as its scores were made" in summary
    assert all(row[2] == decoding_label(record["decoding"]) == "beam 4, length penalty 0.6" for row in rows)

    write_eval_results(
        copy,
        num_parameters=record["num_parameters"],
        decoding={**record["decoding"], "num_beams": 2},
        scores=record["scores"],
        command=record["command"],
        training=record["training"],
    )
    summary, rows = corpus_table(copy, tmp_path / "no-comparison.json")
    assert "now decodes" not in summary
    assert {row[2] for row in rows} == {"beam 2, length penalty 0.6"}
    assert {score for score, _ in bleu_by_model(rows).values()} == {record["scores"]["test_2016_flickr"]["bleu"]}
    assert {label for _, label in bleu_by_model(rows).values()} == {"beam 2, length penalty 0.6"}
    card = write_model_card(copy, config=folder_config(copy))
    assert "own decoding (beam 2,\nlength penalty 0.6" in card.content
