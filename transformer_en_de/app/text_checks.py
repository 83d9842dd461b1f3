"""Checks on what a visitor sends (text, decoding settings), the decoding controls' starting values, and the split of
a text into sentences.

Each check raises `InputError` with a message for the page; nothing a visitor types should reach the tokenizer as a
crash (a lone surrogate, for one, makes the tokenizer raise TypeError). A raw API client may send anything JSON holds
(a number for the text, `Infinity` for a slider): each gets its one line too. Messages never repeat a visitor's string
as it was sent; `as_text` is how anything a visitor sent is shown on the page (text, never Markdown or HTML).
"""

import math
import re
import unicodedata

from transformer_en_de.decoding.engine import DecodingSettings

DECODINGS = ("beam search", "greedy")
# The controls' starting values for a model whose generation config does not say (a bare config has no max_new_tokens).
FALLBACK_BEAMS = 4
FALLBACK_MAX_NEW_TOKENS = 128
# Tab, newline and carriage return are layout; every other control character is not text.
_LAYOUT = {"\t", "\n", "\r"}
_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])[\"'”“»«)\]]*\s+")


class InputError(ValueError):
    """Input the app cannot translate; the message says why and what to do, in words for the page."""


def as_text(value) -> str:
    """`value` for a Markdown component, shown as the characters it is: every Markdown and HTML mark escaped (a link,
    an image, a tag or an entity sent by a visitor is displayed, never rendered), on one line."""
    text = " ".join(str(value).split())
    return _MARKDOWN_MARK.sub(r"\\\g<0>", text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


# Markdown's backslash-escapable punctuation, "&" excepted (its entity is escaped above, before this runs), and "$"
# (a LaTeX delimiter where a Markdown component renders math).
_MARKDOWN_MARK = re.compile(r"[\\`*_{}\[\]()#+\-.!|~:\"'$]")


def check_text(text, what: str = "text") -> str:
    """`text` if it is translatable; InputError for a value that is not a string, surrogates, control characters or
    nothing visible."""
    if not isinstance(text, str):
        raise InputError(f"The {what} must be a string of text, not {_kind(text)}.")
    for position, character in enumerate(text):
        code = ord(character)
        if 0xD800 <= code <= 0xDFFF:
            raise InputError(
                f"The {what} has a broken character at position {position + 1} (a lone surrogate, U+{code:04X}): "
                "it is not valid Unicode. Paste the text again as plain text."
            )
        if unicodedata.category(character) == "Cc" and character not in _LAYOUT:
            raise InputError(
                f"The {what} has a control character at position {position + 1} (U+{code:04X}), which is not text. "
                "Remove it and try again."
            )
    if text.strip() and not any(_visible(character) for character in text):
        raise InputError(f"The {what} has only invisible characters (zero-width spaces or joiners); type some words.")
    return text


def _visible(character: str) -> bool:
    # Format characters (Cf: zero-width space, joiner, BOM) and separators show nothing on their own.
    return not character.isspace() and unicodedata.category(character) not in ("Cf", "Zs", "Zl", "Zp")


def default_settings(model, limits) -> DecodingSettings:
    """The decoding the page starts with, and the arena's battles decode with: what the model's generation config
    decodes with (a saved model's `generation_config.json`), within the controls' ranges (`limits`: `max_beams`,
    `max_new_tokens`), the fallbacks where it sets no value; in the app's batches."""
    config = model.generation_config
    beams = min(getattr(config, "num_beams", None) or FALLBACK_BEAMS, limits.max_beams)
    tokens = min(getattr(config, "max_new_tokens", None) or FALLBACK_MAX_NEW_TOKENS, limits.max_new_tokens)
    return DecodingSettings(num_beams=beams, max_new_tokens=tokens, batch_size=limits.batch_size)


def decoding_defaults(model, limits) -> tuple[str, int, int]:
    """(decoding, beams, max new tokens) the controls start with: `default_settings` as the page shows them."""
    settings = default_settings(model, limits)
    return ("beam search" if settings.num_beams > 1 else "greedy"), settings.num_beams, settings.max_new_tokens


def check_decoding(decoding, num_beams, max_new_tokens, limits) -> DecodingSettings:
    """The request's decoding from the page's controls, within `limits` (`max_beams`, `max_new_tokens`), decoded in
    the app's batches; InputError names the control and its range."""
    if not isinstance(decoding, str) or decoding not in DECODINGS:
        raise InputError(f"Decoding must be one of {', '.join(repr(d) for d in DECODINGS)}.")
    beams = _whole_number("Beams", num_beams, 1, limits.max_beams)
    tokens = _whole_number("Maximum new tokens", max_new_tokens, 1, limits.max_new_tokens)
    beams = 1 if decoding == "greedy" else beams
    return DecodingSettings(num_beams=beams, max_new_tokens=tokens, batch_size=limits.batch_size)


def _whole_number(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{name} must be a whole number from {low} to {high}, not {_kind(value)}.")
    if not math.isfinite(value) or int(value) != value:
        raise InputError(f"{name} must be a whole number from {low} to {high}, got {value:g}.")
    if not low <= value <= high:
        raise InputError(f"{name} must be from {low} to {high}, got {value:g}.")
    return int(value)


def _kind(value) -> str:
    """What a value sent in place of another is, in words (never the value itself)."""
    kinds = {bool: "true or false", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return "nothing" if value is None else kinds.get(type(value), f"a {type(value).__name__}")


def split_sentences(text: str) -> tuple[list[str], list[str]]:
    """Sentences of `text` and the separator after each (" " within a line, "\\n" between lines)."""
    sentences, separators = [], []
    for line in text.splitlines():
        start = 0
        for end in [match.end() for match in _SENTENCE_END.finditer(line)] + [len(line)]:
            if line[start:end].strip():
                sentences.append(line[start:end].strip())
                separators.append(" ")
            start = end
        if separators:
            separators[-1] = "\n"
    return sentences, separators


def split_long_sentences(sentences: list[str], separators: list[str], max_words: int):
    """Sentences of more than `max_words` words in parts (`split_long_sentence`); (parts, separators, notice)."""
    parts, part_separators, long = [], [], []
    for sentence, separator in zip(sentences, separators, strict=True):
        pieces = split_long_sentence(sentence, max_words)
        if len(pieces) > 1:
            long.append((len(sentence.split()), len(pieces)))
        parts += pieces
        part_separators += [" "] * (len(pieces) - 1) + [separator]
    if not long:
        return parts, part_separators, ""
    words, pieces = max(long)
    which = f"A sentence of {words:,} words" if len(long) == 1 else f"{len(long)} sentences of up to {words:,} words"
    notice = (
        f"{which} without a full stop {'was' if len(long) == 1 else 'were'} translated in parts of at most "
        f'{max_words} words ({sum(n for _, n in long)} parts), split at commas, at words such as "and" or between '
        "words: the model was trained on single sentences. End sentences with a full stop for a better translation."
    )
    return parts, part_separators, notice


# Where a long sentence may be split: after a word ending a clause, or before a word starting one.
_CLAUSE_END = re.compile(r"[,;:–—]$")
_CLAUSE_START = {"and", "but", "or", "while", "whereas", "as", "so", "then", "which", "who", "where", "when"}


def split_long_sentence(sentence: str, max_words: int) -> list[str]:
    """`sentence` in parts of at most `max_words` words (one part if it is that short): each part ends at the last
    comma (;:–—) within its words, else before the last "and" (but, while, which, …), else after `max_words` words;
    never shorter than a third of `max_words` unless it is the last."""
    words = sentence.split()
    parts, start = [], 0
    while len(words) - start > max_words:
        ends = range(start + max(max_words // 3, 1), start + max_words + 1)  # the part is words[start:end]
        at_comma = [end for end in ends if _CLAUSE_END.search(words[end - 1])]
        at_conjunction = [end for end in ends if words[end].lower() in _CLAUSE_START]
        end = (at_comma or at_conjunction or [start + max_words])[-1]
        parts.append(" ".join(words[start:end]))
        start = end
    return parts + [" ".join(words[start:])] if start else [sentence]


def join_sentences(sentences: list[str], separators: list[str]) -> str:
    """The inverse of `split_sentences` for translated sentences."""
    return "".join(sentence + separator for sentence, separator in zip(sentences, separators, strict=True)).strip()


def read_text(text, max_chars: int) -> tuple[str, str]:
    """A visitor's text cut to `max_chars` at a space where one is near, checked (`check_text`) and stripped; and the
    notice saying it was cut ("" when not). InputError for a value that is not text (None reads as "")."""
    text = "" if text is None else text
    if not isinstance(text, str) or len(text.strip()) <= max_chars:
        return check_text(text).strip(), ""
    text = text.strip()
    cut = text.rfind(" ", 0, max_chars)
    notice = (
        f"The text has {len(text):,} characters; only the first {max_chars:,} were translated. "
        "Use the File tab for longer texts."
    )
    return check_text(text[: cut if cut > max_chars // 2 else max_chars]).strip(), notice
