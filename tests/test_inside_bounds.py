"""The Inside view bounded by construction: by pieces (a sentence past `MAX_PIECES` is refused before any model runs,
the translation ends there), by bytes (the answer's JSON under `MAX_VIEW_BYTES`, a model past it shown as one line),
and what the page keeps (`ViewStore`: a bounded number of views and bytes, each expiring)."""

import json
import random

import pytest
import torch
from conftest import ROOT, view_inside

from transformer_en_de.app.inside_tab import view_request
from transformer_en_de.app.inside_tab.outputs import draw_attention, draw_inside, plot_attention_heads
from transformer_en_de.app.serving.limits import Limits
from transformer_en_de.app.translation import RequestContext
from transformer_en_de.decoding.engine import DecodingSettings, plan_decoding
from transformer_en_de.inside import DECIMALS, MAX_PIECES, inside_view, rounded_rows, traced_search

SHIPPED = ROOT / "models" / "transformer-en-de"
RARE = "qzxvjkwyfhg"  # letters our BPE rarely joins: a "word" of them is several pieces


def rare_words(count: int, seed: int = 0, letters: tuple[int, int] = (3, 9)) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choice(RARE) for _ in range(rng.randint(*letters))) for _ in range(count)]


# The attack's sentence: 29 "words" of rare letters (within the 30-word bound), over 200 pieces.
ATTACK = " ".join(rare_words(29, letters=(6, 9)))


def numbers_in(value) -> list:
    """Every number in nested lists and dicts."""
    if isinstance(value, dict):
        return [number for item in value.values() for number in numbers_in(item)]
    if isinstance(value, list):
        return [number for item in value for number in numbers_in(item)]
    return [value]


@pytest.fixture(scope="module")
def ours(shipped_translator):
    return shipped_translator


@pytest.fixture(scope="module")
def at_the_bound(ours) -> str:
    """Rare-letter words, as many as our model reads in at most MAX_PIECES pieces (</s> included)."""
    words = []
    for word in rare_words(200, seed=1):
        if len(ours.tokenizer(" ".join([*words, word]))["input_ids"]) > MAX_PIECES:
            return " ".join(words)
        words.append(word)
    raise AssertionError("200 rare words under the piece bound")


def request(ours, text: str, num_beams: int = 8) -> dict:
    return view_request.inside_request(
        text, "beam search", num_beams, 255, context=RequestContext(ours, limits=Limits())
    )


def attention_and_encoding_bytes(config, sources: int, targets: int) -> int:
    """The most JSON the attention and positional encoding of a view can be (`json.dumps`): every weight at most
    "0.123, " (3 places in [0, 1]), every encoding at most "-0.123, ", each row's "[", "]" and ", "."""
    heads, encoders, decoders = config.num_attention_heads, config.encoder_layers, config.decoder_layers
    weights = heads * (encoders * sources * sources + decoders * (targets * targets + targets * sources))
    rows = heads * (encoders * sources + 2 * decoders * targets) + 3 * (encoders + decoders) * (heads + 1)
    return weights * len("0.123, ") + sources * config.d_model * len("-0.123, ") + 4 * (rows + sources)


def test_a_sentence_past_the_piece_bound_is_refused_in_one_line_before_any_model_runs(ours, monkeypatch):
    def no_model(*args, **kwargs):
        raise AssertionError("a model ran")

    monkeypatch.setattr(view_request, "inside_view", no_model)
    monkeypatch.setattr(view_request.RequestPlan, "job", no_model)
    assert len(ATTACK.split()) == 29 and len(ours.tokenizer(ATTACK)["input_ids"]) > 3 * MAX_PIECES
    view = request(ours, ATTACK)
    assert set(view) == {"message", "notices"} and view["notices"] == []
    assert "\n" not in view["message"] and f"at most {MAX_PIECES}" in view["message"]
    assert ours.name in view["message"]


def test_the_learners_function_refuses_it_too_unless_told_otherwise(ours, at_the_bound):
    past = at_the_bound + " qzxv jkwq"
    with pytest.raises(ValueError, match=f"at most {MAX_PIECES}"):
        view_inside(ours, past, DecodingSettings(num_beams=1))
    unbounded = inside_view(ours.model, ours.tokenizer, past, DecodingSettings(num_beams=1), max_pieces=None)
    assert len(unbounded["source_ids"]) > MAX_PIECES


