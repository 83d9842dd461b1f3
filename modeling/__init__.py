"""The Transformer (Vaswani et al. 2017) as a Hugging Face model; importing this package registers it with the
Auto classes, so `AutoConfig` and `AutoModelForSeq2SeqLM` know the `transformer_mt` model type."""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_transformer_mt import TransformerMTConfig
from .modeling_transformer_mt import (
    TransformerMTForConditionalGeneration,
    TransformerMTModel,
    TransformerMTPreTrainedModel,
)

AutoConfig.register(TransformerMTConfig.model_type, TransformerMTConfig, exist_ok=True)
AutoModel.register(TransformerMTConfig, TransformerMTModel, exist_ok=True)
AutoModelForSeq2SeqLM.register(TransformerMTConfig, TransformerMTForConditionalGeneration, exist_ok=True)

# save_pretrained copies the code into the folder and writes `auto_map`, so the folder loads with trust_remote_code.
TransformerMTConfig.register_for_auto_class()
TransformerMTModel.register_for_auto_class("AutoModel")
TransformerMTForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")

__all__ = [
    "TransformerMTConfig",
    "TransformerMTForConditionalGeneration",
    "TransformerMTModel",
    "TransformerMTPreTrainedModel",
]
