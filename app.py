"""Gradio app: our Transformer beside pretrained models (MarianMT by default), English → German.

Decoding controls, sentence BLEU/chrF against an optional reference, whole files with corpus scores, what happens inside
each model (pieces, positional encoding, attention, the beam search), and the corpus-level comparison. Runs locally
(`python app.py`) and as a Hugging Face Space. This file holds loading, the page's assembly and its callbacks; each
tab's layout and wiring is in `transformer_en_de/app/page/`, what the callbacks do in `transformer_en_de/app/`, and how
the page is served and defended in `transformer_en_de/app/serving/`.

Our model comes from `--model` / TRANSFORMER_MT_MODEL (a folder or a Hub id; default models/transformer-en-de), the
comparison models from `--comparison_models` / COMPARISON_MODELS (ids or folders; "" for none), loaded in background
threads: the page is up before they are, and one that cannot be loaded says why in one line. `--backend` and `--int8`
choose what decodes; `--sign_in` lets the arena's voters sign in with Hugging Face, their votes counted as accounts'
(on a Space whose metadata has `hf_oauth: true`, always; elsewhere only with a real OAuth app, else it stops in one
line; `--sign_in stand-in` tries Gradio's local stand-in, its votes anonymous); `--forwarded_allow_ips` names the proxy
whose X-Forwarded-For tells visitors apart (on a Space, the private networks its proxy connects from). How requests
share the CPU and what the HTTP front refuses: docs/app.md and `transformer_en_de/app/serving/__init__.py`.

Named API endpoints (gradio_client), with one (translation, details) pair per comparison model:
    /translate(text, decoding, num_beams, max_new_tokens, reference)
        -> (our_translation, our_details, [model_translation, model_details]..., notice)
    /translate_file(source_file, reference_file, decoding, num_beams, max_new_tokens)
        -> (translations_tsv, summary, first_lines: Markdown, each line beside its translations)
    /inside(text, decoding, num_beams, max_new_tokens) -> dict (JSON): the first sentence inside our model and each
        comparison model (pieces, positional encoding, attention by kind/layer/head, beam steps, translation)
    /comparison() -> (notes, table), both Markdown
    /status() -> status (Markdown: each comparison model's loading state, requests in progress)
    /battle(text) -> (battle_id, translation_a, translation_b, message): two systems drawn at random, names hidden;
        no battle: battle_id "" and the message says why
    /vote(battle_id, choice) -> (system_a, system_b, message): the names revealed once the vote is stored
    /leaderboard() -> (table: Markdown, plot)
"""

import argparse
import os
import sys
from pathlib import Path

import gradio as gr
import matplotlib

matplotlib.use("Agg")  # no display on a server; must precede any pyplot import (gradio imports it to close figures)

from matplotlib.figure import Figure  # noqa: E402

from transformer_en_de.app.arena.arena import Arena, Voter, leaderboard_markdown, leaderboard_plot  # noqa: E402
from transformer_en_de.app.arena.board_reads import BoardReads  # noqa: E402
from transformer_en_de.app.arena.publish import VotePublisher  # noqa: E402
from transformer_en_de.app.arena.votes import StoreUnavailable, VoteStore  # noqa: E402
from transformer_en_de.app.corpus_report import bleu_by_model, corpus_markdown, corpus_table  # noqa: E402
from transformer_en_de.app.files import translate_file  # noqa: E402
from transformer_en_de.app.inside_tab.outputs import draw_attention, draw_inside  # noqa: E402
from transformer_en_de.app.inside_tab.pictures import rendered  # noqa: E402
from transformer_en_de.app.inside_tab.view_request import inside_request  # noqa: E402
from transformer_en_de.app.inside_tab.view_store import ViewStore  # noqa: E402
from transformer_en_de.app.page.arena import arena_tab, signed_in_line  # noqa: E402
from transformer_en_de.app.page.file import file_tab  # noqa: E402
from transformer_en_de.app.page.inside import inside_tab  # noqa: E402
from transformer_en_de.app.page.style import page_css  # noqa: E402
from transformer_en_de.app.page.translate import decoding_controls, intro_text, page_title, translate_tab  # noqa: E402
from transformer_en_de.app.serving import (  # noqa: E402
    SPACE_PROXY_NETWORKS,
    Limits,
    Serving,
    forwarded_allow_ips_by_default,
    upload_folder,
    uploaded_path,
)
from transformer_en_de.app.sign_in import SignIn, SignInUnavailable, asked_for, sign_in_mode  # noqa: E402
from transformer_en_de.app.text_checks import default_settings  # noqa: E402
from transformer_en_de.app.translation import RequestContext, format_details, format_notice, translate_text  # noqa: E402
from transformer_en_de.app.translators import (  # noqa: E402
    BackgroundTranslator,
    ModelUnavailableError,
    comparison_names,
    display_id,
    load_our_translator,
    parse_model_list,
)
from transformer_en_de.decoding.flags import add_backend_flags  # noqa: E402

