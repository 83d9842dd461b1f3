"""The Transformer of Vaswani et al. 2017, "Attention Is All You Need" (arXiv:1706.03762), as a Hugging Face model.

Reads bottom-up: sinusoidal positions (3.5) -> multi-head attention (3.2) -> position-wise feed-forward (3.3) ->
encoder and decoder layers (3.1) -> pretrained base with weight init -> encoder, decoder -> the encoder-decoder model
and the model with the tied output projection (3.4) that `generate()` drives.

It keeps transformers' model contract (its common tests run in tests/test_transformers_common.py), the way
transformers' own encoder-decoders (Marian, BART) keep it: attention through transformers' attention functions (SDPA
by default, eager for attention weights) with masks from `masking_utils` (so a 4D mask of one's own passes through);
keys and values in transformers' cache classes (`EncoderDecoderCache` over a `DynamicCache` or a `StaticCache`); a
forward that `torch.compile(..., fullgraph=True)` traces whole; hidden states and attention weights recorded by hooks
(`_can_record_outputs`); tuples with `return_dict=False`, `inputs_embeds`, and a plain cross-entropy `loss`. Every
decoding step of every search runs this forward.

This file imports only torch, transformers and its sibling files, so a saved model folder carries it to the Hub and
loads with `trust_remote_code=True`.
"""

import copy
import dataclasses
import inspect
import math

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, LogitsProcessorList, PreTrainedModel
from transformers import initialization as init
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
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
from transformers.utils.deprecation import deprecate_kwarg
from transformers.utils.generic import can_return_tuple

try:
    from transformers.utils.output_capturing import OutputRecorder, capture_outputs
except ImportError:  # transformers 5.0 and 5.1: the same decorator, before it moved and took its name
    from transformers.utils.generic import OutputRecorder
    from transformers.utils.generic import check_model_inputs as capture_outputs

from .beam_search import compact_beam_search, grows_with_the_search, model_cache, row_wise, search_runs_here
from .configuration_transformer_mt import TransformerMTConfig
from .length_bound import DEFAULT_OFFSET, DEFAULT_RATIO, decoding_cap, empty_source_bound, generate_length_settings

# Earlier transformers 5 releases name the cache `past_key_values` (in arguments and outputs); later ones name it
# `cache` and pass it so from generate(). The model takes either (`deprecate_kwarg`) and answers in the output field
# its transformers has.
CACHE_FIELD = "cache" if "cache" in {field.name for field in dataclasses.fields(Seq2SeqLMOutput)} else "past_key_values"


# The keywords of transformers' mask functions changed within 5.x: `input_embeds` became `inputs_embeds` (5.2),
# `cache_position` was required before it was dropped, `past_key_values` became `cache` (5.24), and the SDPA skips
# became arguments (`allow_is_causal_skip`, `allow_is_bidirectional_skip`, 5.15). The masks are passed by the names
# the installed release's signatures have.
CAUSAL_MASK_PARAMETERS = inspect.signature(create_causal_mask).parameters
BIDIRECTIONAL_MASK_PARAMETERS = inspect.signature(create_bidirectional_mask).parameters


def attend_everywhere(batch_idx, head_idx, q_idx, kv_idx):
    """A mask function that hides nothing. And-ed with a mask (releases without the `allow_is_*_skip` arguments), it
    keeps transformers from leaving a mask out, which the eager path (attention weights asked for) needs."""
    return kv_idx >= 0


def _mask_arguments(parameters, hidden_states: torch.Tensor, keep: bool, skip_name: str) -> dict:
    arguments = {"inputs_embeds" if "inputs_embeds" in parameters else "input_embeds": hidden_states}
    if skip_name in parameters:
        arguments[skip_name] = not keep
    elif keep:
        arguments["and_mask_function"] = attend_everywhere
    return arguments


def causal_mask(config, hidden_states, attention_mask, cache: Cache | None, past_length, keep: bool):
    """The decoder's self-attention mask from `create_causal_mask` (None where SDPA may go without), any release."""
    arguments = _mask_arguments(CAUSAL_MASK_PARAMETERS, hidden_states, keep, "allow_is_causal_skip")
    arguments["cache" if "cache" in CAUSAL_MASK_PARAMETERS else "past_key_values"] = cache
    if "cache_position" in CAUSAL_MASK_PARAMETERS:
        arguments["cache_position"] = torch.arange(hidden_states.shape[1], device=hidden_states.device) + past_length
    return create_causal_mask(config=config, attention_mask=attention_mask, **arguments)


