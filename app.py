"""Gradio app: our Transformer beside pretrained models (MarianMT by default), English → German.

Decoding controls, sentence BLEU/chrF against an optional reference, whole files with corpus scores, what happens
inside each model (pieces, positional encoding, attention, the beam search), and the corpus-level comparison. Runs
locally (`python app.py`) and as a Hugging Face Space. This file holds loading, layout and wiring; what the callbacks
do lives in `transformer_en_de/app/`.

Our model comes from `--model` / TRANSFORMER_MT_MODEL (a folder or a Hub id; default models/transformer-en-de), the
comparison models from `--comparison_models` / COMPARISON_MODELS (ids or folders; "" for none), loaded in background
threads: the page is up before they are, and one that cannot be loaded says why in one line. `--backend` and `--int8`
choose what decodes; `--sign_in` lets the arena's voters sign in with Hugging Face (on a Space whose metadata has
`hf_oauth: true`, always; elsewhere as the account of the machine's token); `--forwarded_allow_ips` names the proxy
whose X-Forwarded-For tells visitors apart (on a Space, the private networks its proxy connects from). How requests
share the CPU and what the HTTP front refuses: docs/app.md and `transformer_en_de/app/__init__.py`.

Named API endpoints (gradio_client), with one (translation, details) pair per comparison model:
    /translate(text, decoding, num_beams, max_new_tokens, reference)
        -> (our_translation, our_details, [model_translation, model_details]..., notice)
    /translate_file(source_file, reference_file, decoding, num_beams, max_new_tokens)
        -> (translations_tsv, summary, first_lines: Markdown, each line beside its translations)
    /inside(text, decoding, num_beams, max_new_tokens) -> dict (JSON): the first sentence inside our model and each
        comparison model (pieces, positional encoding, attention by kind/layer/head, beam steps, translation)
    /comparison() -> (notes, table), both Markdown
    /status() -> status (Markdown: each comparison model's loading state, requests in progress)
    /battle(text) -> (battle_id, translation_a, translation_b): two systems drawn at random, names hidden
    /vote(battle_id, choice) -> (system_a, system_b, message): the names revealed once the vote is stored
    /leaderboard() -> (table: Markdown, plot)
"""

import argparse
import os
import random
import sys
from pathlib import Path

import gradio as gr
import matplotlib

matplotlib.use("Agg")  # no display on a server; must precede any pyplot import (gradio imports it to close figures)

import uvicorn  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from transformer_en_de.app.arena.arena import (  # noqa: E402
    CONSENT,
    Arena,
    Voter,
    example_sentences,
    leaderboard_markdown,
    leaderboard_plot,
    vote_rules,
)
from transformer_en_de.app.arena.board_reads import BoardReads  # noqa: E402
from transformer_en_de.app.arena.publish import VotePublisher  # noqa: E402
from transformer_en_de.app.arena.votes import CHOICES, VoteStore  # noqa: E402
from transformer_en_de.app.corpus_report import HEADERS as CORPUS_HEADERS  # noqa: E402
from transformer_en_de.app.corpus_report import corpus_markdown, corpus_table  # noqa: E402
from transformer_en_de.app.files import FILE_TYPES, translate_file  # noqa: E402
from transformer_en_de.app.guard import Gate, RequestGuard  # noqa: E402
from transformer_en_de.app.inside_tab.captions import CAPTIONS, KIND_TITLES  # noqa: E402
from transformer_en_de.app.inside_tab.outputs import draw_attention, draw_inside  # noqa: E402
from transformer_en_de.app.inside_tab.pictures import rendered  # noqa: E402
from transformer_en_de.app.inside_tab.view_request import inside_request  # noqa: E402
from transformer_en_de.app.inside_tab.view_store import ViewStore  # noqa: E402
from transformer_en_de.app.internals import upload_folder  # noqa: E402
from transformer_en_de.app.limits import Limits  # noqa: E402
from transformer_en_de.app.scheduler import Cancelled, FairScheduler  # noqa: E402
from transformer_en_de.app.server import build_server  # noqa: E402
from transformer_en_de.app.sign_in import SignInUnavailable, sign_in_mode  # noqa: E402
from transformer_en_de.app.text_checks import DECODINGS, decoding_defaults, default_settings  # noqa: E402
from transformer_en_de.app.translation import (  # noqa: E402
    NO_PRETRAINED,
    RequestContext,
    format_details,
    format_notice,
    translate_text,
)
from transformer_en_de.app.translators import (  # noqa: E402
    BackgroundTranslator,
    ModelUnavailableError,
    comparison_names,
    display_id,
    load_our_translator,
    parse_model_list,
)
from transformer_en_de.app.uploads import UploadQuota, stored_upload  # noqa: E402
from transformer_en_de.decoding.flags import add_backend_flags  # noqa: E402
from transformer_en_de.inside import KINDS  # noqa: E402

