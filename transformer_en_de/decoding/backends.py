"""What decodes for the engine: PyTorch (the model itself; `backend=None`) or CTranslate2 (`CTranslate2Backend`).

The engine plans a request the same way for both (`engine.DecodingPlan`: the sources as the model reads them, the
limit per sentence, the settings); only the decoding of a batch and the scoring of translations differ. CTranslate2
runs a converted copy of the weights:
- ours through our converter (`ctranslate2_backend.convert`), any model of an architecture CTranslate2 knows
  (MarianMT, T5, BART, ...) through CTranslate2's own `TransformersConverter`, given the model as loaded;
- converted once and cached in `~/.cache/transformer_en_de/ctranslate2/<model>/ctranslate2-<float32|int8>-
  <fingerprint>/` (`TRANSFORMER_MT_CTRANSLATE2_CACHE` moves it), never inside the model folder: a model folder is
  published to the Hub as it is, and the shipped one is tracked by git. The fingerprint is the weights'
  (`fingerprint_model`), so a folder whose weights changed converts again, and the stale conversion is removed;
- by default in a process of its own (`ctranslate2_worker.py`): CTranslate2 and PyTorch in one process slow each
  other down (each its own OpenMP runtime; `python -m benchmarks.engine_backends` measures it). A worker that dies
  is started again (its request sent again), a few times at most; then the backend gives up (`gave_up`).

Optional: `pip install ctranslate2` (the `app` extra); nothing imports it until a CTranslate2 backend is asked for.
"""

import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import torch

# Bump when a converter's output changes: every cached conversion is then made again.
CONVERSION_VERSION = "1"
CACHE_VARIABLE = "TRANSFORMER_MT_CTRANSLATE2_CACHE"
WORKER = Path(__file__).with_name("ctranslate2_worker.py")
BACKENDS = ("torch", "ctranslate2", "auto")
# A worker process that dies is started again, at most RESTARTS times in RESTART_WINDOW seconds: a worker that keeps
# dying (a request that crashes it, memory that runs out) must not cost every later request a restart and a failure.
RESTARTS = 3
RESTART_WINDOW = 600.0


class BackendError(RuntimeError):
    """A backend cannot be made; the message says why in one line."""


def ctranslate2_available() -> bool:
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return False
    return True


def resolve_backend(backend: str, device: str | torch.device = "cpu") -> str:
    """The backend to use ("torch" or "ctranslate2") for a requested "torch", "ctranslate2" or "auto" (CTranslate2
    where it is installed and the device is the CPU)."""
    if backend not in BACKENDS:
        raise BackendError(f"unknown backend {backend!r}: use one of {', '.join(BACKENDS)}.")
    if backend == "auto":
        return "ctranslate2" if ctranslate2_available() and torch.device(device).type == "cpu" else "torch"
    if backend == "ctranslate2" and not ctranslate2_available():
        raise BackendError("the CTranslate2 backend needs the ctranslate2 package: pip install ctranslate2.")
    if backend == "ctranslate2" and torch.device(device).type != "cpu":
        raise BackendError(f"the CTranslate2 backend runs on the CPU here, not on {device}.")
    return backend