def test_the_search_ends_at_the_piece_bound(ours):
    sentence = "Two young women in colourful dresses are dancing on a wooden stage in front of a small crowd."
    plan = plan_decoding(ours.model, ours.tokenizer, [sentence], DecodingSettings(num_beams=4))
    whole, _, _, reached = traced_search(ours.model, plan)
    assert len(whole[0]) - 1 > 8 and not reached
    cut, _, _, reached = traced_search(ours.model, plan, max_pieces=8)
    assert len(cut[0]) - 1 == 8 and reached
    assert cut[0][-1] == ours.model.generation_config.eos_token_id  # ended with </s>, as the bound forces


def test_a_translation_at_the_bound_is_shown_to_there_and_says_so(ours, monkeypatch):
    sentence = "Snowboarders snowboard downhill."  # 10 pieces in, 13 out
    whole = request(ours, sentence, num_beams=4)
    assert len(whole["source_ids"]) == 10 < len(whole["target_ids"]), "pick a sentence translated longer than it is"
    monkeypatch.setattr(view_request, "MAX_PIECES", 10)
    view = request(ours, sentence, num_beams=4)
    assert len(view["target_ids"]) == 10 and view["reached_bound"]
    assert any("at most 10 pieces" in notice for notice in view["notices"])
    assert len(view["attention"]["cross"][0][0]) == 10  # a row of attention a piece


def test_our_models_worst_case_is_under_the_byte_cap_by_construction(ours):
    """From layers x heads x pieces and the rounding alone, with room left for the beam search and the pieces."""
    assert attention_and_encoding_bytes(ours.model.config, MAX_PIECES, MAX_PIECES) < 0.65 * view_request.MAX_VIEW_BYTES


def test_the_worst_case_view_serialises_under_the_byte_cap(ours, at_the_bound):
    view = request(ours, at_the_bound, num_beams=Limits().max_beams)
    sources, targets = len(view["source_ids"]), len(view["target_ids"])
    assert MAX_PIECES - 4 <= sources <= MAX_PIECES and targets <= MAX_PIECES
    assert "attention" in view, view.get("message")  # shown whole, not replaced by a line
    assert len(json.dumps(view)) <= view_request.MAX_VIEW_BYTES
    numbers = len(json.dumps(view["attention"])) + len(json.dumps(view["positional_encoding"]))
    assert numbers <= attention_and_encoding_bytes(ours.model.config, sources, targets)
    written = [json.dumps(number) for number in numbers_in([view["attention"], view["positional_encoding"]])]
    assert max(len(number) for number in written) == len("-0.123")  # DECIMALS places, nothing longer
    assert DECIMALS == 3


def test_rounded_weights_stay_within_a_unit_and_rows_still_sum_to_one():
    torch.manual_seed(0)
    later = torch.ones(40, 40, dtype=torch.bool).triu(diagonal=1)
    weights = torch.randn(3, 4, 40, 40).masked_fill(later, float("-inf")).softmax(dim=-1)  # masked, as the decoder's
    rounded = torch.tensor(rounded_rows(weights), dtype=torch.float64)
    assert (rounded - weights.double()).abs().max() < 10**-DECIMALS
    assert torch.allclose(rounded.sum(dim=-1), torch.ones(3, 4, 40, dtype=torch.float64), atol=1e-12)
    assert (rounded[..., later] == 0).all()
    assert all(round(value, DECIMALS) == value for value in rounded.flatten().tolist())


def test_a_model_past_the_byte_cap_is_one_line_and_the_answer_stays_under_it(ours, monkeypatch):
    views = [view_inside(ours, "A dog runs in the park.", DecodingSettings(num_beams=4))]
    views.append({**views[0], "model": "big"})
    envelope = {"sentence": "A dog runs in the park.", "notices": [], "comparisons": []}
    alone = len(json.dumps(view_request.within_bytes(envelope, views[:1])))
    monkeypatch.setattr(view_request, "MAX_VIEW_BYTES", alone + 1_000)  # room for ours and a line, not for two
    answer = view_request.within_bytes(envelope, views)
    assert len(json.dumps(answer)) <= view_request.MAX_VIEW_BYTES
    assert "attention" in answer  # ours, first, whole
    [line] = answer["comparisons"]
    assert set(line) == {"model", "message"} and line["model"] == "big" and "bound" in line["message"]
    monkeypatch.setattr(view_request, "MAX_VIEW_BYTES", 2 * alone + 1_000)
    assert "attention" in view_request.within_bytes(envelope, views)["comparisons"][0]


