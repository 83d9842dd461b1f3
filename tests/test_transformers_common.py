"""transformers' own common tests (ModelTesterMixin, ConfigTester) against our two model classes and the config.

The harness follows transformers' tests/models/marian/test_modeling_marian.py: a tiny config, source ids >= 3 ending
in `</s>`, and our classes listed in transformers' model-name tables the way a native model is listed (the mixin
reads them to choose labels and heads). The test files come from the source release of the installed transformers
(`transformers_suite.py`); without a cached copy and without the package registry, the module is skipped.
"""

import unittest

import pytest
import torch
from transformers import CompileConfig
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

    def __init__(
        self,
        parent,
        batch_size=13,
        seq_length=7,
        is_training=True,
        vocab_size=99,
        hidden_size=16,
        num_hidden_layers=2,
        num_attention_heads=4,
        intermediate_size=4,
        dropout=0.1,
        max_position_embeddings=20,
        eos_token_id=2,
        pad_token_id=1,
        bos_token_id=0,
        decoder_start_token_id=3,
    ):
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
            "not in its release: the generate() contract is covered below (static cache, compiled forward, 4D masks) "
            "and by tests/test_modeling.py"
        )

    # What GenerationTesterMixin checks of a model whose forward compiles (`_can_compile_fullgraph`), written here
    # against the same tiny configs. The forward is compiled as generate() compiles it (`compile_config`), with the
    # eager backend: dynamo traces the whole graph (fullgraph: no break allowed) and guards it (recompilations), but
    # generates no kernels, which would take minutes on a CPU and is not what these tests check.

    def _generative_model(self):
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        config.dropout = config.attention_dropout = 0.0
        torch.manual_seed(0)
        model = TransformerMTForConditionalGeneration(config).eval()
        return model, {"input_ids": inputs["input_ids"][:3], "attention_mask": inputs["attention_mask"][:3]}

    @staticmethod
    def _compiled():
        config = CompileConfig(fullgraph=True, backend="eager", mode=None)
        config._compile_all_devices = True  # generate() compiles on accelerators only, unless told (a class field)
        return config

    def test_generate_compile_model_forward_fullgraph(self):
        model, inputs = self._generative_model()
        self.assertTrue(model._can_compile_fullgraph)
        torch._dynamo.reset()
        for num_beams in (1, 2):
            with self.subTest(num_beams=num_beams), torch.no_grad():
                settings = dict(num_beams=num_beams, max_new_tokens=5, min_new_tokens=5, cache_implementation="static")
                eager = model.generate(**inputs, **settings)
                compiled = model.generate(**inputs, **settings, compile_config=self._compiled())
                self.assertTrue(torch.equal(eager, compiled))
        self.assertIsNotNone(getattr(model, "_compiled_call", None))  # generate() did run the compiled forward

    def test_generate_compilation_all_outputs(self):
        model, inputs = self._generative_model()
        torch._dynamo.reset()
        settings = dict(
            num_beams=1,
            max_new_tokens=4,
            min_new_tokens=4,
            cache_implementation="static",
            return_dict_in_generate=True,
            output_scores=True,
            output_logits=True,
            output_attentions=True,
            output_hidden_states=True,
        )
        with torch.no_grad():
            eager = model.generate(**inputs, **settings)
            compiled = model.generate(**inputs, **settings, compile_config=self._compiled())
        self.assertTrue(torch.equal(eager.sequences, compiled.sequences))
        self.assertEqual(len(compiled.scores), 4)
        self.assertEqual(len(compiled.decoder_attentions), 4)
        self.assertEqual(len(compiled.cross_attentions), 4)
        self.assertEqual(len(compiled.decoder_hidden_states), 4)
        for step in range(4):
            self.assertTrue(torch.allclose(eager.logits[step], compiled.logits[step], atol=1e-5))
            for eager_layer, compiled_layer in zip(
                eager.cross_attentions[step], compiled.cross_attentions[step], strict=True
            ):
                self.assertTrue(torch.allclose(eager_layer, compiled_layer, atol=1e-6))

    def test_static_cache_no_recompile_with_smaller_length(self):
        model, inputs = self._generative_model()
        torch._dynamo.reset()
        settings = dict(num_beams=1, cache_implementation="static", compile_config=self._compiled())
        with torch.no_grad():
            model.generate(**inputs, max_new_tokens=8, min_new_tokens=8, **settings)  # traced: prompt and next steps
            other_sources = inputs["input_ids"].flip(0)
            with torch._dynamo.config.patch(error_on_recompile=True):
                shorter = model.generate(
                    input_ids=other_sources,
                    attention_mask=inputs["attention_mask"],
                    max_new_tokens=4,
                    min_new_tokens=4,
                    **settings,
                )
        self.assertEqual(shorter.shape[1], 1 + 4)

    def test_custom_4d_attention_mask(self):
        """A 4D mask of one's own (float, additive) passes through to attention: the padding and causal masks
        written out as 4D give the outputs of the 2D masks they stand for."""
        model, inputs = self._generative_model()
        input_ids = inputs["input_ids"].clone()
        input_ids[0, -3:] = model.config.pad_token_id  # one padded source
        source_mask = input_ids.ne(model.config.pad_token_id).long()
        decoder_input_ids = input_ids[:, :5].clone().clamp(min=3)
        decoder_mask = torch.ones_like(decoder_input_ids)
        decoder_mask[1, -2:] = 0  # one padded target
        minimum = torch.finfo(torch.float32).min
        length, target_length = input_ids.shape[1], decoder_input_ids.shape[1]
        source_4d = (1.0 - source_mask[:, None, None, :].float()).expand(-1, 1, length, length) * minimum
        causal = torch.tril(torch.ones(target_length, target_length, dtype=torch.bool))
        allowed = causal[None, None] & decoder_mask[:, None, None, :].bool()
        decoder_4d = (~allowed).float() * minimum
        for implementation in ("sdpa", "eager"):
            with self.subTest(implementation=implementation), torch.no_grad():
                model.set_attn_implementation(implementation)
                encoder = model.get_encoder()
                encoded_2d = encoder(input_ids, attention_mask=source_mask).last_hidden_state
                encoded_4d = encoder(input_ids, attention_mask=source_4d).last_hidden_state
                real = source_mask.bool()
                self.assertTrue(torch.allclose(encoded_2d[real], encoded_4d[real], atol=1e-5))
                common = dict(input_ids=input_ids, attention_mask=source_mask, decoder_input_ids=decoder_input_ids)
                logits_2d = model(**common, decoder_attention_mask=decoder_mask).logits
                logits_4d = model(**common, decoder_attention_mask=decoder_4d).logits
                real = decoder_mask.bool()
                self.assertTrue(torch.allclose(logits_2d[real], logits_4d[real], atol=1e-5))


