"""What a visitor waits for on the Inside the Transformer tab, and the work it costs against the engine's estimate.

The tab's two callbacks in turn, as the page calls them after "Look inside" (app.py: `inside`, then `draw_inside`),
on the shipped model loaded as the app loads it (eager attention, the app's limits and scheduler), no comparison model:
- compute: `inside_request`, the search traced through `generate()`, the teacher-forced pass with attention weights;
- draw: `draw_inside` for the page's first choice (cross-attention, layer 1, all heads), each picture encoded as
  Gradio sends it (`gr.Plot` encodes a figure when the update is made);
- the view as JSON (what the hidden `gr.JSON` and the session state carry), and `draw_attention` alone (what a change
  of kind, layer or head costs: decoder self-attention of one head, then every head of the last layer).
The sentence is the README's 20-word one; medians of `--rounds` after one warm-up.

Then the worst case the bounds allow (`inside.MAX_PIECES`, `view_request.MAX_VIEW_BYTES`): rare-letter "words" read
as 62 pieces, at the most beams, against the 29 such words that were 48 MB of JSON before the bounds: the answer's
bytes, what the page's `ViewStore` keeps of it, and what keeping and reading it adds to a redraw.

Then the work factor (`view_request.WORK_FACTOR`): on `--sentences` random test_2016_flickr sentences, the CPU seconds
of `inside_request` divided by the engine's estimate it is admitted with (`budget_plan`'s, which the scheduler counts).

    OMP_NUM_THREADS=1 taskset -c 1 python -m benchmarks.inside_view --threads 1 [--quick]
"""

import json
import time

from benchmarks import harness
from transformer_en_de.app.inside_tab import view_request, view_store
from transformer_en_de.app.inside_tab.outputs import draw_attention, draw_inside
from transformer_en_de.app.serving.limits import Limits
from transformer_en_de.app.translation import RequestContext, budget_plan
from transformer_en_de.app.translators import load_our_translator
from transformer_en_de.decoding.engine import DecodingSettings, run_plan

SENTENCE = "Two young women in colourful dresses are dancing on a wooden stage in front of a small crowd at night."
# Letters our BPE rarely joins (tests/test_inside_bounds.py): the most pieces under the bound, and far past it.
AT_THE_BOUND = "hzjz yygwvz qwwhqy vhzkq qgf wgv qfvyyf kvgv yjqwfgzxg jzkfwfgv jhyfw"
PAST_THE_BOUND = " ".join(["zzzzjqzzq zzzvxwqkqj zzzqjjxqqjq"] * 9 + ["zzzjkvjqkq zzxzqzjjzqxz"])  # 29 words


def options(parser):
    parser.add_argument("--model", default=str(harness.SHIPPED_DIR), help="a model folder")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds of the 20-word sentence")
    parser.add_argument("--sentences", type=int, default=40, help="test sentences for the work factor")


