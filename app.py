"""Gradio app: our Transformer and MarianMT (Helsinki-NLP/opus-mt-en-de) translating English to German side by side.

Decoding controls, sentence BLEU/chrF against an optional reference, cross-attention heatmaps, whole files with
corpus scores, and the corpus-level comparison. Runs locally (`python app.py`) and as a Hugging Face Space.

Our model comes from `models/transformer-en-de` (or `--model` / TRANSFORMER_MT_MODEL: a folder or a Hub id), MarianMT
from `--marian-model` / MARIAN_MODEL. MarianMT loads in a background thread: the page is up before it is, and when
it cannot be loaded (offline) its panel says so while our model keeps serving.

Named API endpoints (gradio_client):
    /translate(text, decoding, num_beams, max_new_tokens, reference)
        -> (our_translation, our_details, marian_translation, marian_details, notice)
    /translate_file(source_file, reference_file, decoding, num_beams, max_new_tokens) -> (translations_tsv, summary)
    /comparison() -> (summary, table)
    /marian_status() -> status
"""

import argparse
import csv
import json
import os
import re
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import matplotlib

matplotlib.use("Agg")  # no display on a server; must precede any pyplot import (gradio imports it to close figures)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from huggingface_hub import constants as hub_constants  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer  # noqa: E402

from transformer_en_de.evaluation import corpus_scores, sentence_scores  # noqa: E402

APP_DIR = Path(__file__).resolve().parent
DEFAULT_MODEL = "models/transformer-en-de"
DEFAULT_MARIAN_MODEL = "Helsinki-NLP/opus-mt-en-de"
COMPARISON_PATH = APP_DIR / "results" / "comparison_test_2016_flickr.json"
OURS_NAME = "Transformer (ours)"
MARIAN_NAME = "MarianMT"

DECODINGS = ("beam search", "greedy")
MAX_BEAMS = 8
MAX_INPUT_CHARS = 3_000  # text box; longer texts belong in the file tab
MAX_FILE_BYTES = 2_000_000
MAX_FILE_LINES = 2_000
BATCH_SIZE = 16
CONCURRENCY_LIMIT = 2  # CPU-bound generation: more parallel jobs only slow each other down

# Sentences and references written for this app (not taken from Multi30k).
EXAMPLES = [
    ["A man in a blue jacket is repairing a bicycle.", "Ein Mann in einer blauen Jacke repariert ein Fahrrad."],
    ["Two dogs are playing in the snow.", "Zwei Hunde spielen im Schnee."],
    ["A little girl eats an ice cream on a bench.", "Ein kleines Mädchen isst auf einer Bank ein Eis."],
    ["Several people wait at a bus stop. It is raining.", "Mehrere Leute warten an einer Bushaltestelle. Es regnet."],
    ["An old woman sells vegetables at a market.", "Eine alte Frau verkauft Gemüse auf einem Markt."],
]

# Emoji and rare scripts are missing from matplotlib's default font; their labels show as boxes, which is enough.
warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")


class ModelUnavailableError(RuntimeError):
    """Our model cannot be loaded; the message names the path or id and how to get a model."""


# ---------------------------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class Translator:
    """A loaded seq2seq model and its tokenizer, with the limits its positions impose."""

    name: str
    reference: str  # the folder or Hub id it came from
    model: object
    tokenizer: object

    @property
    def num_parameters(self) -> int:
        return self.model.num_parameters()

    @property
    def num_layers(self) -> int:
        return self.model.config.decoder_layers

    @property
    def max_source_tokens(self) -> int:
        """Longest source the encoder's positions cover (a tokenizer may be stricter)."""
        limit = self.model.config.max_position_embeddings
        tokenizer_limit = self.tokenizer.model_max_length
        return min(limit, tokenizer_limit) if tokenizer_limit and tokenizer_limit < 1_000_000 else limit

    @property
    def max_new_tokens(self) -> int:
        # Position 0 holds the decoder start token.
        return self.model.config.max_position_embeddings - 1


def _looks_local(reference: str) -> bool:
    """A path rather than a Hub id ("name" or "owner/name")."""
    if Path(reference).expanduser().exists():
        return True
    return reference.startswith((".", "/", "~")) or "\\" in reference or reference.count("/") > 1


def load_translator(reference: str, name: str, *, eager_attention: bool = False, **load_kwargs) -> Translator:
    """Load a model and tokenizer from a folder or a Hub id with the Auto classes.

    `trust_remote_code=True` runs the modeling code saved beside our weights (a Hub id works like a folder).
    `eager_attention` is for models whose default attention kernel cannot return the weights the heatmaps need.
    """
    tokenizer = AutoTokenizer.from_pretrained(reference, **load_kwargs)
    if eager_attention:
        load_kwargs["attn_implementation"] = "eager"
    model = AutoModelForSeq2SeqLM.from_pretrained(reference, **load_kwargs).eval()
    return Translator(name=name, reference=reference, model=model, tokenizer=tokenizer)


