"""The File tab: an uploaded text file (one English sentence per line) in, a TSV of every system's translations out.

Lines are split as compare.py reads corpora (`data.split_lines`). The TSV goes into Gradio's cache whole or not at all,
once every line is translated. A visitor reads one plain line about what went wrong, never an error's own text (it may
name a server path); the log gets the detail once."""

import csv
import errno
import os
import re
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from transformer_en_de.data import split_lines
from transformer_en_de.evaluation import corpus_scores
from transformer_en_de.markdown import markdown_table

from .out_of_depth import DepthCheck
from .serving import Busy, Cancelled, Limits
from .text_checks import InputError, as_text, check_decoding, check_text
from .translation import ADVICE, RequestContext, RequestPlan, SystemOutput, run_systems, why_stopped
from .translators import models_beside

FILE_TYPES = [".txt", ".en", ".de"]
SUMMARY_HEADERS = ["System", "Sentences", "Seconds", "BLEU", "chrF"]
PREVIEW_LINES = 10
PREVIEW_CELL_CHARS = 300  # a preview cell shows at most this much of a line; the download has every line whole
NO_ROOM = "The server has no room to write the translations now; try again later."
CANNOT_STORE = "The server cannot store the translations right now; try again later."
FAILED = "The server could not translate this file; try again later."


@dataclass
class FileResult:
    path: str | None  # the TSV of translations
    summary: str  # Markdown: scores, timings, notices, or why nothing was translated
    scores: dict[str, dict] = field(default_factory=dict)  # system name → {"bleu", "chrf"}
    preview: str = ""  # Markdown: the first lines beside their translations


def read_upload(path: str | Path | None, what: str, limits: Limits = Limits()) -> list[str]:
    """Lines of a visitor's uploaded UTF-8 text file; InputError in the visitor's words for binary, non-UTF-8,
    oversized or empty files (`check_lines` checks each line)."""
    if path is None:
        raise InputError(f"Upload the {what} first.")
    path = Path(path)
    name = as_text(path.name)  # the visitor's file name, shown as text
    try:
        if not path.is_file():  # gone from the upload folder (it keeps files an hour), or a folder
            raise InputError(f"The {what} is no longer on the server (uploads are kept for an hour); upload it again.")
        size = path.stat().st_size
        if size > limits.max_file_bytes:
            raise InputError(f"The {what} ({name}) has {size:,} bytes; the limit here is {limits.max_file_bytes:,}.")
        data = path.read_bytes()
    except OSError as error:  # its text names the upload's path on the server: the log's, not the visitor's
        log_failure(f"an uploaded {what} could not be read", error)
        raise InputError(f"The {what} ({name}) could not be read on the server; upload it again.") from None
    if b"\x00" in data:
        raise InputError(f"The {what} ({name}) looks like a binary file; upload plain text, one sentence per line.")
    try:
        lines = split_lines(data.decode("utf-8").removeprefix("\ufeff"))  # a byte-order mark is no part of a sentence
    except UnicodeDecodeError as error:
        raise InputError(
            f"The {what} ({name}) is not UTF-8 text (byte {error.start} cannot be decoded); save it as UTF-8."
        ) from None
    if not any(line.strip() for line in lines):
        raise InputError(f"The {what} ({name}) has no text.")
    return lines


def check_lines(lines: list[str], what: str, path) -> None:
    """InputError naming the first line that is not text (`check_text`)."""
    for number, line in enumerate(lines, start=1):
        check_text(line, f"{what} ({as_text(Path(path).name)}, line {number})")


def read_files(source_file, reference_file, request: RequestPlan):
    """The English file's lines and the reference's (None without one); InputError, or Busy before any work."""
    limits = request.context.limits
    lines = read_upload(source_file, "English file", limits)
    # The file's one room request, before anything else is done with it (checks, tokenizing, planning): a burst of
    # long files while the long requests are all in flight costs the other visitors nothing.
    request.admit(sum(1 for line in lines[: limits.max_file_lines] if line.strip()))
    check_lines(lines, "English file", source_file)
    references = read_upload(reference_file, "reference file", limits) if reference_file else None
    if references is not None:
        check_lines(references, "reference file", reference_file)
    if references is not None and len(references) != len(lines):
        raise InputError(
            f"The reference file has {len(references):,} lines but the English file has {len(lines):,}: "
            "they must pair up line by line."
        )
    return lines, references


