"""The Transformer of Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762), as a Hugging Face model.

Reads bottom-up: sinusoidal positions (3.5) -> masks -> multi-head attention (3.2) -> position-wise feed-forward
(3.3) -> encoder and decoder layers (3.1) -> pretrained base with weight init -> encoder, decoder -> the
encoder-decoder model and the model with the tied output projection (3.4) that `generate()` drives.

It keeps transformers' model contract (its common tests run in tests/test_transformers_common.py): attention through
transformers' attention functions (SDPA by default, eager for attention weights), hidden states and attention weights
recorded by hooks (`_can_record_outputs`) when asked for or set in the config, tuples with `return_dict=False`,
`inputs_embeds`, and a plain cross-entropy `loss`.

This file imports only torch, transformers and its sibling configuration file, so a saved model folder carries it
to the Hub and loads with `trust_remote_code=True`.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, LogitsProcessorList, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs
from transformers.utils.generic import can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .beam_search import compact_beam_search, compact_search_covers
from .configuration_transformer_mt import TransformerMTConfig
from .length_bound import (
    DEFAULT_OFFSET,
    DEFAULT_RATIO,
    SourceLengthBound,
    generate_bound,
    new_token_limits,
    source_lengths,
)
from .linear_kernel import linear


def sinusoidal_table(num_positions: int, d_model: int) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model))."""
    position = torch.arange(num_positions, dtype=torch.float32).unsqueeze(1)  # (P, 1)
    inverse_frequency = torch.pow(10000.0, -torch.arange(0, d_model, 2, dtype=torch.float32) / d_model)  # (d/2,)
    table = torch.zeros(num_positions, d_model)
    table[:, 0::2] = torch.sin(position * inverse_frequency)
    table[:, 1::2] = torch.cos(position * inverse_frequency)
    return table  # (P, d_model)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed (not learned) sinusoidal position encodings, added to the scaled token embeddings."""

    def __init__(self, config: TransformerMTConfig):
        super().__init__()
        self.num_positions = config.max_position_embeddings
        self.d_model = config.d_model
        # Not persistent: it is a function of the config, so it is rebuilt (in `_init_weights`) rather than saved.
        self.register_buffer("table", sinusoidal_table(self.num_positions, self.d_model), persistent=False)

    def forward(self, length: int, offset: int = 0) -> torch.Tensor:
        if offset + length > self.num_positions:
            raise ValueError(
                f"Sequence of {offset + length} tokens is longer than this model's max_position_embeddings "
                f"({self.num_positions}). Truncate the input (tokenizer(..., truncation=True)) or generate fewer "
                f"tokens (max_new_tokens)."
            )
        return self.table[offset : offset + length]  # (T, d_model)


def padding_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    """Mask out padding keys: (B, S) with 1 for real tokens -> (B, 1, 1, S) boolean, True where attending is allowed."""
    if attention_mask is None:
        return None
    return attention_mask.bool()[:, None, None, :]


def causal_mask(query_length: int, key_length: int, device: torch.device) -> torch.Tensor:
    """Mask out subsequent positions: query i (the last `query_length` of `key_length` positions) sees keys <= i."""
    offset = key_length - query_length  # tokens already in the cache
    query_positions = torch.arange(query_length, device=device)[:, None] + offset
    key_positions = torch.arange(key_length, device=device)[None, :]
    return key_positions <= query_positions  # (T, S)


def combine_masks(*masks: torch.Tensor | None) -> torch.Tensor | None:
    """Logical AND of broadcastable boolean masks, skipping absent ones."""
    present = [mask for mask in masks if mask is not None]
    if not present:
        return None
    combined = present[0]
    for mask in present[1:]:
        combined = combined & mask
    return combined


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(QK^T / sqrt(d_k)) V written out, so that the weights it returns are exactly those that multiply V.

    query: (B, h, T, d_k), key and value: (B, h, S, d_k); attention_mask: boolean (True where attending is allowed)
    or additive float, broadcastable to (B, h, T, S). Returns the context (B, T, h, d_k) and the weights (B, h, T, S),
    the layout of transformers' attention functions (`ALL_ATTENTION_FUNCTIONS`).
    """
    scores = query @ key.transpose(-2, -1) * scaling  # (B, h, T, S)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = torch.softmax(scores.float(), dim=-1).to(value.dtype)
    context = F.dropout(weights, p=dropout, training=module.training) @ value  # (B, h, T, d_k)
    return context.transpose(1, 2).contiguous(), weights  # (B, T, h, d_k)


def attention_function(implementation: str | None):
    """transformers' attention function for `config._attn_implementation`: the written-out one for eager (or None)."""
    if implementation in (None, "eager"):
        return eager_attention_forward
    return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)


