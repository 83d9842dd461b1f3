"""transformer_en_de/data.py: corpus specs, weighted mixing, case variants (on real Multi30k lines)."""

import random

import pytest
from conftest import DATA_DIR

from transformer_en_de import data


def real(lang: str, count: int) -> list[str]:
    return (DATA_DIR / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:count]


@pytest.mark.parametrize(
    ("spec", "prefix", "weight", "tagged"),
    [
        ("bt/task2", "bt/task2", 1.0, False),
        ("bt/task2:0.5", "bt/task2", 0.5, False),
        ("bt/task2:tagged", "bt/task2", 1.0, True),
        ("bt/task2:2:tagged", "bt/task2", 2.0, True),
        ("bt/task2:tagged:3", "bt/task2", 3.0, True),
        ("C:/data/bt:0.25", "C:/data/bt", 0.25, False),  # options are read from the right
    ],
)
def test_parse_corpus(spec, prefix, weight, tagged):
    corpus = data.parse_corpus(spec)
    assert (corpus.prefix, corpus.weight, corpus.tagged) == (prefix, weight, tagged)


@pytest.mark.parametrize("spec", [":2", "bt:0", "bt:-1"])
def test_bad_corpus_specs_say_the_format(spec):
    with pytest.raises(data.DataError, match="extra_train"):
        data.parse_corpus(spec)


@pytest.mark.parametrize(("weight", "expected"), [(1.0, 100), (2.0, 200), (0.5, 50), (1.25, 125), (0.01, 1)])
def test_upsample_counts(weight, expected):
    indices = data.upsample(100, weight, random.Random(0))
    assert len(indices) == expected
    whole = int(weight)
    assert all(indices.count(index) in (whole, whole + 1) for index in range(100))  # spread evenly


def test_mix_keeps_pairs_together_and_marks_tagged_corpora():
    real_pairs = data.Corpus("real", 1.0, False, real("en", 30), real("de", 30))
    synthetic = data.Corpus("bt", 0.5, True, real("en", 60)[30:], real("de", 60)[30:])
    sources, targets, tagged = data.mix_corpora([real_pairs, synthetic], seed=0)
    assert len(sources) == 45 and tagged.count(True) == 15
    pairs = dict(zip(real("en", 60), real("de", 60), strict=True))
    assert all(pairs[source] == target for source, target in zip(sources, targets, strict=True))


def test_case_variants_are_seeded_and_change_the_source_only():
    sources, targets = real("en", 100), real("de", 100)
    variants = data.case_variants(sources, targets, 0.2, seed=1)
    assert variants == data.case_variants(sources, targets, 0.2, seed=1)
    assert len(variants) == 20 and len({index for index, _, _ in variants}) == 20
    for index, source, target in variants:
        assert source in (sources[index].upper(), sources[index].lower())
        assert target == targets[index]  # German stays as it is written
    assert {source.isupper() for _, source, _ in variants} == {True, False}  # both kinds


def test_case_fraction_out_of_range_is_an_error():
    with pytest.raises(data.DataError, match="case_augmentation"):
        data.case_variants(["A."], ["B."], 1.5, seed=0)


# ------------------------------------------------------------------------------------------- datasets (Hub or local)


def test_rows_in_both_shapes_give_the_pair():
    assert data.row_pair({"translation": {"de": "Ein Hund.", "en": "A dog."}}, "en", "de") == ("A dog.", "Ein Hund.")
    assert data.row_pair({"en": "A dog.", "de": "Ein Hund."}, "de", "en") == ("Ein Hund.", "A dog.")
    with pytest.raises(data.DataError, match="no 'en'/'fr' text .*columns: translation"):
        data.row_pair({"translation": {"de": "Ein Hund.", "en": "A dog."}}, "en", "fr")


def test_clean_batch_normalises_and_drops_like_clean_pairs():
    rows = {
        "translation": [
            {"en": "A&amp;B  dog.", "de": "Ein Hund."},
            {"en": "@@", "de": "Leer."},
            {"en": "Two.", "de": ""},
        ]
    }
    assert data.clean_batch(rows, "en", "de") == {"source": ["A&B dog."], "target": ["Ein Hund."]}


def test_saved_dataset_split_is_read_in_memory_or_streamed(tmp_path):
    from datasets import Dataset, DatasetDict

    DatasetDict({"train": Dataset.from_dict({"en": real("en", 5), "de": real("de", 5)})}).save_to_disk(tmp_path)
    in_memory = data.load_translation_split(str(tmp_path), None, "train")
    streamed = data.load_translation_split(str(tmp_path), None, "train", streaming=True)
    assert (
        data.dataset_pairs(in_memory, "en", "de")
        == data.dataset_pairs(streamed, "en", "de")
        == (real("en", 5), real("de", 5))
    )
    with pytest.raises(data.DataError, match="no split 'validation' .*train"):
        data.load_translation_split(str(tmp_path), None, "validation")


