"""The Arena tab: two anonymous translations of the same English, a vote, the names revealed; the leaderboard below;
what a vote counts for, and whether the visitor is signed in. The battles and votes themselves: `app/arena/`."""

import random

import gradio as gr

from ..arena.arena import CONSENT, example_sentences, vote_rules
from ..arena.votes import CHOICES

# The tab's line on sign-in (what each kind of vote counts for: `vote_rules()`, below it).
SIGNED_IN = "You are signed in with Hugging Face: your votes count as your account's."
NOT_SIGNED_IN = "You are not signed in: your votes are anonymous. Sign in with Hugging Face to count as yourself."
ANONYMOUS_ONLY = "Votes here are anonymous: this page has no sign-in."


def arena_tab(app, sign_in: bool = False) -> gr.Markdown | None:
    """The tab, wired to `app.battle`, `app.vote` and `app.leaderboard` (`app`: app.py's `TranslationApp`). With
    `sign_in`, a "Sign in with Hugging Face" button and the line saying whether the visitor is signed in (returned: the
    page fills it when it loads, `signed_in_line`), else a line saying that votes here are anonymous."""
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
    app.serving.work(start.click, app.battle, [text], [battle_id, first, second], api_name="battle")
    app.serving.work(send.click, app.vote, [battle_id, choice], [system_a, system_b, message], api_name="vote")
    limits = app.serving.limits
    reads = app.serving.work(refresh.click, app.leaderboard, None, [board, plot], api_name="leaderboard")
    app.serving.paced(reads, limits.board_reads_per_address_burst, limits.board_reads_per_address_per_second)
    return signed_in if sign_in else None


def signed_in_line(profile: gr.OAuthProfile | None) -> str:
    """What the tab says of the visitor's sign-in (without naming the account: the button does)."""
    return SIGNED_IN if profile is not None else NOT_SIGNED_IN
