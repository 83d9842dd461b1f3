"""Our converter to CTranslate2 (`transformer_en_de/ctranslate2_backend.py`): the converted model computes what ours
computes, so both write the same greedy tokens. Skipped where the optional `ctranslate2` package is not installed."""

import pytest
import torch
from conftest import tiny_config

from modeling import TransformerMTForConditionalGeneration
from transformer_en_de import ctranslate2_backend

ctranslate2 = pytest.importorskip("ctranslate2")

SOURCES = [
    "A dog runs in the park.",
    "Two men are working.",
    "A girl in a red dress is smiling.",
    "The cat sleeps on the sofa.",
    "Three people ride bicycles.",
]
NEW_TOKENS = 12


def greedy_pairs(model, tokenizer, folder):
    """(ours, CTranslate2's) greedy new tokens per source, without the start token and </s>."""
    translator = ctranslate2_backend.load(ctranslate2_backend.convert(model, tokenizer, folder))
    ids = tokenizer(SOURCES)["input_ids"]
    theirs = ctranslate2_backend.translate_ids(translator, tokenizer, ids, beam_size=1, max_decoding_length=NEW_TOKENS)
    pairs = []
    for source_ids, other in zip(ids, theirs, strict=True):
        with torch.inference_mode():
            output = model.generate(
                torch.tensor([source_ids]), num_beams=1, max_new_tokens=NEW_TOKENS + 1, max_new_tokens_ratio=None
            )
        mine = [token for token in output[0, 1:].tolist() if token != model.config.eos_token_id]
        pairs.append((mine[:NEW_TOKENS], other[:NEW_TOKENS]))
    return pairs


@pytest.mark.parametrize("norm_placement", ["post", "pre"])
def test_converted_model_writes_our_greedy_tokens(tiny_tokenizer, tmp_path, norm_placement):
    torch.manual_seed(0)
    # Wide weights: the output changes with the input, so a weight mapped to the wrong place would show.
    config = tiny_config(tiny_tokenizer, init_std=0.5, norm_placement=norm_placement)
    model = TransformerMTForConditionalGeneration(config).eval()
    pairs = greedy_pairs(model, tiny_tokenizer, tmp_path / "ct2")
    assert all(mine == other for mine, other in pairs), pairs
    assert len({tuple(mine) for mine, _ in pairs}) > 1


def test_converted_logits_match_ours(tiny_tokenizer, tmp_path):
    """The log-probabilities of every token of a reference translation agree to float32 rounding."""
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, init_std=0.5)).eval()
    translator = ctranslate2_backend.load(ctranslate2_backend.convert(model, tiny_tokenizer, tmp_path / "ct2"))
    source = tiny_tokenizer(SOURCES[0])["input_ids"]
    target = tiny_tokenizer(text_target="Ein Hund rennt im Park.")["input_ids"]
    tokens = tiny_tokenizer.convert_ids_to_tokens
    result = translator.score_batch([tokens(source)], [tokens(target[:-1])])[0]  # it adds the start and </s>
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([source]), labels=torch.tensor([target])).logits
    expected = torch.log_softmax(logits[0], dim=-1).gather(1, torch.tensor(target)[:, None]).squeeze(1)
    assert torch.allclose(torch.tensor(result.log_probs), expected, atol=1e-4)