def resolve_our_model(reference: str | None) -> str:
    """The default folder sits beside app.py; other paths are relative to the working directory."""
    if not reference or reference == DEFAULT_MODEL:
        return str(APP_DIR / DEFAULT_MODEL)
    return reference


def load_our_translator(reference: str) -> Translator:
    """Load our model, or raise ModelUnavailableError saying where it was looked for and how to get one."""
    how = (
        "Train one with `python train.py --output_dir models/transformer-en-de` (see the README), or point --model / "
        "TRANSFORMER_MT_MODEL at a saved model folder or a Hub id such as your-name/transformer-en-de."
    )
    if _looks_local(reference) or reference == str(APP_DIR / DEFAULT_MODEL):
        folder = Path(reference).expanduser()
        if not folder.is_dir():
            raise ModelUnavailableError(f"No model folder at {folder}. {how}")
        if not (folder / "config.json").is_file():
            raise ModelUnavailableError(f"{folder} is not a saved model folder (it has no config.json). {how}")
    try:
        return load_translator(reference, OURS_NAME, trust_remote_code=True)
    except Exception as error:
        raise ModelUnavailableError(f"Could not load our model from {reference}: {_first_line(error)} {how}") from error


def _first_line(error: BaseException, limit: int = 300) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text if len(text) <= limit else text[:limit] + "…"


class BackgroundModel:
    """Loads a translator in a daemon thread so start-up never waits for a download.

    `translator` stays None until loading succeeds; `error` then says in plain words why it failed.
    """

    def __init__(self, reference: str, name: str, **load_kwargs):
        self.reference = reference
        self.name = name
        self.translator: Translator | None = None
        self.error: str | None = None
        self._started = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._load, args=(load_kwargs,), name=f"load {name}", daemon=True)
        self._thread.start()

    def _load(self, load_kwargs: dict) -> None:
        try:
            self.translator = load_translator(self.reference, self.name, eager_attention=True, **load_kwargs)
        except Exception as error:  # any failure becomes a message in the panel, never a crash
            self.error = self._explain(error)
        finally:
            self._done.set()

    def _explain(self, error: Exception) -> str:
        if isinstance(error, ImportError):
            return f"{self.name} is not available: loading {self.reference} needs a missing package ({error})."
        if hub_constants.HF_HUB_OFFLINE and not _looks_local(self.reference):
            return (
                f"{self.name} is not available: this server is offline (HF_HUB_OFFLINE=1) and {self.reference} "
                "is not in the local Hugging Face cache. Our model keeps working."
            )
        return f"{self.name} is not available: {self.reference} could not be loaded ({_first_line(error)})."

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until loading has finished (either way); False on timeout."""
        return self._done.wait(timeout)

    def status(self) -> str:
        """One line for the panel: loading, ready or why not."""
        if self.translator is not None:
            return f"{self.name} ready: {self.reference}, {_millions(self.translator.num_parameters)} parameters."
        if self.error is not None:
            return self.error
        waited = time.monotonic() - self._started
        return f"{self.name} ({self.reference}) is loading in the background ({waited:.0f} s so far)…"


# ---------------------------------------------------------------------------------------------------------------
# Translation
# ---------------------------------------------------------------------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])[\"'”“»«)\]]*\s+")


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


def join_sentences(sentences: list[str], separators: list[str]) -> str:
    return "".join(sentence + separator for sentence, separator in zip(sentences, separators, strict=True)).strip()


@dataclass
class Run:
    """One system's output for a list of sentences."""

    translations: list[str]
    source_ids: list[list[int]]  # what the encoder read (after any truncation), no padding
    generated_ids: list[list[int]]  # decoder start token, generated tokens, up to and including </s>
    seconds: float
    tokens_generated: int
    truncated: list[int]  # 1-based numbers of sentences cut to fit the encoder


def _strip_generated(sequence: list[int], pad_id: int, eos_id: int) -> list[int]:
    """Start token + tokens up to the first </s>; the start token may equal <pad> (Marian), so skip it first."""
    body = sequence[1:]
    if eos_id in body:
        body = body[: body.index(eos_id) + 1]
    else:
        while body and body[-1] == pad_id:
            body.pop()
    return sequence[:1] + body