class MultiHeadAttention(nn.Module):
    """softmax(QK^T / sqrt(d_k)) V over h heads, concatenated and projected by W_O; self- or cross-attention.

    The product itself runs in the configured attention implementation (`config._attn_implementation`): SDPA by
    default, or the written-out `eager_attention_forward`. Attention weights exist only in the eager path, so a call
    that asks for them (`output_attentions`) runs eager whatever is configured.
    """

    is_causal = False  # every mask is passed explicitly (see `causal_mask`): SDPA must not add its own

    def __init__(self, config: TransformerMTConfig, is_cross_attention: bool = False, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.d_model // config.num_attention_heads  # d_k = d_v = d_model / h
        self.scaling = self.head_dim**-0.5  # 1 / sqrt(d_k)
        self.is_cross_attention = is_cross_attention
        self.layer_idx = layer_idx
        self.attention_dropout = config.attention_dropout
        self.q_proj = nn.Linear(config.d_model, config.d_model)
        self.k_proj = nn.Linear(config.d_model, config.d_model)
        self.v_proj = nn.Linear(config.d_model, config.d_model)
        self.out_proj = nn.Linear(config.d_model, config.d_model)

    def _split_heads(self, states: torch.Tensor) -> torch.Tensor:
        batch, length, _ = states.shape
        return states.view(batch, length, self.num_heads, self.head_dim).transpose(1, 2)  # (B, h, T, d_k)

    def _keys_and_values(
        self, hidden_states: torch.Tensor, key_value_states: torch.Tensor | None, past_key_values: Cache | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_cross_attention:
            keys = self._split_heads(linear(self.k_proj, hidden_states))
            values = self._split_heads(linear(self.v_proj, hidden_states))
            if past_key_values is not None:
                cache = past_key_values.self_attention_cache
                keys, values = cache.update(keys, values, self.layer_idx)  # (B, h, past + T, d_k)
            return keys, values
        # Cross-attention keys/values depend only on the encoder output: computed once per source, then reused.
        if past_key_values is not None and past_key_values.is_updated.get(self.layer_idx):
            layer = past_key_values.cross_attention_cache.layers[self.layer_idx]
            return layer.keys, layer.values
        keys = self._split_heads(linear(self.k_proj, key_value_states))  # (B, h, S, d_k)
        values = self._split_heads(linear(self.v_proj, key_value_states))
        if past_key_values is not None:
            keys, values = past_key_values.cross_attention_cache.update(keys, values, self.layer_idx)
            past_key_values.is_updated[self.layer_idx] = True
        return keys, values

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        queries = self._split_heads(linear(self.q_proj, hidden_states))  # (B, h, T, d_k)
        keys, values = self._keys_and_values(hidden_states, key_value_states, past_key_values)  # (B, h, S, d_k)
        output_attentions = kwargs.pop("output_attentions", None)
        if output_attentions is None:
            output_attentions = self.config.output_attentions
        return self.attend(queries, keys, values, attention_mask, output_attentions, **kwargs)

    def attend(
        self,
        queries: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        attention_mask: torch.Tensor | None,
        output_attentions: bool = False,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention product of projected heads, concatenated and projected by W_O: (B, T, d_model), weights."""
        attention_interface = attention_function(None if output_attentions else self.config._attn_implementation)
        context, weights = attention_interface(
            self,
            queries,
            keys,
            values,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            **kwargs,
        )  # (B, T, h, d_k)
        batch, length = context.shape[:2]
        return linear(self.out_proj, context.reshape(batch, length, -1)), weights  # (B, T, h * d_k) -> (B, T, d_model)


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately."""

    def __init__(self, config: TransformerMTConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.activation_dropout = nn.Dropout(config.activation_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return linear(self.fc2, self.activation_dropout(F.relu(linear(self.fc1, hidden_states))))


class ResidualLayer(GradientCheckpointingLayer):
    """Residual connections around sub-layers: post-norm LayerNorm(x + Dropout(Sublayer(x))) or pre-norm.

    A `GradientCheckpointingLayer`: after `model.gradient_checkpointing_enable()`, training keeps only each layer's
    input and recomputes its activations in the backward pass (less memory, about a third more compute).
    """

    def __init__(self, config: TransformerMTConfig):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = nn.Dropout(config.dropout)

    # `step=True`: the decoding step (inference only) skips the dropout module (the identity) and calls the norm as a
    # function, the same arithmetic without module calls, a few percent of a step at batch 1.
    def sublayer_input(self, hidden_states: torch.Tensor, norm: nn.LayerNorm, step: bool = False) -> torch.Tensor:
        if not self.pre_norm:
            return hidden_states
        return _layer_norm(norm, hidden_states) if step else norm(hidden_states)

    def add_and_norm(
        self, residual: torch.Tensor, sublayer_output: torch.Tensor, norm: nn.LayerNorm, step: bool = False
    ) -> torch.Tensor:
        hidden_states = residual + (sublayer_output if step else self.dropout(sublayer_output))
        if self.pre_norm:
            return hidden_states
        return _layer_norm(norm, hidden_states) if step else norm(hidden_states)


class EncoderLayer(ResidualLayer):
    """Self-attention, then the feed-forward network, each wrapped in a residual connection and LayerNorm."""

    def __init__(self, config: TransformerMTConfig):
        super().__init__(config)
        self.self_attn = MultiHeadAttention(config)
        self.self_attn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.feed_forward = PositionwiseFeedForward(config)
        self.feed_forward_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attended, _ = self.self_attn(
            self.sublayer_input(hidden_states, self.self_attn_norm), attention_mask=attention_mask, **kwargs
        )
        hidden_states = self.add_and_norm(hidden_states, attended, self.self_attn_norm)
        transformed = self.feed_forward(self.sublayer_input(hidden_states, self.feed_forward_norm))
        return self.add_and_norm(hidden_states, transformed, self.feed_forward_norm)  # (B, S, d_model)


class DecoderLayer(ResidualLayer):
    """Masked self-attention, cross-attention over the encoder output, then the feed-forward network."""

    def __init__(self, config: TransformerMTConfig, layer_idx: int):
        super().__init__(config)
        self.self_attn = MultiHeadAttention(config, layer_idx=layer_idx)
        self.self_attn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.cross_attn = MultiHeadAttention(config, is_cross_attention=True, layer_idx=layer_idx)
        self.cross_attn_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.feed_forward = PositionwiseFeedForward(config)
        self.feed_forward_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        self_attn_mask: torch.Tensor | None = None,
        cross_attn_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attended, _ = self.self_attn(
            self.sublayer_input(hidden_states, self.self_attn_norm),
            attention_mask=self_attn_mask,
            past_key_values=past_key_values,
            **kwargs,
        )
        hidden_states = self.add_and_norm(hidden_states, attended, self.self_attn_norm)
        attended, _ = self.cross_attn(
            self.sublayer_input(hidden_states, self.cross_attn_norm),
            key_value_states=encoder_hidden_states,
            attention_mask=cross_attn_mask,
            past_key_values=past_key_values,
            **kwargs,
        )
        hidden_states = self.add_and_norm(hidden_states, attended, self.cross_attn_norm)
        transformed = self.feed_forward(self.sublayer_input(hidden_states, self.feed_forward_norm))
        return self.add_and_norm(hidden_states, transformed, self.feed_forward_norm)  # (B, T, d_model)

    def step(self, hidden_states: torch.Tensor, state, masks: tuple, attend) -> torch.Tensor:
        """`forward` in inference for incremental decoding, on the plain tensors of `state`: the same operations in
        the same order (bit-identical), called as functions (see `TransformerMTDecoder.step`)."""
        index, self_attention, cross_attention = self.self_attn.layer_idx, self.self_attn, self.cross_attn
        self_attn_mask, cross_attn_mask = masks
        attention_input = self.sublayer_input(hidden_states, self.self_attn_norm, step=True)
        queries = self_attention._split_heads(linear(self_attention.q_proj, attention_input))  # (B, h, T, d_k)
        keys, values = state.append(
            index,
            self_attention._split_heads(linear(self_attention.k_proj, attention_input)),
            self_attention._split_heads(linear(self_attention.v_proj, attention_input)),
        )  # (B, h, past + T, d_k)
        attended = linear(self_attention.out_proj, attend(self_attention, queries, keys, values, self_attn_mask))
        hidden_states = self.add_and_norm(hidden_states, attended, self.self_attn_norm, step=True)
        attention_input = self.sublayer_input(hidden_states, self.cross_attn_norm, step=True)
        queries = cross_attention._split_heads(linear(cross_attention.q_proj, attention_input))
        context = attend(cross_attention, queries, state.cross_keys[index], state.cross_values[index], cross_attn_mask)
        attended = linear(cross_attention.out_proj, context)
        hidden_states = self.add_and_norm(hidden_states, attended, self.cross_attn_norm, step=True)
        attention_input = self.sublayer_input(hidden_states, self.feed_forward_norm, step=True)
        transformed = linear(self.feed_forward.fc2, F.relu(linear(self.feed_forward.fc1, attention_input)))
        return self.add_and_norm(hidden_states, transformed, self.feed_forward_norm, step=True)  # (B, T, d_model)


# The decoding step calls the norms' parameters through this function (and every linear layer through
# `linear_kernel.linear`): the modules' own calls cost about as much as a small matrix product at batch 1. A module
# replaced by another kind is called as it is.
def _layer_norm(module: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    if type(module) is nn.LayerNorm:
        return F.layer_norm(inputs, module.normalized_shape, module.weight, module.bias, module.eps)
    return module(inputs)


def step_attention(implementation: str | None):
    """The attention product of a decoding step, (module, queries, keys, values, mask) -> context (B, T, d_model):
    `MultiHeadAttention.attend` without the projection, the function chosen once per step."""

    def sdpa(module, queries, keys, values, mask):
        # What transformers' SDPA function computes for our modules (is_causal False: every mask is explicit).
        context = F.scaled_dot_product_attention(queries, keys, values, attn_mask=mask, scale=module.scaling)
        return context.transpose(1, 2).flatten(2)  # (B, h, T, d_k) -> (B, T, h * d_k)

    function = attention_function(implementation)

    def other(module, queries, keys, values, mask):
        context, _ = function(module, queries, keys, values, mask, dropout=0.0, scaling=module.scaling)
        return context.flatten(2)  # (B, T, h, d_k) -> (B, T, h * d_k)

    # transformers' own SDPA function, unless someone registered another under its name.
    return sdpa if implementation == "sdpa" and function is sdpa_attention_forward else other


class TransformerMTPreTrainedModel(PreTrainedModel):
    """Weight init and loading/saving shared by the encoder-decoder classes."""

    config_class = TransformerMTConfig
    config: TransformerMTConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["EncoderLayer", "DecoderLayer"]
    supports_gradient_checkpointing = True
    # Attention runs through transformers' attention functions: SDPA by default, eager on request (and whenever
    # attention weights are asked for). Flash and flex attention need masks in their own formats: not offered.
    _supports_sdpa = True

    @torch.no_grad()
    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            init.normal_(module.weight, mean=0.0, std=self.config.init_std)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            # std d_model^-0.5: the sqrt(d_model) scaling then gives unit-variance inputs (and a sane tied output).
            init.normal_(module.weight, mean=0.0, std=self.config.d_model**-0.5)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, SinusoidalPositionalEncoding):
            # from_pretrained builds on the meta device and never loads this buffer: rebuild it every time.
            init.copy_(module.table, sinusoidal_table(module.num_positions, module.d_model))


def embed(
    module: "TransformerMTEncoder | TransformerMTDecoder",
    input_ids: torch.LongTensor | None,
    inputs_embeds: torch.Tensor | None,
    offset: int = 0,
) -> torch.Tensor:
    """Token embeddings (looked up, or given as `inputs_embeds`) times sqrt(d_model), plus positions (section 3.4)."""
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("Pass exactly one of input_ids and inputs_embeds (decoder_input_ids / decoder_inputs_embeds).")
    if inputs_embeds is None:
        inputs_embeds = module.embed_tokens(input_ids)  # (B, T, d_model)
    positions = module.embed_positions(inputs_embeds.shape[1], offset=offset)  # (T, d_model)
    return module.dropout(inputs_embeds * module.embed_scale + positions)  # (B, T, d_model)


class TransformerMTEncoder(TransformerMTPreTrainedModel):
    """N encoder layers over scaled token embeddings plus positions.

    Its own embedding module, whose weight the model ties to the shared matrix (`_tied_weights_keys`): tied by
    parameter, as transformers' Marian and BART tie theirs, so loading sees each alias as a key of its own.
    """

    _can_record_outputs = {"hidden_states": EncoderLayer, "attentions": MultiHeadAttention}

    def __init__(self, config: TransformerMTConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model)
        self.embed_positions = SinusoidalPositionalEncoding(config)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.encoder_layers))
        self.final_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_placement == "pre" else None
        )
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        """`output_hidden_states` / `output_attentions` (arguments, else the config's) are recorded by hooks on the
        layers and attentions (`_can_record_outputs`); `return_dict=False` gives a tuple."""
        hidden_states = embed(self, input_ids, inputs_embeds)  # (B, S, d_model)
        mask = padding_mask(attention_mask)  # (B, 1, 1, S)
        for layer in self.layers:
            hidden_states = layer(hidden_states, attention_mask=mask, **kwargs)
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class TransformerMTDecoder(TransformerMTPreTrainedModel):
    """N decoder layers: causal self-attention over the target so far, cross-attention over the encoder output."""

    _can_record_outputs = {
        "hidden_states": DecoderLayer,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="cross_attn"),
    }

    def __init__(self, config: TransformerMTConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model)
        self.embed_positions = SinusoidalPositionalEncoding(config)
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(DecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers))
        self.final_norm = (
            nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.norm_placement == "pre" else None
        )
        self.post_init()

    def get_input_embeddings(self):
        return self.embed_tokens

    def set_input_embeddings(self, value):
        self.embed_tokens = value

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Reads the target so far (all of it, or the tokens after those in `past_key_values`, which it extends)."""
        kwargs.pop("use_cache", None)  # the caller decides by passing a cache or not
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        hidden_states = embed(self, input_ids, inputs_embeds, offset=past_length)  # (B, T, d_model)

        query_length = hidden_states.shape[1]
        key_length = past_length + query_length
        # One new token may see everything cached: no causal mask needed (and SDPA runs unmasked).
        future = causal_mask(query_length, key_length, hidden_states.device) if query_length > 1 else None  # (T, S)
        self_attn_mask = combine_masks(future, padding_mask(attention_mask))  # (B, 1, T, S)
        cross_attn_mask = padding_mask(encoder_attention_mask)  # (B, 1, 1, S_src)
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                encoder_hidden_states,  # positional: gradient checkpointing passes it on
                self_attn_mask=self_attn_mask,
                cross_attn_mask=cross_attn_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, past_key_values=past_key_values
        )

    def step(self, input_ids: torch.LongTensor, state) -> torch.Tensor:
        """The hidden states of `input_ids` (the prompt, then one token per row) after the tokens `state` holds.

        `forward`'s arithmetic, call for call, for the one case beam search needs (`beam_search.DecodingState`):
        inference, nothing recorded, keys and values kept as plain tensors in `state`, which this extends, the
        layers' parameters used through functions. At batch 1 the machinery around that arithmetic in the module
        path (the cache object, output recording, keyword plumbing, module calls) is about a quarter of a step. No
        hooks run: the search calls the decoder module when any are registered.
        """
        hidden_states = embed(self, input_ids, None, offset=state.length)  # (B, T, d_model)
        query_length = hidden_states.shape[1]
        key_length = state.length + query_length
        future = causal_mask(query_length, key_length, hidden_states.device) if query_length > 1 else None
        masks = (future, padding_mask(state.source_mask))  # (T, S) or None; (B, 1, 1, S_src)
        attend = step_attention(self.config._attn_implementation)
        for layer in self.layers:
            hidden_states = layer.step(hidden_states, state, masks, attend)
        state.length = key_length
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        return hidden_states  # (B, T, d_model)


class TransformerMTModel(TransformerMTPreTrainedModel):
    """The bare encoder-decoder, with one embedding matrix shared by source and target (joint BPE vocabulary)."""

    # The encoder's and the decoder's embeddings are the shared matrix (target -> source): stored once, as
    # `shared.weight`, the layout of every folder saved before and since.
    _tied_weights_keys = {
        "encoder.embed_tokens.weight": "shared.weight",
        "decoder.embed_tokens.weight": "shared.weight",
    }

    def __init__(self, config: TransformerMTConfig):
        super().__init__(config)
        self.shared = nn.Embedding(config.vocab_size, config.d_model, padding_idx=config.pad_token_id)
        self.encoder = TransformerMTEncoder(config)
        self.decoder = TransformerMTDecoder(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.shared

    def set_input_embeddings(self, value):
        self.shared = value
        self.encoder.embed_tokens = value
        self.decoder.embed_tokens = value

    def get_encoder(self, modality=None):
        return self.encoder

    def get_decoder(self, modality=None):
        return self.decoder

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        """`output_attentions`, `output_hidden_states` and `return_dict` fall back to the config's when not given."""
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(), DynamicCache())
        if not use_cache:
            past_key_values = None

        if encoder_outputs is None:
            if input_ids is None and inputs_embeds is None:
                raise ValueError("Pass input_ids (the source), inputs_embeds or precomputed encoder_outputs.")
            encoder_outputs = self.encoder(
                input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, return_dict=True, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError("Pass decoder_input_ids, or labels to the model with a language-modeling head.")

        decoder_outputs = self.decoder(
            decoder_input_ids,
            encoder_outputs.last_hidden_state,
            attention_mask=decoder_attention_mask,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            past_key_values=decoder_outputs.past_key_values,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
        )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder reads the target shifted one position right, starting with the start token."""
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)  # -100 marks ignored label positions


def label_smoothed_cross_entropy(
    logits: torch.Tensor, labels: torch.Tensor, epsilon: float, num_items_in_batch: int | torch.Tensor | None = None
) -> torch.Tensor:
    """Cross-entropy with label smoothing epsilon (section 5.4), ignoring label positions set to -100.

    The training loss (`config.label_smoothing`); the model's own `loss` is the plain cross-entropy (epsilon 0), so
    that evaluation losses compare across models. `num_items_in_batch` (the Trainer's token count over all
    accumulated micro-batches) makes it a true per-token mean.
    """
    # Only scored positions reach the float32 log-softmax: target padding is a third of a batch or more, and
    # upcasting and normalising its logits over the whole vocabulary cost about 15% of a training step.
    scored = labels != -100  # (B, T)
    loss = F.cross_entropy(
        logits[scored].float(),  # (N, vocab) float32: bf16 log-softmax over the vocabulary is too coarse
        labels[scored],
        label_smoothing=epsilon,
        reduction="sum" if num_items_in_batch is not None else "mean",
    )
    if num_items_in_batch is not None:
        loss = loss / num_items_in_batch
    return loss


def set_translation_defaults(generation_config, config: TransformerMTConfig) -> None:
    """The paper's decoding (beam 4, length penalty 0.6), each sentence bounded by its source length.

    What a trained model ships in its `generation_config.json` (train.py and average_checkpoints.py set it): a model
    built from a bare config decodes as any transformers model does (greedy, transformers' defaults).
    `max_new_tokens_ratio` and `max_new_tokens_offset` bound every sentence of a batch on its own: at most
    `ratio * (source tokens) + offset` new tokens, `</s>` included (see `length_bound.py`); `max_new_tokens` caps them
    all, as it caps any transformers model (it ends decoding, it forces no `</s>`).
    """
    # A config derived from the model config drops unknown fields (the bound's) when it is loaded back: this one is
    # the model's own generation config.
    generation_config._from_model_config = False
    generation_config.num_beams = 4
    generation_config.length_penalty = 0.6
    generation_config.early_stopping = True
    # The cap is max_new_tokens, not max_length: a default max_length clashes (with a warning) with every
    # caller's max_new_tokens. The decoder start token takes position 0: start + new tokens fill the table.
    generation_config.max_length = None
    generation_config.max_new_tokens = config.max_position_embeddings - 1
    generation_config.max_new_tokens_ratio = DEFAULT_RATIO
    generation_config.max_new_tokens_offset = DEFAULT_OFFSET
    generation_config.decoder_start_token_id = config.decoder_start_token_id
    generation_config.bos_token_id = config.bos_token_id
    generation_config.eos_token_id = config.eos_token_id
    generation_config.pad_token_id = config.pad_token_id


class TransformerMTForConditionalGeneration(TransformerMTPreTrainedModel, GenerationMixin):
    """The Transformer with its pre-softmax projection tied to the shared embedding; `generate()` translates."""

    # Beam search lets each finished sentence leave the batch (same ids, `beam_search.py`); False: transformers' own.
    drop_finished_sentences = True

    def __init__(self, config: TransformerMTConfig):
        super().__init__(config)
        self.model = TransformerMTModel(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        # Every alias of the one embedding matrix, target -> source, so saving and loading keep a single tensor.
        self._tied_weights_keys = {
            "model.encoder.embed_tokens.weight": "model.shared.weight",
            "model.decoder.embed_tokens.weight": "model.shared.weight",
        }
        if config.tie_word_embeddings:
            self._tied_weights_keys["lm_head.weight"] = "model.shared.weight"
        self.post_init()

    def get_input_embeddings(self):
        return self.model.shared

    def set_input_embeddings(self, value):
        self.model.set_input_embeddings(value)

    def get_output_embeddings(self):
        return self.lm_head

    def set_output_embeddings(self, new_embeddings):
        self.lm_head = new_embeddings

    def get_encoder(self, modality=None):
        return self.model.encoder

    def get_decoder(self, modality=None):
        return self.model.decoder

    def generate(self, inputs=None, generation_config=None, logits_processor=None, **kwargs):
        """`GenerationMixin.generate` with the per-sentence length bound of the generation config.

        `max_new_tokens_ratio` / `max_new_tokens_offset` may also be passed here; a ratio of None turns the bound off
        (a generation config without them, as a bare config's, has none). The bound forces `</s>` when a sentence
        reaches its own limit; `max_new_tokens` and `max_length` only end decoding, as in any transformers model.
        """
        config = generation_config if generation_config is not None else self.generation_config
        ratio, offset = generate_bound(config, kwargs)
        # A caller's max_length (e.g. Seq2SeqTrainer's generation_max_length) replaces the default max_new_tokens
        # instead of being overridden by it.
        if kwargs.get("max_length") is not None and "max_new_tokens" not in kwargs:
            kwargs["max_new_tokens"] = None
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        if ratio is not None and input_ids is not None:
            if kwargs.get("max_new_tokens") is not None:
                cap = kwargs["max_new_tokens"]
            elif kwargs.get("max_length") is not None:
                cap = kwargs.pop("max_length") - 1  # the decoder start token takes one position
            else:
                cap = config.max_new_tokens
            lengths = source_lengths(input_ids, kwargs.get("attention_mask"), self.config.pad_token_id)
            limits = new_token_limits(lengths, ratio, offset)
            # The batch ends with its longest allowed sentence, or at the cap: the cap cuts, it forces no </s>.
            longest = int(limits.max())
            kwargs["max_new_tokens"] = longest if cap is None else min(longest, int(cap))
            eos_token_id = kwargs.get("eos_token_id", config.eos_token_id)  # the caller's end token wins
            if isinstance(eos_token_id, (list, tuple)):
                eos_token_id = eos_token_id[0]
            if eos_token_id is not None:
                logits_processor = LogitsProcessorList(
                    [*(logits_processor or []), SourceLengthBound(limits, eos_token_id)]
                )
        return super().generate(
            inputs, generation_config=generation_config, logits_processor=logits_processor, **kwargs
        )

    def _beam_search(
        self, input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=False, **model_kwargs
    ):
        """transformers' beam search, with each sentence leaving the batch once it is done (`beam_search.py`)."""
        if self.drop_finished_sentences and compact_search_covers(
            generation_config, logits_processor, stopping_criteria, synced_gpus, model_kwargs
        ):
            return compact_beam_search(
                self, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs
            )
        return super()._beam_search(
            input_ids, logits_processor, stopping_criteria, generation_config, synced_gpus=synced_gpus, **model_kwargs
        )

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        """With `labels`: `loss` is their cross-entropy (no smoothing: see `label_smoothed_cross_entropy`)."""
        if labels is not None:
            use_cache = False  # training and scoring read the whole target at once
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        outputs = self.model(
            input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        logits = linear(self.lm_head, outputs.last_hidden_state)  # (B, T, vocab_size)
        loss = None
        if labels is not None:
            loss = label_smoothed_cross_entropy(logits, labels, 0.0, num_items_in_batch)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
        )


__all__ = [
    "TransformerMTPreTrainedModel",
    "TransformerMTModel",
    "TransformerMTForConditionalGeneration",
    "label_smoothed_cross_entropy",
]
