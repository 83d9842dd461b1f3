"""`modeling.linear_kernel`: which kernel multiplies a linear layer in inference, and that every path of the model
multiplies alike (so our beam search keeps transformers' ids and a sentence's translation does not depend on the
sentences beside it) with either kernel, on any machine."""

import copy
import gc

import pytest
import torch
import torch.nn.functional as F
from conftest import PAIRS, tiny_config

from modeling import TransformerMTForConditionalGeneration, linear_kernel
from modeling.beam_search import _output_layer
from modeling.linear_kernel import linear, uses_packed_weights
from modeling.modeling_transformer_mt import set_translation_defaults

SOURCES = [english for english, _ in PAIRS] + [
    "Two dogs.",
    "A very small boy in a green jacket runs after a red ball on the grass in the park near the lake.",
    "A woman with a hat reads a book to three children on a bench.",
]


@pytest.fixture(scope="module")
def model(tiny_tokenizer):
    torch.manual_seed(0)
    # d_model 256: products of 32 terms come out the same from both kernels, of 256 they do not
    config = tiny_config(tiny_tokenizer, init_std=0.5, d_model=256, num_attention_heads=4, d_ff=512)
    model = TransformerMTForConditionalGeneration(config).eval()
    set_translation_defaults(model.generation_config, model.config)
    return model


def generate(model, tokenizer, sources, **options):
    with torch.inference_mode():
        return model.generate(**tokenizer(sources, return_tensors="pt", padding=True), **options)


def test_inference_multiplies_with_the_chosen_kernel_and_training_with_f_linear(packed_linear):
    torch.manual_seed(0)
    layer = torch.nn.Linear(256, 40)
    inputs = torch.randn(3, 5, 256)
    with torch.no_grad():
        assert uses_packed_weights(layer.weight) == packed_linear
        torch.testing.assert_close(linear(layer, inputs), F.linear(inputs, layer.weight, layer.bias))
    inputs.requires_grad_(True)
    assert not uses_packed_weights(layer.weight)  # gradients enabled: autograd's F.linear
    linear(layer, inputs).sum().backward()
    assert layer.weight.grad is not None and inputs.grad is not None


def test_a_changed_weight_is_packed_again(packed_linear):
    """Loading and optimizer steps change weights in place: the packed copy must follow."""
    torch.manual_seed(0)
    layer = torch.nn.Linear(16, 8)
    inputs = torch.randn(4, 16)
    with torch.no_grad():
        before = linear(layer, inputs)
        layer.weight.mul_(-2.0)
        after = linear(layer, inputs)
        torch.testing.assert_close(after, F.linear(inputs, layer.weight, layer.bias))
        assert not torch.allclose(before, after)
        layer.load_state_dict({"weight": torch.ones(8, 16), "bias": torch.zeros(8)})
        torch.testing.assert_close(linear(layer, inputs), inputs.sum(-1, keepdim=True).expand(4, 8))
    if packed_linear:  # the packed copy goes with its weight
        identity = id(layer.weight)
        assert identity in linear_kernel._packed_weights
        del layer
        gc.collect()
        assert identity not in linear_kernel._packed_weights


def test_a_watched_or_replaced_layer_runs_as_a_module(packed_linear):
    layer = torch.nn.Linear(8, 8)
    seen = []
    handle = layer.register_forward_hook(lambda module, args, output: seen.append(output.shape))
    with torch.no_grad():
        linear(layer, torch.randn(2, 8))
    handle.remove()
    assert seen == [torch.Size([2, 8])]
    doubled = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU())
    with torch.no_grad():
        assert linear(doubled, torch.randn(2, 8)).min() >= 0


def test_our_search_gives_transformers_ids_with_either_kernel(packed_linear, model, tiny_tokenizer):
    plain = copy.deepcopy(model)
    plain.drop_finished_sentences = False
    options = dict(num_beams=4, max_new_tokens_ratio=0.5, max_new_tokens_offset=2)
    ours = generate(model, tiny_tokenizer, SOURCES, **options)
    assert torch.equal(ours, generate(plain, tiny_tokenizer, SOURCES, **options))
    assert len({tuple(row.tolist()) for row in ours}) > 1


def test_a_translation_does_not_depend_on_the_sentences_beside_it(packed_linear, model, tiny_tokenizer):
    """A sentence translates the same alone and in a batch, with either kernel: oneDNN's result for a row does not
    depend on the rows beside it; MKL's can, at some row counts (by about 1e-6), as the encoder's rows vary."""
    eos, pad = model.config.eos_token_id, model.config.pad_token_id
    batched = generate(model, tiny_tokenizer, SOURCES)
    for row, source in zip(batched, SOURCES, strict=True):
        alone = generate(model, tiny_tokenizer, [source])[0]
        strip = [token for token in row.tolist() if token not in (pad, eos)]
        assert strip == [token for token in alone.tolist() if token not in (pad, eos)], source


@pytest.mark.skipif(not linear_kernel.AVAILABLE, reason="no oneDNN packed linear")
def test_both_kernels_translate_alike(monkeypatch, model, tiny_tokenizer):
    """They round differently (about 1e-6), which may flip a near tie, but not the translations of a whole batch."""
    runs = {}
    for packed in (True, False):
        monkeypatch.setattr(linear_kernel, "PACKED_LINEAR", packed)
        runs[packed] = generate(model, tiny_tokenizer, SOURCES)
    same = sum(torch.equal(mine, other) for mine, other in zip(runs[True], runs[False], strict=True))
    assert same >= len(SOURCES) - 1


def test_the_search_computes_logits_as_the_forward_does(packed_linear, model, tiny_tokenizer):
    """The output layer of our search and the model's forward multiply with the same kernel, bit for bit."""
    batch = tiny_tokenizer(SOURCES[:4], return_tensors="pt", padding=True)
    decoder_input_ids = torch.tensor([[model.config.decoder_start_token_id, 9, 12]] * 4)
    with torch.no_grad():
        outputs = model(**batch, decoder_input_ids=decoder_input_ids, output_hidden_states=True)
        last_hidden = outputs.decoder_hidden_states[-1][:, -1, :]
        assert torch.equal(_output_layer(model)(last_hidden), outputs.logits[:, -1, :])