def fingerprint_model(model, tokenizer) -> str:
    """sha256 of the weights, the saved generation config and the tokenizer: what decides the translations."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    digest.update(model.generation_config.to_json_string(use_diff=False).encode())
    digest.update(tokenizer.backend_tokenizer.to_str().encode() if hasattr(tokenizer, "backend_tokenizer") else b"")
    return digest.hexdigest()


def _is_ours(model) -> bool:
    return type(model).__name__ == "TransformerMTForConditionalGeneration"


def cache_root() -> Path:
    """Where conversions are cached: $TRANSFORMER_MT_CTRANSLATE2_CACHE, else ~/.cache/transformer_en_de/ctranslate2."""
    if os.environ.get(CACHE_VARIABLE):
        return Path(os.environ[CACHE_VARIABLE]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "transformer_en_de" / "ctranslate2"


def cache_folder(model_id: str, quantization: str, fingerprint: str, cache: Path | None = None) -> Path:
    """Where the conversion of `model_id` goes: `cache` (default `cache_root()`) / the model / the kind and fingerprint.
    The model is named by its Hub id, or by a folder's name and a digest of its path (two folders of the same name
    keep their own conversions)."""
    name = f"ctranslate2-{quantization}-{fingerprint[:16]}-v{CONVERSION_VERSION}"
    folder = Path(model_id).expanduser()
    if folder.is_dir():
        path = str(folder.resolve())
        label = f"{folder.resolve().name}-{hashlib.sha256(path.encode()).hexdigest()[:8]}"
    else:
        label = "--".join(part for part in model_id.split("/") if part not in ("", ".", ".."))
    return (cache or cache_root()) / (label or "model") / name


def convert_cached(model_id: str, model, tokenizer, *, int8: bool = False, cache: Path | None = None, log=None) -> Path:
    """The CTranslate2 conversion of `model` (loaded from `model_id`), made once: an existing one with the same
    fingerprint is reused, a stale one (other weights, same quantization) is removed."""
    quantization = "int8" if int8 else "float32"
    folder = cache_folder(model_id, quantization, fingerprint_model(model, tokenizer), cache)
    if (folder / "model.bin").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    if log is not None:
        print(f"converting {model_id} to CTranslate2 ({quantization}) in {folder} ...", file=log, flush=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{folder.name}.", dir=folder.parent))
    try:
        if _is_ours(model):
            from .ctranslate2_backend import convert

            convert(model, tokenizer, partial, quantization=quantization if int8 else None)
        else:
            _convert_transformers(model, tokenizer, partial, quantization if int8 else None)
        try:
            os.replace(partial, folder)  # atomic: a concurrent conversion of the same weights wins or loses whole
        except OSError:
            if not (folder / "model.bin").is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    for stale in folder.parent.glob(f"ctranslate2-{quantization}-*"):
        if stale != folder and stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
    return folder


def _convert_transformers(model, tokenizer, folder: Path, quantization: str | None) -> None:
    """CTranslate2's own converter for a Transformers model, fed `model` itself: the commit and weights that were
    loaded, never a second download by id (`ctranslate2_backend.convert_loaded`)."""
    from .ctranslate2_backend import convert_loaded

    try:
        convert_loaded(model, tokenizer, folder, quantization)
    except (ValueError, NotImplementedError) as error:
        architecture = ", ".join(getattr(model.config, "architectures", None) or [type(model).__name__])
        raise BackendError(f"CTranslate2 cannot convert {architecture}: {' '.join(str(error).split())}") from error


class _WorkerDied(Exception):
    """The worker process ended before it answered."""


def _exchange(worker: subprocess.Popen, request):
    """Send `request` to a worker process (None: send nothing) and read its answer; _WorkerDied if it has ended."""
    try:
        if request is not None:
            pickle.dump(request, worker.stdin)
            worker.stdin.flush()
        return pickle.load(worker.stdout)
    except (EOFError, OSError, pickle.UnpicklingError) as error:
        raise _WorkerDied from error


def _end(worker: subprocess.Popen) -> int:
    """End a worker process for sure (one whose answer was cut off may still run), close its pipes; its exit code."""
    worker.kill()
    for pipe in (worker.stdin, worker.stdout):
        try:
            pipe.close()
        except OSError:  # bytes still buffered for a pipe nobody reads
            pass
    return worker.wait()


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


class CTranslate2Backend:
    """A converted model, decoding batches of tokens for the engine (`engine.translate(..., backend=...)`).

    `process=True` (the default) runs CTranslate2 in a worker process (`ctranslate2_worker.py`), so that it never
    shares a process, and an OpenMP runtime, with PyTorch; `process=False` loads it here (the benchmark's other way).
    `threads`: CTranslate2's intra-op threads (default: as many as PyTorch uses here).

    A worker process that dies (killed, out of memory) is started again and the request it was running is sent once
    more, so a caller loses nothing; each death is one line on `log` (default stderr). One death more than `restarts`
    within `restart_window` seconds, or a worker that cannot be started again, and the backend gives up for good:
    one line, then BackendError on every call and `gave_up` True (the app then decodes with `fallback`, named in
    that line: `translators.Translator.backend`).
    """

    def __init__(
        self,
        folder: str | Path,
        tokenizer,
        *,
        int8: bool = False,
        threads: int | None = None,
        process: bool = True,
        restarts: int = RESTARTS,
        restart_window: float = RESTART_WINDOW,
        fallback: str = "",
        log=None,
    ):
        self.folder = Path(folder)
        self.tokens = tokenizer.convert_ids_to_tokens  # ids -> the tokens CTranslate2 reads (its vocabulary's)
        self.int8 = int8
        self.name = f"CTranslate2 {'int8' if int8 else 'float32'}"
        self.threads = threads or torch.get_num_threads()
        self.process = process
        self.restarts, self.restart_window, self.fallback, self.log = restarts, restart_window, fallback, log
        self._compute_type = "int8" if int8 else "float32"
        vocabulary = next(
            (
                self.folder / name
                for name in ("shared_vocabulary.json", "target_vocabulary.json")
                if (self.folder / name).is_file()
            ),
            None,
        )
        self.target_vocabulary = set(json.loads(vocabulary.read_text(encoding="utf-8"))) if vocabulary else set()
        self._lock = threading.Lock()  # one request at a time through the pipe (the app translates from threads)
        self._worker: subprocess.Popen | None = None
        self._translator = None
        self._deaths: list[float] = []  # when the worker died, within the last `restart_window` seconds
        self._seed: int | None = None  # set again in a worker started in place of a dead one
        self._gave_up = ""  # why, once the backend has given up
        self._closed = False
        if process:
            self._worker = self._start()  # BackendError in one line if the model cannot be loaded
        else:
            import ctranslate2

            self._translator = ctranslate2.Translator(
                str(self.folder),
                device="cpu",
                compute_type=self._compute_type,
                intra_threads=self.threads,
                inter_threads=1,
            )

    @property
    def pid(self) -> int | None:
        """The worker process's id (None when CTranslate2 runs in this process)."""
        return None if self._worker is None else self._worker.pid

    @property
    def gave_up(self) -> bool:
        """True once the worker has died too often (or could not be started again): no worker is started any more."""
        return bool(self._gave_up)

    def _say(self, line: str) -> None:
        print(line, file=self.log or sys.stderr, flush=True)

    def _start(self) -> subprocess.Popen:
        """A worker process with the model loaded; BackendError (one line) if it cannot load it."""
        worker = subprocess.Popen(
            [sys.executable, str(WORKER), str(self.folder), self._compute_type, str(self.threads)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        try:
            ok, result = _exchange(worker, None)  # its "ready", or why it could not load the model
            if ok and self._seed is not None:
                ok, result = _exchange(worker, ("seed", self._seed))  # sampling goes on as seeded
        except _WorkerDied:
            ok, result = False, f"the worker process ended before it was ready ({_how_it_ended(worker.wait())})."
        if not ok:
            _end(worker)
            raise BackendError(f"{self.name}: {result}")
        return worker

    def _replace_worker(self) -> None:
        """The worker has died: start another one and say so in one line. Past `restarts` restarts within
        `restart_window` seconds, or when no worker can be started, give up for good (one line, BackendError)."""
        if self._closed:
            raise BackendError(f"the {self.name} backend is closed.")
        if self._gave_up:
            raise BackendError(self._gave_up)  # said in the log once already
        how = _how_it_ended(_end(self._worker))
        now = time.monotonic()
        self._deaths = [when for when in self._deaths if now - when < self.restart_window] + [now]
        window = f"{self.restart_window / 60:g} minutes"
        instead = f"; {self.fallback} decodes from now on" if self.fallback else ""
        if len(self._deaths) > self.restarts:
            self._give_up(
                f"the {self.name} worker process died {len(self._deaths)} times in {window} (last: {how}); "
                f"it is not started again{instead}."
            )
        try:
            self._worker = self._start()
        except BackendError as error:
            # Why goes to the log only: it may name the model's folder, and the raised message may reach a visitor.
            self._give_up(
                f"the {self.name} worker process died ({how}) and could not be started again{instead}.",
                detail=str(error),
            )
        self._say(
            f"the {self.name} worker process died ({how}); a new one was started (restart "
            f"{len(self._deaths)} of at most {self.restarts} in {window})."
        )

    def _give_up(self, why: str, detail: str = "") -> None:
        self._gave_up = why
        self._say(f"{why} {detail}" if detail else why)
        raise BackendError(why)

    def _call(self, request):
        """Send one request to the worker and return its result. A worker that dies during the request is replaced
        (`_replace_worker`) and the request sent once more: the caller loses it only if the new worker dies too."""
        with self._lock:
            for attempt in range(2):
                if self._worker.poll() is not None:
                    self._replace_worker()  # it died between requests (or the backend is closed, or has given up)
                try:
                    ok, result = _exchange(self._worker, request)
                    break
                except _WorkerDied:
                    self._replace_worker()
                    if attempt:
                        raise BackendError(f"the {self.name} worker process died twice on one request.") from None
        if not ok:
            raise BackendError(f"{self.name}: {result}")
        return result

    def translate_batch(self, sources: list[list[str]], options: dict) -> list[list[str]]:
        """The best hypothesis of each source (tokens), as `ctranslate2.Translator.translate_batch(**options)`."""
        if self._translator is None:
            return self._call(("translate", sources, options))
        return [item.hypotheses[0] for item in self._translator.translate_batch(sources, **options)]

    def score_batch(self, sources: list[list[str]], targets: list[list[str]]) -> list[list[float]]:
        """Log-probabilities of each target's tokens and of the `</s>` after them (`Translator.score_batch`)."""
        if self._translator is None:
            return self._call(("score", sources, targets))
        return [item.log_probs for item in self._translator.score_batch(sources, targets)]

    def set_seed(self, seed: int) -> None:
        """CTranslate2's sampling seed (the engine's sampling is then reproducible, like `torch.manual_seed`)."""
        if self._translator is None:
            self._seed = seed
            self._call(("seed", seed))
        else:
            import ctranslate2

            ctranslate2.set_random_seed(seed)

    def cpu_seconds(self) -> float:
        """CPU seconds the worker process has used (0 when CTranslate2 runs in this process: it is this one's)."""
        if self._worker is None:
            return 0.0
        try:
            fields = Path(f"/proc/{self._worker.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # not Linux, or the worker has ended
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime

    def close(self) -> None:
        self._closed = True  # no worker is started again
        if self._worker is not None and self._worker.poll() is None:
            try:
                with self._lock:
                    pickle.dump(None, self._worker.stdin)
                    self._worker.stdin.close()
                self._worker.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self._worker.kill()
        self._translator = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # interpreter shutdown: the worker ends with its closed stdin anyway
            pass


def load_backend(
    model_id: str,
    model,
    tokenizer,
    *,
    int8: bool = False,
    threads: int | None = None,
    process: bool = True,
    cache: Path | None = None,
    log=None,
    fallback: str = "",
) -> CTranslate2Backend:
    """The CTranslate2 backend of `model` (loaded from `model_id`): converted once (cached), then loaded. `log`: where
    the conversion and the worker's deaths are said (default: nothing, and stderr); `fallback`: what decodes if the
    worker gives up, for that line (`CTranslate2Backend`)."""
    if not ctranslate2_available():
        raise BackendError("the CTranslate2 backend needs the ctranslate2 package: pip install ctranslate2.")
    folder = convert_cached(model_id, model, tokenizer, int8=int8, cache=cache, log=log)
    return CTranslate2Backend(
        folder, tokenizer, int8=int8, threads=threads, process=process, fallback=fallback, log=log
    )


__all__ = [
    "BackendError",
    "CTranslate2Backend",
    "ctranslate2_available",
    "convert_cached",
    "fingerprint_model",
    "load_backend",
    "resolve_backend",
]
