"""Model profiles and the step-time cost model (simulated seconds per engine step); GPUs: kvpilot.gpus.

Cost model (docs/background.md §1; roofline):

    t_step = overhead + max(t_memory, t_compute) + t_offload_load + t_offload_store
    t_memory  = (weight_bytes / TP + kv_bytes_read / TP) / (bandwidth * bandwidth_efficiency)
    t_compute = (2 * params * tokens + attention_flops) / TP / (peak_flops * compute_efficiency)
    attention_flops = 4 * layers * q_heads * head_dim * sum over scheduled tokens of their context
    kv_bytes_read   = bytes_per_token * sum over scheduled requests of (context after this step)

- 2·P FLOP per token for the linear layers (docs/background.md §1); the weights read per step are the
  checkpoint's bytes (:attr:`ModelProfile.weight_bytes`).
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
from kvpilot.kv.capacity import REFERENCE_WEIGHTS_BYTES
from kvpilot.kv.size import footprint
from kvpilot.kv.spec import DTYPE_BYTES, FULL, KVSpec, kv_spec_from_config, text_config
from kvpilot.text.documents import JsonObject
from kvpilot.text.errors import InvalidValueError

#: Fraction of the datasheet bandwidth a decode step reaches (docs/background.md §1: 632 of 896 GB/s).
BANDWIDTH_EFFICIENCY = 0.70
#: Fraction of the dense bf16 peak a prefill reaches: the calibration of the module docstring.
COMPUTE_EFFICIENCY = 0.78
#: Seconds of scheduler, sampling and kernel-launch time per step (an assumption, docs/engine.md).
STEP_OVERHEAD_S = 1.5e-3


@dataclass(frozen=True)
class ModelProfile:
    """One model's shape, as its config.json gives it, and its weights.

    Attributes:
        name: profile name (``qwen2.5-1.5b`` …).
        params: parameters (model card), for the 2·P FLOP per token.
        num_layers / num_heads / head_dim / num_kv_heads: ``num_hidden_layers``, ``num_attention_heads``, head
            size, ``num_key_value_heads``.
        weight_bytes: bytes of the checkpoint's tensors (its safetensors ``total_size``), what vLLM loads and
            subtracts before it sizes the KV pool.
        max_model_len: the context vLLM derives from the config (``kvpilot.kv.spec.context_length``), tokens.
        source: where the figures come from.
        spec: the KV layout read from the config (sliding windows, MLA, hybrid layers), None for every layer full
            attention in bf16 (the named profiles).
    """

    name: str
    params: float
    num_layers: int
    num_heads: int
    head_dim: int
    num_kv_heads: int
    weight_bytes: int
    max_model_len: int
    source: str
    spec: KVSpec | None = None

    def kv_spec(self) -> KVSpec:
        """The model as :mod:`kvpilot.kv` sees it: the config's layout, else every layer full attention, bf16."""
        if self.spec is not None:
            return self.spec
        return KVSpec(
            model_type=None,
            num_layers=self.num_layers,
            num_attention_heads=self.num_heads,
            num_kv_heads=self.num_kv_heads,
            head_dim=self.head_dim,
            model_dtype="bfloat16",
            is_mla=False,
            layer_counts=((FULL, self.num_layers),),
        )

    @property
    def bytes_per_token(self) -> int:
        """KV bytes per token at bf16 and TP 1 (:func:`kvpilot.kv.size.footprint`: 2 x layers x KV heads x head
        dim x 2; docs/background.md §2).
        """
        return footprint(self.kv_spec()).bytes_per_token


MODEL_PROFILES: dict[str, ModelProfile] = {
    "qwen2.5-1.5b": ModelProfile(
        "qwen2.5-1.5b",
        1.54e9,
        28,
        12,
        128,
        2,
        REFERENCE_WEIGHTS_BYTES,
        32_768,
        "Qwen/Qwen2.5-1.5B-Instruct config.json (28 layers, 12 heads, 2 KV heads, hidden 1536, "
        "max_position_embeddings 32,768), model card (1.54B parameters); weights: 1,543,714,304 bf16 "
        "parameters in its model.safetensors = 3,087,428,608 bytes",
    ),
    "qwen2.5-7b": ModelProfile(
        "qwen2.5-7b",
        7.61e9,
        28,
        28,
        128,
        4,
        15_231_233_024,
        32_768,
        "Qwen/Qwen2.5-7B-Instruct config.json (28 layers, 28 heads, 4 KV heads, hidden 3584, "
        "max_position_embeddings 32,768), model card (7.61B parameters); weights: "
        "model.safetensors.index.json total_size 15,231,233,024",
    ),
    "llama-3.1-8b": ModelProfile(
        "llama-3.1-8b",
        8.03e9,
        32,
        32,
        128,
        8,
        16_060_522_496,
        131_072,
        "meta-llama/Llama-3.1-8B-Instruct config.json (32 layers, 32 heads, 8 KV heads, hidden 4096, "
        "max_position_embeddings 131,072, llama3 RoPE); 8.03B parameters (model card); weights: "
        "model.safetensors.index.json total_size 16,060,522,496",
    ),
}


