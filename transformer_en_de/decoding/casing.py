"""Input casing: text typed in capitals is translated as ordinary sentence case.

Multi30k's sources are sentence case, and the joint byte-level BPE splits an all-caps word into rare pieces
("MAN" -> "M", "AN"), so a model trained on it loops on capitals ("Ein COGOGOGO..."). Lower-casing such input and
capitalising the start of each sentence costs almost nothing on ordinary text (it is left alone) and turns shouting
into the kind of sentence the model has seen.
"""

import re

# A text is "shouting" when at least this share of its cased letters are capitals, and it has enough letters to
# tell (a lone "OK" or "USA" in a sentence is not shouting).
SHOUTING_SHARE = 0.7
MIN_LETTERS = 8
_SENTENCE_START = re.compile(r"(^|[.!?]\s+)(\w)")
_PRONOUN_I = re.compile(r"\bi\b")


def is_shouting(text: str) -> bool:
    """True when most cased letters of `text` are capitals."""
    cased = [character for character in text if character.isupper() or character.islower()]
    if len(cased) < MIN_LETTERS:
        return False
    return sum(character.isupper() for character in cased) / len(cased) >= SHOUTING_SHARE


def normalise_case(text: str) -> str:
    """`text` in sentence case if it is shouting, else unchanged."""
    if not is_shouting(text):
        return text
    lowered = _PRONOUN_I.sub("I", text.lower())
    return _SENTENCE_START.sub(lambda match: match.group(1) + match.group(2).upper(), lowered)
