"""transformer_en_de/training.py: batches of about N tokens, and the training loss on real target tokens only."""

import random

import torch
from conftest import DATA_DIR, tiny_config

from modeling import TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import label_smoothed_cross_entropy
from transformer_en_de.training import TokenBatchSampler, scored_loss


def test_token_batches_hold_every_pair_once_within_the_budget():
    lengths = [random.Random(index).randint(3, 40) for index in range(500)]
    sampler = TokenBatchSampler(lengths, max_tokens=300, seed=0)
    first, second = list(sampler), list(sampler)
    for batches in (first, second):
        assert len(batches) == len(sampler)  # the Trainer counts steps with len()
        assert sorted(index for batch in batches for index in batch) == list(range(500))
        assert all(len(batch) * max(lengths[index] for index in batch) <= 300 for batch in batches)
    assert first != second  # another order every epoch
    short = [batch for batch in first if max(lengths[index] for index in batch) <= 10]
    long = [batch for batch in first if min(lengths[index] for index in batch) >= 30]
    assert min(map(len, short)) > max(map(len, long))  # many short sentences to a batch, few long ones


def test_scored_loss_is_the_smoothed_loss_of_the_full_logits_with_the_same_gradients(tiny_tokenizer):
    sources = (DATA_DIR / "val.en").read_text(encoding="utf-8").splitlines()[:6]
    targets = (DATA_DIR / "val.de").read_text(encoding="utf-8").splitlines()[:6]
    batch = tiny_tokenizer(sources, text_target=targets, padding=True, truncation=True, max_length=48,
                           return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tiny_tokenizer.pad_token_id, -100)
    assert (batch["labels"] == -100).any()  # padded targets: the positions scored_loss leaves out
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, dropout=0.0)).train()

    expected = label_smoothed_cross_entropy(model(**batch).logits, batch["labels"], model.config.label_smoothing)
    expected.backward()
    expected_grads = [parameter.grad.clone() for parameter in model.parameters()]
    model.zero_grad()
    loss = scored_loss(model, batch)
    loss.backward()
    assert torch.allclose(loss, expected, atol=1e-6)
    for parameter, grad in zip(model.parameters(), expected_grads, strict=True):
        assert torch.allclose(parameter.grad, grad, atol=1e-6)