def bidirectional_mask(config, hidden_states, attention_mask, keep: bool, encoder_hidden_states=None):
    """A padding mask from `create_bidirectional_mask` (encoder self-attention, or cross-attention), any release."""
    arguments = _mask_arguments(BIDIRECTIONAL_MASK_PARAMETERS, hidden_states, keep, "allow_is_bidirectional_skip")
    if encoder_hidden_states is not None:
        arguments["encoder_hidden_states"] = encoder_hidden_states
    return create_bidirectional_mask(config=config, attention_mask=attention_mask, **arguments)


def _is_compiling() -> bool:
    return torch.compiler.is_compiling()


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

    def forward(self, length: int, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """The encodings of positions offset .. offset + length - 1: (T, d_model). `offset` (the tokens already in a
        cache) is a tensor for a static cache, so that a compiled forward does not depend on its value."""
        if not _is_compiling() and int(offset) + length > self.num_positions:
            raise ValueError(
                f"Sequence of {int(offset) + length} tokens is longer than this model's max_position_embeddings "
                f"({self.num_positions}). Truncate the input (tokenizer(..., truncation=True)) or generate fewer "
                f"tokens (max_new_tokens)."
            )
        if self.table.is_meta and not _is_compiling():
            # from_pretrained of transformers 5.3 leaves this buffer on the meta device (`_init_weights` is not run on
            # it): build it here, once.
            self.table = sinusoidal_table(self.num_positions, self.d_model)
        if isinstance(offset, int):
            return self.table[offset : offset + length]
        return self.table[torch.arange(length, device=self.table.device) + offset]


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
    if hasattr(ALL_ATTENTION_FUNCTIONS, "get_interface"):
        return ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
    return ALL_ATTENTION_FUNCTIONS.get(implementation, eager_attention_forward)  # before 5.2: a plain mapping


def wants_attentions(config: TransformerMTConfig, kwargs: dict) -> bool:
    """Whether this call records attention weights (the argument, else the config's)."""
    output_attentions = kwargs.get("output_attentions")
    return bool(config.output_attentions if output_attentions is None else output_attentions)


class MultiHeadAttention(nn.Module):
    """softmax(QK^T / sqrt(d_k)) V over h heads, concatenated and projected by W_O; self- or cross-attention.

    The product itself runs in the configured attention implementation (`config._attn_implementation`): SDPA by
    default, or the written-out `eager_attention_forward`. Attention weights exist only in the eager path, so a call
    that asks for them (`output_attentions`) runs eager whatever is configured (its masks are then never left out).
    """

    def __init__(
        self,
        config: TransformerMTConfig,
        is_cross_attention: bool = False,
        layer_idx: int | None = None,
        is_causal: bool = False,
    ):
        super().__init__()
        self.config = config
        self.num_heads = config.num_attention_heads
        self.head_dim = config.d_model // config.num_attention_heads  # d_k = d_v = d_model / h
        self.scaling = self.head_dim**-0.5  # 1 / sqrt(d_k)
        self.is_cross_attention = is_cross_attention
        # Read by SDPA when the mask was left out (no padding): the decoder's self-attention is causal.
        self.is_causal = is_causal
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
        self, hidden_states: torch.Tensor, key_value_states: torch.Tensor | None, cache: Cache | None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_cross_attention:
            keys = self._split_heads(self.k_proj(hidden_states))
            values = self._split_heads(self.v_proj(hidden_states))
            if cache is not None:
                keys, values = cache.self_attention_cache.update(keys, values, self.layer_idx)  # (B, h, past+T, d_k)
            return keys, values
        # Cross-attention keys/values depend only on the encoder output: computed once per source, then reused.
        if cache is not None and cache.is_updated.get(self.layer_idx):
            layer = cache.cross_attention_cache.layers[self.layer_idx]
            return layer.keys, layer.values
        keys = self._split_heads(self.k_proj(key_value_states))  # (B, h, S, d_k)
        values = self._split_heads(self.v_proj(key_value_states))
        if cache is not None:
            keys, values = cache.cross_attention_cache.update(keys, values, self.layer_idx)
            cache.is_updated[self.layer_idx] = True
        return keys, values

    def forward(
        self,
        hidden_states: torch.Tensor,
        key_value_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        queries = self._split_heads(self.q_proj(hidden_states))  # (B, h, T, d_k)
        keys, values = self._keys_and_values(hidden_states, key_value_states, cache)  # (B, h, S, d_k)
        output_attentions = wants_attentions(self.config, kwargs)
        kwargs.pop("output_attentions", None)
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
        return self.out_proj(context.reshape(batch, length, -1)), weights  # (B, T, h * d_k) -> (B, T, d_model)


class PositionwiseFeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position separately."""

    def __init__(self, config: TransformerMTConfig):
        super().__init__()
        self.fc1 = nn.Linear(config.d_model, config.d_ff)
        self.fc2 = nn.Linear(config.d_ff, config.d_model)
        self.activation_dropout = nn.Dropout(config.activation_dropout)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.activation_dropout(F.relu(self.fc1(hidden_states))))


class ResidualLayer(GradientCheckpointingLayer):
    """Residual connections around sub-layers: post-norm LayerNorm(x + Dropout(Sublayer(x))) or pre-norm.

    A `GradientCheckpointingLayer`: after `model.gradient_checkpointing_enable()`, training keeps only each layer's
    input and recomputes its activations in the backward pass (less memory, about a third more compute).
    """

    def __init__(self, config: TransformerMTConfig):
        super().__init__()
        self.pre_norm = config.norm_placement == "pre"
        self.dropout = nn.Dropout(config.dropout)

    def sublayer_input(self, hidden_states: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        return norm(hidden_states) if self.pre_norm else hidden_states

    def add_and_norm(self, residual: torch.Tensor, sublayer_output: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
        hidden_states = residual + self.dropout(sublayer_output)
        return hidden_states if self.pre_norm else norm(hidden_states)


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
        self.self_attn = MultiHeadAttention(config, layer_idx=layer_idx, is_causal=True)
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
        cache: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        attended, _ = self.self_attn(
            self.sublayer_input(hidden_states, self.self_attn_norm),
            attention_mask=self_attn_mask,
            cache=cache,
            **kwargs,
        )
        hidden_states = self.add_and_norm(hidden_states, attended, self.self_attn_norm)
        attended, _ = self.cross_attn(
            self.sublayer_input(hidden_states, self.cross_attn_norm),
            key_value_states=encoder_hidden_states,
            attention_mask=cross_attn_mask,
            cache=cache,
            **kwargs,
        )
        hidden_states = self.add_and_norm(hidden_states, attended, self.cross_attn_norm)
        transformed = self.feed_forward(self.sublayer_input(hidden_states, self.feed_forward_norm))
        return self.add_and_norm(hidden_states, transformed, self.feed_forward_norm)  # (B, T, d_model)


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
    # No data-dependent branch in the forward: it compiles whole, and generate() may use a static cache with it.
    _can_compile_fullgraph = True

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
    offset: int | torch.Tensor = 0,
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
        layers and attentions (`_can_record_outputs`); `return_dict=False` gives a tuple. `attention_mask`: (B, S)
        with 1 for real tokens, or a 4D mask of one's own; padded `input_ids` without it warn (once), as transformers'
        own models do: the padding is then attended to, and the translation changes."""
        if input_ids is not None and not _is_compiling():
            self.warn_if_padding_and_no_attention_mask(input_ids, attention_mask)
        hidden_states = embed(self, input_ids, inputs_embeds)  # (B, S, d_model)
        keep_mask = wants_attentions(self.config, kwargs)  # eager attention: the mask may not be left out
        mask = bidirectional_mask(self.config, hidden_states, attention_mask, keep=keep_mask)
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
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        """Reads the target so far (all of it, or the tokens after those in `cache`, which it extends).

        `attention_mask` is over the cached and new target tokens, (B, past + T), or a 4D mask of one's own;
        `past_key_values`, the cache's name in earlier transformers 5 releases, is taken for `cache`.
        """
        kwargs.pop("use_cache", None)  # the caller decides by passing a cache or not
        past_length = cache.get_seq_length() if cache is not None else 0  # a tensor for a static cache
        hidden_states = embed(self, input_ids, inputs_embeds, offset=past_length)  # (B, T, d_model)
        batch, query_length = hidden_states.shape[:2]
        if attention_mask is None and not _is_compiling():
            attention_mask = torch.ones(batch, past_length + query_length, device=hidden_states.device)
        keep_masks = wants_attentions(self.config, kwargs)  # eager attention: no mask may be left out
        self_attention_cache = cache.self_attention_cache if cache is not None else None
        self_attn_mask = causal_mask(
            self.config, hidden_states, attention_mask, self_attention_cache, past_length, keep=keep_masks
        )
        cross_attn_mask = bidirectional_mask(
            self.config, hidden_states, encoder_attention_mask, keep_masks, encoder_hidden_states=encoder_hidden_states
        )
        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                encoder_hidden_states,  # positional: gradient checkpointing passes it on
                self_attn_mask=self_attn_mask,
                cross_attn_mask=cross_attn_mask,
                cache=cache,
                **kwargs,
            )
        if self.final_norm is not None:
            hidden_states = self.final_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(last_hidden_state=hidden_states, **{CACHE_FIELD: cache})


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
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        """`output_attentions`, `output_hidden_states` and `return_dict` fall back to the config's when not given.
        `past_key_values`, the cache's name in earlier transformers 5 releases, is taken for `cache`."""
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and cache is None:
            cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
        if not use_cache:
            cache = None

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
            cache=cache,
            inputs_embeds=decoder_inputs_embeds,
            return_dict=True,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            **{CACHE_FIELD: cache},
        )


