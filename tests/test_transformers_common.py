"""transformers' own common tests (ModelTesterMixin, ConfigTester) against our two model classes and the config.

The harness follows transformers' tests/models/marian/test_modeling_marian.py: a tiny config, source ids >= 3 ending
in `</s>`, and our classes listed in transformers' model-name tables the way a native model is listed (the mixin
reads them to choose labels and heads). The test files come from the source release of the installed transformers
(`transformers_suite.py`); without a cached copy and without the package registry, the module is skipped.
"""

import unittest

import pytest
from transformers.models.auto import modeling_auto
from transformers_suite import upstream_tests

from modeling import TransformerMTConfig, TransformerMTForConditionalGeneration, TransformerMTModel

try:
    modeling_common, configuration_common = upstream_tests()
except Exception as error:  # no cached copy and no registry: say so, do not fail the suite for it
    pytest.skip(
        f"transformers' common tests could not be had ({type(error).__name__}: {error}); they come from the "
        "transformers source release on PyPI, cached after the first download (see tests/transformers_suite.py).",
        allow_module_level=True,
    )

ModelTesterMixin, ids_tensor = modeling_common.ModelTesterMixin, modeling_common.ids_tensor
ConfigTester = configuration_common.ConfigTester

# Listed as a native model is: the base model, and the model with the LM head as a sequence-to-sequence LM.
MODEL_TYPE = TransformerMTConfig.model_type
NAME_TABLES = (
    (modeling_auto.MODEL_MAPPING_NAMES, TransformerMTModel.__name__),
    (modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, TransformerMTForConditionalGeneration.__name__),
)


@pytest.fixture(scope="module", autouse=True)
def listed_in_transformers_name_tables():
    for table, name in NAME_TABLES:
        table[MODEL_TYPE] = name
    yield
    for table, _ in NAME_TABLES:
        table.pop(MODEL_TYPE, None)


class TransformerMTModelTester:
    """Tiny configs and inputs, as transformers' MarianModelTester makes them."""

    def __init__(self, parent, batch_size=13, seq_length=7, is_training=True, vocab_size=99, hidden_size=16,
                 num_hidden_layers=2, num_attention_heads=4, intermediate_size=4, dropout=0.1,
                 max_position_embeddings=20, eos_token_id=2, pad_token_id=1, bos_token_id=0, decoder_start_token_id=3):
        self.parent = parent
        self.batch_size = batch_size
        self.seq_length = seq_length
        self.is_training = is_training
        self.vocab_size = vocab_size
        self.hidden_size = hidden_size
        self.num_hidden_layers = num_hidden_layers
        self.num_attention_heads = num_attention_heads
        self.intermediate_size = intermediate_size
        self.dropout = dropout
        self.max_position_embeddings = max_position_embeddings
        self.eos_token_id = eos_token_id
        self.pad_token_id = pad_token_id
        self.bos_token_id = bos_token_id
        self.decoder_start_token_id = decoder_start_token_id

    def get_config(self) -> TransformerMTConfig:
        return TransformerMTConfig(
            vocab_size=self.vocab_size,
            d_model=self.hidden_size,
            encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers,
            num_attention_heads=self.num_attention_heads,
            d_ff=self.intermediate_size,
            dropout=self.dropout,
            attention_dropout=self.dropout,
            max_position_embeddings=self.max_position_embeddings,
            eos_token_id=self.eos_token_id,
            pad_token_id=self.pad_token_id,
            bos_token_id=self.bos_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
        )

    def prepare_config_and_inputs(self):
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)  # no special tokens
        input_ids[:, -1] = self.eos_token_id
        decoder_input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size)
        config = self.get_config()
        inputs = {
            "input_ids": input_ids,
            "attention_mask": input_ids.ne(config.pad_token_id),
            "decoder_input_ids": decoder_input_ids,
            "decoder_attention_mask": decoder_input_ids.ne(config.pad_token_id),
        }
        return config, inputs

    def prepare_config_and_inputs_for_common(self):
        return self.prepare_config_and_inputs()


class TransformerMTModelTest(ModelTesterMixin, unittest.TestCase):
    all_model_classes = (TransformerMTModel, TransformerMTForConditionalGeneration)
    all_generative_model_classes = (TransformerMTForConditionalGeneration,)
    is_encoder_decoder = True
    # transformers checks _init_weights only for models added since 2023 by default; this one is new (2026).
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        self.model_tester = TransformerMTModelTester(self)
        self.config_tester = ConfigTester(self, config_class=TransformerMTConfig)

    def test_config(self):
        self.config_tester.run_common_tests()

    def test_generation_tester_mixin_inheritance(self):
        self.skipTest(
            "checks that this class also runs GenerationTesterMixin, which is only in transformers' source repository, "
            "not in its release: generate() is covered by tests/test_modeling.py instead"
        )
