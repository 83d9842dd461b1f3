"""Translate a monolingual file, one sentence per line, into a synthetic parallel corpus (back-translation).

    python translate_corpus.py --model runs/de-en --input ../shared/data/multi30k-task2/train.1.de \\
        --output runs/bt/task2.1 --source_lang de --target_lang en --num_beams 4
    python translate_corpus.py ... --sample --top_k 10 --seed 1     # sampled back-translation

writes `OUTPUT.de` (the input sentences, cleaned as the training data is) and `OUTPUT.en` (their translations),
line-aligned, plus `OUTPUT.progress.json`, the run's record: model fingerprint, decoding settings, input
fingerprint, lines done, counts of truncated sources and of translations stopped at the length bound, wall and CPU
seconds spent translating.

- Every sentence goes through the one engine (`decoding.engine.translate`): length-sorted batches inside
  each chunk, the per-sentence length bound, greedy, beam search or sampling (`DecodingSettings`).
- `--backend ctranslate2` decodes with CTranslate2 (converted once and cached beside the model, in a worker process;
  `transformer_en_de/decoding/backends.py`), `--int8` with its int8 weights; the backend is recorded with the decoding.
- Resumable: the input is cut into chunks of `--chunk_size` lines; after each chunk both files are appended and
  synced, then the progress file is replaced atomically. A killed run leaves at most a partial chunk past the
  recorded sizes: the next run with the same command cuts it off and goes on from the last finished chunk, so no
  line is lost or written twice, and the result equals an uninterrupted run (sampling seeds each chunk with
  `--seed + chunk number`). A different model, decoding setting, chunking or input against existing output is
  refused; `--limit N` may grow between runs (a last chunk it cut short is translated again, whole).
  `--stop_after_chunks K` ends a run after K chunks (to split the work).
- Input lines are cleaned like the training data (HTML entities, non-breaking spaces, runs of whitespace); a line
  left empty or without a letter or digit (training drops those) is skipped in both files, so the two outputs
  stay aligned with each other but not with input line numbers; the progress file counts the skipped lines.
  Translations are cleaned the same way, so a generated line break can never shift the alignment.
- Progress (lines done / total, sentences per second, ETA) goes to stderr after each chunk; the end of a run gives
  wall and CPU seconds. Shipped model (d_model 256, 3+3 layers), one thread, batches of 64: 66 sentences per
  CPU-second greedy, 35 with beam 4, i.e. about 36 min and 68 min for the 145,000 lines of train.{1..5}.
"""

import os

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one process, batches already: no tokenizer threads

import argparse  # noqa: E402
import copy  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402

from transformer_en_de.data import DataError, clean_line, normalise_text, read_lines  # noqa: E402
from transformer_en_de.decoding.backends import BackendError, fingerprint_model, load_backend, resolve_backend  # noqa: E402
from transformer_en_de.decoding.engine import DecodingSettings, resolved_settings, translate  # noqa: E402
from transformer_en_de.decoding.flags import add_backend_flags, add_length_bound_flags  # noqa: E402
from transformer_en_de.decoding.int8 import int8_dynamic  # noqa: E402
from transformer_en_de.decoding.loading import load_model  # noqa: E402

DEFAULT_CHUNK_SIZE = 1000
# Shipped model, one thread, 2,000 task-2 lines: greedy 66 sentences per CPU-second at 64 against 58 at 32; beam 4
# 35 at either. Chunks of 1,000 sentences sort well enough for batches of 64.
DEFAULT_BATCH_SIZE = 64
DEFAULT_SEED = 0
STATE_VERSION = 1
# What a chunk adds to; `whole_chunks` keeps their values at the last chunk that ended on a multiple of chunk_size.
COUNTERS = ("lines_read", "lines_written", "lines_skipped", "sources_truncated", "hit_length_bound", "bytes")


class CorpusError(RuntimeError):
    """The corpus cannot be translated as asked; the message says why and what to do."""


@dataclass
class Chunk:
    index: int
    start: int  # first input line (0-based)
    stop: int  # one past the last input line