def test_unreachable_hub_is_tried_in_the_cache_only_and_named(tmp_path, monkeypatch):
    import time

    import datasets

    # An empty cache: offline, datasets would take any cached dataset named wmt14 (a local folder's too).
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path)
    started = time.time()
    with pytest.raises(data.DataError, match="wmt14: the Hugging Face Hub is unreachable .* not in the local"):
        data.load_translation_split("wmt14", "de-en", "validation", hub_reachable=lambda: False)
    assert time.time() - started < 10


THREE = ["A dog runs in the park.", "Two men are working.", "The cat sleeps on the sofa."]
LINE_ENDS = {"LF": "\n", "CRLF": "\r\n", "CR": "\r"}


@pytest.mark.parametrize("end", LINE_ENDS.values(), ids=LINE_ENDS.keys())
@pytest.mark.parametrize("last_line_ended", [True, False])
def test_lines_ending_in_lf_crlf_or_cr_are_the_same_lines(tmp_path, end, last_line_ended):
    path = tmp_path / "three.en"
    path.write_bytes((end.join(THREE) + (end if last_line_ended else "")).encode("utf-8"))
    assert data.read_lines(path) == THREE


def test_mixed_line_ends_and_the_breaks_that_stay_inside_a_sentence():
    assert data.split_lines("one\r\ntwo\rthree\nfour") == ["one", "two", "three", "four"]
    assert data.split_lines("one\n\r\nthree\r\r") == ["one", "", "three", ""]  # empty lines are kept, counted
    assert data.split_lines("a line\u2028still it\x0cand it\n") == ["a line\u2028still it\x0cand it"]
    assert data.split_lines("") == []


def test_every_reader_of_text_files_reads_an_old_mac_file_as_its_lines(tmp_path, tiny_model_dir):
    """A file with CR line ends only (classic Mac OS) is three sentences for the app's upload, compare.py and
    train.py (`read_parallel`), the tokenizer's trainer and translate_corpus.py, not one."""
    import translate_corpus
    from tokenizer.bpe import _lines
    from transformer_en_de.app.files import read_upload

    source, target = tmp_path / "mac.en", tmp_path / "unix.de"
    source.write_bytes("\r".join(THREE).encode("utf-8") + b"\r")
    target.write_text("Ein Hund rennt.\nZwei Männer arbeiten.\nDie Katze schläft.\n", encoding="utf-8")

    assert read_upload(source, "English file") == THREE
    assert data.read_parallel(source, target)[0] == THREE
    assert list(_lines([source])) == THREE
    output = tmp_path / "out" / "translated"
    assert (
        translate_corpus.main(
            [
                "--model",
                str(tiny_model_dir),
                "--input",
                str(source),
                "--output",
                str(output),
                "--source_lang",
                "en",
                "--target_lang",
                "de",
                "--num_beams",
                "1",
            ]
        )
        == 0
    )
    assert output.with_name("translated.en").read_text(encoding="utf-8") == "".join(line + "\n" for line in THREE)


@pytest.mark.parametrize(
    "source, translation, loop",
    [
        ("A woman in a coat outside a house while it snows", "Eine Frau vor einem Haus, während es schneit.", False),
        ("Woman in coat outside a house", "Eine Frau vor einem Haus während Schnee Schnee Schnee fällt.", True),
        ("A dog and a dog.", "Ein Hund und ein Hund.", False),  # a phrase twice is no loop
        ("Two dogs play in the snow on a cold day.", "Zwei Hunde, die Hunde, die Hunde, die Hunde spielen.", True),
        ("A man and a woman.", "Ein Mann und eine Frau und eine Frau.", False),
        ("Hello, how are you?", "Hallo, du, du, DU?", True),  # punctuation and case do not hide the loop
        ("I am tired and I want to go home.", "Ich bin müde, wenn Sie wenn Sie wenn Sie", True),
        ("Go.", "Ein Mann geht eine Straße entlang.", True),  # over 3x the source's characters
    ],
)
def test_a_looping_translation_is_recognised(source, translation, loop):
    assert data.is_loop(source, translation) is loop


def test_drop_loops_keeps_the_other_pairs_aligned(tmp_path):
    prefix = tmp_path / "synthetic"
    sources = ["A dog runs.", "It snows.", "Two men work."]
    targets = ["Ein Hund rennt.", "Schnee Schnee Schnee Schnee.", "Zwei Männer arbeiten."]
    (tmp_path / "synthetic.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "synthetic.de").write_text("\n".join(targets) + "\n", encoding="utf-8")

    assert data.drop_loops(str(prefix)) == (2, 3)
    assert (tmp_path / "synthetic-clean.en").read_text(encoding="utf-8").splitlines() == [sources[0], sources[2]]
    assert (tmp_path / "synthetic-clean.de").read_text(encoding="utf-8").splitlines() == [targets[0], targets[2]]