class OutputProjection(nn.Linear):
    """The pre-softmax linear transformation (3.4): d_model -> vocabulary logits, its weight tied to the embedding.

    For a few rows (a decoding step at batch 1: one row per beam) it multiplies as W · hᵀ instead of h · Wᵀ, the same
    product: for a handful of rows the BLAS (MKL here) reads the (vocab × d_model) weight once per row in the second
    form and once in all in the first, so the largest product of a step takes about a third of the time, and
    translating one sentence at a time 1.2-1.35x less (RESULTS.md, round 5; the same ids on test_2016_flickr).
    With more rows (batches, training, scoring) it is an ordinary `nn.Linear`.
    """

    FEW_ROWS = 16

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        rows = hidden_states.reshape(-1, hidden_states.shape[-1])  # (N, d_model)
        if rows.shape[0] > self.FEW_ROWS:
            return super().forward(hidden_states)
        logits = torch.mm(self.weight, rows.t()).t()  # (N, vocab)
        if self.bias is not None:
            logits = logits + self.bias
        return logits.reshape(*hidden_states.shape[:-1], -1)


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
    `ratio * (source tokens) + offset` new tokens, `</s>` included (see `length_bound.py`). They are defaults: a
    caller's `max_new_tokens`, `max_length`, `min_new_tokens` or `min_length` replaces the bound.
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
    generation_config.max_new_tokens = decoding_cap(config.max_position_embeddings)
    generation_config.max_new_tokens_ratio = DEFAULT_RATIO
    generation_config.max_new_tokens_offset = DEFAULT_OFFSET
    generation_config.decoder_start_token_id = config.decoder_start_token_id
    generation_config.bos_token_id = config.bos_token_id
    generation_config.eos_token_id = config.eos_token_id
    generation_config.pad_token_id = config.pad_token_id