def timed(run) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return time.perf_counter() - wall, time.process_time() - cpu, result


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0], options)
    rounds, count = (3, 8) if args.quick else (args.rounds, args.sentences)
    print(harness.describe_machine(args.threads))
    ours = load_our_translator(args.model, backend="torch")
    ours.model.set_attn_implementation("eager")  # as the app does: SDPA returns no attention weights
    limits = Limits()

    def request(sentence: str, beams: int | None = None) -> dict:
        return view_request.inside_request(
            sentence,
            "beam search",
            beams or ours.model.generation_config.num_beams,
            limits.max_new_tokens,
            context=RequestContext(ours, limits=limits),
        )

    steps = {
        "compute (inside_request)": lambda: request(SENTENCE),
        "draw the first choice (draw_inside)": lambda: draw_inside(view, "cross", 1, 0, 1),
        "the view as JSON": lambda: json.dumps(view),
        "change: decoder self, layer 1, head 1": lambda: draw_attention(view, "decoder_self", 1, 1, 1),
        "change: encoder self, last layer, all heads": lambda: draw_attention(view, "encoder_self", 99, 0, 1),
    }
    view = request(SENTENCE)
    print(
        f"sentence: {len(SENTENCE.split())} words, {len(view['source_ids'])} source pieces, "
        f"{len(view['target_ids'])} target pieces, {view['num_beams']} beams: {view['translation']}"
    )
    timings = {name: harness.Timings() for name in steps}
    for _ in range(rounds + 1):  # the first round warms up
        for name, run in steps.items():
            wall, cpu, result = timed(run)
            view = result if name.startswith("compute") else view
            timings[name].wall.append(wall)
            timings[name].cpu.append(cpu)
    rows = [[name, harness.spread(t.wall[1:]), harness.spread(t.cpu[1:])] for name, t in timings.items()]
    names = list(steps)
    waited = [sum(timings[name].wall[i] for name in names[:3]) for i in range(1, rounds + 1)]
    rows.append(["**a visitor waits (compute + draw + JSON)**", harness.spread(waited), ""])
    print(f"\nThe 20-word sentence, {rounds} rounds (median [quartiles]):\n")
    harness.print_table(["step", "wall s", "CPU s"], rows)

    worst_case(request, limits, rounds)

    english, _ = harness.sample_sentences("test_2016_flickr", count)
    against_engine, against_estimate = [], []
    for sentence in english:
        asked = DecodingSettings(
            ours.model.generation_config.num_beams, max_new_tokens=limits.max_new_tokens, batch_size=limits.batch_size
        )
        plan, estimate = budget_plan(RequestContext(ours, limits=limits), [sentence], asked, limits.text)
        _, engine, _ = timed(lambda plan=plan: run_plan(ours.model, ours.tokenizer, plan))
        _, seen, _ = timed(lambda sentence=sentence: request(sentence))
        against_engine.append(seen / engine)
        against_estimate.append(seen / estimate)
    print(f"\nWork of an inside request, {count} random test_2016_flickr sentences (CPU seconds of inside_request):")
    harness.print_table(
        ["divided by", "median", "90th percentile", "max"],
        [
            [what, *(f"{value:.2f}" for value in quantiles(ratios))]
            for what, ratios in [
                ("the engine's own translation of the sentence (torch backend)", against_engine),
                ("the engine's estimate the request is admitted with (budget_plan's estimate)", against_estimate),
            ]
        ],
    )
    print(f"view_request.WORK_FACTOR = {view_request.WORK_FACTOR:g} (counted against the estimate)")


def worst_case(request, limits: Limits, rounds: int) -> None:
    """The answer at the bounds, its bytes and the store's, and the store's part of a redraw (median of `rounds`)."""
    _, _, refused = timed(lambda: request(PAST_THE_BOUND, limits.max_beams))
    print(f"\n29 rare-letter words: {len(json.dumps(refused)):,} bytes: {refused.get('message', 'shown')}")
    view = request(AT_THE_BOUND, limits.max_beams)
    store = view_store.ViewStore()
    put = [timed(lambda: store.put(view)) for _ in range(rounds)]
    view_id = put[-1][2]
    got = [timed(lambda: store.get(view_id)) for _ in range(rounds)]
    kept = len(store.views[view_id][0])
    print(
        f"At the bound ({len(view['source_ids'])} pieces in, {len(view['target_ids'])} out, {view['num_beams']} "
        f"beams): {len(json.dumps(view)):,} bytes of JSON (bound {view_request.MAX_VIEW_BYTES:,}); the store keeps "
        f"{kept:,} bytes ({view_store.VIEWS_KEPT} views, {view_store.VIEW_STORE_BYTES:,} bytes at most); keeping it "
        f"{harness.median([wall for wall, _, _ in put]):.3f} s, reading it back for a redraw "
        f"{harness.median([wall for wall, _, _ in got]):.3f} s"
    )


def quantiles(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    return harness.median(values), ordered[int(0.9 * (len(ordered) - 1))], ordered[-1]


if __name__ == "__main__":
    main()
