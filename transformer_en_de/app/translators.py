"""The models the app serves: ours (loaded at start, or the app does not start) and the operator's comparison models,
each loading in a background thread so that the page is up first. A visitor never chooses what is loaded, so a
comparison model may load pickle weights (`load_listed_model`), and its status line says so. The PyTorch model is
loaded with CTranslate2 too: the Inside tab reads its attention, and it takes over from a worker that keeps dying."""

import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from transformer_en_de.decoding.backends import BackendError, load_backend, resolve_backend
from transformer_en_de.decoding.budget import StepCost
from transformer_en_de.decoding.engine import max_target_tokens
from transformer_en_de.decoding.int8 import int8_dynamic
from transformer_en_de.decoding.loading import display_id, load_listed_model

OURS_NAME = "Transformer (ours)"
# Hub models known to have learned translation from millions of sentences of every kind: the page calls only these
# "pretrained". A local folder, or another Hub id, may hold anything (a copy of ours, a test model).
PRETRAINED_FAMILIES = (
    "helsinki-nlp/opus-mt- helsinki-nlp/opus-tatoeba- google-t5/t5- t5- google/flan-t5- google/madlad400- "
    "facebook/nllb-200- facebook/m2m100_ facebook/wmt19- facebook/mbart-large-50"
).split()


class ModelUnavailableError(RuntimeError):
    """Our model cannot be loaded; the message names where it was looked for and how to get one."""


def known_pretrained(model_id: str) -> bool:
    """Whether `model_id` is a Hub id (perhaps at "@revision") of a model in `PRETRAINED_FAMILIES`, not a folder."""
    if not model_id.strip() or Path(model_id).expanduser().exists() or model_id.startswith((".", "/", "~")):
        return False
    return model_id.split("@", 1)[0].lower().startswith(tuple(PRETRAINED_FAMILIES))


def models_beside(systems: list) -> str:
    """What the models beside ours are: "pretrained" where one is known to be (never a folder), "other", "" (none)."""
    if any(system.pretrained for system in systems):
        return "pretrained"
    return "other" if systems else ""


@dataclass
class Translator:
    """A loaded seq2seq model and its tokenizer, under a name for the page. A system on the page is this or a
    `BackgroundTranslator`, read alike: `translator` (None until loaded), `done`, `failed`, `status()`."""

    name: str
    model_id: str  # the folder or Hub id it was loaded from (the page shows `display_id`)
    model: object
    tokenizer: object
    decoder: object = None  # a `CTranslate2Backend`, or None for the model itself
    decoder_name: str = "PyTorch"
    revision: str | None = None  # the Hub commit it was loaded at (None for a folder)
    weights: str = ""  # for the page, when the weights are not the safetensors of what was named
    step_cost: StepCost | None = None  # a decoder step's cost on this machine, measured once loaded unless given
    done, failed = True, False  # loaded before the page is up

    def __post_init__(self):
        if self.step_cost is None:
            self.step_cost = StepCost.measure(self.model)
        self.pretrained = known_pretrained(self.model_id)

    @property
    def translator(self) -> "Translator":
        return self

    def status(self) -> str:
        commit = f" at commit {self.revision[:7]}" if self.revision else ""
        weights = f"; {self.weights}" if self.weights else ""
        millions = self.num_parameters / 1e6
        return f"{self.name} ready: {display_id(self.model_id)}{commit}, {millions:.2f}M parameters{weights}."

    @property
    def backend(self):
        """What the engine decodes with: None for the model itself, also once CTranslate2 has given up."""
        return None if self.decoder is None or self.decoder.gave_up else self.decoder

    @property
    def backend_name(self) -> str:
        stopped = self.decoder is not None and self.decoder.gave_up
        return "PyTorch (CTranslate2 stopped)" if stopped else self.decoder_name

    @property
    def num_parameters(self) -> int:
        return self.model.num_parameters()

    @property
    def num_layers(self) -> int:
        """The layers of the deeper stack: a deep-encoder, shallow-decoder model (6 + 1) has six to look inside."""
        config = self.model.config
        encoder = getattr(config, "encoder_layers", None) or getattr(config, "num_layers", None) or 1
        decoder = getattr(config, "decoder_layers", None) or getattr(config, "num_decoder_layers", None) or encoder
        return max(encoder, decoder)

    @property
    def max_new_tokens(self) -> int:
        return max_target_tokens(self.model)


# transformers' from_pretrained builds a model on the meta device through process-wide state: two loads at once
# (the comparison models' threads) fail with "Cannot copy out of meta tensor". So loads take turns.
LOADING = threading.Lock()