def decode_with_compact_beam_search(
    model, input_ids, logits_processor, stopping_criteria, generation_config, **model_kwargs
) -> torch.LongTensor:
    """The decoding loop generate() runs for our beam search (`custom_generate`): `compact_beam_search`, in which a
    finished sentence leaves the batch when every processor and criterion treats each row on its own."""
    for name in ("synced_gpus", "streamer"):  # what some releases pass every decoding loop; unused here
        model_kwargs.pop(name, None)
    encoder_outputs = model_kwargs.get("encoder_outputs")
    if encoder_outputs is not None and not isinstance(encoder_outputs, BaseModelOutput):
        model_kwargs["encoder_outputs"] = BaseModelOutput(*encoder_outputs)
    if not grows_with_the_search(model_cache(model_kwargs)) or generation_config.num_return_sequences not in (None, 1):
        raise ValueError(
            "This model's beam search needs transformers' dynamic cache and returns one sequence per sentence; for "
            "anything else set `model.drop_finished_sentences = False` to decode with transformers' own beam search."
        )
    drop = row_wise(logits_processor, stopping_criteria)
    return compact_beam_search(
        model, input_ids, logits_processor, stopping_criteria, generation_config, drop_finished=drop, **model_kwargs
    )


class TransformerMTForConditionalGeneration(TransformerMTPreTrainedModel, GenerationMixin):
    """The Transformer with its pre-softmax projection tied to the shared embedding; `generate()` translates."""

    # Beam search lets each finished sentence leave the batch (same ids, `beam_search.py`); False: transformers' own.
    drop_finished_sentences = True

    def __init__(self, config: TransformerMTConfig):
        super().__init__(config)
        self.model = TransformerMTModel(config)
        self.lm_head = OutputProjection(config.d_model, config.vocab_size, bias=False)
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

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`; a folder saved with its code (the class registered for the Auto classes)
        also lists the bare encoder-decoder in `auto_map`, so that `AutoModel` loads it with `trust_remote_code`."""
        if self._auto_class is not None:
            auto_map = dict(getattr(self.config, "auto_map", None) or {})
            auto_map.setdefault("AutoModel", f"{type(self).__module__.split('.')[-1]}.{TransformerMTModel.__name__}")
            self.config.auto_map = auto_map
        return super().save_pretrained(save_directory, *args, **kwargs)

    def generate(self, inputs=None, generation_config=None, logits_processor=None, **kwargs):
        """`GenerationMixin.generate` with the per-sentence length bound of the generation config as its default, and
        beam search run by `compact_beam_search` (finished sentences leave the batch; transformers' ids).

        `max_new_tokens_ratio` / `max_new_tokens_offset` may also be passed here; a ratio of None turns the bound off.
        A length the caller passes (`max_new_tokens`, `max_length`, `min_new_tokens`, `min_length`) replaces the
        bound unless the call also passes a ratio, and a `SourceLengthBound` the caller passes among its logits
        processors replaces it in any case (`length_bound.generate_length_settings`).

        A sentence with nothing to translate (an empty string: only `</s>`) gets an empty translation
        (`length_bound.empty_source_bound`). `num_beams` below 1 is refused with a `ValueError`.
        """
        config = generation_config if generation_config is not None else self.generation_config
        num_beams = kwargs.get("num_beams", config.num_beams)
        if num_beams is not None and num_beams < 1:
            raise ValueError(
                f"num_beams must be at least 1 (1: greedy search or sampling, 2 or more: beam search); got {num_beams}."
            )
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        # Before the bound settles the lengths: a caller's minimum length is read from the call as given.
        ends_empty = empty_source_bound(config, kwargs, input_ids, self.config.pad_token_id)
        bound = generate_length_settings(config, kwargs, input_ids, self.config.pad_token_id, logits_processor)
        for processor in (bound, ends_empty):
            if processor is not None:
                logits_processor = LogitsProcessorList([*(logits_processor or []), processor])
        if self.drop_finished_sentences and kwargs.get("custom_generate") is None:
            call_config = copy.deepcopy(config)
            call_config.update(**kwargs)  # what the call asks for, as generate() will see it
            if search_runs_here(call_config, kwargs):
                # generate()'s public hook for a decoding loop of one's own: it prepares everything, then calls it.
                kwargs["custom_generate"] = decode_with_compact_beam_search
        return super().generate(
            inputs, generation_config=generation_config, logits_processor=logits_processor, **kwargs
        )

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    @deprecate_kwarg("past_key_values", "5.40.0", new_name="cache")
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: BaseModelOutput | tuple | None = None,
        cache: EncoderDecoderCache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        num_items_in_batch: int | torch.Tensor | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        """With `labels`: `loss` is their cross-entropy (no smoothing: see `label_smoothed_cross_entropy`).
        `past_key_values`, the cache's name in earlier transformers 5 releases, is taken for `cache`."""
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
            cache=cache,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            return_dict=True,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, T, vocab_size)
        loss = None
        if labels is not None:
            loss = label_smoothed_cross_entropy(logits, labels, 0.0, num_items_in_batch)
        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
        )


__all__ = [
    "TransformerMTPreTrainedModel",
    "TransformerMTModel",
    "TransformerMTForConditionalGeneration",
    "label_smoothed_cross_entropy",
]