APP_DIR = Path(__file__).resolve().parent
DEFAULT_MODEL = "models/transformer-en-de"
DEFAULT_COMPARISON_MODELS = "Helsinki-NLP/opus-mt-en-de"
COMPARISON_PATH = APP_DIR / "results" / "comparison_test_2016_flickr.json"
# Gradio's cache (uploads and our TSVs): every 10 minutes, files older than an hour are deleted.
DELETE_CACHE = (600, 3600)
# On a Space every request comes through the Hub's proxy, from the Space's private network; nothing else reaches it.
SPACE_PROXY_NETWORKS = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16"
WORK = "work"  # the concurrency group of every event that spends CPU: the admission point (scheduler.py)
# The Arena tab's line on sign-in (what each kind of vote counts for: `vote_rules()`, below it).
SIGNED_IN = "You are signed in with Hugging Face: your votes count as your account's."
NOT_SIGNED_IN = "You are not signed in: your votes are anonymous. Sign in with Hugging Face to count as yourself."
ANONYMOUS_ONLY = "Votes here are anonymous: this page has no sign-in."

# Sentences and references written for this app (not taken from Multi30k).
EXAMPLES = [
    ["A man in a blue jacket is repairing a bicycle.", "Ein Mann in einer blauen Jacke repariert ein Fahrrad."],
    ["Two dogs are playing in the snow.", "Zwei Hunde spielen im Schnee."],
    ["A little girl eats an ice cream on a bench.", "Ein kleines Mädchen isst auf einer Bank ein Eis."],
    ["Several people wait at a bus stop. It is raining.", "Mehrere Leute warten an einer Bushaltestelle. Es regnet."],
    ["An old woman sells vegetables at a market.", "Eine alte Frau verkauft Gemüse auf einem Markt."],
    # An everyday sentence, where our model is out of its depth (and says so).
    ["Where is the train station?", "Wo ist der Bahnhof?"],
]

INTRO = """# English → German: our Transformer beside pretrained models
Our model is the Transformer of *Attention Is All You Need*, written from scratch and trained on **29,000 English
descriptions of photos** and their German translations (Multi30k): *"Two dogs are playing in the snow."* It translates
sentences like those well, and little else: on everyday sentences (try the last example) it writes fluent nonsense, and
its **confidence** (how probable the model finds its own words, and how much the English reads like a photo
description) drops; the page then says so. {comparison} Every model translates the same input with the same settings,
through the same code."""
WITH_PRETRAINED = "The pretrained models beside it learned from millions of sentences of every kind."

# At phone width: the input boxes stack, the examples' text wraps instead of being cut, a dropdown's text stays clear
# of its arrow, wide tables scroll inside their box.
CSS = """
#examples table { table-layout: fixed; width: 100%; }
#examples td, #examples th { max-width: none !important; white-space: normal; overflow-wrap: break-word; }
#examples td div { width: auto !important; }
.secondary-wrap input { text-overflow: ellipsis; padding-right: 1.5em; }
.prose table { display: block; overflow-x: auto; }
.prose th { white-space: nowrap; }
.prose td { word-break: normal; overflow-wrap: normal; }
"""


def stacked_table_css(elem_id: str, headers: list[str], width: int = 640) -> str:
    """CSS that shows the Markdown table inside `#elem_id` as one block per row below `width` pixels, each cell
    preceded by its column's header ("BLEU: 39.70"): a phone sees every column, none cut or scrolled away."""
    scope = f"#{elem_id}"
    parts = ", ".join(f"{scope} {tag}" for tag in ("table", "thead", "tbody", "tr", "th", "td"))
    rules = [
        f"{parts} {{ display: block; width: auto; }}",
        f"{scope} thead {{ display: none; }}",
        f"{scope} tr {{ border-bottom: 1px solid var(--border-color-primary); padding: 0.4em 0; }}",
        f"{scope} td {{ border: none !important; padding: 0.1em 0.6em; }}",
        f"{scope} td:empty {{ display: none; }}",
    ]
    for number, header in enumerate(headers, start=1):
        label = header.replace("\\", "\\\\").replace('"', '\\"')
        rules.append(f'{scope} td:nth-child({number})::before {{ content: "{label}: "; font-weight: 600; }}')
    return f"@media (max-width: {width}px) {{\n" + "\n".join(rules) + "\n}\n"


def resolve_model(model_id: str | None) -> str:
    """The default folder sits beside app.py; other paths are relative to the working directory."""
    if not model_id or model_id == DEFAULT_MODEL:
        return str(APP_DIR / DEFAULT_MODEL)
    return model_id


