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
  other down (each its own OpenMP runtime; `python -m benchmarks.engine_backends` measures it).

Optional: `pip install ctranslate2` (the `app` extra); nothing imports it until a CTranslate2 backend is asked for.
"""

import hashlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import torch

# Bump when a converter's output changes: every cached conversion is then made again.
CONVERSION_VERSION = "1"
CACHE_VARIABLE = "TRANSFORMER_MT_CTRANSLATE2_CACHE"
WORKER = Path(__file__).with_name("ctranslate2_worker.py")
BACKENDS = ("torch", "ctranslate2", "auto")


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


class CTranslate2Backend:
    """A converted model, decoding batches of tokens for the engine (`engine.translate(..., backend=...)`).

    `process=True` (the default) runs CTranslate2 in a worker process (`ctranslate2_worker.py`), so that it never
    shares a process, and an OpenMP runtime, with PyTorch; `process=False` loads it here (the benchmark's other way).
    `threads`: CTranslate2's intra-op threads (default: as many as PyTorch uses here).
    """

    def __init__(
        self, folder: str | Path, tokenizer, *, int8: bool = False, threads: int | None = None, process: bool = True
    ):
        self.folder = Path(folder)
        self.tokens = tokenizer.convert_ids_to_tokens  # ids -> the tokens CTranslate2 reads (its vocabulary's)
        self.int8 = int8
        self.name = f"CTranslate2 {'int8' if int8 else 'float32'}"
        self.threads = threads or torch.get_num_threads()
        self.process = process
        compute_type = "int8" if int8 else "float32"
        vocabulary = next(
            (self.folder / name for name in ("shared_vocabulary.json", "target_vocabulary.json")
             if (self.folder / name).is_file()),
            None,
        )  # fmt: skip
        self.target_vocabulary = set(json.loads(vocabulary.read_text(encoding="utf-8"))) if vocabulary else set()
        self._lock = threading.Lock()  # one request at a time through the pipe (the app translates from threads)
        self._worker: subprocess.Popen | None = None
        self._translator = None
        if process:
            self._worker = subprocess.Popen(
                [sys.executable, str(WORKER), str(self.folder), compute_type, str(self.threads)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            self._call(None)  # its "ready", or why it could not load the model
        else:
            import ctranslate2

            self._translator = ctranslate2.Translator(
                str(self.folder), device="cpu", compute_type=compute_type, intra_threads=self.threads, inter_threads=1
            )

    def _call(self, request):
        """Send one request to the worker (None: only read its first answer) and return its result."""
        with self._lock:
            if self._worker is None or self._worker.poll() is not None:
                raise BackendError(f"the {self.name} worker process is not running.")
            try:
                if request is not None:
                    pickle.dump(request, self._worker.stdin)
                    self._worker.stdin.flush()
                ok, result = pickle.load(self._worker.stdout)
            except (EOFError, BrokenPipeError, pickle.UnpicklingError) as error:
                raise BackendError(f"the {self.name} worker process ended ({type(error).__name__}).") from error
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
) -> CTranslate2Backend:
    """The CTranslate2 backend of `model` (loaded from `model_id`): converted once (cached), then loaded."""
    if not ctranslate2_available():
        raise BackendError("the CTranslate2 backend needs the ctranslate2 package: pip install ctranslate2.")
    folder = convert_cached(model_id, model, tokenizer, int8=int8, cache=cache, log=log)
    return CTranslate2Backend(folder, tokenizer, int8=int8, threads=threads, process=process)


__all__ = [
    "BackendError",
    "CTranslate2Backend",
    "ctranslate2_available",
    "convert_cached",
    "fingerprint_model",
    "load_backend",
    "resolve_backend",
]
