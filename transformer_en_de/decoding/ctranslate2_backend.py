"""Our Transformer in CTranslate2, the C++ inference engine of OpenNMT: a converter written for this model.

`convert(model, tokenizer, folder)` describes the model with `ctranslate2.specs` (post- or pre-norm layers, shared
embeddings scaled by sqrt(d_model), our sinusoidal table, the tied output projection) and saves it;
`load(folder)` opens it as a `ctranslate2.Translator`, and `translate_ids` decodes batches of our token ids with it.
The engine's CTranslate2 backend (`backends.py`) converts our model with it, and other architectures with
`convert_loaded` (CTranslate2's own converter, fed the very model that was loaded), and caches the result;
`tests/test_ctranslate2.py` checks that both give the same greedy tokens and the same log-probabilities.

Optional: `pip install ctranslate2` (imported only when called)."""

from pathlib import Path

import numpy as np
import torch


def _array(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to(torch.float32).cpu().numpy()


def _linear(spec, *linears) -> None:
    """One CTranslate2 linear from one or more of ours, stacked along the outputs (fused Q/K/V, K/V)."""
    spec.weight = _array(torch.cat([linear.weight for linear in linears]))
    if linears[0].bias is not None:
        spec.bias = _array(torch.cat([linear.bias for linear in linears]))


def _layer_norm(spec, norm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _feed_forward(spec, feed_forward, norm) -> None:
    _linear(spec.linear_0, feed_forward.fc1)
    _linear(spec.linear_1, feed_forward.fc2)
    _layer_norm(spec.layer_norm, norm)


def model_spec(model):
    """The `ctranslate2.specs.TransformerSpec` of a `TransformerMTForConditionalGeneration`, weights included."""
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    pre_norm = config.norm_placement == "pre"
    spec = transformer_spec.TransformerSpec.from_config(
        (config.encoder_layers, config.decoder_layers),
        config.num_attention_heads,
        pre_norm=pre_norm,
        activation=common_spec.Activation.RELU,
    )
    encoder, decoder = model.model.encoder, model.model.decoder
    # Our table interleaves sin and cos (the paper's PE); CTranslate2's built-in one concatenates them: pass ours.
    positions = _array(encoder.embed_positions.table)  # (max_positions, d_model)

    spec.encoder.embeddings[0].weight = _array(model.model.shared.weight)
    spec.encoder.scale_embeddings = True  # x sqrt(d_model)
    spec.encoder.position_encodings.encodings = positions
    for theirs, ours in zip(spec.encoder.layer, encoder.layers, strict=True):
        attention = ours.self_attn
        _linear(theirs.self_attention.linear[0], attention.q_proj, attention.k_proj, attention.v_proj)
        _linear(theirs.self_attention.linear[1], attention.out_proj)
        _layer_norm(theirs.self_attention.layer_norm, ours.self_attn_norm)
        _feed_forward(theirs.ffn, ours.feed_forward, ours.feed_forward_norm)

    spec.decoder.embeddings.weight = _array(model.model.shared.weight)
    spec.decoder.scale_embeddings = True
    spec.decoder.position_encodings.encodings = positions
    for theirs, ours in zip(spec.decoder.layer, decoder.layers, strict=True):
        attention, cross = ours.self_attn, ours.cross_attn
        _linear(theirs.self_attention.linear[0], attention.q_proj, attention.k_proj, attention.v_proj)
        _linear(theirs.self_attention.linear[1], attention.out_proj)
        _layer_norm(theirs.self_attention.layer_norm, ours.self_attn_norm)
        _linear(theirs.attention.linear[0], cross.q_proj)
        _linear(theirs.attention.linear[1], cross.k_proj, cross.v_proj)
        _linear(theirs.attention.linear[2], cross.out_proj)
        _layer_norm(theirs.attention.layer_norm, ours.cross_attn_norm)
        _feed_forward(theirs.ffn, ours.feed_forward, ours.feed_forward_norm)
    if pre_norm:
        _layer_norm(spec.encoder.layer_norm, encoder.final_norm)
        _layer_norm(spec.decoder.layer_norm, decoder.final_norm)
    _linear(spec.decoder.projection, model.get_output_embeddings())  # tied: the shared embedding
    return spec


def convert(model, tokenizer, folder: str | Path, quantization: str | None = None) -> Path:
    """Save `model` as a CTranslate2 model in `folder` (quantization: None for float32, or "int8", ...)."""
    spec = model_spec(model)
    tokens = tokenizer.convert_ids_to_tokens(list(range(model.config.vocab_size)))
    spec.register_source_vocabulary(tokens)
    spec.register_target_vocabulary(tokens)
    special = tokenizer.convert_ids_to_tokens
    spec.config.unk_token = tokenizer.unk_token
    spec.config.bos_token = special(model.config.bos_token_id)
    spec.config.eos_token = special(model.config.eos_token_id)
    spec.config.decoder_start_token = special(model.config.decoder_start_token_id)
    spec.config.add_source_bos = False  # our tokenizer adds </s> itself; the ids passed in are the model's input
    spec.config.add_source_eos = False
    spec.config.layer_norm_epsilon = model.config.layer_norm_eps
    spec.validate()
    spec.optimize(quantization=quantization)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    spec.save(str(folder))
    return folder


def convert_loaded(model, tokenizer, folder: str | Path, quantization: str | None = None) -> Path:
    """Save a Transformers model of an architecture CTranslate2 knows (MarianMT, T5, BART, ...) as a CTranslate2
    model in `folder`, converting `model` itself: it is saved to a scratch folder that CTranslate2's converter reads.
    Given a Hub id, the converter would download the model again, at `main` and perhaps from a pickle, not the commit
    and weights the app loaded and draws the Inside tab from."""
    import tempfile

    from ctranslate2.converters import TransformersConverter

    with tempfile.TemporaryDirectory(prefix="ctranslate2-source-") as scratch:
        model.save_pretrained(scratch)  # safetensors, the weights as loaded
        tokenizer.save_pretrained(scratch)
        TransformersConverter(scratch).convert(str(folder), quantization=quantization, force=True)
    return Path(folder)


def load(folder: str | Path, threads: int = 1, compute_type: str = "default"):
    """A `ctranslate2.Translator` on the CPU with `threads` threads."""
    import ctranslate2

    return ctranslate2.Translator(str(folder), device="cpu", intra_threads=threads, compute_type=compute_type)


def translate_ids(translator, tokenizer, batch_ids: list[list[int]], **options) -> list[list[int]]:
    """Decode source ids (as our tokenizer gives them, </s> included) to target ids (without start and </s>)."""
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in batch_ids]
    results = translator.translate_batch(sources, **options)
    return [tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for result in results]


__all__ = ["convert", "convert_loaded", "load", "model_spec", "translate_ids"]