def load_translator(
    model_id: str, name: str, *, on_load=None, backend: str = "torch", int8: bool = False, allow_pickle: bool = False
) -> Translator:
    """Load through `load_listed_model`, RuntimeError in plain words when it cannot; `on_load(model)` prepares it.
    `backend`: "torch", "ctranslate2" or "auto"; `int8`: CTranslate2's int8 weights, or PyTorch's dynamic int8."""
    try:
        chosen = resolve_backend(backend)
    except BackendError as error:
        raise RuntimeError(f"could not be loaded: {error}") from error
    with LOADING:
        loaded = load_listed_model(model_id, allow_pickle=allow_pickle)
        model, tokenizer, decoder = loaded.model, loaded.tokenizer, None
        if chosen == "ctranslate2":  # converting saves and reads the model again (Transformers): not two at once
            try:
                decoder = load_backend(model_id, model, tokenizer, int8=int8, fallback="PyTorch")
            except (BackendError, OSError, ValueError) as error:
                raise RuntimeError(f"could not be loaded: {' '.join(str(error).split())}") from error
    if decoder is None and int8:
        model = int8_dynamic(model)
    if on_load is not None:
        on_load(model)
    decoder_name = decoder.name if decoder is not None else "PyTorch int8" if int8 else "PyTorch"
    return Translator(name, model_id, model, tokenizer, decoder, decoder_name, loaded.revision, loaded.weights)


def load_our_translator(model_id: str, **options) -> Translator:
    """Our model (`load_translator`'s options), or ModelUnavailableError saying where it looked and how to get one."""
    how = (
        "Train one with `python train.py --output_dir models/transformer-en-de` (see the README), or point --model / "
        "TRANSFORMER_MT_MODEL at a saved model folder or a Hub id such as your-name/transformer-en-de."
    )
    folder = Path(model_id).expanduser()
    if folder.exists() or model_id.startswith((".", "/", "~")) or model_id.count("/") > 1:
        if not folder.is_dir():
            raise ModelUnavailableError(f"No model folder at {folder}. {how}")
        if not (folder / "config.json").is_file():
            raise ModelUnavailableError(f"{folder} is not a saved model folder (it has no config.json). {how}")
    try:
        return load_translator(model_id, OURS_NAME, **options)
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
    """Model ids from a flag or the environment (comma- or space-separated); "" or "none" for none."""
    items = [] if value is None else [value] if isinstance(value, str) else list(value)
    ids = [part for item in items for part in str(item).replace(",", " ").split()]
    return [] if [model_id.lower() for model_id in ids] in ([], ["none"]) else ids


# An absolute path (a cache folder, a file in the virtual environment), unless it follows a word, ".", ":", "/", "~"
# or "<": a Hub id (Helsinki-NLP/opus-mt-en-de), a URL and "</s>" stay as they are.
ABSOLUTE_PATH = re.compile(r"(?<![\w.:/~<])~?/[^\s'\"]*")


def without_paths(text: str) -> str:
    """`text` with every absolute path cut to its last part: what a visitor may be shown of a server's error."""
    return ABSOLUTE_PATH.sub(lambda match: match.group().rstrip("/").rsplit("/", 1)[-1] or "…", text)


def why_not_loaded(name: str, model_id: str, error: Exception) -> str:
    """One line saying by name why a comparison model is not on the page (no server paths)."""
    if isinstance(error, RuntimeError) and "offline" in str(error) and "cache" in str(error):
        cause = "the Hugging Face Hub is offline and the model is not cached"
    else:
        first = (str(error).strip().splitlines() or [type(error).__name__])[0].removeprefix("could not be loaded: ")
        cause = f"failed to load: {first if isinstance(error, RuntimeError) else f'{type(error).__name__}: {first}'}"
    shown = display_id(model_id)
    for path in {model_id, str(Path(model_id).expanduser().resolve())} if shown else ():
        cause = cause.replace(path, shown)
    name = "MarianMT" if "opus-mt-" in model_id.lower() else name  # what a visitor knows the OPUS-MT models as
    return f"{name}{f' ({shown})' if shown else ''} is not on this page: {without_paths(cause)}"


class BackgroundTranslator:
    """A comparison model loading in a daemon thread: `translator` is None until it is ready, `error` says why not."""

    def __init__(self, model_id: str, name: str, **options):
        self.model_id, self.name, self.pretrained = model_id, name, known_pretrained(model_id)
        self.translator: Translator | None = None
        self.error: str | None = None
        self.started, self.done = time.monotonic(), False  # done: loaded, or failed for good
        threading.Thread(target=self.load, kwargs=options, name=f"load {name}", daemon=True).start()

    def load(self, **options) -> None:
        try:
            if not self.model_id.strip():
                raise RuntimeError("could not be loaded: no model id was given.")
            self.translator = load_translator(self.model_id, self.name, allow_pickle=True, **options)
        except Exception as error:  # any failure becomes the panel's message, never a crash of the app
            self.error = why_not_loaded(self.name, self.model_id, error)
            print(f"app.py: {self.error}", flush=True)
        finally:
            self.done = True

    @property
    def failed(self) -> bool:
        return self.error is not None

    def status(self) -> str:
        """One line in a visitor's words: loading, ready, or which model is not on the page and why."""
        if self.translator is not None:
            return self.translator.status()
        if self.error is not None:
            return f"{self.error}. Our model translates alone."
        waited = time.monotonic() - self.started
        return f"{self.name} ({display_id(self.model_id)}) is loading in the background ({waited:.0f} s so far)…"


System = Translator | BackgroundTranslator  # a system on the page, loaded or loading


def start_comparisons(model_ids: str | list[str] | None, **options) -> list[BackgroundTranslator]:
    """A `BackgroundTranslator` per listed model (`parse_model_list`), under its panel name (`comparison_names`)."""
    ids = parse_model_list(model_ids)
    return [BackgroundTranslator(i, name, **options) for i, name in zip(ids, comparison_names(ids), strict=True)]