def parse_options(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Our Transformer beside pretrained models, English → German.")
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
        help="pretrained models to show beside ours, folders or Hub ids (env COMPARISON_MODELS, "
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
        action="store_true",
        default=os.environ.get("ARENA_SIGN_IN", "") not in ("", "0"),
        help="a 'Sign in with Hugging Face' button on the Arena tab (env ARENA_SIGN_IN=1): a signed-in vote counts as "
        "its account's. On a Space whose metadata has `hf_oauth: true` it is there without this flag; elsewhere "
        "Gradio's local stand-in signs every visitor in as the account of this machine's Hugging Face token (at "
        "HF_ENDPOINT), so the app stops at once, in one line, if there is no token or the Hub cannot tell whose it is. "
        "The sign-in cookie is a secure one: over plain HTTP a browser keeps it only at localhost or 127.0.0.1; "
        "anywhere else serve HTTPS",
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


def forwarded_allow_ips_by_default(environ) -> str:
    """The operator's FORWARDED_ALLOW_IPS; else on a Space (the runtime sets SPACE_ID) the private networks the Hub's
    proxy connects from, whose last X-Forwarded-For hop is the visitor's; elsewhere nothing is trusted."""
    if "FORWARDED_ALLOW_IPS" in environ:
        return environ["FORWARDED_ALLOW_IPS"]
    return SPACE_PROXY_NETWORKS if environ.get("SPACE_ID") else ""


def uploaded_path(payload, max_bytes: int) -> str | None:
    """The server path of an upload as sent to an unpreprocessed callback: a file stored in Gradio's upload folder
    (the front checked the call already; this holds for a caller that did not come through it)."""
    return stored_upload(payload.get("path") if isinstance(payload, dict) else None, max_bytes)


def unchanged(outputs: int) -> tuple:
    """What a dropped call of a short piece of work answers: its `outputs` components left as they are."""
    return tuple(gr.skip() for _ in range(outputs))


def build_app_server(
    app: "TranslationApp", host: str | None = None, port: int | None = None, forwarded_allow_ips: str = ""
) -> uvicorn.Server:
    """The server for the page: the HTTP front (`RequestGuard`) first in line, uploads within their quota, sessions
    kept in memory bounded, connections bounded, X-Forwarded-For trusted from `forwarded_allow_ips` only
    (`server.py`). The host and port default to Gradio's (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT, as a Space sets
    them)."""
    limits = app.limits
    front = dict(max_body_bytes=limits.max_body_bytes, demo=app.demo, gate=app.gate, uploads=app.uploads)
    return build_server(
        app.demo,
        front=(RequestGuard, front),
        limits=limits,
        css=page_css(app.systems),
        host=host or os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
        port=port or int(os.environ.get("GRADIO_SERVER_PORT", "7860")),
        forwarded_allow_ips=forwarded_allow_ips,
    )


class TranslationApp:
    """What the page serves from (our model, the comparison models, the turns on the CPU, the limits) and its event
    callbacks: each hands its inputs to `transformer_en_de/app/` and its results to the components."""

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
        self.gate, self.uploads = Gate(limits), UploadQuota(limits)
        # The one order every piece of work takes turns in; a call nobody reads is dropped before it runs.
        self.scheduler = FairScheduler(
            heavy_jobs=limits.heavy_jobs,
            ordinary_seconds=limits.ordinary_cpu_seconds,
            is_read=self.gate.readers.is_read,
            stream_wait_seconds=limits.stream_wait_seconds,
            unread_grace_seconds=limits.unread_grace_seconds,
        )
        engine = dict(on_load=self.prepare_model, backend=backend, int8=int8)
        self.ours = load_our_translator(resolve_model(model_id), **engine)
        ids = parse_model_list(comparison_model_ids)
        self.comparisons = [
            BackgroundTranslator(i, name, **engine) for i, name in zip(ids, comparison_names(ids), strict=True)
        ]
        self.systems = [self.ours, *self.comparisons]
        self.views = ViewStore()  # the Inside tab's views, of which sessions keep only the ids
        # The arena's votes: a real database, committed at each vote; published to the Hub when asked.
        votes = VoteStore(votes_db or default_votes_db())
        self.arena = Arena(votes)
        self.board = BoardReads(self.leaderboard_table, lambda board: rendered(leaderboard_plot(board)))
        self.publisher = VotePublisher(votes, votes_dataset, Path(votes.path).parent / "votes-dataset").start()
        if votes_dataset:
            print(f"app.py: {self.publisher.status}", flush=True)
        self.demo: gr.Blocks | None = None  # the page, once built
        # Every event that spends CPU is in one concurrency group of Gradio's queue, the admission point: Gradio bounds
        # how many are in their callbacks and how many wait (`Limits.concurrent_jobs`, `queue_size`), and in the
        # callbacks they take turns in the scheduler's one order. Inputs reach the callbacks as sent
        # (preprocess=False): the app checks a value out of a control's range and answers in one line, where
        # Gradio's own check would log a traceback for each. Each such event is told to the HTTP front
        # (`app.gate.count(...)` where the page builds it): its calls count against their session there.
        self.work = dict(concurrency_id=WORK, concurrency_limit=limits.concurrent_jobs)
        self.compute = dict(self.work, preprocess=False)

    def prepare_model(self, model) -> None:
        model.set_attn_implementation("eager")  # the Inside tab needs attention weights, which SDPA does not return

    def context(self, request: gr.Request, arrived: float | None) -> RequestContext:
        """What every request needs besides its inputs: the systems, the turns, the limits, who asks and since when."""
        return RequestContext(self.ours, self.comparisons, self.scheduler, self.limits, request.session_hash, arrived)

    def in_turn(self, request: gr.Request, work, dropped: tuple):
        """`work()` (a picture, the corpus table, a vote) in the scheduler's side lane, its pictures rendered there too
        (Gradio would encode them after the callback, in its event loop). Side work is never refused as heavy; a call
        nobody reads is dropped (Cancelled) and answers `dropped`, logging nothing."""
        with self.gate.serving(request.session_hash) as arrived:
            try:
                with self.scheduler.job(request.session_hash, self.limits.text.seconds, side=True, since=arrived):
                    return tuple(rendered(value) if isinstance(value, Figure) else value for value in work())
            except Cancelled:
                return dropped

    def translate(self, text, decoding, num_beams, max_new_tokens, reference, request: gr.Request):
        """Translate English text with our model and every comparison model.

        Args: text (str, one or more sentences), decoding ("beam search" or "greedy"), num_beams (int, 1-8; used with
        beam search), max_new_tokens (int, 1-255), reference (str, optional German reference; "" for none).
        Returns: our translation and details (Markdown: latency, tokens generated, parameters, sentence BLEU/chrF,
        notices), then a translation and details per comparison model, then a notice about the request.
        """
        # Decoding takes turns on the CPU inside generate(): at each step of the search this request may wait for
        # another one, or end (Cancelled: the page closed) - the engine's `TurnPoint`, which translation.py hands it.
        with self.gate.serving(request.session_hash) as arrived:
            result = translate_text(
                text, decoding, num_beams, max_new_tokens, reference, context=self.context(request, arrived)
            )
        panels = [value for output in result.outputs for value in (output.translation, format_details(output))]
        return (*panels, format_notice(result))

    def translate_file(
        self, source_file, reference_file, decoding, num_beams, max_new_tokens, request: gr.Request,
        progress=gr.Progress(),
    ):  # fmt: skip
        """Translate an uploaded UTF-8 text file (.txt, .en, .de; one English sentence per line) with every model.

        Returns a TSV (line, source, one column per model, reference) and a Markdown summary with timings and, when a
        reference file with the same number of lines is given, corpus BLEU and chrF.
        """
        with self.gate.serving(request.session_hash) as arrived:
            result = translate_file(
                uploaded_path(source_file, self.limits.max_file_bytes),
                uploaded_path(reference_file, self.limits.max_file_bytes), decoding, num_beams, max_new_tokens,
                output_dir=upload_folder(), progress=progress, context=self.context(request, arrived),
            )  # fmt: skip
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
        return "\n\n".join(lines + [self.scheduler.describe()])

    def intro(self):
        """The page's introduction: the advice to compare with a pretrained model only while one is on the page."""
        ready = any(model.translator is not None for model in self.comparisons)
        loading = any(not model.done for model in self.comparisons)
        return INTRO.format(comparison=WITH_PRETRAINED if ready or loading else NO_PRETRAINED)

    def poll_models(self):
        """Each comparison model's line; a model that cannot be loaded keeps only its line (no empty boxes)."""
        shown = [gr.update(visible=not model.failed) for model in self.comparisons]
        statuses = [model.status() for model in self.comparisons]
        done = all(model.done for model in self.comparisons)
        return (*statuses, *shown, self.intro(), gr.Timer(active=not done))

    # ---------------------------------------------------------------- Inside the Transformer: its callbacks (issue 35)

    def inside(self, text, decoding, num_beams, max_new_tokens, request: gr.Request):
        """What our model (and each comparison model that returns its attention) does with the text's first sentence.

        Args: as /translate's first four. Returns a dict (JSON): source_tokens, source_ids, target_tokens, target_ids,
        positional_encoding [positions][d_model], attention {encoder_self, decoder_self, cross} each
        [layers][heads][query][key], beam_steps (each with beams and finished), finished, translation (as /translate
        gives it for that sentence), notices, comparisons (the same per comparison model); or only message and notices.
        """
        with self.gate.serving(request.session_hash) as arrived:
            view = inside_request(text, decoding, num_beams, max_new_tokens, context=self.context(request, arrived))
        # The endpoint's answer; the id of the copy the pictures are drawn from, in place of the session's earlier one
        return view, self.views.put(view, request.session_hash)

    # ------------------------------------------------------------------ the arena: blind votes (app/arena/)

    # Gradio fills `profile` from the visitor's sign-in session (None when not signed in, or the page has no sign-in);
    # it is not an input of the endpoint, so an API client cannot claim an account.
    def battle(self, text, request: gr.Request, profile: gr.OAuthProfile | None):
        """Two systems drawn at random translate the text; their names are hidden until the vote.

        Args: text (str, English: one sentence or a few). Returns: battle_id (str; "" when there is no battle),
        translation_a, translation_b (str; with no battle, translation_a says why in one line).
        """
        settings = default_settings(self.ours.model, self.limits)  # what the page starts with, for both systems
        voter = voter_of(request, profile)
        with self.gate.serving(request.session_hash) as arrived:
            return self.arena.battle(text, self.context(request, arrived), settings, voter)

    def vote(self, battle_id, choice, request: gr.Request, profile: gr.OAuthProfile | None):
        """Vote on a battle: choice is "A", "B", "tie" or "both bad".

        Returns: system_a, system_b (the names revealed; "" if the vote was refused) and a one-line message.
        """
        dropped, voter = ("", "", "Cancelled: nobody reads this."), voter_of(request, profile)
        cast_at = self.gate.arrival(request.session_hash)  # when the visitor voted, not when its turn came
        return self.in_turn(request, lambda: self.voted(self.arena.vote(battle_id, choice, voter, cast_at)), dropped)

    def voted(self, answer: tuple[str, str, str]) -> tuple[str, str, str]:
        if answer[0]:  # stored (the names are revealed only then): the board changed
            self.board.vote_stored()
        return answer

    def signed_in_line(self, profile: gr.OAuthProfile | None) -> str:
        """What the Arena tab says of the visitor's sign-in (without naming the account: the button does)."""
        return SIGNED_IN if profile is not None else NOT_SIGNED_IN

    def leaderboard(self, request: gr.Request):
        """The arena's leaderboard: Markdown table (Bradley-Terry ratings, 95% intervals, battles, BLEU), and a plot."""
        # Readers back to back share one working-out and one drawing; a page that shows the board already gets nothing.
        # A board still fresh is only looked up: no turn on the CPU, so many readers never hold up a battle.
        read = lambda: self.board.read(request.session_hash) or unchanged(2)  # noqa: E731
        if self.board.is_fresh():
            with self.gate.serving(request.session_hash):
                return read()
        return self.in_turn(request, read, unchanged(2))

    def leaderboard_table(self) -> tuple[list, str]:
        """(the board's rows, its Markdown table), from the votes and each system's corpus BLEU."""
        _, rows = self.corpus()
        bleu = {row[0]: float(row[3]) for row in rows if row[1] == "test 2016 flickr" and row[3] not in ("", "-")}
        board, agreement = self.arena.leaderboard(bleu)
        return board, leaderboard_markdown(board, agreement)

    def cancel_visitor(self, request: gr.Request):
        if self.scheduler.cancel(request.session_hash):
            print("app.py: a visitor left; their request was cancelled.", flush=True)

    def draw_inside(self, view_id, kind, layer, head, request: gr.Request):
        """Every picture of the Inside tab, from the server's copy of the view (no model runs); the endpoint's answer
        emptied, so that Gradio's copy of it in the session goes."""
        pictures = lambda: [*draw_inside(self.views.get(view_id), kind, layer, head, len(self.systems)), None]  # noqa: E731
        return self.in_turn(request, pictures, unchanged(3 + 4 * len(self.systems)))

    def draw_inside_attention(self, view_id, kind, layer, head, request: gr.Request):
        """The Inside tab's attention pictures again, for another kind, layer or head."""
        pictures = lambda: draw_attention(self.views.get(view_id), kind, layer, head, len(self.systems))  # noqa: E731
        return self.in_turn(request, pictures, unchanged(1 + len(self.systems)))


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
    sign_in: bool = False,
) -> TranslationApp:
    """Load our model (ModelUnavailableError if it cannot be), start loading the others, build the page (`.demo`).
    `sign_in`: the Arena tab has a "Sign in with Hugging Face" button (`sign_in_mode` checked that it can work)."""
    app = TranslationApp(
        model_id, comparison_model_ids, limits=limits, comparison_path=comparison_path, backend=backend, int8=int8,
        votes_db=votes_db, votes_dataset=votes_dataset,
    )  # fmt: skip
    with gr.Blocks(title="Transformer vs pretrained models, English → German", delete_cache=DELETE_CACHE) as demo:
        intro = gr.Markdown(app.intro())
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
        status = gr.Markdown(visible=False)
        # The corpus table is work like any other; the status line only reads counters and skips the queue.
        app.gate.count(demo.load(app.comparison, None, [notes, table], api_name="comparison", **app.work))
        demo.load(app.status, None, status, api_name="status", queue=False)
        if signed_in is not None:  # reads the sign-in cookie only: no turn on the CPU
            demo.load(app.signed_in_line, None, signed_in, api_visibility="private", queue=False)
        # A page that closes (its heartbeat ends) cancels its request; a client that keeps no page open is stopped
        # when nobody reads its results (scheduler.py). A client calling this event itself makes new sessions no
        # faster than its address may (guard.py), and cancels nothing of anyone else's.
        demo.unload(app.cancel_visitor)
    # api_open=False: the REST routes that would run a translation outside the queue (/run, /api) are closed.
    # max_size: beyond the callbacks running, at most this many calls wait; a further one is refused at once.
    demo.queue(max_size=limits.queue_size, api_open=False)
    app.demo = demo
    return app