def _int(cfg: JsonObject, key: str, default: int = 0) -> int:
    value = cfg.get(key)
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else default


def config_params(config: JsonObject) -> tuple[float, float]:
    """``(parameters, parameters each token computes with)`` of a decoder from its config.json.

    Embeddings ``vocab x hidden`` (twice unless ``tie_word_embeddings``); per layer the attention projections
    (``hidden x heads x head_dim`` for Q and O, ``hidden x kv_heads x head_dim`` for K and V; MLA's latent
    projections counted as K/V of its latent width) and a gated MLP (``3 x hidden x intermediate``). A mixture of
    experts (``num_experts`` / ``num_local_experts`` / ``n_routed_experts`` with ``num_experts_per_tok``) holds
    every expert (``moe_intermediate_size`` each, else ``intermediate_size``) and computes with
    ``num_experts_per_tok`` of them plus its shared experts. Norms and biases are left out (under 0.1 %). A
    ``text_config`` without ``hidden_size`` or ``intermediate_size`` (left to transformers' defaults) is taken as
    ``heads x head_dim`` wide with a 4x MLP, an approximation the calibration to the window absorbs.
    """
    spec = kv_spec_from_config(config)
    cfg, _ = text_config(config)
    heads, kv_heads, head_dim = spec.num_attention_heads, spec.num_kv_heads, spec.head_dim
    hidden = _int(cfg, "hidden_size", heads * head_dim)  # a text_config may leave it to transformers' default
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    inter = _int(cfg, "intermediate_size", 4 * hidden)
    experts = _int(cfg, "num_experts") or _int(cfg, "num_local_experts") or _int(cfg, "n_routed_experts")
    if experts:
        per_expert = 3 * hidden * _int(cfg, "moe_intermediate_size", inter)
        shared = _int(cfg, "n_shared_experts") * per_expert + 3 * hidden * _int(cfg, "shared_expert_intermediate_size")
        active = _int(cfg, "num_experts_per_tok", 1)
        mlp_all, mlp_active = experts * per_expert + shared, active * per_expert + shared
    else:
        mlp_all = mlp_active = 3 * hidden * inter
    vocab = _int(cfg, "vocab_size") or _int(config, "vocab_size")
    tied = bool(cfg.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    embed = vocab * hidden * (1 if tied else 2)
    layers = spec.num_layers
    return float(embed + layers * (attention + mlp_all)), float(embed + layers * (attention + mlp_active))


def profile_from_config(config: JsonObject, name: str, weight_bytes: int | None = None) -> ModelProfile:
    """The served model's own profile from its config.json (any architecture :mod:`kvpilot.kv` reads).

    Parameters from :func:`config_params` (the active ones price a token's FLOPs); weights ``weight_bytes`` when
    known (a checkpoint's ``total_size``), else every parameter at the config's dtype; the KV layout and context
    from :func:`kvpilot.kv.spec.kv_spec_from_config`.

    Raises:
        KVConfigError: the config cannot be read (naming the field).
    """
    spec = kv_spec_from_config(config)
    total, active = config_params(config)
    weights = weight_bytes if weight_bytes else int(total * DTYPE_BYTES.get(spec.model_dtype, 2))
    context = spec.context.default if spec.context is not None else (spec.max_position_embeddings or 0)
    return ModelProfile(
        name,
        active,
        spec.num_layers,
        spec.num_attention_heads,
        spec.head_dim,
        spec.num_kv_heads,
        weights,
        int(context) or 2048,
        f"{name}'s config.json: {spec.num_layers} layers, {spec.num_attention_heads} heads, {spec.num_kv_heads} KV "
        f"heads of {spec.head_dim}, {total / 1e9:.3g}B parameters ({active / 1e9:.3g}B active) counted from its "
        "shapes",
        spec,
    )


def model_profile(name: str) -> ModelProfile:
    """The model profile called ``name``. Raises ValueError naming the known profiles."""
    try:
        return MODEL_PROFILES[name]
    except KeyError:
        raise InvalidValueError("model", f"unknown profile {name!r}; known: {', '.join(MODEL_PROFILES)}") from None


class CostModel:
    """Step time in seconds from the step's token counts (see the module docstring).

    Args:
        gpu, model: profiles; ``bytes_per_token``: KV bytes per token per GPU (after dtype/TP);
        ``tensor_parallel_size``: GPUs sharing weights and compute; efficiencies 0-1; ``overhead``
        seconds per step; ``weight_bytes``: override of the model's checkpoint bytes.
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
        bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY,
        compute_efficiency: float = COMPUTE_EFFICIENCY,
        overhead: float = STEP_OVERHEAD_S,
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