def test_the_byte_count_is_the_answers_own_or_a_little_more(ours):
    view = view_inside(ours, "A dog runs in the park.", DecodingSettings(num_beams=4))
    envelope = {"sentence": "A dog runs in the park.", "notices": ["a notice"], "comparisons": []}
    for count in (1, 3):
        views = [{**view, "model": f"model {n}"} for n in range(count)]
        counted = len(json.dumps(envelope)) + sum(len(json.dumps(item)) + 2 for item in views)
        assert 0 <= counted - len(json.dumps(view_request.within_bytes(envelope, views))) <= 4


# ------------------------------------------------------------------------------------------------ the page's store


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_store_gives_back_the_view_under_a_random_id():
    store = view_request.ViewStore()
    view = {"model": "m", "attention": {"cross": [[[[0.5, 0.5]]]]}, "notices": []}
    first, second = store.put(view), store.put(view)
    assert first != second and len(first) >= 20
    assert store.get(first) == view
    assert store.get(None) is None and store.get("") is None  # nothing looked at yet: nothing to draw


def test_the_store_keeps_at_most_its_count_and_bytes_the_least_recently_used_dropped():
    store = view_request.ViewStore(max_views=3)
    ids = [store.put({"model": str(n)}) for n in range(5)]
    assert len(store.views) == 3 and store.get(ids[0]) is view_request.EXPIRED and store.get(ids[2]) == {"model": "2"}
    store.put({"model": "5"})  # drops 3, not 2, which was just used
    assert store.get(ids[3]) is view_request.EXPIRED and store.get(ids[2]) == {"model": "2"}
    rng = random.Random(0)
    noise = lambda: "".join(rng.choice(RARE) for _ in range(20_000))  # noqa: E731 (compresses little)
    small = view_request.ViewStore(max_bytes=30_000)
    kept = [small.put({"model": noise()}) for _ in range(4)]
    assert small.bytes <= 30_000 and small.get(kept[-1])["model"] and small.get(kept[0]) is view_request.EXPIRED


def test_a_view_expires_after_its_time_unused_and_the_redraw_says_look_inside_again():
    clock = Clock()
    store = view_request.ViewStore(seconds=60, clock=clock)
    used, unused = store.put({"model": "a"}), store.put({"model": "b"})
    clock.now = 40
    assert store.get(used) == {"model": "a"}  # its time starts again
    clock.now = 90
    assert store.get(used) == {"model": "a"} and store.get(unused) is view_request.EXPIRED
    assert store.bytes == len(next(iter(store.views.values()))[0])
    count = 2
    notice, *_ = draw_inside(view_request.EXPIRED, "cross", 1, 0, count)
    *pictures, caption = draw_attention(view_request.EXPIRED, "cross", 1, 0, count)
    for line in (notice, caption):
        assert "Look inside again" in line and "\n" not in line
    assert not any(picture.visible for picture in pictures)


def test_a_view_redrawn_from_the_store_draws_as_the_view_itself(ours):
    view = request(ours, "A dog runs in the park.", num_beams=4)
    store = view_request.ViewStore()
    kept = store.get(store.put(view))
    assert kept == json.loads(json.dumps(view))
    caption = draw_attention(view, "cross", 1, 1, 1)[-1]
    assert draw_attention(kept, "cross", 1, 1, 1)[-1] == caption
    assert plot_attention_heads(kept, "decoder_self", 0, None) is not None


@pytest.mark.slow
def test_ten_worst_case_views_leave_the_store_and_the_process_bounded(ours, at_the_bound):
    """As the page keeps them: each answer into the store, nothing else kept. The store holds its bound in bytes and
    views; the process grows by far less than one old view (+125 MB each, never freed)."""

    def resident_mb() -> float:
        with open("/proc/self/status") as status:
            return next(int(line.split()[1]) for line in status if line.startswith("VmRSS")) / 1024

    store = view_request.ViewStore(max_views=4)
    store.put(request(ours, at_the_bound))  # the first run's allocations are the process's, not the views'
    before = resident_mb()
    for _ in range(10):
        answer = request(ours, at_the_bound)
        assert len(json.dumps(answer)) <= view_request.MAX_VIEW_BYTES
        store.put(answer)
    assert len(store.views) == 4 and store.bytes <= 4 * view_request.MAX_VIEW_BYTES
    assert store.bytes == sum(len(data) for data, _ in store.views.values())
    assert resident_mb() - before < 100
