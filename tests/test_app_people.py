"""The app's server counts people, not scripts (issue 50): a page on a slow link gets every answer, one session
cannot push out another's Inside view, bad values to an event cost no traceback, and a script churning sessions from
a school's address does not lock its learners out. A real server in this process (our tiny model alone), called the
way a page calls it: a heartbeat, posts to queue/join, the session's event stream."""

import json
import os
import socket
import threading
import time

import httpx
import pytest

from benchmarks.load import Page, events
from transformer_en_de.app.serving.limits import Limits

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def served(app_model_dir):
    """The app's server in this process, our model alone, the limits as shipped; yields (url, the app)."""
    from conftest import start_in_thread

    import app

    translation_app = app.build_app(str(app_model_dir), [], limits=Limits(), backend="torch")
    port = free_port()
    server = app.build_app_server(translation_app, "127.0.0.1", port)
    start_in_thread(server)
    yield f"http://127.0.0.1:{port}/", translation_app
    server.should_exit = True


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def translation_of(message: dict) -> str:
    assert message.get("success"), message
    return message["output"]["data"][0]


@pytest.mark.parametrize("late", [2.5, 4.0])
def test_a_page_whose_stream_opens_late_gets_its_answer(served, late):
    # A slow mobile link: the page asked, and its event stream opens seconds later. The page is still open (its
    # heartbeat is), so the translation runs and waits to be read.
    url, _ = served
    named, _ = events(url)
    page = Page(url)
    try:
        assert page.join(named["translate"], ["A dog runs in the park.", "beam search", 4, 32, ""]).status_code == 200
        time.sleep(late)
        (message,) = page.read()
    finally:
        page.close()
    assert translation_of(message) and "Cancelled" not in json.dumps(message["output"]), message


def test_a_call_whose_page_never_opened_is_still_dropped(served):
    # No heartbeat, and no stream within the bounded wait (a script posting and leaving): dropped before it runs, so
    # that work nobody reads costs nothing of the next visitor's. Its stream, opened afterwards, says so.
    url, _ = served
    named, _ = events(url)
    script = Page(url, heartbeat=False)
    try:
        assert script.join(named["translate"], ["A dog runs.", "beam search", 4, 32, ""]).status_code == 200
        time.sleep(Limits().stream_wait_seconds + 1.5)
        (message,) = script.read()
    finally:
        script.close()
    assert "Cancelled" in json.dumps(message["output"]), message


def test_learners_opening_the_page_from_an_address_churning_sessions_are_let_in(served):
    # A script makes 20 new sessions a second from a school's address (a join each, never read); then the school's 60
    # learners open the page from that address: each page's heartbeat opens as it posts its first call (as a browser
    # does, on another connection), and every learner is answered. The script's own sessions are still refused.
    url, _ = served
    named, _ = events(url)
    school, stop, churned = "127.0.0.5", threading.Event(), []
    script = httpx.Client(timeout=30, transport=httpx.HTTPTransport(local_address=school))

    def churn():  # one of 20 threads, each a new session a second
        while not stop.wait(1.0):
            body = {"data": [], "fn_index": named["comparison"], "session_hash": os.urandom(8).hex()}
            churned.append(script.post(f"{url}gradio_api/queue/join", json=body).status_code)

    churners = [threading.Thread(target=churn, daemon=True) for _ in range(20)]
    began = time.monotonic()
    for churner in churners:
        churner.start()
    deadline = time.monotonic() + 60
    while 429 not in churned:  # the address's new sessions are spent
        assert time.monotonic() < deadline, churned[-5:]
        time.sleep(0.2)
    answered, failed = [], []

    def learner():
        page = Page(url, peer=school, heartbeat=True, settle=False)
        try:
            posted = page.join(named["comparison"], [])
            if posted.status_code != 200:
                failed.append(posted.text)
                return
            (message,) = page.read()
            (answered if message.get("success") else failed).append(message)
        except Exception as error:  # noqa: BLE001 - a learner locked out is what this test looks for
            failed.append(repr(error))
        finally:
            page.close()

    learners = [threading.Thread(target=learner) for _ in range(60)]
    for thread in learners:
        thread.start()
    for thread in learners:
        thread.join(timeout=300)
    stop.set()
    for churner in churners:
        churner.join(timeout=30)
    churning = time.monotonic() - began
    script.close()
    assert not failed and len(answered) == 60, failed[:3]
    # The script's new sessions were held to the address's rate all along (its burst, then its rate).
    limits = Limits()
    assert churned.count(200) <= limits.new_sessions_per_address_burst + limits.new_sessions_per_address_per_second * (
        churning + 1
    )


def look_inside(page: Page, named: dict, sentence: str = "A dog runs in the park.") -> None:
    """The page's Look inside: /inside in the page's session, read (its view's id is then the session's)."""
    assert page.join(named["inside"], [sentence, "beam search", 2, 16]).status_code == 200
    (message,) = page.read()
    assert message.get("success") and "message" not in message["output"]["data"][0], message


def redraw(page: Page, fn_index: int, kind, layer, head) -> dict:
    """One redraw of the page's attention pictures (the view's id comes from the session): its completed message."""
    assert page.join(fn_index, [None, kind, layer, head]).status_code == 200
    (message,) = page.read()
    return message


def test_one_session_asking_for_many_views_does_not_push_out_another_visitors_view(served):
    url, translation_app = served
    named, redraws = events(url)
    visitor, other = Page(url), Page(url)
    try:
        look_inside(visitor, named)
        for number in range(translation_app.views.max_views + 2):  # one session, more views than the server keeps
            look_inside(other, named, f"A dog number {number} runs.")
        drawn = redraw(visitor, redraws[-1][0], "cross", 1, 0)
        theirs = redraw(other, redraws[-1][0], "cross", 1, 0)
    finally:
        visitor.close()
        other.close()
    assert drawn.get("success") and "no longer kept" not in drawn["output"]["data"][-1], drawn
    assert theirs.get("success") and "no longer kept" not in theirs["output"]["data"][-1], theirs


def test_redraws_with_values_outside_the_pages_choices_cost_no_traceback(served, capfd):
    # A script sends the Inside tab's redraws values no control offers: each is drawn with the defaults (what the
    # page's choices are), and the log has no traceback (a line each at the very most).
    url, _ = served
    named, redraws = events(url)
    page = Page(url)
    odd = [("sideways", 1, 0), ("cross", 99, 0), ("cross", 1, "x"), (["cross"], None, 3.5), ({"k": 1}, -4, 10**30)]
    try:
        look_inside(page, named)
        capfd.readouterr()
        answers = [redraw(page, redraws[-1][0], *values) for values in odd * 4]
    finally:
        page.close()
    logged = capfd.readouterr()
    log = logged.out + logged.err
    assert all(answer.get("success") for answer in answers), [a for a in answers if not a.get("success")][:1]
    assert "Traceback" not in log and len(log.splitlines()) <= len(answers), log[-2_000:]
