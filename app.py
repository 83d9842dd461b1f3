"""Gradio app: our Transformer beside pretrained models (MarianMT by default), English → German.

`python app.py --help` lists the options; docs/app.md describes the page and its named endpoints. This file holds
loading, the page's assembly and its callbacks; each tab's layout is in `transformer_en_de/app/page/`."""

import argparse
import os
import sys
from pathlib import Path

import gradio as gr
from matplotlib.figure import Figure

from transformer_en_de.app.arena.arena import Arena, BoardReads, Voter, leaderboard_markdown, leaderboard_plot
from transformer_en_de.app.arena.publish import VotePublisher
from transformer_en_de.app.arena.votes import StoreUnavailable, VoteStore
from transformer_en_de.app.corpus_report import bleu_by_model, corpus_markdown, corpus_table
from transformer_en_de.app.files import translate_file
from transformer_en_de.app.inside_tab.outputs import draw_attention, draw_inside, rendered
from transformer_en_de.app.inside_tab.view_request import ViewStore, inside_request
from transformer_en_de.app.page.arena import arena_tab, signed_in_line
from transformer_en_de.app.page.file import file_tab
from transformer_en_de.app.page.inside import inside_tab
from transformer_en_de.app.page.style import page_css
from transformer_en_de.app.page.translate import decoding_controls, intro_text, page_title, translate_tab
from transformer_en_de.app.serving import (
    SPACE_PROXY_NETWORKS,
    Limits,
    Serving,
    forwarded_allow_ips_by_default,
    upload_folder,
    uploaded_path,
)
from transformer_en_de.app.sign_in import SignIn, SignInUnavailable, asked_for, sign_in_mode
from transformer_en_de.app.text_checks import default_settings
from transformer_en_de.app.translation import RequestContext, format_details, translate_text
from transformer_en_de.app.translators import ModelUnavailableError, load_our_translator, start_comparisons
from transformer_en_de.decoding.flags import add_backend_flags

APP_DIR = Path(__file__).resolve().parent
DEFAULT_MODEL = "models/transformer-en-de"
DEFAULT_COMPARISON_MODELS = "Helsinki-NLP/opus-mt-en-de"
COMPARISON_PATH = APP_DIR / "results" / "comparison_test_2016_flickr.json"
# Gradio's cache (uploads and our TSVs): every 10 minutes, files older than an hour are deleted.
DELETE_CACHE = (600, 3600)


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
        default=os.environ.get("COMPARISON_MODELS", DEFAULT_COMPARISON_MODELS),
        help="models to show beside ours, folders or Hub ids (env COMPARISON_MODELS, "
        f"comma-separated; default {DEFAULT_COMPARISON_MODELS}); none if given empty",
    )
    add_backend_flags(parser, default_backend=os.environ.get("TRANSFORMER_MT_BACKEND", "auto"), device=False)
    parser.add_argument(
        "--votes_db",
        "--votes-db",
        type=Path,
        default=default_votes_db(),
        help="the arena's SQLite database of votes (env VOTES_DB; default /data/votes.sqlite3 on a Space with "
        "persistent storage, else data/ beside app.py)",
    )
    parser.add_argument(
        "--votes_dataset",
        "--votes-dataset",
        default=os.environ.get("VOTES_DATASET") or None,
        help="a Hub dataset repo (user/name) the votes are pushed to every 10 minutes with HF_TOKEN (env "
        "VOTES_DATASET); offline or without a token they stay local",
    )
    parser.add_argument(
        "--sign_in",
        "--sign-in",
        nargs="?",
        const="accounts",
        choices=["accounts", "stand-in"],
        default=asked_for(os.environ.get("ARENA_SIGN_IN")) or None,
        help="a 'Sign in with Hugging Face' button on the Arena tab (env ARENA_SIGN_IN=1): needs a Space with "
        "`hf_oauth: true` or a real OAuth app; `stand-in` tries Gradio's local stand-in, its votes anonymous "
        "(docs/app.md). The cookie is secure: serve HTTPS anywhere but localhost",
    )
    parser.add_argument("--host", default=None, help="address to listen on (default: gradio's, 127.0.0.1)")
    parser.add_argument("--port", type=int, default=None, help="port (default: gradio's, 7860)")
    parser.add_argument(
        "--forwarded_allow_ips",
        "--forwarded-allow-ips",
        default=forwarded_allow_ips_by_default(os.environ),
        help="the proxies (addresses or networks, comma-separated) whose X-Forwarded-For names the visitor (env "
        f"FORWARDED_ALLOW_IPS; default on a Space, where SPACE_ID is set, {SPACE_PROXY_NETWORKS}; elsewhere none)",
    )
    Limits.add_flags(parser)
    return parser.parse_args(argv)


def default_votes_db() -> Path:
    """VOTES_DB; else a Space's persistent storage (/data) when it has one, else beside app.py."""
    if os.environ.get("VOTES_DB"):
        return Path(os.environ["VOTES_DB"])
    persistent = Path("/data")
    folder = persistent if persistent.is_dir() and os.access(persistent, os.W_OK) else APP_DIR / "data"
    return folder / "votes.sqlite3"


