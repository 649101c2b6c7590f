"""Model profiles and the step-time cost model (simulated seconds per engine step); GPUs: kvpilot.gpus.

Cost model (docs/background.md §1; roofline):

    t_step = overhead + max(t_memory, t_compute) + t_offload_load + t_offload_store
    t_memory  = (weight_bytes / TP + kv_bytes_read / TP) / (bandwidth * bandwidth_efficiency)
    t_compute = (2 * params * tokens + attention_flops) / TP / (peak_flops * compute_efficiency)
    attention_flops = 4 * layers * q_heads * head_dim * sum over scheduled tokens of their context
    kv_bytes_read   = bytes_per_token * sum over scheduled requests of (context after this step)

- 2·P FLOP per token for the linear layers, 2 bytes per bf16 weight: docs/background.md §1.
- Attention: QK^T and PV, 2 FLOP per multiply-add each, per query token per context token, per
  head dim, per query head, per layer (Kaplan et al. 2020, "Scaling Laws", Table 1 context term).
- ``bandwidth_efficiency`` 0.70: docs/background.md §1 (39 tok/s on a 896 GB/s GPU with 16.2 GB of
  weights = 632 GB/s = 70 % of peak).
- ``compute_efficiency`` 0.78: calibrated so the §9 prefill of 5,033 tokens on the laptop profile
  takes ~560 ms, the recompute time docs/background.md §9 quotes; 60-80 % of peak is the usual range for
  large bf16 GEMMs. It is a calibration, said so in docs/engine.md.
- ``overhead`` 1.5 ms per step: scheduler, sampling, kernel launches (an assumption, documented).

Left out: tensor-parallel communication, CUDA-graph padding, kernel efficiency varying with batch
size, speculative decoding, MoE routing (params are dense), the LM head computed only for sampled
positions.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.gpus import GPUProfile


@dataclass(frozen=True)
class ModelProfile:
    """One model's shape: parameters, layers, query heads, head dim, KV bytes per token (bf16), KV
    heads (``num_key_value_heads``, for tensor-parallel division).
    """

    name: str
    params: float
    num_layers: int
    num_heads: int
    head_dim: int
    bytes_per_token: int
    source: str
    num_kv_heads: int = 1

    @property
    def weight_bytes(self) -> int:
        """bf16 weights: 2 bytes per parameter (docs/background.md §1)."""
        return int(self.params * 2)


MODEL_PROFILES: dict[str, ModelProfile] = {
    "qwen2.5-1.5b": ModelProfile(
        "qwen2.5-1.5b",
        1.54e9,
        28,
        12,
        128,
        28_672,
        "Qwen/Qwen2.5-1.5B-Instruct config.json (28 layers, 12 heads, 2 KV heads, hidden 1536) and "
        "model card (1.54B parameters); 28,672 B/token: docs/background.md §2",
        2,
    ),
    "qwen2.5-7b": ModelProfile(
        "qwen2.5-7b",
        7.61e9,
        28,
        28,
        128,
        57_344,
        "Qwen/Qwen2.5-7B-Instruct config.json (28 layers, 28 heads, 4 KV heads, hidden 3584) and "
        "model card (7.61B parameters); 57,344 B/token: docs/background.md §2",
        4,
    ),
    "llama-3.1-8b": ModelProfile(
        "llama-3.1-8b",
        8.03e9,
        32,
        32,
        128,
        131_072,
        "meta-llama/Llama-3.1-8B-Instruct config.json (32 layers, 32 heads, 8 KV heads, hidden "
        "4096); 8.03B parameters (model card); 2 x 32 x 8 x 128 x 2 = 131,072 B/token",
        8,
    ),
}


def model_profile(name: str) -> ModelProfile:
    """The model profile called ``name``. Raises ValueError naming the known profiles."""
    try:
        return MODEL_PROFILES[name]
    except KeyError:
        raise ValueError(f"model: unknown profile {name!r}; known: {', '.join(MODEL_PROFILES)}") from None


class CostModel:
    """Step time in seconds from the step's token counts (see the module docstring).

    Args:
        gpu, model: profiles; ``bytes_per_token``: KV bytes per token per GPU (after dtype/TP);
        ``tensor_parallel_size``: GPUs sharing weights and compute; efficiencies 0-1; ``overhead``
        seconds per step; ``weight_bytes``: override of the model's bf16 weight bytes.
    """

    __slots__ = (
        "mem_bw",
        "compute",
        "weight_time",
        "kv_time_per_token",
        "flop_per_token",
        "attn_flop",
        "overhead",
        "gpu",
        "model",
    )

    def __init__(
        self,
        gpu: GPUProfile,
        model: ModelProfile,
        *,
        bytes_per_token: int,
        tensor_parallel_size: int = 1,
        bandwidth_efficiency: float = 0.70,
        compute_efficiency: float = 0.78,
        overhead: float = 1.5e-3,
        weight_bytes: int | None = None,
    ) -> None:
        tp = max(1, tensor_parallel_size)
        self.gpu, self.model = gpu, model
        self.mem_bw = gpu.bandwidth * bandwidth_efficiency * tp
        self.compute = gpu.peak_flops * compute_efficiency * tp
        wb = model.weight_bytes if weight_bytes is None else weight_bytes
        self.weight_time = wb / self.mem_bw
        # bytes_per_token is per GPU already, and each GPU reads its share in parallel
        self.kv_time_per_token = bytes_per_token / (gpu.bandwidth * bandwidth_efficiency)
        self.flop_per_token = 2.0 * model.params / self.compute
        self.attn_flop = 4.0 * model.num_layers * model.num_heads * model.head_dim / self.compute
        self.overhead = overhead

    def step_time(self, num_tokens: int, context_tokens: int, attention_pairs: float) -> float:
        """Seconds for one step.

        Args:
            num_tokens: tokens computed this step (all requests).
            context_tokens: sum over scheduled requests of their KV length after the step
                (tokens whose KV is read).
            attention_pairs: sum over computed tokens of the context each attends to.
        """
        t_mem = self.weight_time + context_tokens * self.kv_time_per_token
        t_cmp = num_tokens * self.flop_per_token + attention_pairs * self.attn_flop
        return self.overhead + (t_mem if t_mem > t_cmp else t_cmp)
