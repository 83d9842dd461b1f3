"""Configuration of the encoder–decoder Transformer of Vaswani et al. 2017, "Attention Is All You Need"."""

import transformers
from packaging.version import Version

# Loading the model imports this file first. The code runs on the transformers releases below (the oldest one run,
# tests/test_transformers_releases.py checks it in CI, up to the newest 5.x). Older 5.x releases load it but fail at
# the first forward or give other translations with a static cache; 4.x lacks what it imports. One line instead.
OLDEST_TRANSFORMERS = "5.10.4"
if not Version(OLDEST_TRANSFORMERS) <= Version(transformers.__version__) < Version("6"):
    raise ImportError(
        f"This model's code needs transformers>={OLDEST_TRANSFORMERS},<6, but transformers {transformers.__version__} "
        f"is installed: run `pip install 'transformers>={OLDEST_TRANSFORMERS},<6'`."
    )

from transformers import PreTrainedConfig  # noqa: E402

NORM_PLACEMENTS = ("post", "pre")
# Generous upper bounds, checked before anything is allocated: a typo such as 1e8 positions would otherwise ask for
# a 100 GB sinusoidal table at load time. Far above any model this code is meant for (the paper's big: 1024/4096/6).
SIZE_LIMITS = {
    "vocab_size": 1_000_000,
    "d_model": 16_384,
    "encoder_layers": 256,
    "decoder_layers": 256,
    "num_attention_heads": 1_024,
    "d_ff": 65_536,
    "max_position_embeddings": 65_536,
}


class TransformerMTConfig(PreTrainedConfig):
    r"""
    Every hyperparameter of the architecture. Defaults are the paper's base model (section 3, table 3);
    the vocabulary is a joint source/target BPE, so one embedding matrix serves encoder, decoder and output.

    Args:
        vocab_size (`int`, defaults to 8000):
            Size of the joint English+German BPE vocabulary.
        d_model (`int`, defaults to 512):
            Width of every sub-layer output and of the embeddings.
        encoder_layers (`int`, defaults to 6):
            Number of identical encoder layers (N).
        decoder_layers (`int`, defaults to 6):
            Number of identical decoder layers (N).
        num_attention_heads (`int`, defaults to 8):
            Heads per multi-head attention (h); `d_model` must be divisible by it (d_k = d_model / h).
        d_ff (`int`, defaults to 2048):
            Inner width of the position-wise feed-forward network.
        dropout (`float`, defaults to 0.1):
            Dropout on embeddings + positions and on every sub-layer output before the residual add (P_drop).
        attention_dropout (`float`, defaults to 0.0):
            Dropout on the attention weights.
        activation_dropout (`float`, defaults to 0.0):
            Dropout after the ReLU inside the feed-forward network.
        max_position_embeddings (`int`, defaults to 256):
            Longest sequence (in tokens) the sinusoidal table covers, for source and target alike.
        norm_placement (`str`, defaults to `"post"`):
            `"post"`: LayerNorm(x + Dropout(Sublayer(x))), the paper's choice.
            `"pre"`: x + Dropout(Sublayer(LayerNorm(x))) with a final LayerNorm after each stack, a common and more
            stable variant.
        layer_norm_eps (`float`, defaults to 1e-5):
            Epsilon of every LayerNorm.
        tie_word_embeddings (`bool`, defaults to `True`):
            Share the pre-softmax projection with the (already shared) source/target embedding (section 3.4).
        init_std (`float`, defaults to 0.02):
            Standard deviation of the normal init of linear layers. Embeddings use d_model**-0.5, so that after
            the sqrt(d_model) scaling they have unit variance.
        label_smoothing (`float`, defaults to 0.1):
            Label smoothing of the training loss (epsilon_ls, section 5.4): train.py's loss,
            `label_smoothed_cross_entropy`. The `loss` the model returns with `labels` is the plain cross-entropy, as
            in every transformers model, so that evaluation losses compare across models.
        pad_token_id (`int`, defaults to 0), bos_token_id (`int`, defaults to 1), eos_token_id (`int`, defaults to 2):
            Special token ids; they must match the tokenizer's.
        decoder_start_token_id (`int`, defaults to 1):
            First decoder input (the target shifted right starts with it).
        use_cache (`bool`, defaults to `True`):
            Return and reuse key/value caches during incremental decoding.
        is_encoder_decoder (`bool`, defaults to `True`):
            Always true for this model; read by `generate()`.
    """

    model_type = "transformer_mt"
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_hidden_layers": "decoder_layers",
        "intermediate_size": "d_ff",
    }

    vocab_size: int = 8000
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    num_attention_heads: int = 8
    d_ff: int = 2048
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    max_position_embeddings: int = 256
    norm_placement: str = "post"
    layer_norm_eps: float = 1e-5
    tie_word_embeddings: bool = True
    init_std: float = 0.02
    label_smoothing: float = 0.1
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | None = 2
    decoder_start_token_id: int | None = 1
    use_cache: bool = True
    is_encoder_decoder: bool = True

    def __post_init__(self, **kwargs):
        super().__post_init__(**kwargs)
        self.check()

    def check(self):
        """Raise a `ValueError` naming the first inconsistent hyperparameter."""
        for name, limit in SIZE_LIMITS.items():
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"TransformerMTConfig: {name} must be a positive integer, got {value!r}.")
            if value > limit:
                raise ValueError(
                    f"TransformerMTConfig: {name} must be at most {limit:,}, got {value:,}; a size this large is "
                    "almost certainly a typo in config.json (it would be allocated when the model is built)."
                )
        if self.d_model % self.num_attention_heads:
            raise ValueError(
                f"TransformerMTConfig: d_model ({self.d_model}) must be divisible by num_attention_heads "
                f"({self.num_attention_heads}), since each head gets d_model / h dimensions."
            )
        if self.d_model % 2:
            raise ValueError(f"TransformerMTConfig: d_model ({self.d_model}) must be even for sinusoidal positions.")
        for name in ("dropout", "attention_dropout", "activation_dropout", "label_smoothing"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                raise ValueError(f"TransformerMTConfig: {name} must lie in [0, 1), got {value!r}.")
        if self.norm_placement not in NORM_PLACEMENTS:
            raise ValueError(
                f"TransformerMTConfig: norm_placement must be one of {NORM_PLACEMENTS}, got {self.norm_placement!r}."
            )
        for name in ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is not None and not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"TransformerMTConfig: {name} ({value}) must lie inside the vocabulary [0, {self.vocab_size})."
                )
        if not self.is_encoder_decoder:
            raise ValueError("TransformerMTConfig: is_encoder_decoder must stay True for this encoder–decoder model.")


__all__ = ["TransformerMTConfig"]
