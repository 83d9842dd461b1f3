"""Which kernel multiplies a linear layer in inference on a CPU: BLAS (`F.linear`) or oneDNN on weights packed once.

PyTorch's `F.linear` multiplies float32 on the CPU with its BLAS (Intel MKL in the x86 wheels). On an AMD EPYC with
AVX-512 (Zen 4), oneDNN's linear on weights reordered once into its blocked layout
(`torch.ops.mkldnn._reorder_linear_weight`, `_linear_pointwise`) took the decoder's and output layer's multiplies of one
step 3.5x faster at 4 rows (one sentence, beam 4) and 1.7x faster at 128 rows; its result for a row does not depend
on how many rows share the call. On an AVX2-only EPYC it was faster up to 16 rows and slower at 128. So it is used
where the CPU has AVX-512 (`PACKED_LINEAR`), for float32 inference only: training, autograd, other dtypes, GPUs and
torch.compile keep `F.linear`. It rounds differently from BLAS (about 1e-6 relative), so every path of the model
(the module forward, the decoding step, the output layer) calls `linear` below: within a process they all
multiply alike, and beam search gives transformers' ids bit for bit.
The packed copies take as much memory again as the float32 weights they copy (30 MB for the shipped model); each
is dropped with its weight.

This file imports only torch, so it travels with the model code to the Hub.
"""

import weakref

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules import module as module_hooks


def _onednn_packed_linear():
    """oneDNN's linear on packed weights where this PyTorch has it (built with oneDNN, both ops present), else None.
    Looked up once, not at every call."""
    ops = torch.ops.mkldnn
    if not torch.backends.mkldnn.is_available():
        return None
    if hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight"):
        return ops._linear_pointwise
    return None


_packed_linear = _onednn_packed_linear()
# Whether this PyTorch can multiply with oneDNN's packed weights at all (a test may choose it on any machine).
AVAILABLE = _packed_linear is not None
# Whether float32 inference on the CPU does, as measured (the docstring): where the CPU has AVX-512. Set at import; a
# test or a benchmark may switch it for a whole process (both ways give the same ids from our search and
# transformers').
PACKED_LINEAR = AVAILABLE and torch.backends.cpu.get_cpu_capability() == "AVX512"

# torch.compile and torch.export trace F.linear, not the packed kernel (torch.compiler.is_compiling: torch >= 2.3).
_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)

# id(weight) -> (a weak reference to it, (data_ptr, version), packed copy): dropped with the weight; the version counts
# in-place changes (loading, optimizer steps), so a changed weight is packed again. A plain dict keyed by id: looked up
# about 25 times a decoding step, where torch.utils.weak.WeakIdKeyDictionary costs 2 us a lookup.
_packed_weights: dict[int, tuple] = {}


def packed_weight(weight: torch.Tensor) -> torch.Tensor:
    """oneDNN's blocked copy of a (out, in) weight, made once per version of the weight."""
    key = (weight.data_ptr(), weight._version)
    entry = _packed_weights.get(id(weight))
    if entry is None or entry[1] != key or entry[0]() is not weight:
        with torch.no_grad():
            packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach())
        identity = id(weight)
        entry = (weakref.ref(weight, lambda _, identity=identity: _packed_weights.pop(identity, None)), key, packed)
        _packed_weights[identity] = entry
    return entry[2]


def uses_packed_weights(weight: torch.Tensor) -> bool:
    """Whether `linear` multiplies by this weight with oneDNN now (float32 CPU inference, nothing compiling)."""
    return (
        PACKED_LINEAR
        and not torch.is_grad_enabled()
        and weight.device.type == "cpu"
        and weight.dtype == torch.float32
        and not _is_compiling()
    )


def _is_watched(layer: nn.Module) -> bool:
    """Hooks on the layer (or on every module) must see it run: then it is called as a module."""
    return bool(
        layer._forward_hooks
        or layer._forward_pre_hooks
        or module_hooks._global_forward_hooks
        or module_hooks._global_forward_pre_hooks
    )


def linear(layer: nn.Module, inputs: torch.Tensor) -> torch.Tensor:
    """`layer(inputs)`. A plain nn.Linear that no hook watches is multiplied directly (a module call costs about as
    much as a small product at batch 1), with oneDNN's packed weights where `uses_packed_weights`; any other layer
    (dynamically quantized, wrapped by an adapter) is called as it is."""
    if type(layer) is not nn.Linear or _is_watched(layer):
        return layer(inputs)
    if inputs.dtype == torch.float32 and uses_packed_weights(layer.weight):
        return _packed_linear(inputs, packed_weight(layer.weight), layer.bias, "none", [], "")
    return F.linear(inputs, layer.weight, layer.bias)
