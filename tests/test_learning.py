"""The model learns: a tiny Transformer trained with a plain PyTorch loop memorises the test pairs exactly."""

import math

import torch
from conftest import PAIRS, tiny_config

from modeling import TransformerMTForConditionalGeneration
from modeling.modeling_transformer_mt import label_smoothed_cross_entropy, set_translation_defaults

SOURCES = [source for source, _ in PAIRS]
TARGETS = [target for _, target in PAIRS]


def test_a_tiny_model_memorises_the_pairs_and_greedy_decoding_reproduces_every_target(tiny_tokenizer):
    torch.manual_seed(0)
    model = TransformerMTForConditionalGeneration(tiny_config(tiny_tokenizer, dropout=0.0))  # label smoothing 0.1
    batch = tiny_tokenizer(SOURCES, text_target=TARGETS, padding=True, return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tiny_tokenizer.pad_token_id, -100)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    model.train()
    losses = []
    for _ in range(200):
        optimizer.zero_grad()
        # The training loss (train.py's): label-smoothed; the model's own `loss` is the plain cross-entropy.
        loss = label_smoothed_cross_entropy(model(**batch).logits, batch["labels"], model.config.label_smoothing)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()

    # From the uniform guess (ln vocab) down to near the floor label smoothing sets: the entropy of the smoothed
    # target distribution, reached only when every token is predicted with certainty.
    vocab, epsilon = model.config.vocab_size, model.config.label_smoothing
    on_target = 1 - epsilon + epsilon / vocab
    floor = -on_target * math.log(on_target) - (vocab - 1) * (epsilon / vocab) * math.log(epsilon / vocab)
    assert losses[0] > 0.8 * math.log(vocab)
    assert floor < losses[-1] < floor + 0.1
    set_translation_defaults(model.generation_config, model.config)  # what train.py ships: beam 4, length penalty 0.6
    sources = tiny_tokenizer(SOURCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        greedy = model.generate(**sources, num_beams=1, do_sample=False, max_new_tokens=40)
        beam = model.generate(**sources, max_new_tokens=40)  # the translation defaults: beam 4, length penalty 0.6
    assert tiny_tokenizer.batch_decode(greedy, skip_special_tokens=True) == TARGETS
    assert tiny_tokenizer.batch_decode(beam, skip_special_tokens=True) == TARGETS