def fingerprint_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_decoding(model, settings: DecodingSettings, chunk_size: int, seed: int) -> dict:
    """The effective decoding of a run (the model's saved settings filled in): what a resumed run must repeat."""
    return {**resolved_settings(model, settings), "chunk_size": chunk_size, "seed": seed}


class CorpusWriter:
    """The two output files and the progress file; appends a chunk so that a kill never leaves a half-counted one."""

    def __init__(self, output: Path, source_lang: str, target_lang: str):
        self.output = output
        self.paths = {
            "source": output.with_name(f"{output.name}.{source_lang}"),
            "target": output.with_name(f"{output.name}.{target_lang}"),
        }
        self.state_path = output.with_name(f"{output.name}.progress.json")
        self.state: dict | None = None

    def check_writable(self) -> None:
        """Refuses, before any work, an output that cannot be written: its folder made and a file written in it for
        real (permissions alone say nothing to root), and the files a resumed run appends to opened for appending."""
        try:
            self.output.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=self.output.parent, prefix=f".{self.output.name}.", suffix=".probe"):
                pass
            for path in (*self.paths.values(), self.state_path):
                if path.exists():
                    with open(path, "ab"):
                        pass
        except OSError as error:
            raise CorpusError(
                f"--output {self.output} cannot be written ({error.strerror or error}): choose another --output."
            ) from error

    def open(self, identity: dict, total_lines: int, chunk_size: int) -> dict:
        """Start or resume: the state to go on from. Refuses output of another command or with other settings."""
        existing = [path for path in self.paths.values() if path.exists()]
        if not self.state_path.is_file():
            if existing:
                raise CorpusError(
                    f"{', '.join(map(str, existing))} already exist(s) but {self.state_path} does not, so they were "
                    "not written by this command (or its progress file was deleted). Delete them or choose another "
                    "--output."
                )
            self.state = {
                "version": STATE_VERSION,
                **identity,
                "total_lines": total_lines,
                "lines_read": 0,
                "lines_written": 0,
                "lines_skipped": 0,
                "sources_truncated": 0,
                "hit_length_bound": 0,
                "bytes": {"source": 0, "target": 0},
                "seconds": 0.0,
                "cpu_seconds": 0.0,
            }
            self.state["whole_chunks"] = self._counters()
            self.output.parent.mkdir(parents=True, exist_ok=True)
            for path in self.paths.values():
                path.write_bytes(b"")
            self._save()
            return self.state
        try:
            state = json.loads(self.state_path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError) as error:
            raise CorpusError(f"{self.state_path} is not a progress file of this command ({error}).") from error
        differences = [
            f"{key}: {state.get(key)!r} there, {value!r} now"
            for key, value in identity.items()
            if key not in ("model", "input") and state.get(key) != value
        ]
        if state.get("version") != STATE_VERSION or differences:
            differences = differences or [f"version: {state.get('version')!r} there, {STATE_VERSION} now"]
            raise CorpusError(
                f"{self.state_path} records a run with other settings, so its output cannot be continued with these "
                f"({'; '.join(differences)}). Re-run with the recorded settings to continue it, or choose another "
                "--output (or delete the three files) to start anew."
            )
        if state["lines_read"] % chunk_size and total_lines > state["lines_read"]:
            # The last chunk was cut short by --limit; the limit has grown: translate that chunk again, whole, so
            # that the output is what one run gives (the same batches, the same seed for sampling).
            state.update(copy.deepcopy(state["whole_chunks"]))
        # A run killed while appending a chunk leaves bytes past the recorded sizes: cut them off.
        for side, path in self.paths.items():
            recorded = state["bytes"][side]
            size = path.stat().st_size if path.is_file() else -1
            if size < recorded:
                raise CorpusError(
                    f"{path} is shorter ({max(size, 0)} bytes) than {self.state_path} records ({recorded} bytes): it "
                    "was changed after the run wrote it. Delete the output files and the progress file to start anew."
                )
            if size > recorded:
                with open(path, "r+b") as handle:
                    handle.truncate(recorded)
        state["total_lines"] = total_lines
        self.state = state
        return state

    def append(
        self,
        chunk: Chunk,
        chunk_size: int,
        sources: list[str],
        targets: list[str],
        counts: dict,
        seconds: float,
        cpu_seconds: float,
    ) -> None:
        """Append one translated chunk to both files, sync them, then record it in the progress file atomically."""
        for side, lines in (("source", sources), ("target", targets)):
            data = "".join(line + "\n" for line in lines).encode("utf-8")
            with open(self.paths[side], "ab") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            self.state["bytes"][side] += len(data)
        self.state["lines_read"] = chunk.stop
        self.state["lines_written"] += len(sources)
        for key, value in counts.items():
            self.state[key] += value
        self.state["seconds"] = round(self.state["seconds"] + seconds, 3)
        self.state["cpu_seconds"] = round(self.state.get("cpu_seconds", 0.0) + cpu_seconds, 3)
        if chunk.stop == chunk.start + chunk_size:
            self.state["whole_chunks"] = self._counters()
        self._save()

    def _counters(self) -> dict:
        return copy.deepcopy({key: self.state[key] for key in COUNTERS})

    def _save(self) -> None:
        partial = self.state_path.with_name(self.state_path.name + ".tmp")
        with open(partial, "w", encoding="utf-8") as handle:
            json.dump(self.state, handle, indent=2, ensure_ascii=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(partial, self.state_path)


def _cpu_seconds(decoder) -> float:
    """CPU seconds of this process so far, and of the backend's worker process if it has one."""
    return time.process_time() + (decoder.cpu_seconds() if decoder is not None else 0.0)


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


def translate_corpus(
    model_id: str,
    input_path: Path,
    output: Path,
    source_lang: str,
    target_lang: str,
    settings: DecodingSettings,
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    seed: int = DEFAULT_SEED,
    limit: int | None = None,
    stop_after_chunks: int | None = None,
    device: str = "cpu",
    int8: bool = False,
    backend: str = "torch",
    log=None,
) -> dict:
    """Translate `input_path` chunk by chunk into OUTPUT.{source_lang} / OUTPUT.{target_lang}; return the state.

    `backend`: "torch" or "ctranslate2" (`backends.load_backend`: converted once, cached). `int8`: PyTorch's linear
    layers in dynamic int8 (`decoding.int8.int8_dynamic`), or CTranslate2's int8 weights (CPU only). Both are recorded
    with the decoding so that a run is resumed only as it started."""
    log = log or sys.stderr
    if source_lang == target_lang:
        raise CorpusError(f"--source_lang and --target_lang are both {source_lang!r}: the two files would be one.")
    if chunk_size < 1 or (limit is not None and limit < 0) or (stop_after_chunks is not None and stop_after_chunks < 1):
        raise CorpusError("--chunk_size and --stop_after_chunks must be at least 1, --limit at least 0.")
    if int8 and str(device) != "cpu":
        raise CorpusError("--int8 quantizes for the CPU: use it with --device cpu.")
    try:
        backend = resolve_backend(backend, device)
    except BackendError as error:
        raise CorpusError(f"--backend {backend}: {error}") from error
    writer = CorpusWriter(Path(output), source_lang, target_lang)
    writer.check_writable()  # before the input is read and the model loaded
    try:
        lines = read_lines(input_path)
    except DataError as error:
        raise CorpusError(str(error)) from error
    total = len(lines) if limit is None else min(limit, len(lines))
    try:
        model, tokenizer = load_model(model_id, device)
    except RuntimeError as error:
        raise CorpusError(f"The model {model_id} {error}") from error

    identity = {
        "model": model_id,
        "model_sha256": fingerprint_model(model, tokenizer),
        "input": str(input_path),
        "input_sha256": fingerprint_file(Path(input_path)),
        "source_lang": source_lang,
        "target_lang": target_lang,
        "decoding": run_decoding(model, settings, chunk_size, seed) | backend_record(backend, int8),
    }
    state = writer.open(identity, total, chunk_size)  # before any conversion: output of another run is refused first
    if state["lines_read"] >= total:
        print(
            f"{Path(output).name}: complete, {state['lines_written']:,} pairs from {total:,} input lines; nothing "
            "to do.",
            file=log,
        )
        return state
    decoder = None
    if backend == "ctranslate2":
        try:
            decoder = load_backend(model_id, model, tokenizer, int8=int8, log=log)
        except (BackendError, OSError) as error:
            raise CorpusError(f"The model {model_id} cannot decode with CTranslate2: {error}") from error
    elif int8:
        model = int8_dynamic(model)  # after the fingerprint: the saved weights identify the run
    try:
        return _translate_chunks(
            model, tokenizer, decoder, writer, lines, total, settings, chunk_size, seed, stop_after_chunks, log
        )
    finally:
        if decoder is not None:
            decoder.close()


def backend_record(backend: str, int8: bool) -> dict:
    """What the decoding record says of the backend and the weights (nothing for PyTorch in float32, as before)."""
    if backend == "ctranslate2":
        return {"backend": "ctranslate2", "weights": "int8" if int8 else "float32"}
    return {"weights": "int8 dynamic"} if int8 else {}


def _translate_chunks(
    model,
    tokenizer,
    decoder,
    writer: CorpusWriter,
    lines: list[str],
    total: int,
    settings: DecodingSettings,
    chunk_size: int,
    seed: int,
    stop_after_chunks: int | None,
    log,
) -> dict:
    """The chunks not done yet, each translated, appended and recorded (see `CorpusWriter`)."""
    start_line = writer.state["lines_read"]
    name = writer.output.name
    if start_line:
        print(f"{name}: resuming at input line {start_line + 1:,} of {total:,}.", file=log)

    started, translated, chunks_done = time.perf_counter(), 0, 0
    for chunk_start in range(start_line, total, chunk_size):
        chunk = Chunk(chunk_start // chunk_size, chunk_start, min(chunk_start + chunk_size, total))
        sources = [text for text in map(clean_line, lines[chunk.start : chunk.stop]) if text]
        chunk_started, chunk_cpu_started = time.perf_counter(), _cpu_seconds(decoder)
        torch.manual_seed(seed + chunk.index)  # each chunk its own seed: a resumed run samples what a whole run does
        if decoder is not None and settings.do_sample:
            decoder.set_seed(seed + chunk.index)
        run = translate(model, tokenizer, sources, settings, backend=decoder)
        targets = [normalise_text(text) for text in run.texts]
        counts = {
            "lines_skipped": chunk.stop - chunk.start - len(sources),
            "sources_truncated": sum(result.source_truncated for result in run.translations),
            "hit_length_bound": sum(result.hit_length_bound for result in run.translations),
        }
        writer.append(
            chunk,
            chunk_size,
            sources,
            targets,
            counts,
            time.perf_counter() - chunk_started,
            _cpu_seconds(decoder) - chunk_cpu_started,
        )
        translated += len(sources)
        chunks_done += 1
        elapsed = time.perf_counter() - started
        rate = translated / elapsed if elapsed > 0 else 0.0
        left = total - chunk.stop
        eta = _duration(left / ((chunk.stop - start_line) / elapsed)) if elapsed > 0 else "?"
        print(
            f"{name}: {chunk.stop:,}/{total:,} lines ({100 * chunk.stop / total:.1f}%), {rate:.1f} sentences/s, "
            f"ETA {eta}",
            file=log,
            flush=True,
        )
        if stop_after_chunks is not None and chunks_done >= stop_after_chunks and chunk.stop < total:
            print(
                f"{name}: stopped after {chunks_done} chunk(s) as asked (--stop_after_chunks); "
                "run the same command again to continue.",
                file=log,
            )
            return writer.state
    state = writer.state
    if state["seconds"] and state["cpu_seconds"]:
        pairs, seconds, cpu = state["lines_written"], state["seconds"], state["cpu_seconds"]
        print(
            f"{name}: translating took {seconds:.1f} s ({pairs / seconds:.1f} sentences/s) and {cpu:.1f} CPU-seconds "
            f"({pairs / cpu:.1f} sentences per CPU-second; with --threads 1, about the rate on an idle core).",
            file=log,
        )
    print(
        f"{name}: done, {state['lines_written']:,} pairs written ({state['lines_skipped']:,} empty lines skipped, "
        f"{state['sources_truncated']:,} sources truncated, {state['hit_length_bound']:,} translations stopped at "
        f"the length bound) to {writer.paths['source']} and {writer.paths['target']}.",
        file=log,
    )
    return state


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Translate a file (one sentence per line) into a line-aligned synthetic parallel corpus.",
        epilog="Re-running the same command continues an interrupted run.",
    )
    parser.add_argument("--model", required=True, help="a saved model folder or a Hub id")
    parser.add_argument("--input", required=True, type=Path, help="UTF-8 text, one sentence per line")
    parser.add_argument(
        "--output",
        required=True,
        type=Path,
        help="prefix: writes OUTPUT.SOURCE_LANG, OUTPUT.TARGET_LANG and OUTPUT.progress.json",
    )
    parser.add_argument("--source_lang", "--source-lang", required=True, help="language of --input, e.g. de")
    parser.add_argument("--target_lang", "--target-lang", required=True, help="language of the translations, e.g. en")
    decoding = parser.add_argument_group("decoding (default: the model's saved generation config)")
    decoding.add_argument("--num_beams", "--num-beams", type=int, default=None, help="1 greedy, more beam search")
    decoding.add_argument(
        "--length_penalty", "--length-penalty", type=float, default=None, help="beam search's length penalty"
    )
    decoding.add_argument("--sample", action="store_true", help="sample instead of searching (num_beams 1 unless set)")
    decoding.add_argument(
        "--top_k", "--top-k", type=int, default=None, help="with --sample: among the K likeliest tokens"
    )
    decoding.add_argument(
        "--top_p",
        "--top-p",
        type=float,
        default=None,
        help="with --sample: among the likeliest tokens that together hold probability P",
    )
    decoding.add_argument("--temperature", type=float, default=None, help="with --sample: the logits divided by T")
    decoding.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help="chunk k samples with seed + k (default: %(default)s)"
    )
    add_length_bound_flags(decoding)
    run = parser.add_argument_group("running")
    run.add_argument(
        "--batch_size",
        "--batch-size",
        type=int,
        default=DEFAULT_BATCH_SIZE,
        help="sentences per generate() call, length-sorted within a chunk (default: %(default)s)",
    )
    run.add_argument(
        "--chunk_size",
        "--chunk-size",
        type=int,
        default=DEFAULT_CHUNK_SIZE,
        help="input lines per chunk: the unit that is written and resumed (default: %(default)s)",
    )
    run.add_argument("--limit", type=int, default=None, help="translate only the first N input lines")
    run.add_argument(
        "--stop_after_chunks",
        "--stop-after-chunks",
        type=int,
        default=None,
        help="end this run after K chunks; the same command continues",
    )
    add_backend_flags(run)
    run.add_argument("--threads", type=int, default=None, help="CPU threads for torch (default: torch's)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        settings = DecodingSettings(
            num_beams=1 if args.sample and args.num_beams is None else args.num_beams,
            length_penalty=args.length_penalty,
            max_new_tokens=args.max_new_tokens,
            max_new_tokens_ratio=args.max_new_tokens_ratio,
            max_new_tokens_offset=args.max_new_tokens_offset,
            do_sample=args.sample,
            top_k=args.top_k,
            top_p=args.top_p,
            temperature=args.temperature,
            batch_size=args.batch_size,
        )
    except ValueError as error:
        parser.error(str(error))
    if not args.sample and any(value is not None for value in (args.top_k, args.top_p, args.temperature)):
        parser.error("--top_k, --top_p and --temperature apply to sampling: add --sample")
    try:
        translate_corpus(
            args.model,
            args.input,
            args.output,
            args.source_lang,
            args.target_lang,
            settings,
            chunk_size=args.chunk_size,
            seed=args.seed,
            limit=args.limit,
            stop_after_chunks=args.stop_after_chunks,
            device=args.device,
            int8=args.int8,
            backend=args.backend,
        )
    except CorpusError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("\ninterrupted: the finished chunks are saved; run the same command again to continue.", file=sys.stderr)
        return 130
    return 0


__all__ = ["CorpusError", "CorpusWriter", "run_decoding", "translate_corpus"]

if __name__ == "__main__":
    sys.exit(main())
