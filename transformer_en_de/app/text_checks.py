"""Checks on what a visitor sends (text, decoding settings), the controls' starting values, and sentence splitting.

Nothing a visitor or a raw API client sends (a lone surrogate, a number for the text, `Infinity` for a slider) reaches
the tokenizer: each check raises `InputError` with a line for the page that never repeats the visitor's string."""

import math
import re
import unicodedata

from transformer_en_de.decoding.engine import DecodingSettings

DECODINGS = ("beam search", "greedy")
# The controls' starting values for a model whose generation config does not say (a bare config has no max_new_tokens).
FALLBACK_BEAMS = 4
FALLBACK_MAX_NEW_TOKENS = 128
LAYOUT = {"\t", "\n", "\r"}  # the control characters that are text
SENTENCE_END = re.compile(r"(?<=[.!?…。！？])[\"'”“»«)\]]*\s+")
# Markdown's backslash-escapable punctuation, "&" excepted (escaped as an entity first), and "$" (a LaTeX delimiter)
MARKDOWN_MARK = re.compile(r"[\\`*_{}\[\]()#+\-.!|~:\"'$]")


class InputError(ValueError):
    """Input the app cannot translate; the message says why and what to do, in words for the page."""


def as_text(value) -> str:
    """`value` on one line for a Markdown component, every Markdown and HTML mark escaped: shown, never rendered."""
    text = " ".join(str(value).split())
    return MARKDOWN_MARK.sub(r"\\\g<0>", text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;"))


def check_text(text, what: str = "text") -> str:
    """`text` if it is translatable; InputError for a non-string, surrogates, control characters or nothing visible."""
    if not isinstance(text, str):
        raise InputError(f"The {what} must be a string of text, not {kind(text)}.")
    for position, character in enumerate(text, start=1):
        code = ord(character)
        if 0xD800 <= code <= 0xDFFF:
            raise InputError(
                f"The {what} has a broken character at position {position} (a lone surrogate, U+{code:04X}): "
                "it is not valid Unicode. Paste the text again as plain text."
            )
        if unicodedata.category(character) == "Cc" and character not in LAYOUT:
            raise InputError(
                f"The {what} has a control character at position {position} (U+{code:04X}), which is not text. "
                "Remove it and try again."
            )
    # Format characters (Cf: zero-width space, joiner, BOM) and separators show nothing on their own
    shown = [c for c in text if not c.isspace() and unicodedata.category(c) not in ("Cf", "Zs", "Zl", "Zp")]
    if text.strip() and not shown:
        raise InputError(f"The {what} has only invisible characters (zero-width spaces or joiners); type some words.")
    return text


def decoding_defaults(model, limits) -> tuple[str, int, int]:
    """(decoding, beams, max new tokens) the controls start with: the model's generation config within their ranges,
    the fallbacks where it is silent."""
    config = model.generation_config
    beams = min(getattr(config, "num_beams", None) or FALLBACK_BEAMS, limits.max_beams)
    tokens = min(getattr(config, "max_new_tokens", None) or FALLBACK_MAX_NEW_TOKENS, limits.max_new_tokens)
    return ("greedy" if beams == 1 else "beam search"), beams, tokens


def default_settings(model, limits) -> DecodingSettings:
    """What the page starts with, and the arena's battles decode with."""
    return check_decoding(*decoding_defaults(model, limits), limits)


def check_decoding(decoding, num_beams, max_new_tokens, limits) -> DecodingSettings:
    """The request's decoding from the page's controls, within `limits`; InputError names the control and its range."""
    if not isinstance(decoding, str) or decoding not in DECODINGS:
        raise InputError(f"Decoding must be one of {', '.join(repr(d) for d in DECODINGS)}.")
    beams = whole_number("Beams", num_beams, limits.max_beams)
    tokens = whole_number("Maximum new tokens", max_new_tokens, limits.max_new_tokens)
    beams = 1 if decoding == "greedy" else beams
    return DecodingSettings(num_beams=beams, max_new_tokens=tokens, batch_size=limits.batch_size)


def whole_number(name: str, value, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{name} must be a whole number from 1 to {high}, not {kind(value)}.")
    if not math.isfinite(value) or int(value) != value:
        raise InputError(f"{name} must be a whole number from 1 to {high}, got {value:g}.")
    if not 1 <= value <= high:
        raise InputError(f"{name} must be from 1 to {high}, got {value:g}.")
    return int(value)


def kind(value) -> str:
    """What a value sent in place of another is, in words (never the value itself)."""
    kinds = {bool: "true or false", int: "a number", float: "a number", list: "a list", dict: "an object"}
    return "nothing" if value is None else kinds.get(type(value), f"a {type(value).__name__}")


def split_sentences(text: str) -> tuple[list[str], list[str]]:
    """Sentences of `text` and the separator after each (" " within a line, "\\n" between lines)."""
    sentences, separators = [], []
    for line in text.splitlines():
        start = 0
        for end in [match.end() for match in SENTENCE_END.finditer(line)] + [len(line)]:
            if line[start:end].strip():
                sentences.append(line[start:end].strip())
                separators.append(" ")
            start = end
        if separators:
            separators[-1] = "\n"
    return sentences, separators


def split_text(text: str, max_words: int) -> tuple[list[str], list[str], str]:
    """Sentences of `text`, those of more than `max_words` words in parts; (parts, separators, notice)."""
    parts, part_separators, long = [], [], []
    for sentence, separator in zip(*split_sentences(text), strict=True):
        pieces = split_long_sentence(sentence, max_words)
        if len(pieces) > 1:
            long.append((len(sentence.split()), len(pieces)))
        parts += pieces
        part_separators += [" "] * (len(pieces) - 1) + [separator]
    if not long:
        return parts, part_separators, ""
    words = max(long)[0]
    which = f"A sentence of {words:,} words" if len(long) == 1 else f"{len(long)} sentences of up to {words:,} words"
    notice = (
        f"{which} without a full stop {'was' if len(long) == 1 else 'were'} translated in parts of at most "
        f'{max_words} words ({sum(n for _, n in long)} parts), split at commas, at words such as "and" or between '
        "words: the model was trained on single sentences. End sentences with a full stop for a better translation."
    )
    return parts, part_separators, notice


# Where a long sentence may be split: after a word ending a clause, or before a word starting one.
CLAUSE_END = re.compile(r"[,;:–—]$")
CLAUSE_START = {"and", "but", "or", "while", "whereas", "as", "so", "then", "which", "who", "where", "when"}


def split_long_sentence(sentence: str, max_words: int) -> list[str]:
    """`sentence` in parts of at most `max_words` words, each ending at its last comma (;:–—), else before its
    last "and" (but, while, …), else at `max_words`; never under a third of `max_words` but the last."""
    words = sentence.split()
    parts, start = [], 0
    while len(words) - start > max_words:
        ends = range(start + max(max_words // 3, 1), start + max_words + 1)  # the part is words[start:end]
        at_comma = [end for end in ends if CLAUSE_END.search(words[end - 1])]
        at_conjunction = [end for end in ends if words[end].lower() in CLAUSE_START]
        end = (at_comma or at_conjunction or [start + max_words])[-1]
        parts.append(" ".join(words[start:end]))
        start = end
    return parts + [" ".join(words[start:])] if start else [sentence]


def join_sentences(sentences: list[str], separators: list[str]) -> str:
    """The inverse of `split_sentences` for translated sentences."""
    return "".join(sentence + separator for sentence, separator in zip(sentences, separators, strict=True)).strip()


def check_reference(reference, limits) -> tuple[str, str]:
    """(reference, notice): one too long to score is dropped, and said; InputError for one not text."""
    if reference is None:
        return "", ""
    if not isinstance(reference, str):
        return check_text(reference, "reference"), ""  # raises: not a string
    lines = reference.count("\n") + 1
    if len(reference) > limits.max_reference_chars or lines > limits.max_reference_lines:
        return "", (
            f"The reference has {len(reference):,} characters on {lines:,} lines; references of up to "
            f"{limits.max_reference_chars:,} characters and {limits.max_reference_lines:,} lines are scored here, so "
            "there are no scores. Use the File tab for longer texts."
        )
    return check_text(reference, "reference").strip(), ""


def read_text(text, max_chars: int) -> tuple[str, str]:
    """A visitor's text cut to `max_chars` near a space, checked and stripped, and the notice saying so."""
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