def translate_file(
    source_file: str | Path | None,
    reference_file: str | Path | None,
    decoding: str,
    num_beams: int,
    max_new_tokens: int,
    *,
    context: RequestContext,
    output_dir: str | Path,
    progress=None,
) -> FileResult:
    """Translate a file with every system of `context` into a TSV in `output_dir`, with corpus scores and confidence."""
    limits = context.limits
    try:
        request = RequestPlan(context, check_decoding(decoding, num_beams, max_new_tokens, limits), limits.file, "line")
        lines, references = read_files(source_file, reference_file, request)
    except (InputError, Busy) as error:
        return FileResult(None, f"⚠️ {error}")
    notices = []
    if len(lines) > limits.max_file_lines:
        notices.append(f"The file has {len(lines):,} lines; only the first {limits.max_file_lines:,} were translated.")
        lines = lines[: limits.max_file_lines]
        references = references[: limits.max_file_lines] if references is not None else None
    folder = Path(output_dir) / "translations"
    # the visitor's file name: letters, digits, "-", "_" and "." only, at most 60 characters
    stem = re.sub(r"[^\w.-]+", "_", Path(source_file).stem)[:60].strip("._") or "translations"
    try:  # where the translations go, before any is made: a TSV that cannot be written costs nothing
        check_disk(folder, lines, references, len(context.systems))
        try:
            columns, scored = translate_lines(lines, references, request, notices, progress)
        except (Busy, Cancelled) as error:
            return FileResult(None, f"⚠️ {why_stopped(error)}")
        except Exception as error:  # noqa: BLE001 - one plain line to the visitor (an error's text may name a path)
            log_failure("a file job failed", error)
            return FileResult(None, f"⚠️ {FAILED}")
        path = write_tsv(folder, stem, lines, columns, references)
    except OSError as error:
        return FileResult(None, f"⚠️ {storage_problem(error)}")
    scores = {output.name: output.scores for output in scored if output.scores}
    summary = file_summary(scored, notices, references is not None)
    return FileResult(str(path), summary, scores, preview(lines, columns))


def log_failure(what: str, error: BaseException) -> None:
    """One line in the server's log: what failed, and the error's own words (paths included: the operator's)."""
    print(f"app.py: {what}: {type(error).__name__}: {' '.join(str(error).split())}", flush=True)


def storage_problem(error: OSError) -> str:
    """The visitor's line for a TSV that cannot be written (logged once with its detail): no path, no errno."""
    log_failure("a file job's translations could not be stored", error)
    return NO_ROOM if error.errno in (errno.ENOSPC, errno.EDQUOT) else CANNOT_STORE


def translate_lines(lines, references, request: RequestPlan, notices: list, progress):
    """(columns, the outputs that ran) of every system's translations of `lines`, blank lines left blank so that the
    lines keep pairing up with the input and references; its notices added to `notices`. Raises Busy or Cancelled."""
    systems = request.context.systems
    filled = [index for index, line in enumerate(lines) if line.strip()]
    sentences = [lines[index].strip() for index in filled]

    def on_batch(number, done, total):
        if progress is not None:
            progress((number * total + done, len(systems) * total), desc=f"Translating with {systems[number].name}")

    plan = request.fit(sentences).plan
    notices += list(plan.notices)
    outputs = run_systems(request, sum(map(len, references or [])), on_batch)
    columns, confidence = {}, {}
    for output in outputs:
        if output.run is None:
            notices.append(output.message)
            continue
        columns[output.name] = spread(output.run.texts, filled, len(lines))
        if output.depth:
            confidence[f"{output.name} confidence"] = spread([depth_cell(c) for c in output.depth], filled, len(lines))
            flagged = sum(check.flagged for check in output.depth)
            advice = ADVICE[models_beside([other.translator for other in outputs[1:] if other.run is not None])]
            notices.append(
                f"{output.name}: {flagged:,} of {len(output.depth):,} sentences flagged as out of its depth"
                + (f" (⚠ in its confidence column). {advice}" if flagged else ".")
            )
        notices += [f"{output.name}: {notice}" for notice in output.notices]
        # Scored when every line was translated (a plan that only lowered the beams translated them all)
        if references is not None and len(plan) == len(sentences) and not output.run.stopped_early:
            output.scores = corpus_scores(columns[output.name], references)
    return columns | confidence, [output for output in outputs if output.run is not None]