APP_DIR = Path(__file__).resolve().parent
DEFAULT_MODEL = "models/transformer-en-de"
DEFAULT_COMPARISON_MODELS = "Helsinki-NLP/opus-mt-en-de"
COMPARISON_PATH = APP_DIR / "results" / "comparison_test_2016_flickr.json"
# Gradio's cache (uploads and our TSVs): every 10 minutes, files older than an hour are deleted.
DELETE_CACHE = (600, 3600)


def resolve_model(model_id: str | None) -> str:
    """The default folder sits beside app.py; other paths are relative to the working directory."""
    if not model_id or model_id == DEFAULT_MODEL:
        return str(APP_DIR / DEFAULT_MODEL)
    return model_id


def parse_options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Our Transformer beside other models (MarianMT by default), English → German."
    )
    parser.add_argument(
        "--model",
        default=os.environ.get("TRANSFORMER_MT_MODEL", DEFAULT_MODEL),
        help=f"our model: a folder or a Hub id (env TRANSFORMER_MT_MODEL; default {DEFAULT_MODEL})",
    )
    parser.add_argument(
        "--comparison_models",
        "--comparison-models",
        nargs="*",
        default=parse_model_list(os.environ.get("COMPARISON_MODELS", DEFAULT_COMPARISON_MODELS)),
        help="models to show beside ours, folders or Hub ids (env COMPARISON_MODELS, "
        f"comma-separated; default {DEFAULT_COMPARISON_MODELS}); none if given empty",
    )
    # env TRANSFORMER_MT_BACKEND sets the default backend
    add_backend_flags(parser, default_backend=os.environ.get("TRANSFORMER_MT_BACKEND", "auto"), device=False)
    parser.add_argument(
        "--votes_db",
        "--votes-db",
        type=Path,
        default=default_votes_db(),
        help="the arena's SQLite database of votes (env VOTES_DB; default /data/votes.sqlite3 where a Space has "
        "persistent storage, else data/votes.sqlite3 beside app.py)",
    )
    parser.add_argument(
        "--votes_dataset",
        "--votes-dataset",
        default=os.environ.get("VOTES_DATASET") or None,
        help="a Hub dataset repo (user/name) the votes are pushed to every 10 minutes with the token in HF_TOKEN "
        "(env VOTES_DATASET); offline or without a token the votes stay local, and the log says so once",
    )
    parser.add_argument(
        "--sign_in",
        "--sign-in",
        nargs="?",
        const="accounts",
        choices=["accounts", "stand-in"],
        default=asked_for(os.environ.get("ARENA_SIGN_IN")) or None,
        help="a 'Sign in with Hugging Face' button on the Arena tab (env ARENA_SIGN_IN=1): a signed-in vote counts as "
        "its account's, and the leaderboard ranks signed-in accounts' votes, the anonymous ones apart. On a Space "
        "whose metadata has `hf_oauth: true` it is there without this flag; elsewhere it needs a real OAuth app "
        "(SYSTEM=spaces, SPACE_ID, OAUTH_CLIENT_ID, OAUTH_CLIENT_SECRET, OAUTH_SCOPES, OPENID_PROVIDER_URL, as a Space "
        "has: without them Gradio's sign-in is a stand-in anyone can forge), else the app stops at once in one line. "
        "`--sign_in stand-in` (ARENA_SIGN_IN=stand-in) tries Gradio's local stand-in, which signs every visitor in as "
        "the account of this machine's Hugging Face token (at HF_ENDPOINT; the app stops in one line if there is no "
        "token or the Hub cannot tell whose it is); its votes count as anonymous. The sign-in cookie is a secure one: "
        "over plain HTTP a browser keeps it only at localhost or 127.0.0.1; anywhere else serve HTTPS",
    )
    parser.add_argument("--host", default=None, help="address to listen on (default: gradio's, 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default: gradio's, 7860)")
    parser.add_argument(
        "--forwarded_allow_ips",
        "--forwarded-allow-ips",
        default=forwarded_allow_ips_by_default(os.environ),
        help="the proxies in front of the app (addresses or networks, comma-separated) whose X-Forwarded-For names "
        "the visitor; from any other peer the header is ignored (env FORWARDED_ALLOW_IPS, as uvicorn reads it; on a "
        f"Hugging Face Space, where SPACE_ID is set, default {SPACE_PROXY_NETWORKS}, the private networks its proxy "
        "connects from; elsewhere none)",
    )
    return parser.parse_args(argv)