def decoding_controls(app: TranslationApp) -> list:
    """Decoding, beams and maximum new tokens, shared by both tabs; they start at what our model decodes with."""
    limits = app.limits
    decoding, beams, tokens = decoding_defaults(app.ours.model, limits)
    with gr.Row():
        return [
            gr.Radio(list(DECODINGS), value=decoding, label="Decoding", min_width=240),
            gr.Slider(1, limits.max_beams, value=beams, step=1, label="Beams (beam search)", min_width=240),
            gr.Slider(1, limits.max_new_tokens, value=tokens, step=1, label="Maximum new tokens", min_width=240),
        ]


def translate_tab(app: TranslationApp, controls: list, intro: gr.Markdown) -> gr.Textbox:
    """Text in, a panel per model, the examples; returns the English text box."""
    with gr.Row():  # side by side on a wide screen, one above the other on a phone
        text = gr.Textbox(
            label="English", lines=4, placeholder="Type one or more English sentences.", elem_id="english",
            min_width=320,
        )  # fmt: skip
        reference = gr.Textbox(
            "", label="Reference translation (optional, German)", lines=4, elem_id="reference", min_width=320
        )
    button = gr.Button("Translate", variant="primary", elem_id="translate")
    notice = gr.Markdown(label="Notice", elem_id="notice", latex_delimiters=[])
    panels, statuses, columns = model_panels(app.systems)
    gr.Examples(
        EXAMPLES,
        inputs=[text, reference],
        label="Examples (with references; the last is an everyday sentence)",
        cache_examples=False,
        elem_id="examples",
    )
    gr.Markdown("How each model reads the sentence and chooses its words: the *Inside the Transformer* tab.")
    app.gate.count(
        button.click(
            app.translate, [text, *controls, reference], [*panels, notice], api_name="translate", **app.compute
        )
    )
    timer = gr.Timer(1.0, active=bool(app.comparisons))
    timer.tick(
        app.poll_models,
        None,
        [*statuses, *columns, intro, timer],
        api_visibility="private",
        queue=False,
        show_progress="hidden",
    )
    return text