def translate_sentences(
    translator: Translator, sentences: list[str], num_beams: int, max_new_tokens: int, on_batch=None
) -> Run:
    """Translate in batches of BATCH_SIZE; sources longer than the encoder's positions are truncated (and listed)."""
    tokenizer, model = translator.tokenizer, translator.model
    limit = translator.max_source_tokens
    pad_id, eos_id = model.config.pad_token_id, model.config.eos_token_id
    generation = dict(num_beams=num_beams, do_sample=False, max_new_tokens=max_new_tokens)
    if num_beams == 1:
        generation.update(length_penalty=None, early_stopping=None)  # beam-only settings; unset for greedy
    translations, source_ids, generated_ids, truncated = [], [], [], []
    tokens_generated = 0
    start = time.perf_counter()
    for first in range(0, len(sentences), BATCH_SIZE):
        batch = sentences[first : first + BATCH_SIZE]
        lengths = [len(ids) for ids in tokenizer(batch, verbose=False)["input_ids"]]
        truncated += [first + index + 1 for index, length in enumerate(lengths) if length > limit]
        encoded = tokenizer(batch, return_tensors="pt", padding=True, truncation=True, max_length=limit)
        with torch.inference_mode():
            output = model.generate(**encoded, **generation)
        for row, sequence in enumerate(output.tolist()):
            ids = _strip_generated(sequence, pad_id, eos_id)
            generated_ids.append(ids)
            tokens_generated += len(ids) - 1
            source_ids.append(encoded["input_ids"][row][encoded["attention_mask"][row].bool()].tolist())
            translations.append(tokenizer.decode(ids, skip_special_tokens=True).strip())
        if on_batch is not None:
            on_batch(min(first + BATCH_SIZE, len(sentences)), len(sentences))
    return Run(translations, source_ids, generated_ids, time.perf_counter() - start, tokens_generated, truncated)


@dataclass
class SystemOutput:
    """What one panel shows: the translation and its figures, or a message saying why there is none."""

    name: str
    translation: str = ""
    seconds: float | None = None
    tokens_generated: int | None = None
    num_parameters: int | None = None
    scores: dict | None = None
    message: str = ""
    notices: list[str] = field(default_factory=list)
    run: Run | None = None


@dataclass
class TextResult:
    sentences: list[str]
    ours: SystemOutput
    marian: SystemOutput
    notices: list[str] = field(default_factory=list)  # about the input as a whole
    message: str = ""  # set when there was nothing to translate


def _decoding_settings(decoding: str, num_beams, max_new_tokens) -> tuple[int, int]:
    if decoding not in DECODINGS:
        raise ValueError(f"decoding must be one of {', '.join(repr(d) for d in DECODINGS)}, got {decoding!r}.")
    beams = 1 if decoding == "greedy" else int(min(max(int(num_beams), 1), MAX_BEAMS))
    return beams, max(int(max_new_tokens), 1)


def _run_system(
    translator: Translator, sentences: list[str], separators: list[str], beams: int, max_new_tokens: int,
    reference: str, on_batch=None,
) -> SystemOutput:
    output = SystemOutput(name=translator.name, num_parameters=translator.num_parameters)
    if max_new_tokens > translator.max_new_tokens:
        output.notices.append(
            f"{translator.name} writes at most {translator.max_new_tokens} tokens (its positions); "
            f"max new tokens was lowered from {max_new_tokens}."
        )
        max_new_tokens = translator.max_new_tokens
    run = translate_sentences(translator, sentences, beams, max_new_tokens, on_batch)
    if run.truncated:
        numbers = ", ".join(str(number) for number in run.truncated)
        which = f"sentences {numbers} were" if len(run.truncated) > 1 else f"sentence {numbers} was"
        output.notices.append(
            f"{translator.name} reads at most {translator.max_source_tokens} tokens per sentence: {which} cut to fit."
        )
    output.run = run
    output.translation = join_sentences(run.translations, separators)
    output.seconds = run.seconds
    output.tokens_generated = run.tokens_generated
    if reference:
        output.scores = sentence_scores(output.translation, reference)
    return output


def _unavailable(marian: "BackgroundModel | Translator | None") -> str:
    if marian is None:
        return f"{MARIAN_NAME} is not configured."
    if isinstance(marian, BackgroundModel) and marian.translator is None:
        return marian.status()
    return ""


def _marian_translator(marian: "BackgroundModel | Translator | None") -> Translator | None:
    return marian.translator if isinstance(marian, BackgroundModel) else marian


