"""What a visitor waits for on the Inside the Transformer tab, and the work it costs against the engine's estimate.

On the shipped model as the app loads it, the README's 20-word sentence: each step of a view and a redraw (medians of
7 rounds); then the worst case the bounds allow (`inside.MAX_PIECES`, `view_request.MAX_VIEW_BYTES`) against the 29
rare-letter words that were 48 MB of JSON before the bounds, and what the `ViewStore` keeps of it; then the CPU
seconds of `inside_request` over the estimate it is admitted with (`view_request.WORK_FACTOR`).

    OMP_NUM_THREADS=1 taskset -c 1 python -m benchmarks.inside_view --threads 1 [--quick]
"""

import json

from benchmarks import harness
from transformer_en_de.app.inside_tab import view_request
from transformer_en_de.app.inside_tab.outputs import draw_attention, draw_inside
from transformer_en_de.app.serving.limits import Limits
from transformer_en_de.app.translation import RequestContext, RequestPlan
from transformer_en_de.app.translators import load_our_translator
from transformer_en_de.decoding.engine import DecodingSettings, run_plan

SENTENCE = "Two young women in colourful dresses are dancing on a wooden stage in front of a small crowd at night."
# Letters our BPE rarely joins (tests/test_inside_bounds.py): the most pieces under the bound, and far past it.
AT_THE_BOUND = "hzjz yygwvz qwwhqy vhzkq qgf wgv qfvyyf kvgv yjqwfgzxg jzkfwfgv jhyfw"
PAST_THE_BOUND = " ".join(["zzzzjqzzq zzzvxwqkqj zzzqjjxqqjq"] * 9 + ["zzzjkvjqkq zzxzqzjjzqxz"])  # 29 words


def main() -> None:
    args = harness.parse_args(__doc__.splitlines()[0])
    rounds, count = (3, 8) if args.quick else (7, 40)  # timed rounds of the 20-word sentence, test sentences
    print(harness.describe_machine(args.threads))
    ours = load_our_translator(str(harness.SHIPPED_DIR), backend="torch")
    ours.model.set_attn_implementation("eager")  # as the app does: SDPA returns no attention weights
    limits, beams = Limits(), ours.model.generation_config.num_beams

    def request(sentence: str, most_beams: bool = False) -> dict:
        context = RequestContext(ours, limits=limits)
        used = limits.max_beams if most_beams else beams
        return view_request.inside_request(sentence, "beam search", used, limits.max_new_tokens, context=context)

    view = request(SENTENCE)
    print(
        f"sentence: {len(SENTENCE.split())} words, {len(view['source_ids'])} source pieces, "
        f"{len(view['target_ids'])} target pieces, {view['num_beams']} beams: {view['translation']}"
    )
    steps = {
        "compute (inside_request)": lambda: request(SENTENCE),
        "draw the first choice (draw_inside)": lambda: draw_inside(view, "cross", 1, 0, 1),
        "the view as JSON": lambda: json.dumps(view),
        "change: decoder self, layer 1, head 1": lambda: draw_attention(view, "decoder_self", 1, 1, 1),
        "change: encoder self, last layer, all heads": lambda: draw_attention(view, "encoder_self", 99, 0, 1),
    }
    timings = harness.alternate(steps, rounds)
    rows = [[name, harness.spread(t.wall), harness.spread(t.cpu)] for name, t in timings.items()]
    waited = [sum(timings[name].wall[i] for name in list(steps)[:3]) for i in range(rounds)]
    rows.append(["**a visitor waits (compute + draw + JSON)**", harness.spread(waited), ""])
    print(f"\nThe 20-word sentence, {rounds} rounds (median [quartiles]):\n")
    harness.print_table(["step", "wall s", "CPU s"], rows)

    refused = request(PAST_THE_BOUND, most_beams=True)
    print(f"\n29 rare-letter words: {len(json.dumps(refused)):,} bytes: {refused.get('message', 'shown')}")
    view, store = request(AT_THE_BOUND, most_beams=True), view_request.ViewStore()
    put, got = harness.Timings(), harness.Timings()
    view_id = [put.time(lambda: store.put(view)) for _ in range(rounds)][-1]
    for _ in range(rounds):
        got.time(lambda: store.get(view_id))
    print(
        f"At the bound ({len(view['source_ids'])} pieces in, {len(view['target_ids'])} out, {view['num_beams']} "
        f"beams): {len(json.dumps(view)):,} bytes of JSON (bound {view_request.MAX_VIEW_BYTES:,}); the store keeps "
        f"{len(store.views[view_id][0]):,} bytes ({view_request.VIEWS_KEPT} views, "
        f"{view_request.VIEW_STORE_BYTES:,} bytes at most); keeping it {put.seconds:.3f} s, reading it back for a "
        f"redraw {got.seconds:.3f} s"
    )

    english, _ = harness.sample_sentences("test_2016_flickr", count)
    ratios = {"the engine's own translation of the sentence (torch backend)": []}
    ratios["the engine's estimate the request is admitted with (RequestPlan's estimate)"] = []
    for sentence in english:
        asked = DecodingSettings(beams, max_new_tokens=limits.max_new_tokens, batch_size=limits.batch_size)
        fitted = RequestPlan(RequestContext(ours, limits=limits), asked, limits.text).admit(1).fit([sentence])
        plan, estimate = fitted.plan, fitted.seconds
        engine, seen = harness.Timings(), harness.Timings()
        engine.time(lambda plan=plan: run_plan(ours.model, ours.tokenizer, plan))
        seen.time(lambda sentence=sentence: request(sentence))
        for ratio, against in zip(ratios.values(), (engine.cpu_seconds, estimate), strict=True):
            ratio.append(seen.cpu_seconds / against)
    print(f"\nWork of an inside request, {count} random test_2016_flickr sentences (CPU seconds of inside_request):")
    rows = []
    for what, values in ratios.items():
        ordered = sorted(values)
        figures = (harness.median(values), ordered[int(0.9 * (len(ordered) - 1))], ordered[-1])
        rows.append([what, *(f"{value:.2f}" for value in figures)])
    harness.print_table(["divided by", "median", "90th percentile", "max"], rows)
    print(f"view_request.WORK_FACTOR = {view_request.WORK_FACTOR:g} (counted against the estimate)")


if __name__ == "__main__":
    main()
