"""A real Chromium (Debian's, driven by Playwright) uses the page: types, translates, sees every panel."""

import socket

import pytest
from conftest import ROOT, start_in_thread
from tiny_marian import build_tiny_marian
from tiny_models import build_tiny_t5

import app
from transformer_en_de.app.page.translate import EVERYDAY_EXAMPLE

pytestmark = [pytest.mark.slow, pytest.mark.browser]

SCREENSHOT = ROOT / "test-artifacts" / "app.png"


def serve(translation_app, port: int):
    """The app's server (as `python app.py` runs it) in this process; yields its URL until the fixture ends."""
    server = app.build_app_server(translation_app, "127.0.0.1", port)
    start_in_thread(server)
    yield f"http://127.0.0.1:{port}/"
    server.should_exit = True


@pytest.fixture(scope="module")
def page_url(app_model_dir, tmp_path_factory):
    ours = app_model_dir
    marian = build_tiny_marian(tmp_path_factory.mktemp("marian"))
    t5 = build_tiny_t5(tmp_path_factory.mktemp("t5"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    # PyTorch decodes: the page is under test here (the backends are compared in test_ctranslate2.py).
    yield from serve(app.build_app(str(ours), [str(marian), str(t5)], backend="torch"), port)


def test_type_translate_and_see_every_panel(page_url, browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(page_url)
    for number in (1, 2):
        page.locator(f"#status-{number}").get_by_text("ready").wait_for(timeout=60_000)

    page.locator("#english textarea").fill("A dog runs in the park.")
    page.locator("#reference textarea").fill("Ein Hund rennt im Park.")
    page.locator("#translate").click()

    for number in (0, 1, 2):  # ours, the tiny MarianMT, the tiny T5
        details = page.locator(f"#details-{number}")
        details.get_by_text("Tokens generated").wait_for(timeout=60_000)
        assert "Sentence BLEU" in details.inner_text()
        assert page.locator(f"#translation-{number} textarea").input_value() != ""

    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT), full_page=True)
    assert errors == []
    page.close()


def test_empty_input_shows_a_message_not_an_error(page_url, browser):
    page = browser.new_page()
    page.goto(page_url)
    page.locator("#translate").click()

    page.locator("#notice").get_by_text("Type an English sentence").wait_for(timeout=30_000)
    assert page.get_by_text("Error", exact=True).count() == 0
    page.close()


@pytest.fixture(scope="module")
def phone_page_url(app_model_dir, tmp_path_factory):
    """Ours, a tiny MarianMT, and a comparison model that cannot be loaded here (the Hub is offline)."""
    marian = build_tiny_marian(tmp_path_factory.mktemp("marian-phone"))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    yield from serve(
        app.build_app(str(app_model_dir), [str(marian), "Helsinki-NLP/opus-mt-en-de"], backend="torch"), port
    )


def inside(page, selector: str, width: int) -> bool:
    """Every element matching `selector` lies within the page's width (nothing cut at the right)."""
    rights = page.eval_on_selector_all(selector, "nodes => nodes.map(n => n.getBoundingClientRect().right)")
    return bool(rights) and max(rights) <= width


def test_at_phone_width_inputs_stack_nothing_is_cut_and_a_missing_model_is_one_line(phone_page_url, browser):
    page = browser.new_page(viewport={"width": 390, "height": 844})
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.goto(phone_page_url)
    page.locator("#status-1").get_by_text("ready").wait_for(timeout=60_000)
    line = (
        "MarianMT (Helsinki-NLP/opus-mt-en-de) is not on this page: the Hugging Face Hub is offline and the model "
        "is not cached. Our model translates alone."
    )
    page.wait_for_function(  # one line: which model is missing and why
        "line => document.querySelector('#status-2')?.innerText.trim() === line", arg=line, timeout=60_000
    )
    page.locator("#translation-2").wait_for(state="hidden", timeout=10_000)  # no empty box

    english, reference = (page.locator(f"#{name} textarea").bounding_box() for name in ("english", "reference"))
    assert english["y"] + english["height"] <= reference["y"] and english["width"] >= 280  # stacked, full width
    page.get_by_text(EVERYDAY_EXAMPLE[0]).click()  # the everyday example
    # The example fills the input through the server: wait for it, as a visitor would.
    page.wait_for_function(
        "text => document.querySelector('#english textarea')?.value === text", arg=EVERYDAY_EXAMPLE[0], timeout=30_000
    )
    assert inside(page, "#examples td", 390)
    page.locator("#translate").click()
    details = page.locator("#details-0")
    details.get_by_text("Low confidence").wait_for(timeout=60_000)  # a random tiny model is out of its depth
    assert "**" not in details.inner_text() and "Confidence" in details.inner_text()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390

    # Four tabs do not fit a phone's width: Gradio shows the first ones and the rest behind "More tabs".
    page.get_by_role("button", name="More tabs").click()
    page.get_by_role("button", name="Corpus comparison").click()
    page.locator("#corpus-table td").first.wait_for(timeout=30_000)
    assert inside(page, "#corpus-table td", 390)
    label = page.eval_on_selector("#corpus-table td", "cell => getComputedStyle(cell, '::before').content")
    assert label == '"Model: "'  # each cell says which column it is, as the header row is hidden
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=str(SCREENSHOT.with_name("app-390.png")), full_page=True)
    assert errors == []
    page.close()