def default_votes_db() -> Path:
    """Where the votes are kept: VOTES_DB; else a Space's persistent storage (/data) when it has one, else beside
    app.py."""
    if os.environ.get("VOTES_DB"):
        return Path(os.environ["VOTES_DB"])
    persistent = Path("/data")
    folder = persistent if persistent.is_dir() and os.access(persistent, os.W_OK) else APP_DIR / "data"
    return folder / "votes.sqlite3"


def unchanged(outputs: int) -> tuple:
    """What a dropped call of a short piece of work answers: its `outputs` components left as they are."""
    return tuple(gr.skip() for _ in range(outputs))


def voter_of(request: gr.Request, profile: gr.OAuthProfile | None = None) -> Voter:
    """The arena's voter behind a request: its session, the address uvicorn gives (the proxy's visitor where the proxy
    is trusted, `serving/server.py`) and the Hub account the visitor signed in with (the arena stores only its salted
    hash)."""
    account = profile.username if profile is not None else None
    return Voter(request.session_hash or "", request.client.host if request.client else "", account)


class TranslationApp:
    """What the page serves from (our model, the comparison models, the serving layer, the limits) and its event
    callbacks: each hands its inputs to `transformer_en_de/app/` and its results to the components. Every callback of
    an event of work runs admitted (`serving.admitted`), or as side work (`in_turn`)."""

    def __init__(
        self,
        model_id: str,
        comparison_model_ids: list[str] | None,
        *,
        limits: Limits,
        comparison_path: Path,
        backend: str = "auto",
        int8: bool = False,
        votes_db: Path | None = None,
        votes_dataset: str | None = None,
    ):
        self.limits, self.comparison_path = limits, comparison_path
        self.serving = Serving(limits)  # the HTTP front, the upload quota, the scheduler; builds the server
        # The arena's votes: a real database, committed at each vote; published to the Hub when asked. Opened before
        # any model loads: a salt or database that stops the app (`StoreUnavailable`) does so at once.
        votes = VoteStore(votes_db or default_votes_db())
        engine = dict(on_load=self.prepare_model, backend=backend, int8=int8)
        self.ours = load_our_translator(resolve_model(model_id), **engine)
        ids = parse_model_list(comparison_model_ids)
        self.comparisons = [
            BackgroundTranslator(i, name, **engine) for i, name in zip(ids, comparison_names(ids), strict=True)
        ]
        self.systems = [self.ours, *self.comparisons]
        self.views = ViewStore()  # the Inside tab's views, of which sessions keep only the ids
        self.arena = Arena(votes)
        self.board = BoardReads(self.leaderboard_table, lambda board: rendered(leaderboard_plot(board)))
        self.publisher = VotePublisher(votes, votes_dataset, Path(votes.path).parent / "votes-dataset").start()
        if votes_dataset:
            print(f"app.py: {self.publisher.status}", flush=True)
        self.demo: gr.Blocks | None = None  # the page, once built

    def prepare_model(self, model) -> None:
        model.set_attn_implementation("eager")  # the Inside tab needs attention weights, which SDPA does not return

    def context(self, request: gr.Request, arrived: float | None) -> RequestContext:
        """What every request needs besides its inputs: the systems, the turns, the limits, who asks and since when."""
        scheduler = self.serving.scheduler
        return RequestContext(self.ours, self.comparisons, scheduler, self.limits, request.session_hash, arrived)

    def in_turn(self, request: gr.Request, work, dropped: tuple):
        """`work()` (a picture, the corpus table, a vote) as side work (`Serving.side_work`), its pictures rendered in
        its turn too (Gradio would encode them after the callback, in its event loop); `dropped` if nobody reads it."""
        pictures = lambda: tuple(rendered(value) if isinstance(value, Figure) else value for value in work())  # noqa: E731
        return self.serving.side_work(request, pictures, dropped)

    def translate(self, text, decoding, num_beams, max_new_tokens, reference, request: gr.Request):
        """Translate English text with our model and every comparison model.

        Args: text (str, one or more sentences), decoding ("beam search" or "greedy"), num_beams (int, 1-8; used with
        beam search), max_new_tokens (int, 1-255), reference (str, optional German reference; "" for none).
        Returns: our translation and details (Markdown: latency, tokens generated, parameters, sentence BLEU/chrF,
        notices), then a translation and details per comparison model, then a notice about the request.
        """
        # Decoding takes turns on the CPU inside generate(): at each step of the search this request may wait for
        # another one, or end (Cancelled: the page closed) - the engine's `TurnPoint`, which translation.py hands it.
        with self.serving.admitted(request) as arrived:
            result = translate_text(
                text, decoding, num_beams, max_new_tokens, reference, context=self.context(request, arrived)
            )
        panels = [value for output in result.outputs for value in (output.translation, format_details(output))]
        return (*panels, format_notice(result))

    # reference_file may be left out (None): its default makes it optional in the API. The page always sends the
    # controls, whose own values are their defaults there; None here only lets the parameters follow it.
    def translate_file(
        self,
        source_file,
        reference_file=None,
        decoding=None,
        num_beams=None,
        max_new_tokens=None,
        request: gr.Request = None,
        progress=gr.Progress(),
    ):
        """Translate an uploaded UTF-8 text file (.txt, .en, .de; one English sentence per line) with every model.

        Returns a TSV (line, source, one column per model, reference) and a Markdown summary with timings and, when a
        reference file with the same number of lines is given, corpus BLEU and chrF.
        """
        with self.serving.admitted(request) as arrived:
            result = translate_file(
                uploaded_path(source_file, self.limits.max_file_bytes),
                uploaded_path(reference_file, self.limits.max_file_bytes),
                decoding,
                num_beams,
                max_new_tokens,
                output_dir=upload_folder(),
                progress=progress,
                context=self.context(request, arrived),
            )
        return result.path, result.summary, result.preview

    def comparison(self, request: gr.Request):
        """Corpus-level results: Markdown notes (what the scores mean) and a Markdown table, one row per model and
        test set (eval_results.json and compare.py's JSON)."""
        return self.in_turn(request, self.corpus_markdown, unchanged(2))

    def corpus_markdown(self) -> tuple[str, str]:
        summary, rows = self.corpus()
        return summary, corpus_markdown(rows)

    def corpus(self) -> tuple[str, list[list[str]]]:
        """The corpus notes and rows (eval_results.json and compare.py's JSON)."""
        folder = self.ours.model_id if Path(self.ours.model_id).is_dir() else None
        return corpus_table(folder, self.comparison_path, display_id(self.ours.model_id))

    def status(self):
        """Each comparison model's loading state, what decodes, and the requests in progress, as Markdown lines."""
        lines = [model.status() for model in self.comparisons]
        lines.append(f"Our model decodes with {getattr(self.ours, 'backend_name', 'PyTorch')}.")
        return "\n\n".join(lines + [self.serving.scheduler.describe()])

    def poll_models(self):
        """Each comparison model's line; a model that cannot be loaded keeps only its line (no empty boxes)."""
        shown = [gr.update(visible=not model.failed) for model in self.comparisons]
        statuses = [model.status() for model in self.comparisons]
        done = all(model.done for model in self.comparisons)
        return (*statuses, *shown, intro_text(self.comparisons), gr.Timer(active=not done))

    # ---------------------------------------------------------------- Inside the Transformer: its callbacks (issue 35)

    def inside(self, text, decoding, num_beams, max_new_tokens, request: gr.Request):
        """What our model (and each comparison model that returns its attention) does with the text's first sentence.

        Args: as /translate's first four. Returns a dict (JSON): source_tokens, source_ids, target_tokens, target_ids,
        positional_encoding [positions][d_model], attention {encoder_self, decoder_self, cross} each
        [layers][heads][query][key], beam_steps (each with beams and finished), finished, translation (as /translate
        gives it for that sentence), notices, comparisons (the same per comparison model); or only message and notices.
        """
        with self.serving.admitted(request) as arrived:
            view = inside_request(text, decoding, num_beams, max_new_tokens, context=self.context(request, arrived))
        # The endpoint's answer; the id of the copy the pictures are drawn from, in place of the session's earlier one
        return view, self.views.put(view, request.session_hash)

    def draw_inside(self, view_id, kind, layer, head, request: gr.Request):
        """Every picture of the Inside tab, from the server's copy of the view (no model runs); the endpoint's answer
        emptied, so that Gradio's copy of it in the session goes."""
        pictures = lambda: [*draw_inside(self.views.get(view_id), kind, layer, head, len(self.systems)), None]  # noqa: E731
        return self.in_turn(request, pictures, unchanged(3 + 4 * len(self.systems)))

    def draw_inside_attention(self, view_id, kind, layer, head, request: gr.Request):
        """The Inside tab's attention pictures again, for another kind, layer or head."""
        pictures = lambda: draw_attention(self.views.get(view_id), kind, layer, head, len(self.systems))  # noqa: E731
        return self.in_turn(request, pictures, unchanged(1 + len(self.systems)))

    # ------------------------------------------------------------------ the arena: blind votes (app/arena/)

    # Gradio fills `profile` from the visitor's sign-in session (None when not signed in, or the page has no sign-in);
    # it is not an input of the endpoint, and the arena counts it as an account only where the sign-in is a real OAuth
    # app, whose secret signs the session cookie (`Arena.accounts`, `sign_in.py`): no one else can make that cookie.
    def battle(self, text, request: gr.Request, profile: gr.OAuthProfile | None):
        """Two systems drawn at random translate the text; their names are hidden until the vote.

        Args: text (str, English: one sentence or a few). Returns: battle_id (str; "" when there is no battle),
        translation_a, translation_b (str; "" with no battle), message (one line; with no battle, why).
        """
        settings = default_settings(self.ours.model, self.limits)  # what the page starts with, for both systems
        voter = voter_of(request, profile)
        with self.serving.admitted(request) as arrived:
            return self.arena.battle(text, self.context(request, arrived), settings, voter)

    def vote(self, battle_id, choice, request: gr.Request, profile: gr.OAuthProfile | None):
        """Vote on a battle: choice is "A", "B", "tie" or "both bad".

        Returns: system_a, system_b (the names revealed; "" if the vote was refused) and a one-line message.
        """
        dropped, voter = ("", "", "Cancelled: nobody reads this."), voter_of(request, profile)
        cast_at = self.serving.arrival(request)  # when the visitor voted, not when its turn came
        return self.in_turn(request, lambda: self.voted(self.arena.vote(battle_id, choice, voter, cast_at)), dropped)

    def voted(self, answer: tuple[str, str, str]) -> tuple[str, str, str]:
        if answer[0]:  # stored (the names are revealed only then): the board changed
            self.board.vote_stored()
        return answer

    def leaderboard(self, request: gr.Request):
        """The arena's leaderboard: Markdown table (Bradley-Terry ratings, 95% intervals, battles, BLEU), and a plot."""
        # Readers back to back share one working-out and one drawing; a page that shows the board already gets nothing.
        # A board still fresh is only looked up: no turn on the CPU, so many readers never hold up a battle.
        read = lambda: self.board.read(request.session_hash) or unchanged(2)  # noqa: E731
        if self.board.is_fresh():
            with self.serving.admitted(request):
                return read()
        return self.in_turn(request, read, unchanged(2))

    def leaderboard_table(self) -> tuple[list, str]:
        """(the first board's rows, the boards' Markdown), from the votes and each system's corpus BLEU."""
        _, rows = self.corpus()
        # each system's test 2016 BLEU from the Corpus tab's own rows (ours: its record's), so the two never disagree
        scored = bleu_by_model(rows)
        bleu = {model: score for model, (score, _) in scored.items()}
        how = "; ".join(f"{model}: {decoding}" for model, (_, decoding) in scored.items())
        bleu_line = f"BLEU: cased sacreBLEU on test 2016 flickr, decoded as scored ({how})." if scored else ""
        boards = self.arena.boards(bleu)
        return boards[0].rows, leaderboard_markdown(boards, bleu_line)

    def cancel_visitor(self, request: gr.Request):
        if self.serving.scheduler.cancel(request.session_hash):
            print("app.py: a visitor left; their request was cancelled.", flush=True)


