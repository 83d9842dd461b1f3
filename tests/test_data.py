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


def test_case_variants_are_seeded_and_consistent():
    sources, targets = real("en", 100), real("de", 100)
    variants = data.case_variants(sources, targets, 0.2, seed=1)
    assert variants == data.case_variants(sources, targets, 0.2, seed=1)
    assert len(variants) == 20 and len({index for index, _, _ in variants}) == 20
    for index, source, target in variants:
        assert source in (sources[index].upper(), sources[index].lower())
        assert target == (targets[index].upper() if source == sources[index].upper() else targets[index].lower())


def test_case_fraction_out_of_range_is_an_error():
    with pytest.raises(data.DataError, match="case_augmentation"):
        data.case_variants(["A."], ["B."], 1.5, seed=0)