class DeepShallowModelTester(TransformerMTModelTester):
    """Model round 7's shape scaled down: a deeper encoder than decoder (3 + 1 layers here, 6 + 1 shipped)."""

    encoder_layers, decoder_layers = 3, 1

    def get_config(self) -> TransformerMTConfig:
        config = super().get_config()
        config.encoder_layers, config.decoder_layers = self.encoder_layers, self.decoder_layers
        return config


class DeepShallowModelTest(TransformerMTModelTest):
    """The whole common suite again on a model whose stacks differ in depth. Two of transformers' tests count one
    `num_hidden_layers` for both stacks (every model they were written for has equal stacks); they are replaced by
    the same checks counted per stack."""

    def setUp(self):
        super().setUp()
        self.model_tester = DeepShallowModelTester(self)

    def _outputs(self, model_class):
        """(inputs, outputs with every attention and hidden state) of a new model on the tester's random inputs."""
        config, inputs = self.model_tester.prepare_config_and_inputs_for_common()
        model = model_class(config).eval()
        with torch.no_grad():
            return inputs, model(**inputs, output_attentions=True, output_hidden_states=True, return_dict=True)

    def test_attention_outputs(self):
        tester = self.model_tester
        batch, heads, length = tester.batch_size, tester.num_attention_heads, tester.seq_length
        for model_class in self.all_model_classes:
            with self.subTest(model_class=model_class.__name__):
                inputs, outputs = self._outputs(model_class)
                self.assertEqual(len(outputs.encoder_attentions), tester.encoder_layers)
                self.assertEqual(len(outputs.decoder_attentions), tester.decoder_layers)
                self.assertEqual(len(outputs.cross_attentions), tester.decoder_layers)
                for attentions in (outputs.encoder_attentions, outputs.decoder_attentions, outputs.cross_attentions):
                    for layer in attentions:
                        self.assertEqual(tuple(layer.shape), (batch, heads, length, length))
                        self.assertTrue(torch.allclose(layer.sum(-1), torch.ones(batch, heads, length), atol=1e-5))
                # No decoder position sees a later one. A position with no key it may see (a padding token first
                # in its row) gets an even spread over every key, as softmax does everywhere: its output is unused.
                future = torch.ones(length, length, dtype=torch.bool).triu(1)
                visible = ~future & inputs["decoder_attention_mask"][:, None, :].bool()
                checked = (visible.any(-1)[:, :, None] & future)[:, None].expand(-1, heads, -1, -1)
                self.assertGreater(checked.sum().item(), 0)
                self.assertEqual(outputs.decoder_attentions[0][checked].abs().max().item(), 0.0)

    def test_hidden_states_output(self):
        tester = self.model_tester
        for model_class in self.all_model_classes:
            with self.subTest(model_class=model_class.__name__):
                _, outputs = self._outputs(model_class)
                self.assertEqual(len(outputs.encoder_hidden_states), tester.encoder_layers + 1)  # embeddings too
                self.assertEqual(len(outputs.decoder_hidden_states), tester.decoder_layers + 1)
                for state in outputs.encoder_hidden_states + outputs.decoder_hidden_states:
                    self.assertEqual(tuple(state.shape), (tester.batch_size, tester.seq_length, tester.hidden_size))
