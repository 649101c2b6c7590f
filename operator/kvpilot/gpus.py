"""GPU profiles: memory, memory bandwidth and dense bf16 tensor peak of the GPUs kvpilot knows.

Shared by the engine model (step time, KV memory) and the diagnoser (vLLM's GPU-tier defaults, the
compute-bound knee) without either depending on the other. Each profile names its source (a vendor
datasheet or the derivation used); pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.text.errors import InvalidValueError
from kvpilot.text.numbers import GIB


@dataclass(frozen=True)
class GPUProfile:
    """One GPU: memory (bytes), bandwidth (bytes/s), dense bf16 tensor peak (FLOP/s), source."""

    name: str
    memory_bytes: int
    bandwidth: float
    peak_flops: float
    source: str


GPU_PROFILES: dict[str, GPUProfile] = {
    "h100-sxm": GPUProfile(
        "h100-sxm",
        80 * GIB,
        3.35e12,
        989e12,
        "NVIDIA H100 Tensor Core GPU datasheet (SXM5): 80 GB HBM3, 3.35 TB/s, BF16 1,979 TFLOPS "
        "with sparsity = 989 dense; docs/background.md §1",
    ),
    "a100-80gb": GPUProfile(
        "a100-80gb",
        80 * GIB,
        2.039e12,
        312e12,
        "NVIDIA A100 Tensor Core GPU datasheet (80GB SXM): 2,039 GB/s HBM2e, BF16 312 TFLOPS dense (624 with sparsity)",
    ),
    "l4": GPUProfile(
        "l4",
        24 * GIB,
        300e9,
        121e12,
        "NVIDIA L4 datasheet: 24 GB GDDR6, 300 GB/s, BF16 242 TFLOPS with sparsity = 121 dense",
    ),
    "laptop-8gb": GPUProfile(
        "laptop-8gb",
        8 * GIB,
        256e9,
        40.1e12,
        "NVIDIA GeForce RTX 4070 Laptop GPU (8 GB GDDR6, 128-bit, 16 Gbps = 256 GB/s; 36 SMs, "
        "boost up to 2,175 MHz); dense FP16/BF16 tensor FLOPS with FP32 accumulate derived as "
        "36 SM x 2.175 GHz x 512 FLOP/clk/SM, the per-SM rate of the Ada whitepaper's RTX 4090 "
        "(165.2 TFLOPS / 128 SM / 2.52 GHz); the GPU of docs/background.md §9 is an unnamed 8 GB one",
    ),
    "laptop-896gbs": GPUProfile(
        "laptop-896gbs",
        24 * GIB,
        896e9,
        100e12,
        "GeForce RTX 5090 Laptop GPU class: 24 GB GDDR7, 896 GB/s (docs/background.md §1's example); "
        "tensor peak an approximation (not from a datasheet): only decode, memory-bound, is "
        "checked against it",
    ),
}

#: Other spellings of the profile names (case-insensitive).
GPU_ALIASES = {
    "h100": "h100-sxm",
    "h100-80gb": "h100-sxm",
    "a100": "a100-80gb",
    "a100-80g": "a100-80gb",
    "laptop": "laptop-8gb",
    "rtx-4070-laptop": "laptop-8gb",
    "rtx-5090-laptop": "laptop-896gbs",
}


def gpu_profile(name: str) -> GPUProfile:
    """The profile called ``name`` (case-insensitive, :data:`GPU_ALIASES` accepted).

    Raises:
        InvalidValueError: ``"gpu: unknown profile ..."`` naming the known profiles.
    """
    key = str(name).strip().lower().replace("_", "-").replace(" ", "-")
    key = GPU_ALIASES.get(key, key)
    try:
        return GPU_PROFILES[key]
    except KeyError:
        raise InvalidValueError("gpu", f"unknown profile {name!r}; known: {', '.join(GPU_PROFILES)}") from None
