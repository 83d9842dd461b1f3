"""The models the app serves: ours (loaded at start, or the app does not start) and the comparison models the
operator lists (loaded in background threads, so the page is up before they are; each says why it is unavailable).

Every model is loaded by `transformer_en_de.hub.load_model` (a folder or a Hub id; offline it fails at once and says
so). A visitor never chooses what is loaded: the list comes from the command line or the environment.
"""

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from transformer_en_de.engine import max_target_tokens
from transformer_en_de.hub import load_model

OURS_NAME = "Transformer (ours)"


class ModelUnavailableError(RuntimeError):
    """Our model cannot be loaded; the message names where it was looked for and how to get one."""


@dataclass
class Translator:
    """A loaded seq2seq model and its tokenizer, under a name for the page."""

    name: str
    model_id: str  # the folder or Hub id it was loaded from (for the operator; the page shows `display_id`)
    model: object
    tokenizer: object

    @property
    def num_parameters(self) -> int:
        return self.model.num_parameters()

    @property
    def num_layers(self) -> int:
        config = self.model.config
        return getattr(config, "decoder_layers", None) or getattr(config, "num_decoder_layers", None) or 1

    @property
    def max_new_tokens(self) -> int:
        return max_target_tokens(self.model)


def display_id(model_id: str) -> str:
    """What the page shows for a model: a Hub id as it is, a local folder by its name only (no server paths)."""
    path = Path(model_id).expanduser()
    if path.exists() or model_id.startswith((".", "/", "~")):
        return path.resolve().name
    return model_id


# transformers' from_pretrained builds a model on the meta device through process-wide state: two loads at once
# (the comparison models' threads) fail with "Cannot copy out of meta tensor". So loads take turns.
_LOADING = threading.Lock()


def load_translator(model_id: str, name: str, *, on_load=None) -> Translator:
    """Load through `hub.load_model`; RuntimeError in plain words when it cannot. `on_load(model)` prepares it."""
    with _LOADING:
        model, tokenizer = load_model(model_id)
    if on_load is not None:
        on_load(model)
    return Translator(name=name, model_id=model_id, model=model, tokenizer=tokenizer)


def load_our_translator(model_id: str, *, on_load=None) -> Translator:
    """Our model, or ModelUnavailableError saying where it was looked for and how to get one."""
    how = (
        "Train one with `python train.py --output_dir models/transformer-en-de` (see the README), or point --model / "
        "TRANSFORMER_MT_MODEL at a saved model folder or a Hub id such as your-name/transformer-en-de."
    )
    folder = Path(model_id).expanduser()
    looks_local = folder.exists() or model_id.startswith((".", "/", "~")) or model_id.count("/") > 1
    if looks_local and not folder.is_dir():
        raise ModelUnavailableError(f"No model folder at {folder}. {how}")
    if looks_local and not (folder / "config.json").is_file():
        raise ModelUnavailableError(f"{folder} is not a saved model folder (it has no config.json). {how}")
    try:
        return load_translator(model_id, OURS_NAME, on_load=on_load)
    except RuntimeError as error:
        raise ModelUnavailableError(f"Our model {model_id} {error} {how}") from error


def comparison_names(model_ids: list[str]) -> list[str]:
    """A short, unique panel name per comparison model: the last part of its id ("opus-mt-en-de")."""
    names = []
    for model_id in model_ids:
        name = display_id(model_id).rstrip("/").split("/")[-1] or model_id
        while name in names or name == OURS_NAME:
            name += "'"
        names.append(name)
    return names


def parse_model_list(value: str | list[str] | None) -> list[str]:
    """Model ids from a flag (a list) or an environment variable (comma- or space-separated); empty for none."""
    if value is None:
        return []
    items = value if isinstance(value, list) else value.replace(",", " ").split()
    return [item.strip() for item in items if item.strip()]


class BackgroundTranslator:
    """A comparison model loading in a daemon thread: `translator` is None until it is ready, `error` says why not."""

    def __init__(self, model_id: str, name: str, *, on_load=None):
        self.model_id = model_id
        self.name = name
        self.translator: Translator | None = None
        self.error: str | None = None
        self._started = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._load, args=(on_load,), name=f"load {name}", daemon=True)
        self._thread.start()

    def _load(self, on_load) -> None:
        try:
            self.translator = load_translator(self.model_id, self.name, on_load=on_load)
        except Exception as error:  # any failure becomes the panel's message, never a crash of the app
            cause = str(error) if isinstance(error, RuntimeError) else f"could not be loaded ({type(error).__name__})."
            for path in {self.model_id, str(Path(self.model_id).expanduser().resolve())}:
                cause = cause.replace(path, display_id(self.model_id))  # the page shows no server paths
            self.error = f"{self.name} is not available: {display_id(self.model_id)} {cause}"
            print(f"app.py: {self.error}", flush=True)  # the operator's words go to the log; the page has one line
        finally:
            self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def failed(self) -> bool:
        return self.error is not None

    def status(self) -> str:
        """One line in a visitor's words: loading, ready, or not available (the cause is in the log, for the
        operator)."""
        if self.translator is not None:
            millions = self.translator.num_parameters / 1e6
            return f"{self.name} ready: {display_id(self.model_id)}, {millions:.2f}M parameters."
        if self.error is not None:
            return f"{self.name} is not available on this server right now, so our model translates alone."
        waited = time.monotonic() - self._started
        return f"{self.name} ({display_id(self.model_id)}) is loading in the background ({waited:.0f} s so far)…"
