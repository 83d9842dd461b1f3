"""metrics.py gives exactly what sacreBLEU gives when called directly on the same strings."""

import pytest
import sacrebleu

from transformer_en_de.evaluation import ChrF, SacreBleu, corpus_scores, sentence_scores

REFERENCES = [
    "Ein Hund rennt im Park.",
    "Zwei Männer arbeiten auf einem Dach.",
    "Ein Mädchen in einem roten Kleid lächelt.",
    "Die Kinder spielen auf der Straße.",
]

CASES = {
    "perfect": list(REFERENCES),
    "imperfect": [
        "Ein Hund läuft im Park.",
        "Zwei Männer arbeiten auf dem Dach.",
        "Ein Mädchen im roten Kleid lächelt.",
        "Kinder spielen auf einer Straße.",
    ],
    "lowercased and unpunctuated": [reference.lower().rstrip(".") for reference in REFERENCES],
    "one empty hypothesis": ["Ein Hund rennt.", "", "Ein Mädchen lächelt.", "Die Kinder spielen auf der Straße."],
    "unrelated": ["Das Wetter ist schön.", "Ich habe Hunger.", "Wo ist der Bahnhof?", "Guten Morgen!"],
}


@pytest.mark.parametrize("case", CASES)
def test_corpus_metrics_equal_sacrebleu(case):
    hypotheses = CASES[case]
    expected_bleu = sacrebleu.corpus_bleu(hypotheses, [REFERENCES])
    expected_chrf = sacrebleu.corpus_chrf(hypotheses, [REFERENCES])

    bleu = SacreBleu().compute(predictions=hypotheses, references=REFERENCES)
    chrf = ChrF().compute(predictions=hypotheses, references=REFERENCES)

    assert bleu["score"] == expected_bleu.score
    assert chrf["score"] == expected_chrf.score
    assert corpus_scores(hypotheses, REFERENCES) == {
        "bleu": round(expected_bleu.score, 2),
        "chrf": round(expected_chrf.score, 2),
    }


def test_signatures_name_sacrebleu_defaults():
    bleu = SacreBleu().compute(predictions=CASES["imperfect"], references=REFERENCES)
    chrf = ChrF().compute(predictions=CASES["imperfect"], references=REFERENCES)
    direct_bleu, direct_chrf = sacrebleu.BLEU(), sacrebleu.CHRF()
    direct_bleu.corpus_score(CASES["imperfect"], [REFERENCES])
    direct_chrf.corpus_score(CASES["imperfect"], [REFERENCES])
    assert bleu["signature"] == str(direct_bleu.get_signature())
    assert chrf["signature"] == str(direct_chrf.get_signature())
    assert "case:mixed" in bleu["signature"] and "tok:13a" in bleu["signature"]


def test_scores_order_perfect_imperfect_unrelated():
    perfect = corpus_scores(CASES["perfect"], REFERENCES)
    imperfect = corpus_scores(CASES["imperfect"], REFERENCES)
    unrelated = corpus_scores(CASES["unrelated"], REFERENCES)
    assert perfect == {"bleu": 100.0, "chrf": 100.0}
    assert perfect["bleu"] > imperfect["bleu"] > unrelated["bleu"]
    assert perfect["chrf"] > imperfect["chrf"] > unrelated["chrf"]


@pytest.mark.parametrize("index", range(len(REFERENCES)))
@pytest.mark.parametrize("case", ["imperfect", "lowercased and unpunctuated", "one empty hypothesis"])
def test_sentence_scores_equal_sacrebleu(case, index):
    hypothesis, reference = CASES[case][index], REFERENCES[index]
    assert sentence_scores(hypothesis, reference) == {
        "bleu": round(sacrebleu.sentence_bleu(hypothesis, [reference]).score, 2),
        "chrf": round(sacrebleu.sentence_chrf(hypothesis, [reference]).score, 2),
    }


def test_mismatched_lengths_are_refused():
    with pytest.raises(ValueError, match="3 predictions but 4 references"):
        corpus_scores(CASES["imperfect"][:3], REFERENCES)


def test_empty_corpus_is_refused():
    with pytest.raises(ValueError, match="No sentences"):
        corpus_scores([], [])