# ------------------------------------------------------------------------------------------------------------ the page


def build_app(
    model_id: str = DEFAULT_MODEL,
    comparison_model_ids: list[str] | None = None,
    *,
    limits: Limits = Limits(),
    comparison_path: Path = COMPARISON_PATH,
    backend: str = "auto",
    int8: bool = False,
    votes_db: Path | None = None,
    votes_dataset: str | None = None,
    sign_in: SignIn | None = None,
) -> TranslationApp:
    """Load our model (ModelUnavailableError if it cannot be), start loading the others, build the page (`.demo`).
    `sign_in`: the Arena tab has a "Sign in with Hugging Face" button (`sign_in_mode` checked that it can work)."""
    app = TranslationApp(
        model_id,
        comparison_model_ids,
        limits=limits,
        comparison_path=comparison_path,
        backend=backend,
        int8=int8,
        votes_db=votes_db,
        votes_dataset=votes_dataset,
    )
    with gr.Blocks(title=f"English → German: {page_title(app.comparisons)}", delete_cache=DELETE_CACHE) as demo:
        intro = gr.Markdown(intro_text(app.comparisons))
        controls = decoding_controls(app)
        with gr.Tabs():
            with gr.Tab("Translate"):
                text = translate_tab(app, controls, intro)
            with gr.Tab("File"):
                file_tab(app, controls)
            with gr.Tab("Inside the Transformer"):
                inside_tab(app, controls, text)
            with gr.Tab("Arena"):
                signed_in = arena_tab(app, sign_in)
            with gr.Tab("Corpus comparison"):
                notes = gr.Markdown(label="Notes")
                table = gr.Markdown(label="Corpus results", elem_id="corpus-table")
        status = gr.Markdown(label="Status", visible=False)
        # The corpus table is work like any other; the status line only reads counters and skips the queue.
        app.serving.work(demo.load, app.comparison, None, [notes, table], api_name="comparison")
        demo.load(app.status, None, status, api_name="status", queue=False)
        if signed_in is not None:  # reads the sign-in cookie only: no turn on the CPU
            demo.load(signed_in_line, None, signed_in, api_visibility="private", queue=False)
        # A page that closes (its heartbeat ends) cancels its request; a client that keeps no page open is stopped
        # when nobody reads its results (serving/scheduler.py). A client calling this event itself makes new sessions
        # no faster than its address may (serving/guard.py), and cancels nothing of anyone else's.
        demo.unload(app.cancel_visitor)
    app.serving.queue(demo)
    app.demo = demo
    return app


