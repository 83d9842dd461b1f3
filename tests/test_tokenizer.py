"""The joint byte-level BPE tokenizer: exact round trips, special ids, targets, clean saves, training inputs, CLI."""

import copy
import json
import pickle
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
    result = run_cli("--files", english, german, "--vocab_size", 320, "--bpe_min_frequency", 1, "--output_dir", output)
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


def saved_config(folder) -> dict:
    return json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))


def saved_backend_state(folder) -> tuple:
    saved = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    return saved["truncation"], saved["padding"]


CALL_STATE = {
    "is_local",
    "local_files_only",
    "max_length",
    "stride",
    "truncation_strategy",
    "pad_to_multiple_of",
    "pad_token_type_id",
}


def test_saving_writes_no_load_or_call_state(tmp_path):
    trained = train_tokenizer(texts=[text for pair in PAIRS for text in pair], vocab_size=300, min_frequency=1)
    trained(["A dog runs in the park."] * 2, max_length=5, truncation=True, padding="max_length")  # as training does
    trained.save_pretrained(tmp_path / "trained")
    assert CALL_STATE.isdisjoint(saved_config(tmp_path / "trained"))
    assert saved_backend_state(tmp_path / "trained") == (None, None)

    loaded = load_tokenizer(tmp_path / "trained")  # from_pretrained records is_local / local_files_only
    loaded(["Zwei Männer arbeiten."], max_length=7, truncation=True, padding=True)
    loaded.save_pretrained(tmp_path / "again")
    assert CALL_STATE.isdisjoint(saved_config(tmp_path / "again"))
    assert saved_backend_state(tmp_path / "again") == (None, None)
    assert saved_config(tmp_path / "again") == saved_config(tmp_path / "trained")
    # Calls after a save still truncate and pad as asked.
    assert len(loaded("word " * 50, max_length=7, truncation=True)["input_ids"]) == 7


def test_a_polluted_saved_folder_is_cleaned_by_loading_and_saving(tiny_tokenizer, tmp_path):
    """The shipped folder's state before the fix: load-time flags and a training-time max_length in both files."""
    polluted = tmp_path / "polluted"
    tiny_tokenizer.save_pretrained(polluted)
    config = saved_config(polluted) | {
        "is_local": True,
        "local_files_only": True,
        "max_length": 128,
        "stride": 0,
        "truncation_side": "right",
        "truncation_strategy": "longest_first",
    }
    (polluted / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    backend = json.loads((polluted / "tokenizer.json").read_text(encoding="utf-8"))
    backend["truncation"] = {"direction": "Right", "max_length": 128, "strategy": "LongestFirst", "stride": 0}
    (polluted / "tokenizer.json").write_text(json.dumps(backend), encoding="utf-8")

    load_tokenizer(polluted).save_pretrained(tmp_path / "clean")

    cleaned = saved_config(tmp_path / "clean")
    assert CALL_STATE.isdisjoint(cleaned) and "truncation_side" not in cleaned
    assert saved_backend_state(tmp_path / "clean") == (None, None)
    reloaded = AutoTokenizer.from_pretrained(tmp_path / "clean")
    for text in ROUND_TRIP:
        assert reloaded(text)["input_ids"] == tiny_tokenizer(text)["input_ids"]
    long_text = "word " * 200  # no hidden 128-token cut left in tokenizer.json
    assert len(reloaded(long_text)["input_ids"]) == len(tiny_tokenizer(long_text)["input_ids"]) > 128


def test_copies_of_a_tokenizer_still_save_cleanly(tiny_tokenizer, tmp_path):
    copied = copy.deepcopy(load_tokenizer_from(tiny_tokenizer, tmp_path / "source"))
    copied("word " * 100, max_length=9, truncation=True)
    copied.save_pretrained(tmp_path / "copy")
    assert CALL_STATE.isdisjoint(saved_config(tmp_path / "copy"))
    unpickled = pickle.loads(pickle.dumps(copied))  # a plain pickle copy (e.g. a DataLoader worker) still works
    assert unpickled("Zwei Männer arbeiten.")["input_ids"] == tiny_tokenizer("Zwei Männer arbeiten.")["input_ids"]


def load_tokenizer_from(tokenizer, folder):
    tokenizer.save_pretrained(folder)
    return load_tokenizer(folder)


def test_loading_from_a_model_folder_asks_nothing(tiny_model_dir, tiny_tokenizer, capfd):
    """A model folder's config.json names custom code; the tokenizer needs none of it and must not prompt for it."""
    loaded = load_tokenizer(tiny_model_dir)
    assert loaded(PAIRS[1][1])["input_ids"] == tiny_tokenizer(PAIRS[1][1])["input_ids"]
    captured = capfd.readouterr()
    assert "custom code" not in captured.out + captured.err


def test_the_shipped_tokenizer_files_hold_no_call_state():
    shipped = ROOT / "models" / "transformer-en-de"
    assert CALL_STATE.isdisjoint(saved_config(shipped))
    assert saved_backend_state(shipped) == (None, None)