def model_panels(systems: list) -> tuple[list, list, list]:
    """A column per model (its translation and details), side by side on a wide screen, stacked on a phone; for each
    comparison model a status line, and the rest of its column hidden while it cannot be loaded."""
    panels, statuses, columns = [], [], []
    with gr.Row(equal_height=False):
        for number, system in enumerate(systems):
            with gr.Column(min_width=300):
                if number:
                    statuses.append(gr.Markdown(system.status(), elem_id=f"status-{number}"))
                with gr.Column(visible=not getattr(system, "failed", False)) as column:
                    gr.Markdown(f"### {system.name}\n`{display_id(system.model_id)}`")
                    panels += [
                        gr.Textbox(
                            label="German", lines=4, interactive=False, elem_id=f"translation-{number}"
                        ),
                        gr.Markdown(label=f"{system.name} details", elem_id=f"details-{number}", latex_delimiters=[]),
                    ]
                columns += [column] if number else []
    return panels, statuses, columns


# ------------------------------------------------------------ Inside the Transformer: the tab and /inside (issue 35)


def inside_tab(app: TranslationApp, controls: list, text: gr.Textbox) -> None:
    """The English box's first sentence inside every model, computed when asked: pieces, positional encoding, attention
    of each kind, layer and head, the beam search; each picture with its line from the paper."""
    gr.Markdown(
        "What each part of the paper does with **your sentence** (the first one in the English box of the Translate "
        "tab, decoded with the settings above), for our model and for each comparison model that returns its "
        "attention weights. Nothing here is computed until you ask."
    )
    button = gr.Button("Look inside", variant="primary", elem_id="inside-run")
    notice = gr.Markdown(elem_id="inside-notice")
    columns = range(len(app.systems))
    gr.Markdown(f"### The pieces\n{CAPTIONS['pieces']}")
    with gr.Row(equal_height=False):
        pieces = [gr.Markdown(elem_id=f"inside-pieces-{n}", min_width=300) for n in columns]
    gr.Markdown(f"### Positional encoding\n{CAPTIONS['positions']}")
    with gr.Row():
        positions = [gr.Plot(show_label=False, elem_id=f"inside-positions-{n}", min_width=300) for n in columns]
    gr.Markdown("### Attention")
    layers, heads = (max(sizes) for sizes in zip(*(system_sizes(system) for system in app.systems), strict=True))
    with gr.Row():
        kind = gr.Radio(
            [(KIND_TITLES[k], k) for k in KINDS], value="cross", label="Attention", elem_id="inside-kind", min_width=240
        )
        layer = gr.Dropdown(
            [(f"layer {n}", n) for n in range(1, layers + 1)], value=1, label="Layer", elem_id="inside-layer"
        )
        head = gr.Dropdown(
            [("all heads", 0)] + [(f"head {n}", n) for n in range(1, heads + 1)], value=0, label="Head",
            elem_id="inside-head",
        )  # fmt: skip
    with gr.Row():
        attention = [gr.Plot(show_label=False, elem_id=f"inside-attention-{n}", min_width=300) for n in columns]
    caption = gr.Markdown(elem_id="inside-attention-caption")
    gr.Markdown(f"### Beam search, step by step\n{CAPTIONS['beams']}")
    with gr.Row(equal_height=False):
        beams = [gr.Markdown(elem_id=f"inside-beams-{n}", min_width=300) for n in columns]
    # The endpoint's answer (not shown: the pictures are; emptied once they are drawn), and the id of the server's copy
    # the pictures are drawn from (app.views: bounded, expiring).
    numbers, view_id = gr.JSON(label="Inside view", visible=False), gr.State()
    pictures = [notice, *pieces, *positions, *attention, caption, *beams]
    chosen = [view_id, kind, layer, head]
    inside = app.gate.count(
        button.click(app.inside, [text, *controls], [numbers, view_id], api_name="inside", **app.compute)
    )
    # The controls' values as sent (`compute`: no preprocessing): one outside their choices draws the defaults
    # (`draw_attention`), where Gradio's check would fail the call with a traceback in the log.
    app.gate.count(inside.then(app.draw_inside, chosen, [*pictures, numbers], api_visibility="private", **app.compute))
    for control in (kind, layer, head):
        redraw = control.input(
            app.draw_inside_attention, chosen, [*attention, caption], api_visibility="private", **app.compute
        )
        app.gate.count(redraw)


