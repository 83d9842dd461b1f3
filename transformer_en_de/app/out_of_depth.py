"""Is our model out of its depth on a sentence? It learned German from 29,000 photo descriptions and nothing else.

Its confidence (`engine.confidences`) misses some everyday sentences ("Hello, how are you?" → "Ein Paar, wie man?" at
79%); how caption-like the English is (a word bigram model of the training captions) catches the rest. A sentence is
flagged when its score, confidence × exp(DISCOUNT × min(0, log-probability per word − CAPTION_FLOOR)), is below
`LOW_SCORE`, or when its translation loops (`repeats_itself`). The shipped bigram counts are built by
`python -m transformer_en_de.app.out_of_depth ../shared/data/multi30k/train.en`."""

import argparse
import functools
import gzip
import json
import math
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from transformer_en_de.data import DataError, is_loop, read_lines

STATISTICS = Path(__file__).with_name("caption_bigrams.json.gz")

# Chosen on the odd lines of benchmarks/everyday_sentences.txt and on Multi30k validation. CAPTION_FLOOR is about
# validation's 10th percentile of log-probability per word: 9 captions in 10 keep their confidence. On the shipped
# model (`python -m benchmarks.hub_user --engine --threads 1`): everyday sentences 97.4% flagged (chosen on) and 94.7%
# (held out), validation 3.6%; the confidence alone below 0.64 flags 63-66% and 1.5%.
CAPTION_FLOOR = -5.7
DISCOUNT = 0.15
LOW_SCORE = 0.64

WORD = re.compile(r"[a-z]+(?:'[a-z]+)?|\d+|[^\w\s]", re.IGNORECASE)  # words, numbers and punctuation
START, END = "<s>", "</s>"
MIN_BIGRAM_COUNT = 3  # rarer bigrams are left out of the shipped file (it shrinks 5×; the flags do not change)


@dataclass(frozen=True)
class DepthCheck:
    flagged: bool
    score: float  # 0..1, shown as the confidence %; nan for a sentence not translated
    reason: str  # short, for the visitor; "" when not flagged


def words(sentence: str, lower: bool = True) -> list[str]:
    return [word.lower() if lower else word for word in WORD.findall(sentence)]


class CaptionBigrams:
    """A word bigram model of captions: Witten-Bell interpolation with add-half unigrams."""

    def __init__(self, unigrams: dict[str, int], contexts: dict[str, list[int]], bigrams: dict[str, int]):
        self.unigrams = unigrams  # word → count (END included, START not)
        self.contexts = contexts  # word → [bigrams starting with it, distinct words after it], over all bigrams
        self.bigrams = bigrams  # "first second" → count, the frequent ones
        self.total = sum(unigrams.values())
        self.vocabulary = len(unigrams) + 1  # and one for every unseen word

    @classmethod
    def build(cls, lines: list[str]) -> "CaptionBigrams":
        unigrams, bigrams = Counter(), Counter()
        for line in lines:
            tokens = [START, *words(line), END]
            unigrams.update(tokens[1:])
            bigrams.update(zip(tokens, tokens[1:], strict=False))
        contexts: dict[str, list[int]] = {}
        for (first, _), count in bigrams.items():
            totals = contexts.setdefault(first, [0, 0])
            totals[0] += count
            totals[1] += 1
        frequent = {f"{a} {b}": count for (a, b), count in bigrams.items() if count >= MIN_BIGRAM_COUNT}
        return cls(dict(unigrams), contexts, frequent)

    def save(self, path: Path) -> None:
        content = {"unigrams": self.unigrams, "contexts": self.contexts, "bigrams": self.bigrams}
        # mtime=0: the same captions give the same bytes.
        path.write_bytes(gzip.compress(json.dumps(content, sort_keys=True).encode(), mtime=0))

    @classmethod
    def load(cls, path: Path) -> "CaptionBigrams":
        content = json.loads(gzip.decompress(path.read_bytes()))
        return cls(content["unigrams"], content["contexts"], content["bigrams"])

    def unigram(self, word: str) -> float:
        return (self.unigrams.get(word, 0) + 0.5) / (self.total + 0.5 * self.vocabulary)

    def bigram(self, first: str, second: str) -> float:
        seen, distinct = self.contexts.get(first, (0, 0))
        if not seen:
            return self.unigram(second)
        weight = seen / (seen + distinct)
        return weight * self.bigrams.get(f"{first} {second}", 0) / seen + (1 - weight) * self.unigram(second)

    def log_probability_per_word(self, sentence: str) -> float:
        """The mean log-probability of each word given the one before (the sentence's end counted as a word)."""
        tokens = [START, *words(sentence), END]
        pairs = list(zip(tokens, tokens[1:], strict=False))
        return sum(math.log(self.bigram(a, b)) for a, b in pairs) / len(pairs)

    def unseen_words(self, sentence: str) -> list[str]:
        """The words (letters only) that no caption has, as written, in order, once each."""
        written = words(sentence, lower=False)
        return list(dict.fromkeys(w for w in written if w[0].isalpha() and w.lower() not in self.unigrams))


