"""The Arena tab's layout and wiring (the battles and votes themselves: `app/arena/`). Every output is labelled, so
the API names what it returns; messages go to a text box, which renders nothing."""

import random

import gradio as gr

from ..arena.arena import CONSENT, example_sentences, vote_rules
from ..arena.votes import CHOICES

SIGNED_IN = "You are signed in with Hugging Face: your votes count as your account's."
NOT_SIGNED_IN = "You are not signed in: your votes are anonymous. Sign in with Hugging Face to count as yourself."
ANONYMOUS_ONLY = "Votes here are anonymous: this page has no sign-in."
STAND_IN = (
    "Sign-in here is Gradio's local stand-in (this machine's account, to try the page): every vote counts as "
    "anonymous, by network."
)


def arena_tab(app, sign_in=None) -> gr.Markdown | None:
    """The tab; with `sign_in` (`sign_in.SignIn`), a "Sign in with Hugging Face" button. The line on sign-in where it
    counts accounts (filled on load, `signed_in_line`), else None."""
    accounts = bool(getattr(sign_in, "accounts", False))
    app.arena.accounts = accounts  # the arena, not the page, decides whom a vote counts for; it is told here
    two = len(app.systems) > 1
    alone = "" if two else " (The arena needs two systems: only ours is here, so there is no battle.)"
    gr.Markdown(
        "Two systems of this page, drawn at random, translate your English; their names stay hidden until you vote. "
        f"Which German is better?{alone}\n\n{CONSENT}"
    )
    text = gr.Textbox(label="English", lines=2, elem_id="arena-english", placeholder="One sentence or a few.")
    with gr.Row():
        caption = gr.Button("A random caption", size="sm")
        everyday = gr.Button("A random everyday sentence", size="sm")
        start = gr.Button("Translate blind", variant="primary", elem_id="arena-battle", interactive=two)
    battle_id = gr.Textbox(label="battle_id", visible=False, elem_id="arena-battle-id")  # what the vote names
    with gr.Row(equal_height=True):
        first = gr.Textbox(label="Translation A", lines=3, interactive=False, elem_id="arena-a", min_width=300)
        second = gr.Textbox(label="Translation B", lines=3, interactive=False, elem_id="arena-b", min_width=300)
    choice = gr.Radio(list(CHOICES), label="Which is better?", elem_id="arena-choice")
    with gr.Row(equal_height=True):
        send = gr.Button("Vote", elem_id="arena-vote", min_width=160, interactive=False)
        if sign_in:
            gr.LoginButton(size="md", elem_id="arena-sign-in", min_width=240)
    line = NOT_SIGNED_IN if accounts else STAND_IN if sign_in else ANONYMOUS_ONLY
    signed_in = gr.Markdown(line, elem_id="arena-signed-in")
    gr.Markdown(vote_rules(accounts), elem_id="arena-vote-rules")
    with gr.Row():
        system_a = gr.Textbox(label="A was", interactive=False, elem_id="arena-system-a")
        system_b = gr.Textbox(label="B was", interactive=False, elem_id="arena-system-b")
    message = gr.Textbox(label="Message", interactive=False, elem_id="arena-message", max_lines=3)
    gr.Markdown("### Leaderboard")
    board = gr.Markdown(label="Leaderboard", elem_id="arena-leaderboard", latex_delimiters=[])
    plot = gr.Plot(label="Ratings", show_label=False, elem_id="arena-plot")
    refresh = gr.Button("Show the leaderboard", size="sm", elem_id="arena-refresh")
    private = dict(queue=False, api_visibility="private")  # page-only events: no turn on the CPU, not in the API
    for button, kind in ((caption, "caption"), (everyday, "everyday")):
        button.click(lambda kind=kind: random.choice(example_sentences(kind)), None, text, **private)
    outputs = [battle_id, first, second, message]
    battled = app.serving.work(start.click, app.battle, [text], outputs, api_name="battle", side=True)
    # The Vote button is offered only with a battle (so a refused battle is said once); a battle takes one vote.
    battled.then(lambda battle: gr.Button(interactive=bool(battle)), battle_id, send, **private)
    outputs = [system_a, system_b, message]
    voted = app.serving.work(send.click, app.vote, [battle_id, choice], outputs, api_name="vote", side=True)
    voted.then(lambda revealed: gr.Button(interactive=not revealed), system_a, send, **private)
    limits = app.serving.limits
    reads = app.serving.work(refresh.click, app.leaderboard, None, [board, plot], api_name="leaderboard", side=True)
    app.serving.paced(reads, limits.board_reads_per_address_burst, limits.board_reads_per_address_per_second)
    return signed_in if accounts else None


def signed_in_line(profile: gr.OAuthProfile | None) -> str:  # the button names the account
    return SIGNED_IN if profile is not None else NOT_SIGNED_IN
