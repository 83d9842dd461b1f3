"""Shared fixtures: a tiny tokenizer and tiny models built in milliseconds, never touching the network."""

import os
import tempfile

# Before any Hugging Face import: never wait on the unreachable Hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# CTranslate2 conversions of the tests' tiny models go to a folder of this run, not the user's cache.
os.environ.setdefault("TRANSFORMER_MT_CTRANSLATE2_CACHE", tempfile.mkdtemp(prefix="ctranslate2-cache-"))
# So do the training mixes that train.py keeps tokenized for a resumed run.
os.environ.setdefault("TRANSFORMER_MT_CACHE", tempfile.mkdtemp(prefix="prepared-mix-cache-"))
# The arena's votes of every app a test starts: a folder of the run's own, never the checkout's data/.
os.environ.setdefault("VOTES_DB", os.path.join(tempfile.mkdtemp(prefix="votes-"), "votes.sqlite3"))

import shutil
import threading
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent

from transformers import GenerationConfig  # noqa: E402

from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration  # noqa: E402
from modeling.modeling_transformer_mt import set_translation_defaults  # noqa: E402
from tokenizer import config_token_fields, train_tokenizer  # noqa: E402
from transformer_en_de.inside import inside_view  # noqa: E402

DATA_DIR = ROOT.parent / "shared" / "data" / "multi30k"

# A handful of parallel sentences we wrote for the tests.
PAIRS = [
    ("A dog runs in the park.", "Ein Hund rennt im Park."),
    ("Two men are working.", "Zwei Männer arbeiten."),
    ("A girl in a red dress is smiling.", "Ein Mädchen in einem roten Kleid lächelt."),
    ("The children play on the street.", "Die Kinder spielen auf der Straße."),
    ("A woman reads a book.", "Eine Frau liest ein Buch."),
    ("Three people ride bicycles.", "Drei Leute fahren Fahrrad."),
    ("A man sings on a stage.", "Ein Mann singt auf einer Bühne."),
    ("The cat sleeps on the sofa.", "Die Katze schläft auf dem Sofa."),
]


def tiny_config(tokenizer, **overrides) -> TransformerMTConfig:
    settings = dict(
        config_token_fields(tokenizer),
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        num_attention_heads=4,
        d_ff=64,
        max_position_embeddings=64,
    )
    settings.update(overrides)
    return TransformerMTConfig(**settings)


@pytest.fixture(scope="session")
def tiny_tokenizer():
    """A 400-token byte-level BPE trained on the test sentences."""
    texts = [text for pair in PAIRS for text in pair]
    return train_tokenizer(texts=texts * 4, vocab_size=400, min_frequency=1, model_max_length=64)


@pytest.fixture(scope="session")
def tiny_model(tiny_tokenizer):
    """A randomly initialised 2+2-layer model, d_model 32, in eval mode, with the decoding a trained model ships
    (beam 4, length penalty 0.6, the per-sentence length bound: what train.py writes to generation_config.json)."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer)).eval()
    set_translation_defaults(model.generation_config, model.config)
    return model


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model, tiny_tokenizer, tmp_path_factory):
    """A saved folder (model + tokenizer), the layout train.py writes and the app loads."""
    folder = tmp_path_factory.mktemp("tiny-model")
    tiny_model.save_pretrained(folder)
    tiny_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="session")
def app_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny folder with <s> and <pad> banned from its output: a random model favours them and they decode to
    nothing, while the app's tests want translations to look at."""
    folder = tmp_path_factory.mktemp("app-model")
    shutil.copytree(tiny_model_dir, folder, dirs_exist_ok=True)
    generation = GenerationConfig.from_pretrained(folder)
    generation.bad_words_ids = [[generation.bos_token_id], [generation.pad_token_id]]
    generation.save_pretrained(folder)
    return folder


def view_inside(translator, sentence: str, settings) -> dict:
    """`inside_view` of a model loaded as the app loads it (`translators.Translator`), under its name on the page."""
    return inside_view(translator.model, translator.tokenizer, sentence, settings, name=translator.name)


# ------------------------------------------------------------------ the loopback Hub, and the shipped model for the app

HUB_TOKEN = "hf_loopback_write_token"  # the token the loopback Hub asks of a push


@pytest.fixture
def online(monkeypatch):
    """The tests run with HF_HUB_OFFLINE=1; a push to the loopback server needs huggingface_hub's online mode."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)


@pytest.fixture
def hub(online):
    """A loopback Hub that asks for `HUB_TOKEN`, online mode on."""
    from loopback_hub import LoopbackHub

    with LoopbackHub(token=HUB_TOKEN) as server:
        yield server


@pytest.fixture(scope="module")
def shipped_translator():
    """The shipped model as the app loads it, attention weights on (SDPA returns none)."""
    from transformer_en_de.app import translators

    translator = translators.load_our_translator(str(ROOT / "models" / "transformer-en-de"))
    translator.model.set_attn_implementation("eager")
    return translator


# A real browser for the page's tests: Debian's Chromium, driven by Playwright.
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def start_in_thread(server, timeout: float = 60.0) -> threading.Thread:
    """Run a uvicorn `server` in a daemon thread; returns once it accepts connections."""
    thread = threading.Thread(target=server.run, name="app server", daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the app server did not start")
        time.sleep(0.05)
    return thread


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the test module that asks (its pages are its own)."""
    if not CHROMIUM.exists():
        pytest.fail(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium` (or `make browser`).")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield browser
        browser.close()


def pytest_sessionfinish(session, exitstatus):
    """Wait for comparison models still loading in their daemon threads (`translators.BackgroundTranslator`, each
    measuring its step cost with `generate()` once loaded): a thread still inside torch when the interpreter finalizes
    aborts the process ("terminate called without an active exception") after every test has passed."""
    for thread in threading.enumerate():
        if thread.daemon and thread.name.startswith("load "):
            thread.join(timeout=300)
