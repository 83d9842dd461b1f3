"""The joint byte-level BPE tokenizer: exact round trips, special ids, targets, saving, training inputs, the CLI."""

import subprocess
import sys

import pytest
from conftest import PAIRS, ROOT
from transformers import AutoTokenizer

from modeling import TransformerMTConfig
from tokenizer import SPECIAL_TOKENS, load_tokenizer, train_tokenizer
from tokenizer.__main__ import main as cli_main

ROUND_TRIP = [
    "A dog runs in the park.",
    "Zwei Männer arbeiten.",
    "Die Straße ist „schön“, sagt Jürgen – nicht wahr?",
    "ÄÖÜ äöü ß ẞ: Größe, Übermaß, Öl.",
    "Er kaufte 3 Äpfel für 12,50 € am 24.12.2023.",
    "Two  spaces,   three spaces and a tab\there.",
    " leading and trailing spaces ",
    "Spaces before punctuation stay : yes , no ! really ? it 's , do n't .",
    "Emoji 🐕🚲 and CJK 漢字かな한국어 never seen in training.",
    "Zero-width\u200bjoiner, accents: café naïve Ångström, math ∑ √2 ≈ 1.414.",
    "",
]


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_decode_of_encode_is_exactly_the_input(tiny_tokenizer, text):
    ids = tiny_tokenizer(text)["input_ids"]
    assert tiny_tokenizer.unk_token_id not in ids  # bytes cover everything: nothing is unknown
    assert tiny_tokenizer.decode(ids, skip_special_tokens=True) == text


def test_special_token_ids_are_the_config_defaults(tiny_tokenizer):
    defaults = TransformerMTConfig()
    assert tiny_tokenizer.pad_token_id == defaults.pad_token_id == 0
    assert tiny_tokenizer.bos_token_id == defaults.bos_token_id == defaults.decoder_start_token_id == 1
    assert tiny_tokenizer.eos_token_id == defaults.eos_token_id == 2
    assert tiny_tokenizer.unk_token_id == 3
    assert [tiny_tokenizer.convert_tokens_to_ids(token) for token in SPECIAL_TOKENS.values()] == [0, 1, 2, 3]


def test_sources_and_targets_end_in_eos(tiny_tokenizer):
    sources = [source for source, _ in PAIRS]
    targets = [target for _, target in PAIRS]
    batch = tiny_tokenizer(sources, text_target=targets)
    eos = tiny_tokenizer.eos_token_id
    for source_ids, label_ids, target in zip(batch["input_ids"], batch["labels"], targets, strict=True):
        assert source_ids[-1] == eos and source_ids.count(eos) == 1
        assert label_ids[-1] == eos and label_ids.count(eos) == 1
        assert tiny_tokenizer.bos_token_id not in label_ids  # the model prepends the start token itself
        assert tiny_tokenizer.decode(label_ids, skip_special_tokens=True) == target


def test_truncation_keeps_the_model_max_length_and_the_eos(tiny_tokenizer):
    ids = tiny_tokenizer(" ".join(["word"] * 200), truncation=True)["input_ids"]
    assert len(ids) == tiny_tokenizer.model_max_length == 64
    assert ids[-1] == tiny_tokenizer.eos_token_id


def test_save_and_auto_tokenizer_round_trip_gives_identical_ids(tiny_tokenizer, tmp_path):
    tiny_tokenizer.save_pretrained(tmp_path)
    for loaded in (AutoTokenizer.from_pretrained(tmp_path), load_tokenizer(tmp_path)):
        assert len(loaded) == len(tiny_tokenizer)
        assert loaded.model_max_length == tiny_tokenizer.model_max_length
        assert (loaded.pad_token_id, loaded.bos_token_id, loaded.eos_token_id) == (0, 1, 2)
        for text in ROUND_TRIP:
            assert loaded(text)["input_ids"] == tiny_tokenizer(text)["input_ids"]
            assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text
        pair = loaded(PAIRS[0][0], text_target=PAIRS[0][1])
        assert pair["labels"] == tiny_tokenizer(text_target=PAIRS[0][1])["input_ids"]


def write_corpus(folder):
    english, german = folder / "train.en", folder / "train.de"
    english.write_text("".join(f"{source}\n" for source, _ in PAIRS), encoding="utf-8")
    german.write_text("".join(f"{target}\n" for _, target in PAIRS), encoding="utf-8")
    return english, german


def test_training_from_files_equals_training_from_the_same_lines(tmp_path):
    english, german = write_corpus(tmp_path)
    lines = [source for source, _ in PAIRS] + [target for _, target in PAIRS]
    from_files = train_tokenizer(files=[english, german], vocab_size=320, min_frequency=1)
    from_lines = train_tokenizer(texts=iter(lines), vocab_size=320, min_frequency=1)
    assert from_files.get_vocab() == from_lines.get_vocab()
    assert len(from_files) > 260  # merges were learned beyond bytes + specials
    for text in lines + ROUND_TRIP:
        assert from_files(text)["input_ids"] == from_lines(text)["input_ids"]


def run_cli(*arguments):
    """`python -m tokenizer ...`, run from the repository root as a user would."""
    return subprocess.run(
        [sys.executable, "-m", "tokenizer", *map(str, arguments)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_cli_writes_a_loadable_tokenizer_folder(tmp_path):
    english, german = write_corpus(tmp_path)
    output = tmp_path / "tokenizer-out"
    result = run_cli("--files", english, german, "--vocab-size", 320, "--min-frequency", 1, "--output-dir", output)
    assert result.returncode == 0, result.stderr
    assert str(output) in result.stdout
    loaded = load_tokenizer(output)
    expected = train_tokenizer(files=[english, german], vocab_size=320, min_frequency=1)
    assert loaded.get_vocab() == expected.get_vocab()
    text = "Die Straße ist „schön“ 🐕"
    assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text


def test_cli_reports_a_missing_file_or_a_too_small_vocabulary_and_writes_nothing(tmp_path, capsys):
    english, _ = write_corpus(tmp_path)
    output = tmp_path / "tokenizer-out"

    assert cli_main(["--files", str(english), str(tmp_path / "missing.de"), "--output-dir", str(output)]) == 2
    message = capsys.readouterr().err
    assert "not found" in message and "missing.de" in message

    assert cli_main(["--files", str(english), "--vocab-size", "50", "--output-dir", str(output)]) == 2
    assert "vocab_size must be at least" in capsys.readouterr().err
    assert not output.exists()


def test_bad_training_input_raises_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="not found"):
        train_tokenizer(files=[tmp_path / "missing.en"])
    with pytest.raises(ValueError, match="vocab_size must be at least 260"):
        train_tokenizer(texts=["ein Satz"], vocab_size=100)
    with pytest.raises(ValueError, match="needs texts"):
        train_tokenizer()
    with pytest.raises(FileNotFoundError, match="No tokenizer at"):
        load_tokenizer(tmp_path)