def system_sizes(system) -> tuple[int, int]:
    """(layers, heads) of a model on the page; MarianMT's (6, 8) for a comparison model still loading."""
    translator = getattr(system, "translator", system)
    if translator is None:
        return 6, 8
    config = translator.model.config
    heads = [getattr(config, name, None) for name in ("num_attention_heads", "decoder_attention_heads", "num_heads")]
    return translator.num_layers, next((number for number in heads if number), 1)


def file_tab(app: TranslationApp, controls: list) -> None:
    """A file in, its first lines beside their translations, and a TSV of them all with a summary."""
    limits = app.limits
    gr.Markdown(
        f"A UTF-8 text file ({', '.join(FILE_TYPES)}), one English sentence per line, up to "
        f"{limits.max_file_bytes // 1000:,} kB and {limits.max_file_lines:,} lines; big files are "
        "translated with fewer beams. Optionally a German reference file with the same number of "
        "lines for corpus BLEU and chrF. The first lines show below; the download has them all."
    )
    with gr.Row():
        source_file = gr.File(label="English file", file_types=FILE_TYPES, type="filepath", min_width=300)
        reference_file = gr.File(
            label="Reference file (optional)", file_types=FILE_TYPES, type="filepath", min_width=300
        )
    button = gr.Button("Translate file", variant="primary")
    summary = gr.Markdown(label="Summary", elem_id="file-summary", latex_delimiters=[])
    # No LaTeX: "$$...$$" in a visitor's line is shown as the characters it is, like every other mark
    preview = gr.Markdown(label="The first lines", elem_id="file-preview", latex_delimiters=[])
    output = gr.File(label="All translations (TSV)")
    app.gate.count(
        button.click(
            app.translate_file,
            [source_file, reference_file, *controls],
            [output, summary, preview],
            api_name="translate_file",
            **app.compute,
        )
    )