def translate_text(
    text: str,
    decoding: str = "beam search",
    num_beams: int = 4,
    max_new_tokens: int = 128,
    reference: str = "",
    *,
    ours: Translator,
    marian: "BackgroundModel | Translator | None",
) -> TextResult:
    """Translate `text` (one or more sentences) with both systems; score against `reference` when given."""
    empty = TextResult([], SystemOutput(OURS_NAME), SystemOutput(MARIAN_NAME))
    text = (text or "").strip()
    reference = (reference or "").strip()
    try:
        beams, max_new_tokens = _decoding_settings(decoding, num_beams, max_new_tokens)
    except (TypeError, ValueError) as error:
        empty.message = str(error)
        return empty
    if not text:
        empty.message = "Type an English sentence (or several) to translate."
        return empty
    notices = []
    if len(text) > MAX_INPUT_CHARS:
        cut = text.rfind(" ", 0, MAX_INPUT_CHARS)
        notices.append(
            f"The text has {len(text):,} characters; only the first {MAX_INPUT_CHARS:,} were translated. "
            "Use the File tab for longer texts."
        )
        text = text[: cut if cut > MAX_INPUT_CHARS // 2 else MAX_INPUT_CHARS]
    sentences, separators = split_sentences(text)
    result = TextResult(sentences, SystemOutput(OURS_NAME), SystemOutput(MARIAN_NAME), notices)
    result.ours = _run_system(ours, sentences, separators, beams, max_new_tokens, reference)
    marian_translator = _marian_translator(marian)
    if marian_translator is None:
        result.marian.message = _unavailable(marian)
    else:
        result.marian = _run_system(marian_translator, sentences, separators, beams, max_new_tokens, reference)
    return result


# ---------------------------------------------------------------------------------------------------------------
# Cross-attention
# ---------------------------------------------------------------------------------------------------------------


@dataclass
class AttentionMap:
    weights: np.ndarray  # (source tokens, generated tokens)
    source_tokens: list[str]
    generated_tokens: list[str]
    description: str  # which layer(s) and heads were averaged


def _token_labels(tokenizer, ids: list[int]) -> list[str]:
    """Readable token labels: word-initial pieces start with ▁ (SentencePiece's convention) for both tokenizers."""
    labels = []
    for token in tokenizer.convert_ids_to_tokens(ids):
        if token.startswith("▁") or token in tokenizer.all_special_tokens:
            labels.append(token)
            continue
        text = tokenizer.convert_tokens_to_string([token])  # byte-level pieces → text (" dog")
        labels.append("▁" + text[1:] if text.startswith(" ") else (text or token))
    return labels


def cross_attention_map(
    translator: Translator, source_ids: list[int], generated_ids: list[int], layer: int | None = None
) -> AttentionMap:
    """Cross-attention of one translation: a teacher-forced forward pass over the generated ids.

    Row i of the decoder reads generated_ids[: i + 1] and predicts generated_ids[i + 1], so the map has one column
    per generated token. `layer` None averages over layers and heads; an index (clamped) averages one layer's heads.
    """
    model = translator.model
    source = torch.tensor([source_ids])
    decoder_input = torch.tensor([generated_ids[:-1]])
    with torch.inference_mode():
        output = model(
            input_ids=source,
            attention_mask=torch.ones_like(source),
            decoder_input_ids=decoder_input,
            output_attentions=True,
            use_cache=False,
        )
    stacked = torch.stack(output.cross_attentions)[:, 0]  # (layers, heads, generated, source)
    layers, heads = stacked.shape[:2]
    if layer is None:
        weights = stacked.mean(dim=(0, 1))
        description = f"mean of {layers} layers × {heads} heads"
    else:
        index = min(max(layer, 0), layers - 1)
        weights = stacked[index].mean(dim=0)
        description = f"layer {index + 1} of {layers}, mean of {heads} heads"
    return AttentionMap(
        weights=weights.T.float().numpy(),  # (source, generated)
        source_tokens=_token_labels(translator.tokenizer, source_ids),
        generated_tokens=_token_labels(translator.tokenizer, generated_ids[1:]),
        description=description,
    )


def plot_attention(attention: AttentionMap, title: str) -> Figure:
    """Heatmap with source tokens down the side and generated tokens along the bottom."""
    source_count, generated_count = attention.weights.shape
    # About a quarter inch per token, within what a half-page panel shows legibly.
    width = min(2.5 + 0.25 * generated_count, 12.0)
    height = min(1.5 + 0.25 * source_count, 10.0)
    figure = Figure(figsize=(width, height), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    image = axes.imshow(attention.weights, aspect="auto", cmap="viridis", vmin=0.0)
    axes.set_xticks(range(generated_count), attention.generated_tokens, rotation=90, fontsize=8)
    axes.set_yticks(range(source_count), attention.source_tokens, fontsize=8)
    axes.set_xlabel("generated tokens")
    axes.set_ylabel("source tokens")
    axes.set_title(f"{title}: {attention.description}", fontsize=10)
    figure.colorbar(image, ax=axes, fraction=0.05, pad=0.02)
    return figure


# ---------------------------------------------------------------------------------------------------------------
# Files
# ---------------------------------------------------------------------------------------------------------------


class InputFileError(ValueError):
    """An uploaded file that cannot be used; the message says why in plain words."""


def read_lines(path: str | Path | None, what: str) -> list[str]:
    """Lines of an uploaded UTF-8 text file, refusing binary, empty and oversized files."""
    if path is None:
        raise InputFileError(f"Upload the {what} first.")
    path = Path(path)
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise InputFileError(f"The {what} ({path.name}) has {size:,} bytes; the limit here is {MAX_FILE_BYTES:,}.")
    data = path.read_bytes()
    if b"\x00" in data:
        raise InputFileError(
            f"The {what} ({path.name}) looks like a binary file; upload plain text, one sentence per line."
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise InputFileError(
            f"The {what} ({path.name}) is not UTF-8 text (byte {error.start} cannot be decoded); save it as UTF-8."
        ) from None
    lines = text.splitlines()
    if not any(line.strip() for line in lines):
        raise InputFileError(f"The {what} ({path.name}) has no text.")
    return lines


@dataclass
class FileResult:
    path: str | None  # the TSV of translations
    summary: str  # Markdown: scores, timings, notices, or why nothing was translated
    scores: dict[str, dict] = field(default_factory=dict)  # system name → {"bleu", "chrf"}


def translate_file(
    source_file: str | Path | None,
    reference_file: str | Path | None = None,
    decoding: str = "beam search",
    num_beams: int = 4,
    max_new_tokens: int = 128,
    *,
    ours: Translator,
    marian: "BackgroundModel | Translator | None",
    progress=None,
) -> FileResult:
    """Translate a file (one sentence per line) with both systems into a TSV; corpus BLEU/chrF with references."""
    try:
        beams, max_new_tokens = _decoding_settings(decoding, num_beams, max_new_tokens)
        lines = read_lines(source_file, "English file")
        references = read_lines(reference_file, "reference file") if reference_file else None
    except (InputFileError, TypeError, ValueError) as error:
        return FileResult(None, f"⚠️ {error}")
    if references is not None and len(references) != len(lines):
        return FileResult(
            None,
            f"⚠️ The reference file has {len(references):,} lines but the English file has {len(lines):,}: "
            "they must pair up line by line.",
        )
    notices = []
    if len(lines) > MAX_FILE_LINES:
        notices.append(f"The file has {len(lines):,} lines; only the first {MAX_FILE_LINES:,} were translated.")
        lines = lines[:MAX_FILE_LINES]
        references = references[:MAX_FILE_LINES] if references is not None else None

    # Blank lines stay blank in the output, so the lines keep pairing up with the input and references.
    filled = [index for index, line in enumerate(lines) if line.strip()]
    sentences = [lines[index].strip() for index in filled]
    systems = [ours]
    marian_translator = _marian_translator(marian)
    if marian_translator is not None:
        systems.append(marian_translator)
    else:
        notices.append(_unavailable(marian))

    columns, rows = {}, []
    for number, translator in enumerate(systems):

        def on_batch(done, total, number=number, translator=translator):
            if progress is not None:
                progress((number * total + done, len(systems) * total), desc=f"Translating with {translator.name}")

        output = _run_system(translator, sentences, [" "] * len(sentences), beams, max_new_tokens, "", on_batch)
        translations = [""] * len(lines)
        for index, translation in zip(filled, output.run.translations, strict=True):
            translations[index] = translation
        columns[translator.name] = translations
        notices += output.notices
        row = {"System": translator.name, "Sentences": len(sentences), "Seconds": round(output.seconds, 2)}
        if references is not None:
            row.update(corpus_scores(translations, references))
        rows.append(row)

    folder = Path(tempfile.mkdtemp(prefix="translations-"))
    path = folder / f"{Path(source_file).stem}.de.tsv"
    with open(path, "w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t")
        header = ["line", "source", *columns] + (["reference"] if references is not None else [])
        writer.writerow(header)
        for index, line in enumerate(lines):
            row = [index + 1, line, *(column[index] for column in columns.values())]
            writer.writerow(row + ([references[index]] if references is not None else []))

    scores = {row["System"]: {"bleu": row["bleu"], "chrf": row["chrf"]} for row in rows if "bleu" in row}
    return FileResult(str(path), _file_summary(rows, notices, references is not None), scores)


def _file_summary(rows: list[dict], notices: list[str], scored: bool) -> str:
    header = "| System | Sentences | Seconds |" + (" BLEU | chrF |" if scored else "")
    rule = "|---|---:|---:|" + ("---:|---:|" if scored else "")
    lines = [header, rule]
    for row in rows:
        cells = f"| {row['System']} | {row['Sentences']:,} | {row['Seconds']:.2f} |"
        lines.append(cells + (f" {row['bleu']:.2f} | {row['chrf']:.2f} |" if scored else ""))
    if not scored:
        lines.append("\nUpload a reference file (German, same number of lines) for corpus BLEU and chrF.")
    lines += [f"\n⚠️ {notice}" for notice in notices]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------------------------
# Corpus-level comparison
# ---------------------------------------------------------------------------------------------------------------

COMPARISON_HEADERS = ["System", "Test set", "Sentences", "BLEU", "chrF", "Parameters", "Sentences/s", "Note"]


def _read_json(path: Path) -> tuple[dict | None, str]:
    """The file's JSON object, or None and a note saying why not ("" when the file is simply absent)."""
    if not path.is_file():
        return None, ""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        return None, f"{path.name} could not be read ({_first_line(error)})."
    return (data, "") if isinstance(data, dict) else (None, f"{path.name} is not a JSON object.")


def _number(value, digits: int = 2) -> str:
    return f"{value:.{digits}f}" if isinstance(value, int | float) else ""


def _count(value) -> str:
    return f"{value:,}" if isinstance(value, int) else ""


def _evaluation_rows(evaluation: dict) -> list[list[str]]:
    """eval_results.json: one row per evaluated split ({"bleu", "chrf", ...}), besides num_parameters."""
    rows = []
    for split, result in evaluation.items():
        if isinstance(result, dict) and "bleu" in result:
            beams = f"beam {result['num_beams']}" if result.get("num_beams") else ""
            rows.append([f"{OURS_NAME}, eval_results.json", split, _count(result.get("num_sentences")),
                         _number(result["bleu"]), _number(result.get("chrf")),
                         _millions(evaluation.get("num_parameters")), "", beams])
    return rows


def _comparison_rows(comparison: dict) -> list[list[str]]:
    """compare.py's JSON: one row per system, its error (if any) in the note."""
    test_set = Path(str(comparison.get("source_file") or "")).stem
    beams = f"beam {comparison.get('num_beams', '?')}"
    return [
        [str(system.get("model", "?")), test_set, _count(comparison.get("num_sentences")),
         _number(system.get("bleu")), _number(system.get("chrf")), _millions(system.get("num_parameters")),
         _number(system.get("sentences_per_second"), 1), str(system.get("error") or beams)]
        for system in comparison.get("systems", []) if isinstance(system, dict)
    ]


def comparison_table(our_model: str, comparison_path: Path = COMPARISON_PATH) -> tuple[str, list[list[str]]]:
    """A Markdown summary and table rows from our model's eval_results.json and the comparison JSON, where present."""
    rows, notes = [], []
    folder = Path(our_model)
    evaluation, problem = _read_json(folder / "eval_results.json") if folder.is_dir() else (None, "")
    notes += [problem] if problem else []
    if evaluation:
        rows += _evaluation_rows(evaluation)
    comparison, problem = _read_json(comparison_path)
    notes += [problem] if problem else []
    if comparison:
        rows += _comparison_rows(comparison)
        notes.append(
            f"`{comparison_path.name}`: {comparison.get('num_sentences', '?')} sentences of "
            f"`{comparison.get('source_file', '?')}`, beam {comparison.get('num_beams', '?')}, every system on the "
            "same machine (`python compare.py`)."
        )
    if not rows:
        notes.insert(
            0,
            "No corpus-level results yet: train the model (`python train.py` writes eval_results.json beside it) "
            f"and run `python compare.py` (writes {comparison_path.name}).",
        )
    summary = "Cased, detokenised sacreBLEU and chrF on whole test sets.\n\n" + "\n\n".join(notes)
    return summary, rows


# ---------------------------------------------------------------------------------------------------------------
# Formatting for the panels
# ---------------------------------------------------------------------------------------------------------------


def _millions(count) -> str:
    return "" if count is None else f"{count / 1e6:.2f}M"


def format_details(output: SystemOutput) -> str:
    if output.message:
        return f"⚠️ {output.message}"
    if output.seconds is None:
        return ""
    lines = [
        f"**Latency** {output.seconds:.2f} s · **Tokens generated** {output.tokens_generated} · "
        f"**Parameters** {_millions(output.num_parameters)}"
    ]
    if output.scores:
        lines.append(f"**Sentence BLEU** {output.scores['bleu']:.2f} · **chrF** {output.scores['chrf']:.2f}")
    lines += [f"⚠️ {notice}" for notice in output.notices]
    return "\n\n".join(lines)


def _attention_state(result: TextResult) -> dict | None:
    """What the heatmaps need later, kept in the session (ids only: small and serialisable)."""
    if not result.sentences:
        return None

    def ids(output: SystemOutput):
        return None if output.run is None else {"source": output.run.source_ids, "generated": output.run.generated_ids}

    return {"sentences": result.sentences, "ours": ids(result.ours), "marian": ids(result.marian)}


# ---------------------------------------------------------------------------------------------------------------
# Layout and wiring
# ---------------------------------------------------------------------------------------------------------------

INTRO = """# English → German: our Transformer beside MarianMT
Our model is the Transformer of *Attention Is All You Need*, written from scratch and trained on Multi30k
(29,000 image descriptions). MarianMT (`Helsinki-NLP/opus-mt-en-de`) is a production model trained on far more
data. Both translate the same input with the same decoding settings."""


def build_demo(our_model: str = DEFAULT_MODEL, marian_model: str = DEFAULT_MARIAN_MODEL, *,
               comparison_path: Path = COMPARISON_PATH) -> gr.Blocks:
    """Load our model (raising ModelUnavailableError if it cannot be), start loading MarianMT, build the page."""
    our_model = resolve_our_model(our_model)
    ours = load_our_translator(our_model)
    marian = BackgroundModel(marian_model, MARIAN_NAME)
    layer_choices = ["mean over layers and heads"] + [f"layer {n + 1}" for n in range(ours.num_layers)]

    def translate(text, decoding, num_beams, max_new_tokens, reference):
        """Translate English text with both systems.

        Args: text (str, one or more sentences), decoding ("beam search" or "greedy"), num_beams (int, 1-8; used
        with beam search), max_new_tokens (int), reference (str, optional German reference; "" for none).
        Returns: our translation, our details (Markdown: latency, tokens generated, parameters, sentence
        BLEU/chrF), MarianMT's translation, MarianMT's details, and a notice about the input ("" when none).
        """
        result = translate_text(text, decoding, num_beams, max_new_tokens, reference, ours=ours, marian=marian)
        notice = "\n\n".join(f"⚠️ {line}" for line in ([result.message] if result.message else []) + result.notices)
        return (
            result.ours.translation, format_details(result.ours),
            result.marian.translation, format_details(result.marian),
            notice, _attention_state(result),
        )

    def draw_heatmaps(state, sentence_index, layer_index):
        if not state:
            return None, None
        sentence_index = min(int(sentence_index or 0), len(state["sentences"]) - 1)
        layer = None if not layer_index else int(layer_index) - 1
        figures = []
        for key, translator in (("ours", ours), ("marian", marian.translator)):
            ids = state.get(key)
            if ids is None or translator is None:
                figures.append(None)
                continue
            attention = cross_attention_map(
                translator, ids["source"][sentence_index], ids["generated"][sentence_index], layer
            )
            figures.append(plot_attention(attention, translator.name))
        return tuple(figures)

    def refresh_heatmaps(state, layer_index):
        sentences = state["sentences"] if state else []
        choices = [(f"{n + 1}. {s[:60]}", n) for n, s in enumerate(sentences)]
        return (gr.Dropdown(choices=choices, value=0 if choices else None), *draw_heatmaps(state, 0, layer_index))

    def run_file(source_file, reference_file, decoding, num_beams, max_new_tokens, progress=gr.Progress()):
        """Translate an uploaded text file, one English sentence per line, with both systems.

        Returns a TSV (line, source, one column per system, reference) and a Markdown summary with timings and,
        when a reference file with the same number of lines is given, corpus BLEU and chrF.
        """
        result = translate_file(source_file, reference_file, decoding, num_beams, max_new_tokens,
                                ours=ours, marian=marian, progress=progress)
        return result.path, result.summary

    def comparison():
        """Corpus-level results: Markdown notes and a table (eval_results.json and the comparison JSON)."""
        summary, rows = comparison_table(our_model, comparison_path)
        return summary, {"headers": COMPARISON_HEADERS, "data": rows or [[""] * len(COMPARISON_HEADERS)]}

    def marian_status():
        """MarianMT's loading status in one line."""
        return marian.status()

    def poll_marian():
        return marian.status(), gr.Timer(active=not marian.done)

    with gr.Blocks(title="Transformer vs MarianMT, English → German") as demo:
        gr.Markdown(INTRO)
        with gr.Row():
            decoding = gr.Radio(list(DECODINGS), value="beam search", label="Decoding")
            num_beams = gr.Slider(1, MAX_BEAMS, value=4, step=1, label="Beams (beam search)")
            max_new_tokens = gr.Slider(1, ours.max_new_tokens, value=min(128, ours.max_new_tokens), step=1,
                                       label="Maximum new tokens")
        with gr.Tabs():
            with gr.Tab("Translate"):
                with gr.Row():
                    text = gr.Textbox(label="English", lines=4, placeholder="Type one or more English sentences.",
                                      elem_id="english")
                    reference = gr.Textbox("", label="Reference translation (optional, German)", lines=4,
                                           elem_id="reference")
                translate_button = gr.Button("Translate", variant="primary", elem_id="translate")
                notice = gr.Markdown(label="Notice", elem_id="notice")
                with gr.Row(equal_height=False):
                    with gr.Column():
                        gr.Markdown(f"### {OURS_NAME}\n`{ours.reference}`")
                        ours_text = gr.Textbox(label="Our translation (German)", lines=4, interactive=False,
                                               elem_id="ours-translation")
                        ours_details = gr.Markdown(label="Our details", elem_id="ours-details")
                    with gr.Column():
                        gr.Markdown(f"### {MARIAN_NAME}\n`{marian.reference}`")
                        marian_state = gr.Markdown(marian.status(), label="MarianMT status", elem_id="marian-status")
                        marian_text = gr.Textbox(label="MarianMT translation (German)", lines=4, interactive=False,
                                                 elem_id="marian-translation")
                        marian_details = gr.Markdown(label="MarianMT details", elem_id="marian-details")
                gr.Examples(EXAMPLES, inputs=[text, reference], label="Examples (with references)",
                            cache_examples=False)
                gr.Markdown("### Cross-attention\nHow strongly each generated token attends to each source token.")
                with gr.Row():
                    sentence = gr.Dropdown(choices=[], type="value", label="Sentence")
                    layer = gr.Dropdown(choices=[(label, index) for index, label in enumerate(layer_choices)],
                                        value=0, label="Layer")
                with gr.Row():
                    ours_plot = gr.Plot(label=f"{OURS_NAME} cross-attention", show_label=False, elem_id="ours-heatmap")
                    marian_plot = gr.Plot(label=f"{MARIAN_NAME} cross-attention", show_label=False,
                                          elem_id="marian-heatmap")
            with gr.Tab("File"):
                gr.Markdown("One English sentence per line (UTF-8). Optionally a German reference file with the "
                            "same number of lines for corpus BLEU and chrF.")
                with gr.Row():
                    source_file = gr.File(label="English file (.txt)", file_types=[".txt"], type="filepath")
                    reference_file = gr.File(label="Reference file (.txt, optional)", file_types=[".txt"],
                                             type="filepath")
                file_button = gr.Button("Translate file", variant="primary")
                file_output = gr.File(label="Translations (TSV)")
                file_summary = gr.Markdown(label="Summary")
            with gr.Tab("Corpus comparison"):
                comparison_summary = gr.Markdown(label="Notes")
                comparison_rows = gr.Dataframe(headers=COMPARISON_HEADERS, label="Corpus results", interactive=False,
                                               wrap=True)
        attention_state = gr.State()
        timer = gr.Timer(1.0)

        translate_button.click(
            translate, [text, decoding, num_beams, max_new_tokens, reference],
            [ours_text, ours_details, marian_text, marian_details, notice, attention_state],
            api_name="translate",
        ).then(
            refresh_heatmaps, [attention_state, layer], [sentence, ours_plot, marian_plot], api_visibility="private",
        )
        sentence.input(draw_heatmaps, [attention_state, sentence, layer], [ours_plot, marian_plot],
                       api_visibility="private")
        layer.input(draw_heatmaps, [attention_state, sentence, layer], [ours_plot, marian_plot],
                    api_visibility="private")
        file_button.click(run_file, [source_file, reference_file, decoding, num_beams, max_new_tokens],
                          [file_output, file_summary], api_name="translate_file")
        demo.load(comparison, None, [comparison_summary, comparison_rows], api_name="comparison")
        demo.load(marian_status, None, marian_state, api_name="marian_status")
        # Status polling skips the queue: it must not wait behind translations.
        timer.tick(poll_marian, None, [marian_state, timer], api_visibility="private", queue=False,
                   show_progress="hidden")
    demo.queue(default_concurrency_limit=CONCURRENCY_LIMIT, max_size=64)
    return demo


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Our Transformer and MarianMT side by side, English → German.")
    parser.add_argument("--model", default=os.environ.get("TRANSFORMER_MT_MODEL", DEFAULT_MODEL),
                        help="our model: a saved folder or a Hub id (env TRANSFORMER_MT_MODEL; "
                             f"default {DEFAULT_MODEL})")
    parser.add_argument("--marian-model", default=os.environ.get("MARIAN_MODEL", DEFAULT_MARIAN_MODEL),
                        help=f"MarianMT folder or Hub id (env MARIAN_MODEL; default {DEFAULT_MARIAN_MODEL})")
    parser.add_argument("--host", default=None, help="address to listen on (default: gradio's, 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default: gradio's, 7860)")
    args = parser.parse_args(argv)
    try:
        demo = build_demo(args.model, args.marian_model)
    except ModelUnavailableError as error:
        sys.exit(f"app.py: {error}")
    demo.launch(server_name=args.host, server_port=args.port)


if __name__ == "__main__":
    main()