def voter_of(request: gr.Request, profile: gr.OAuthProfile | None = None) -> Voter:
    """The arena's voter: the session, its address (the visitor's, behind a trusted proxy), its Hub account."""
    account = profile.username if profile is not None else None
    return Voter(request.session_hash or "", request.client.host if request.client else "", account)


class TranslationApp:
    """What the page serves from, and its callbacks (each admitted, or as side work: `rendered_side_work`)."""

    def __init__(
        self,
        model_id: str = DEFAULT_MODEL,
        comparison_model_ids: list[str] | None = None,
        *,
        limits: Limits = Limits(),
        backend: str = "auto",
        int8: bool = False,
        votes_db: Path | None = None,
        votes_dataset: str | None = None,
    ):
        self.limits = limits
        self.serving = Serving(limits)  # the HTTP front, the upload quota, the scheduler; builds the server
        # The arena's votes: a real database, committed at each vote; published to the Hub when asked. Opened before
        # any model loads: a salt or database that stops the app (`StoreUnavailable`) does so at once.
        votes = VoteStore(votes_db or default_votes_db())
        # The Inside tab needs attention weights, which SDPA does not return
        engine = dict(on_load=lambda model: model.set_attn_implementation("eager"), backend=backend, int8=int8)
        # The default folder sits beside app.py; other paths are relative to the working directory
        model_id = model_id if model_id and model_id != DEFAULT_MODEL else str(APP_DIR / DEFAULT_MODEL)
        self.ours = load_our_translator(model_id, **engine)
        self.comparisons = start_comparisons(comparison_model_ids, **engine)
        self.systems = [self.ours, *self.comparisons]
        self.views = ViewStore()  # the Inside tab's views, of which sessions keep only the ids
        self.arena = Arena(votes)
        self.board = BoardReads(self.leaderboard_table, lambda board: rendered(leaderboard_plot(board)))
        self.publisher = VotePublisher(votes, votes_dataset, votes.published_folder).start()
        if votes_dataset:
            print(f"app.py: {self.publisher.status}", flush=True)
        self.demo: gr.Blocks | None = None  # the page, once built

    def context(self, request: gr.Request, arrived: float | None) -> RequestContext:
        scheduler = self.serving.scheduler
        return RequestContext(self.ours, self.comparisons, scheduler, self.limits, request.session_hash, arrived)

    def rendered_side_work(self, request: gr.Request, work, dropped):
        """`work()` as side work, its pictures rendered in its turn too (Gradio would encode them after the callback,
        in its event loop); `dropped` if nobody reads it."""
        pictures = lambda: tuple(rendered(value) if isinstance(value, Figure) else value for value in work())  # noqa: E731
        return self.serving.run_side_work(request, pictures, dropped)

    def translate(self, text, decoding, num_beams, max_new_tokens, reference, request: gr.Request):
        """Translate English text (one or more sentences) with our model and every comparison model; sentence BLEU and
        chrF against the German reference, if given. Returns each model's translation and details, then a notice."""
        with self.serving.admitted(request) as arrived:
            result = translate_text(
                text, decoding, num_beams, max_new_tokens, reference, context=self.context(request, arrived)
            )
        panels = [value for output in result.outputs for value in (output.translation, format_details(output))]
        return (*panels, "\n\n".join(f"⚠️ {line}" for line in [result.message, *result.notices] if line))

    # Defaults make reference_file optional in the API (the page always sends the controls)
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
        """Translate a UTF-8 text file (one English sentence per line) with every model: a TSV, a summary with corpus
        BLEU and chrF against a reference file of as many lines, if given, and the first lines."""
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
        """Corpus-level results: notes and a table, one row per model, test set and decoding (Markdown)."""
        return self.rendered_side_work(request, self.corpus_markdown, gr.skip())

    def corpus_markdown(self) -> tuple[str, str]:
        notes, rows = self.corpus()
        return notes, corpus_markdown(rows)

    def corpus(self) -> tuple[str, list[list[str]]]:
        """The Corpus tab's notes and rows, which the leaderboard's BLEU column reads too."""
        return corpus_table(self.ours.model_id, COMPARISON_PATH)

    def status(self):
        """Each comparison model's loading state, what decodes ours, and the requests in progress (Markdown)."""
        lines = [model.status() for model in self.comparisons]
        lines.append(f"Our model decodes with {self.ours.backend_name}.")
        return "\n\n".join(lines + [self.serving.scheduler.describe()])

    def poll_models(self):
        """Each comparison model's line; a model that cannot be loaded keeps only its line (no empty boxes)."""
        shown = [gr.update(visible=not model.failed) for model in self.comparisons]
        statuses = [model.status() for model in self.comparisons]
        done = all(model.done for model in self.comparisons)
        return (*statuses, *shown, intro_text(self.comparisons), gr.Timer(active=not done))

    def inside(self, text, decoding, num_beams, max_new_tokens, request: gr.Request):
        """What our model (and each comparison model that returns its attention) does with the text's first sentence:
        pieces, positional encoding, attention by kind, layer and head, the beam search (JSON; docs/app.md)."""
        with self.serving.admitted(request) as arrived:
            view = inside_request(text, decoding, num_beams, max_new_tokens, context=self.context(request, arrived))
        # The endpoint's answer; the id of the copy the pictures are drawn from, in place of the session's earlier one
        return view, self.views.put(view, request.session_hash)

    def draw_inside(self, view_id, kind, layer, head, request: gr.Request):
        """Every picture of the Inside tab from the server's copy of the view (emptying Gradio's)."""
        pictures = lambda: [*draw_inside(self.views.get(view_id), kind, layer, head, len(self.systems)), None]  # noqa: E731
        return self.rendered_side_work(request, pictures, gr.skip())

    def draw_inside_attention(self, view_id, kind, layer, head, request: gr.Request):
        """The Inside tab's attention pictures again, for another kind, layer or head."""
        pictures = lambda: draw_attention(self.views.get(view_id), kind, layer, head, len(self.systems))  # noqa: E731
        return self.rendered_side_work(request, pictures, gr.skip())

    # Gradio fills `profile` from the visitor's sign-in session (None without one); not an input of the endpoint. The
    # arena counts it as an account only where a real OAuth app's secret signs the cookie (`sign_in.py`).
    def battle(self, text, request: gr.Request, profile: gr.OAuthProfile | None):
        """Two systems drawn at random translate the English text, their names hidden until the vote: battle_id,
        translation_a, translation_b ("" when there is no battle) and a one-line message."""
        settings = default_settings(self.ours.model, self.limits)  # what the page starts with, for both systems
        voter = voter_of(request, profile)
        with self.serving.admitted(request) as arrived:
            return self.arena.battle(text, self.context(request, arrived), settings, voter)

    def vote(self, battle_id, choice, request: gr.Request, profile: gr.OAuthProfile | None):
        """Vote on a battle ("A", "B", "tie" or "both bad"): the names revealed ("" if refused) and a message."""
        dropped, voter = ("", "", "Cancelled: nobody reads this."), voter_of(request, profile)
        cast_at = self.serving.arrival(request)  # when the visitor voted, not when its turn came
        return self.rendered_side_work(
            request, lambda: self.voted(self.arena.vote(battle_id, choice, voter, cast_at)), dropped
        )

    def voted(self, answer: tuple[str, str, str]) -> tuple[str, str, str]:
        if answer[0]:  # stored (the names are revealed only then): the board changed
            self.board.vote_stored()
        return answer

    def leaderboard(self, request: gr.Request):
        """The arena's leaderboard: Markdown table (Bradley-Terry ratings, 95% intervals, battles, BLEU), and a plot."""
        # A fresh board is only looked up, with no turn on the CPU: many readers never hold up a battle
        read = lambda: self.board.read(request.session_hash) or (gr.skip(), gr.skip())  # noqa: E731
        if self.board.is_fresh():
            with self.serving.admitted(request):
                return read()
        return self.rendered_side_work(request, read, gr.skip())

    def leaderboard_table(self) -> tuple[list, str]:
        """(the first board's rows, the boards' Markdown), from the votes and each system's corpus BLEU."""
        scored = bleu_by_model(self.corpus()[1])  # the Corpus tab's own rows: the two never disagree
        bleu = {model: score for model, (score, _) in scored.items()}
        how = "; ".join(f"{model}: {decoding}" for model, (_, decoding) in scored.items())
        bleu_line = f"BLEU: cased sacreBLEU on test 2016 flickr, decoded as scored ({how})." if scored else ""
        boards = self.arena.boards(bleu)
        return boards[0].rows, leaderboard_markdown(boards, bleu_line)


# ------------------------------------------------------------------------------------------------------------ the page


def build_app(*model_ids, sign_in: SignIn | None = None, **options) -> TranslationApp:
    """A `TranslationApp(*model_ids, **options)` (ModelUnavailableError if our model cannot be loaded) and its page
    (`.demo`); `sign_in`: the Arena tab's "Sign in with Hugging Face" button (`sign_in_mode` checked that it works)."""
    app = TranslationApp(*model_ids, **options)
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
        limits=Limits.from_args(OPTIONS),
        backend=OPTIONS.backend,
        int8=OPTIONS.int8,
        votes_db=OPTIONS.votes_db,
        votes_dataset=OPTIONS.votes_dataset,
        sign_in=SIGN_IN,
    )
except (ModelUnavailableError, SignInUnavailable, StoreUnavailable) as error:
    sys.exit(f"app.py: {error}")
if SIGN_IN:
    print(f"app.py: the arena's voters can sign in {SIGN_IN.how}.", flush=True)
demo = APP.demo

if __name__ == "__main__":
    build_app_server(APP, OPTIONS.host, OPTIONS.port, OPTIONS.forwarded_allow_ips).run()
