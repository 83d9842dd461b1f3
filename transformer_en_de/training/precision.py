"""Which precision to compute in: bf16 autocast for training only where the hardware computes bf16 natively (int8
for CPU inference is `decoding.int8`).

bf16 autocast halves memory traffic where bf16 matrix multiplies run in hardware (CUDA GPUs of compute capability
8.0 and newer; CPUs with AVX-512 BF16 or AMX). Elsewhere PyTorch emulates them: on an AVX2-only CPU one training step
of the shipped model size took 36 s in bf16 autocast against 1.1 s in float32. So the default follows the machine,
and an explicit `--bf16` / `--fp16` on the command line always wins.
"""

import platform
from pathlib import Path

import torch

# /proc/cpuinfo flags that mean bf16 dot products in hardware (x86: AVX-512 BF16, AMX; Arm: the BF16 extension).
NATIVE_BF16_CPU_FLAGS = {"avx512_bf16", "amx_bf16", "bf16"}


def cpu_flags() -> set[str]:
    """The CPU's feature flags as Linux reports them (x86 `flags`, Arm `Features`); empty elsewhere."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return set(value.split())
    return set()


def cpu_has_native_bf16(flags: set[str] | None = None) -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX-512 BF16, AMX, or Arm BF16)."""
    flags = cpu_flags() if flags is None else flags
    if flags:
        return bool(flags & NATIVE_BF16_CPU_FLAGS)
    # No /proc/cpuinfo (macOS, Windows): Apple silicon from M2 on has BF16, but PyTorch's CPU kernels do not use it
    # for autocast; float32 is the safe choice.
    return False


def native_bf16(use_cpu: bool = False) -> bool:
    """Whether training on the device the Trainer will pick (a CUDA GPU unless `use_cpu`) has native bf16."""
    if not use_cpu and torch.cuda.is_available():
        return torch.cuda.is_bf16_supported(including_emulation=False)
    if not use_cpu and torch.backends.mps.is_available():
        return False  # MPS autocast to bf16 is not faster than float32 for this model size
    return cpu_has_native_bf16()


def name(bf16: bool, fp16: bool = False) -> str:
    """What a run computes in, as the logs and benchmarks say it."""
    return "bf16 autocast" if bf16 else "fp16 autocast" if fp16 else "float32"


def describe(use_cpu: bool = True) -> str:
    """One line for logs and benchmarks: the device, its vector capability and the precision chosen for it."""
    if not use_cpu and torch.cuda.is_available():
        device = f"CUDA {torch.cuda.get_device_name()}"
    else:
        device = f"CPU {platform.machine()} {torch.backends.cpu.get_cpu_capability()}"
    native = native_bf16(use_cpu)
    return f"{device}, native bf16: {'yes' if native else 'no'} -> default precision {name(native)}"
