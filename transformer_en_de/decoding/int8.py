"""int8 weights for CPU inference, on request: torch's dynamic quantization of the linear layers."""

import copy
import warnings

import torch
from torch import nn


def int8_dynamic(model, keep_output_layer: bool = False):
    """A copy of `model` for CPU inference with int8 weights in every nn.Linear (activations quantized per batch;
    `keep_output_layer`: all but the output projection `lm_head`). On test_2016_flickr it keeps BLEU within 0.3 of
    float32 at about 1.3x the speed (`python -m benchmarks.engine_backends --parts precision`)."""
    model = copy.deepcopy(model).cpu()
    linears = [name for name, module in model.named_modules() if isinstance(module, nn.Linear)]
    chosen = [name for name in linears if not (keep_output_layer and name == "lm_head")]
    for name in chosen:
        module = model.get_submodule(name)
        if type(module) is not nn.Linear:
            # quantize_dynamic swaps nn.Linear itself only; a subclass (our model's OutputProjection, which multiplies
            # the other way round for a few rows) becomes the plain layer first, its parameters shared.
            plain = nn.Linear(module.in_features, module.out_features, bias=module.bias is not None)
            plain.weight, plain.bias = module.weight, module.bias
            model.set_submodule(name, plain)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao.quantization announces its move to torchao
        qconfig = torch.ao.quantization.default_dynamic_qconfig
        return torch.ao.quantization.quantize_dynamic(model, dict.fromkeys(chosen, qconfig), dtype=torch.qint8)
