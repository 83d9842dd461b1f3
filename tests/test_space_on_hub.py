"""The staged Space as it runs on the Hub, MarianMT served by the loopback Hub in each layout real OPUS-MT repos have.

For each layout (`hub_layouts.py`): `deploy_space.py --stage_only` runs online against the loopback Hub (it scores
our model and MarianMT for the Corpus tab there), then the staged folder's `app.py` starts the way a Space starts it
(`SYSTEM=spaces`, `SPACE_ID`, a fresh HOME, `HF_ENDPOINT` at the loopback Hub, the default backend: CTranslate2),
and its API answers: MarianMT translates beside ours, its status line says where its weights came from, and the Corpus
comparison has its BLEU and chrF. The staged app runs with this environment's packages (the ones the lock pins).
"""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import PAIRS, ROOT
from gradio_client import Client
from hub_layouts import LAYOUTS, MARIAN_ID, publish_marian
from loopback_hub import LoopbackHub
from test_app_server import free_port, wait_until_up
from tiny_marian import build_tiny_marian

from transformer_en_de.app import translation, translators

pytestmark = pytest.mark.slow

SENTENCE = "A dog runs in the park."


def space_environment(hub: LoopbackHub, home) -> dict:
    """What a Space's process sees: online, the Hub at the loopback endpoint, a HOME of its own (every cache in it)."""
    env = {
        name: value for name, value in os.environ.items() if not name.startswith(("HF_", "TRANSFORMER_MT_", "GRADIO_"))
    }
    return dict(
        env,
        HF_ENDPOINT=hub.endpoint,
        HF_HUB_OFFLINE="0",
        HOME=str(home),
        SYSTEM="spaces",
        SPACE_ID="someone/transformer-en-de-demo",
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    return build_tiny_marian(tmp_path_factory.mktemp("marian"))


@pytest.fixture(scope="module")
def expected(app_model_dir, marian_dir):
    """Each model's greedy translation of the sentence, loaded here from its folder with PyTorch."""
    ours = translators.load_our_translator(str(app_model_dir))
    marian = translators.load_translator(str(marian_dir), "opus-mt-en-de")
    context = translation.RequestContext(ours, [marian])
    result = translation.translate_text(SENTENCE, "greedy", 1, 20, "", context=context)
    return [output.translation for output in result.outputs]


@pytest.fixture(scope="module")
def test_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("test-set")
    (folder / "test.en").write_text("".join(f"{en}\n" for en, _ in PAIRS), encoding="utf-8")
    (folder / "test.de").write_text("".join(f"{de}\n" for _, de in PAIRS), encoding="utf-8")
    return folder / "test.en", folder / "test.de"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_the_staged_space_shows_marian_beside_ours_and_its_scores(
    layout, app_model_dir, marian_dir, expected, test_files, tmp_path, browser
):
    with LoopbackHub() as hub:
        publish_marian(hub, marian_dir, layout)
        staged, home = tmp_path / "space", tmp_path / "home"
        env = space_environment(hub, home)
        staging = subprocess.run(
            [
                sys.executable,
                str(ROOT / "deploy_space.py"),
                "--stage_only",
                str(staged),
                "--model",
                str(app_model_dir),
                "--test_source",
                str(test_files[0]),
                "--test_reference",
                str(test_files[1]),
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert staging.returncode == 0, staging.stderr
        comparison = json.loads((staged / "results" / "comparison_test_2016_flickr.json").read_text())
        marian_row = comparison["systems"][1]
        assert marian_row["model"] == MARIAN_ID and marian_row["error"] is None
        assert isinstance(marian_row["bleu"], float) and isinstance(marian_row["chrf"], float)

        port, log = free_port(), tmp_path / "space.log"
        with open(log, "w") as output:
            process = subprocess.Popen(
                [sys.executable, "app.py"],
                cwd=staged,
                stdout=output,
                stderr=subprocess.STDOUT,
                text=True,
                env=dict(env, GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port)),
            )
        try:
            wait_until_up(f"http://127.0.0.1:{port}/", process, log)
            client = Client(f"http://127.0.0.1:{port}/", verbose=False)
            status, waited = client.predict(api_name="/status"), 0
            while "ready" not in status and "not on this page" not in status and waited < 600:
                time.sleep(0.5)
                status, waited = client.predict(api_name="/status"), waited + 0.5
            answer = client.predict(SENTENCE, "greedy", 1, 20, "", api_name="/translate")
            notes, table = client.predict(api_name="/comparison")
            shown = translations_in_a_browser(browser, f"http://127.0.0.1:{port}/", SENTENCE)
        finally:
            process.terminate()
            process.wait(timeout=30)
        requests = list(hub.requests)
        pull_request = hub.repo(MARIAN_ID).refs.get("refs/pr/1")

    assert "opus-mt-en-de ready" in status, log.read_text()
    assert "CTranslate2" in status  # the default backend, converted from the model loaded
    assert [answer[0], answer[2]] == expected  # ours, then MarianMT
    assert shown == [answer[0], answer[2]]  # what a visitor's browser shows for the same input (beam 4: the page's)
    table = table.replace("\\", "")  # the table's cells are Markdown-escaped text
    marian_line = next(line for line in table.splitlines() if MARIAN_ID in line)
    assert f"{marian_row['bleu']:.2f}" in marian_line and f"{marian_row['chrf']:.2f}" in marian_line
    assert "no scores here" not in notes and f"{MARIAN_ID} was scored at commit" in notes.replace("\\", "")
    weights_read = [path for method, path in requests if method == "GET" and path.endswith((".bin", ".safetensors"))]
    if layout == "conversion pull request":
        assert f"conversion pull request refs/pr/1 (commit {pull_request[:7]})" in status
        assert all(path.endswith("model.safetensors") for path in weights_read)  # main's pickle is never read
    elif layout == "pickle":
        assert "pickle weights only" in status and "weights_only unpickler" in status
    else:
        assert "weights:" not in status
    assert "use_safetensors" not in status + log.read_text()


def translations_in_a_browser(browser, url: str, sentence: str) -> list[str]:
    """Our translation and MarianMT's as the page shows them in Chromium after typing `sentence` and choosing greedy
    search with 20 new tokens (the settings of the API call above)."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.goto(url)
        page.locator("#status-1").get_by_text("ready").wait_for(timeout=120_000)
        page.locator("#english textarea").fill(sentence)
        page.get_by_label("greedy").check()
        tokens = page.get_by_label("Maximum new tokens").first
        tokens.fill("20")
        tokens.press("Enter")
        page.locator("#translate").click()
        for number in (0, 1):
            page.locator(f"#details-{number}").get_by_text("Tokens generated").wait_for(timeout=120_000)
        return [page.locator(f"#translation-{number} textarea").input_value() for number in (0, 1)]
    finally:
        page.close()