def build_app_server(app: TranslationApp, host: str | None = None, port: int | None = None, forwarded_allow_ips=""):
    """The uvicorn server for the page behind its defences (`Serving.server`); `.run()` serves it."""
    css = page_css(app.systems)
    return app.serving.server(app.demo, css=css, host=host, port=port, forwarded_allow_ips=forwarded_allow_ips)


OPTIONS = parse_options(sys.argv[1:] if __name__ == "__main__" else [])
try:
    SIGN_IN = sign_in_mode(OPTIONS.sign_in)  # checked before any model loads: a sign-in that cannot work stops here
    APP = build_app(
        OPTIONS.model,
        OPTIONS.comparison_models,
        backend=OPTIONS.backend,
        int8=OPTIONS.int8,
        votes_db=OPTIONS.votes_db,
        votes_dataset=OPTIONS.votes_dataset,
        sign_in=SIGN_IN,
    )
except (ModelUnavailableError, SignInUnavailable, StoreUnavailable) as error:
    sys.exit(f"app.py: {error}")
if SIGN_IN:
    print(f"app.py: the arena's voters can sign in {SIGN_IN}.", flush=True)
demo = APP.demo

if __name__ == "__main__":
    build_app_server(APP, OPTIONS.host, OPTIONS.port, OPTIONS.forwarded_allow_ips).run()