def voter_of(request: gr.Request, profile: gr.OAuthProfile | None = None) -> Voter:
    """The arena's voter behind a request: its session, the address uvicorn gives (the proxy's visitor where the proxy
    is trusted, `server.py`) and the Hub account the visitor signed in with (the arena stores only its salted hash)."""
    account = profile.username if profile is not None else None
    return Voter(request.session_hash or "", request.client.host if request.client else "", account)


def arena_tab(app: TranslationApp, sign_in: bool = False) -> gr.Markdown | None:
    """Two anonymous translations of the same English, a vote, the names revealed; the leaderboard below; what a vote
    counts for. With `sign_in`, a "Sign in with Hugging Face" button and the line saying whether the visitor is signed
    in (returned: the page fills it when it loads), else a line saying that votes here are anonymous."""
    gr.Markdown(
        "Two systems of this page, drawn at random, translate your English; their names stay hidden until you vote. "
        f"Which German is better?{'' if len(app.systems) > 1 else ' (The arena needs two systems: only ours is here.)'}"
        f"\n\n{CONSENT}"
    )
    text = gr.Textbox(label="English", lines=2, elem_id="arena-english", placeholder="One sentence or a few.")
    with gr.Row():
        caption = gr.Button("A random caption", size="sm")
        everyday = gr.Button("A random everyday sentence", size="sm")
        start = gr.Button("Translate blind", variant="primary", elem_id="arena-battle")
    battle_id = gr.Textbox(visible=False, elem_id="arena-battle-id")  # the battle's id: what the vote names
    with gr.Row(equal_height=True):
        first = gr.Textbox(label="Translation A", lines=3, interactive=False, elem_id="arena-a", min_width=300)
        second = gr.Textbox(label="Translation B", lines=3, interactive=False, elem_id="arena-b", min_width=300)
    choice = gr.Radio(list(CHOICES), label="Which is better?", elem_id="arena-choice")
    with gr.Row(equal_height=True):
        send = gr.Button("Vote", elem_id="arena-vote", min_width=160)
        if sign_in:
            gr.LoginButton(size="md", elem_id="arena-sign-in", min_width=240)
    signed_in = gr.Markdown(NOT_SIGNED_IN if sign_in else ANONYMOUS_ONLY, elem_id="arena-signed-in")
    gr.Markdown(vote_rules(), elem_id="arena-vote-rules")
    with gr.Row():
        system_a = gr.Textbox(label="A was", interactive=False, elem_id="arena-system-a")
        system_b = gr.Textbox(label="B was", interactive=False, elem_id="arena-system-b")
    message = gr.Markdown(elem_id="arena-message", latex_delimiters=[])
    gr.Markdown("### Leaderboard")
    board = gr.Markdown(elem_id="arena-leaderboard", latex_delimiters=[])
    plot = gr.Plot(show_label=False, elem_id="arena-plot")
    refresh = gr.Button("Show the leaderboard", size="sm", elem_id="arena-refresh")
    for button, kind in ((caption, "caption"), (everyday, "everyday")):
        button.click(
            lambda kind=kind: random.choice(example_sentences(kind)), None, text, queue=False, api_visibility="private"
        )
    app.gate.count(start.click(app.battle, [text], [battle_id, first, second], api_name="battle", **app.compute))
    app.gate.count(
        send.click(app.vote, [battle_id, choice], [system_a, system_b, message], api_name="vote", **app.compute)
    )
    app.gate.count(refresh.click(app.leaderboard, None, [board, plot], api_name="leaderboard", **app.work))
    return signed_in if sign_in else None


def page_css(systems: list) -> str:
    """The page's CSS, with the wide tables shown as one block per row on a phone."""
    return CSS + "".join(
        stacked_table_css(elem_id, headers)
        for elem_id, headers in (
            ("corpus-table", CORPUS_HEADERS),
            ("file-summary", ["System", "Sentences", "Seconds", "BLEU", "chrF"]),
            ("file-preview", ["Line", "English", *[system.name for system in systems]]),
        )
    )


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
        sign_in=SIGN_IN is not None,
    )
except (ModelUnavailableError, SignInUnavailable) as error:
    sys.exit(f"app.py: {error}")
if SIGN_IN:
    print(f"app.py: the arena's voters can sign in {SIGN_IN}.", flush=True)
demo = APP.demo

if __name__ == "__main__":
    build_app_server(APP, OPTIONS.host, OPTIONS.port, OPTIONS.forwarded_allow_ips).run()