def depth_cell(check: DepthCheck) -> str:
    """A line's confidence, "⚠" and why when out of the model's depth ("" when not translated: nan)."""
    if check.score != check.score:
        return ""
    return f"{check.score:.0%}" + (f" ⚠ {check.reason}" if check.flagged else "")


def spread(values: list[str], filled: list[int], count: int) -> list[str]:
    """`values` at the line numbers `filled`, "" on every other of `count` lines."""
    column = [""] * count
    for index, value in zip(filled, values, strict=False):
        column[index] = value
    return column


def preview(lines: list[str], columns: dict[str, list[str]]) -> str:
    """The first `PREVIEW_LINES` non-blank lines beside each system's translation, every cell shown as text and cut to
    `PREVIEW_CELL_CHARS` (a line may be a megabyte long; the download has it whole)."""
    filled = [index for index, line in enumerate(lines) if line.strip()]
    if not filled:
        return ""

    def cut(cell: str) -> str:
        return as_text(cell if len(cell) <= PREVIEW_CELL_CHARS else cell[:PREVIEW_CELL_CHARS].rstrip() + " …")

    rows = [
        [cut(cell) for cell in (str(index + 1), lines[index], *(c[index] for c in columns.values()))]
        for index in filled[:PREVIEW_LINES]
    ]
    table = markdown_table(["Line", "English", *columns], rows, "r" + "l" * len(columns) + "l")
    more = len(filled) - PREVIEW_LINES
    return table + (f"\n\n… and {more:,} more lines in the download." if more > 0 else "")


def check_disk(folder: Path, lines: list[str], references: list[str] | None, systems: int) -> None:
    """OSError unless `folder` takes new files and its disk has room for the TSV; nothing is left in it."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryFile(dir=folder):  # made and gone at once: the folder takes files
        pass
    english = sum(len(line.encode()) + 64 for line in lines)  # 64: a line's number, tabs, a confidence's reason
    # Every column at twice its bytes, and the references
    needed = english * (2 * systems + 3) + sum(len(line.encode()) for line in references or [])
    if shutil.disk_usage(folder).free < needed:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def write_tsv(folder: Path, stem: str, lines, columns: dict[str, list[str]], references) -> Path:
    """The TSV in a fresh subfolder of `folder` (two visitors' files never clash), written into a hidden file beside
    it and moved into place at the end: on any failure (a full disk) nothing is left; OSError."""
    folder = folder / uuid.uuid4().hex
    folder.mkdir(parents=True)
    path = folder / f"{stem}.de.tsv"
    partial = folder / f".{path.name}.partial"
    try:
        with open(partial, "w", encoding="utf-8", newline="") as handle:
            write_rows(handle, lines, columns, references)
        os.replace(partial, path)
    except BaseException:  # a full disk, or the server stopping: no half-written TSV, no empty folder
        shutil.rmtree(folder, ignore_errors=True)
        raise
    return path


def write_rows(handle, lines: list[str], columns: dict[str, list[str]], references: list[str] | None) -> None:
    """line, source, one column per system (and our confidence), reference."""
    writer = csv.writer(handle, delimiter="\t")
    writer.writerow(["line", "source", *columns] + (["reference"] if references is not None else []))
    for index, line in enumerate(lines):
        row = [index + 1, line, *(column[index] for column in columns.values())]
        writer.writerow(row + ([references[index]] if references is not None else []))
    handle.flush()


def file_summary(outputs: list[SystemOutput], notices: list[str], with_references: bool) -> str:
    scored = any(output.scores for output in outputs)
    header = SUMMARY_HEADERS if scored else SUMMARY_HEADERS[:3]
    table = []
    for output in outputs:
        cells = [output.name, f"{len(output.run.plan):,}", f"{output.run.seconds:.2f}"]
        if scored:
            cells += [f"{output.scores[name]:.2f}" if output.scores else "" for name in ("bleu", "chrf")]
        table.append(cells)
    lines = [markdown_table(header, table, "lrr" + "rr" * scored)]
    if not with_references:
        lines.append("\nUpload a reference file (German, same number of lines) for corpus BLEU and chrF.")
    elif not scored:
        lines.append("\nNo corpus scores: not every line was translated (see below).")
    lines += [f"\n⚠️ {notice}" for notice in notices]
    return "\n".join(lines)