@functools.cache
def caption_bigrams() -> CaptionBigrams:
    return CaptionBigrams.load(STATISTICS)


def familiarity(source: str) -> float:
    """1 for a source as likely as 9 captions in 10, less the less likely it is (0..1]."""
    shortfall = min(0.0, caption_bigrams().log_probability_per_word(source) - CAPTION_FLOOR)
    return math.exp(DISCOUNT * shortfall)


LOOP_REASON = "The translation repeats itself: the model has lost its way."
# A piece of up to four characters four times in a row, over at least LOOP_CHARACTERS characters ("1999999999",
# "Moreoreoreore"): a loop inside a word or a number, where the word check sees one word.
REPEATED_PIECE = re.compile(r"(\S{1,4}?)\1{3,}")
LOOP_CHARACTERS = 10
LOOP_PHRASE_WORDS = 4  # an overlong translation (LOOP_LENGTH times its source) saying this many words twice loops
LOOP_LENGTH = 3.0


def repeats_itself(source: str, translation: str) -> bool:
    """A phrase of one to three words thrice in a row (`data.is_loop`), a piece of a word again and again, or over
    `LOOP_LENGTH` times its source's length saying a phrase twice. Length alone is no loop ("Hi." → "Erwachsene.")."""
    if is_loop(source, translation, most=math.inf):
        return True
    if any(len(match.group()) >= LOOP_CHARACTERS for match in REPEATED_PIECE.finditer(translation)):
        return True
    if len(translation) <= LOOP_LENGTH * max(len(source), 1):
        return False
    said = [word.lower() for word in re.findall(r"\w+", translation)]
    phrases = [tuple(said[start : start + LOOP_PHRASE_WORDS]) for start in range(len(said) - LOOP_PHRASE_WORDS + 1)]
    return len(set(phrases)) < len(phrases)


def reason(source: str, familiar: float) -> str:
    if familiar == 1.0:
        return "The model is unsure of its own translation."
    unseen = caption_bigrams().unseen_words(source)
    if not unseen:
        return "Unlike the photo descriptions the model learned from."
    shown = ", ".join(f"“{word}”" for word in unseen[:3]) + (" …" if len(unseen) > 3 else "")
    return f"Unlike the photo descriptions the model learned from (words it never saw: {shown})."


def check_depth(sources: list[str], confidences: list[float | None], translations: list[str] | None = None):
    """One `DepthCheck` per source sentence, from its translation's confidence (None: not translated, not flagged) and
    the translation (when given, checked for loops)."""
    translations = [""] * len(sources) if translations is None else translations
    if not len(sources) == len(confidences) == len(translations):
        raise ValueError(
            f"{len(sources)} sources but {len(confidences)} confidences and {len(translations)} translations: one each "
            "is needed"
        )
    checks = []
    for source, confidence, translation in zip(sources, confidences, translations, strict=True):
        if confidence is None:
            checks.append(DepthCheck(False, float("nan"), ""))
            continue
        familiar = familiarity(source)
        score = confidence * familiar
        if translation and repeats_itself(source, translation):
            checks.append(DepthCheck(True, score, LOOP_REASON))
        else:
            checks.append(DepthCheck(score < LOW_SCORE, score, reason(source, familiar) if score < LOW_SCORE else ""))
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description="Build the caption bigram statistics that check_depth reads.")
    parser.add_argument("captions", type=Path, help="the training captions, one a line (Multi30k's train.en)")
    parser.add_argument("--output", type=Path, default=STATISTICS, help=f"default: {STATISTICS.name} beside this file")
    args = parser.parse_args()
    try:
        captions = read_lines(args.captions)
    except DataError as error:
        parser.error(str(error))
    model = CaptionBigrams.build(captions)
    model.save(args.output)
    print(
        f"{args.output}: {len(model.unigrams):,} words, {len(model.bigrams):,} bigrams seen {MIN_BIGRAM_COUNT}+ times"
    )


if __name__ == "__main__":
    main()
