"""Bytes of KV cache per token and per request, per GPU. Pure arithmetic on a :class:`KVSpec`.

Formulas and their sources (vLLM main, the v0.3x line: kv_cache_interface.py at commit 001cabc1,
mamba_utils.py at 02d71083, config/model.py; docs/background.md §2):

* Standard attention (MHA/GQA/MQA): ``2 (K and V) × layers × kv_heads_per_gpu × head_dim × bytes`` per token:
  ``AttentionSpec.real_page_size_bytes`` = ``2 × block_size × num_kv_heads × head_size × dtype_size``
  (vllm/v1/kv_cache_interface.py), summed over layers.
* ``kv_heads_per_gpu = max(1, kv_heads // tensor_parallel_size)`` (``ModelConfig.get_num_kv_heads``,
  vllm/config/model.py): KV heads are split over TP ranks and replicated when TP > kv_heads, i.e.
  ``total ÷ min(TP, kv_heads)`` when one divides the other. Data parallel never divides it (each replica
  holds whole requests).
* MLA: ``layers × (kv_lora_rank + qk_rope_head_dim) × bytes`` per token — one latent, no K/V factor 2,
  ``get_num_kv_heads`` returns 1 for MLA so TP does not divide it (``MLAAttentionSpec.real_page_size_bytes``).
  ``fp8_ds_mla`` (FlashMLA sparse) stores 656 bytes per token per layer.
* KV element bytes: ``--kv-cache-dtype auto`` = the model dtype (:func:`kvpilot.kv.spec.model_dtype`);
  every ``fp8*`` variant = 1 byte (``get_kv_quant_mode``: any ``fp8…`` string is FP8).
* Sliding-window layers hold at most ``min(window - 1 + max_num_batched_tokens, max_model_len)`` tokens
  plus one block (``SlidingWindowSpec.max_memory_usage_bytes``): a fixed per-request term.
* Mamba / linear-attention layers hold a fixed state per request (``MambaSpec.max_memory_usage_bytes``
  = one page without prefix-caching "all" mode) whose shapes come from
  ``MambaStateShapeCalculator`` (vllm/model_executor/layers/mamba/mamba_utils.py):

  - mamba1 (Jamba): conv ``(d_conv - 1) × d_inner/TP`` + ssm ``d_inner/TP × d_state``,
    ``d_inner = mamba_expand × hidden``;
  - mamba2 (Nemotron-H): conv ``(conv_kernel - 1) × (d_inner + 2·n_groups·state)/TP`` + ssm
    ``heads/TP × head_dim × state``, ``d_inner = mamba_num_heads × mamba_head_dim`` (n_groups raised to TP when
    not divisible);
  - Gated DeltaNet (Qwen3-Next): conv ``(kernel - 1) × (2·k_heads·k_dim + v_heads·v_dim)/TP`` + state
    ``v_heads/TP × v_dim × k_dim``.

  Conv state in the model dtype; SSM state in ``mamba_ssm_cache_dtype`` when the config names one, else the
  model dtype (``MambaStateDtypeCalculator``). vLLM pads Mamba and attention pages to one page size, so the
  real pool use of hybrid models differs: these numbers are an *estimate* there.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.kv.bounds import MAX_BYTES_PER_TOKEN, MAX_MEMORY_BYTES
from kvpilot.kv.spec import (
    DTYPE_BYTES,
    FULL,
    LINEAR,
    MAMBA,
    SLIDING,
    KVConfigError,
    KVSpec,
    StateSpec,
    ceil_div,
    kv_spec_from_config,
)
from kvpilot.text.documents import JsonObject
from kvpilot.text.numbers import count
from kvpilot.vllm.defaults import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER,
)

#: Per-element bytes of vLLM's ``--kv-cache-dtype`` choices other than ``auto`` and ``fp8*``.
KV_CACHE_DTYPES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}
#: vLLM's one-byte ``--kv-cache-dtype`` choices (``CacheDType``, vllm/config/cache.py, v0.29.0); any other
#: ``fp8…`` spelling is a value vLLM refuses, not an fp8 cache.
FP8_KV_CACHE_DTYPES = frozenset({"fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "fp8_per_token_head"})


def kv_element_bytes(kv_cache_dtype: str, model_dtype: str) -> int:
    """Bytes per KV element for ``--kv-cache-dtype`` (``auto`` → ``model_dtype``; ``fp8*`` → 1).

    Raises:
        KVConfigError: naming ``--kv-cache-dtype`` for an unknown value.
    """
    name = str(kv_cache_dtype or "auto").lower()
    if name == "auto":
        return DTYPE_BYTES[model_dtype]
    if name in FP8_KV_CACHE_DTYPES:
        return 1
    if name in KV_CACHE_DTYPES:
        return KV_CACHE_DTYPES[name]
    raise KVConfigError(
        "--kv-cache-dtype",
        f"unknown KV cache dtype {kv_cache_dtype!r} "
        f"(known: auto, bfloat16, float16, float32, {', '.join(sorted(FP8_KV_CACHE_DTYPES))})",
    )


def _check_tp(tensor_parallel_size: int) -> int:
    if isinstance(tensor_parallel_size, bool) or not isinstance(tensor_parallel_size, int) or tensor_parallel_size < 1:
        raise KVConfigError("--tensor-parallel-size", f"must be a whole number >= 1, got {tensor_parallel_size!r}")
    return tensor_parallel_size


def kv_heads_per_gpu(spec: KVSpec, tensor_parallel_size: int = 1) -> int:
    """KV heads one GPU stores: ``max(1, kv_heads // TP)``; 1 for MLA (vLLM ``get_num_kv_heads``)."""
    if spec.is_mla:
        return 1
    return max(1, spec.num_kv_heads // _check_tp(tensor_parallel_size))


def layer_bytes_per_token(spec: KVSpec, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1) -> int:
    """KV bytes one attention layer stores per token on one GPU.

    Standard: ``2 × kv_heads_per_gpu × head_dim × b``. MLA: ``(kv_lora_rank + qk_rope_head_dim) × b``
    (656 for ``fp8_ds_mla``). ``b`` from :func:`kv_element_bytes`.
    """
    if spec.is_mla:
        if str(kv_cache_dtype).lower() == "fp8_ds_mla":
            return FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER
        return spec.head_dim * kv_element_bytes(kv_cache_dtype, spec.model_dtype)
    b = kv_element_bytes(kv_cache_dtype, spec.model_dtype)
    return 2 * kv_heads_per_gpu(spec, tensor_parallel_size) * spec.head_dim * b


def state_bytes_per_layer(state: StateSpec, tensor_parallel_size: int = 1) -> int:
    """Bytes of one Mamba / linear-attention layer's per-request state on one GPU (shapes: module docstring)."""
    tp = _check_tp(tensor_parallel_size)
    p = state.params
    conv_b, ssm_b = DTYPE_BYTES[state.conv_dtype], DTYPE_BYTES[state.ssm_dtype]
    if state.kind == "mamba1":
        conv = (p["conv_kernel"] - 1) * (p["intermediate_size"] // tp)
        ssm = (p["intermediate_size"] // tp) * p["state_size"]
    elif state.kind == "mamba2":
        groups = p["n_groups"] if p["n_groups"] % tp == 0 else tp
        conv = (p["conv_kernel"] - 1) * ((p["intermediate_size"] + 2 * groups * p["state_size"]) // tp)
        ssm = (p["num_heads"] // tp) * p["head_dim"] * p["state_size"]
    elif state.kind == "gated_delta_net":
        conv_dim = 2 * p["num_k_heads"] * p["head_k_dim"] + p["num_v_heads"] * p["head_v_dim"]
        conv = (p["conv_kernel"] - 1) * (conv_dim // tp)
        ssm = (p["num_v_heads"] // tp) * p["head_v_dim"] * p["head_k_dim"]
    else:  # pragma: no cover - StateSpec kinds are closed in spec.py
        raise KVConfigError("model_type", f"unknown state kind {state.kind!r}")
    return conv * conv_b + ssm * ssm_b


@dataclass(frozen=True)
class KVFootprint:
    """KV bytes of one model on one GPU for one KV dtype and TP size.

    Attributes:
        bytes_per_token: bytes each token adds for the whole request (full-attention and MLA layers only).
        sliding_bytes_per_token: bytes per token of the sliding-window layers, held only for the window.
        state_bytes_per_request: fixed Mamba / linear-attention state per request (bytes).
        layer_bytes_per_token: one attention layer's bytes per token.
        full_layers / sliding_layers / state_layers: layer counts.
        kv_heads_per_gpu: KV heads per GPU after TP (1 for MLA).
        element_bytes: bytes per KV element.
        sliding_window: tokens, or None.
        estimate: True when vLLM's hybrid allocator (page padding, layer groups) makes these an estimate.
    """

    bytes_per_token: int
    sliding_bytes_per_token: int
    state_bytes_per_request: int
    layer_bytes_per_token: int
    full_layers: int
    sliding_layers: int
    state_layers: int
    kv_heads_per_gpu: int
    element_bytes: int
    sliding_window: int | None
    estimate: bool

    @property
    def slot_bytes_per_token(self) -> int:
        """Bytes of one token slot across every layer that stores per-token KV (full + sliding).

        vLLM sizes its block pool in these slots (``GPU KV cache size: N tokens``).
        """
        return self.bytes_per_token + self.sliding_bytes_per_token

    def request_bytes(
        self,
        tokens: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
        max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ) -> int:
        """Bytes one request of ``tokens`` tokens holds at most, in whole blocks.

        Full layers: ``ceil(tokens / block_size)`` blocks; sliding layers:
        ``ceil(min(window - 1 + max_num_batched_tokens, tokens) / block_size) + 1`` blocks
        (``SlidingWindowSpec.max_memory_usage_bytes``); plus the fixed state.
        """
        full = ceil_div(tokens, block_size) * block_size * self.bytes_per_token
        sliding = 0
        if self.sliding_layers and self.sliding_window:
            held = min(self.sliding_window - 1 + max_num_batched_tokens, tokens)
            sliding = (ceil_div(held, block_size) + 1) * block_size * self.sliding_bytes_per_token
        return full + sliding + self.state_bytes_per_request


def footprint(spec: KVSpec, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1) -> KVFootprint:
    """The :class:`KVFootprint` of ``spec`` (bytes per GPU) for a KV dtype and TP size.

    Raises:
        KVConfigError: for an unknown ``kv_cache_dtype``, a TP size below 1, or a TP size that does not
            divide ``num_attention_heads`` (vLLM refuses to start: "Total number of attention heads (H)
            must be divisible by tensor parallel size (T)", ``ModelConfig.verify_with_parallel_config``).
    """
    tp = _check_tp(tensor_parallel_size)
    if spec.num_attention_heads % tp:
        raise KVConfigError(
            "--tensor-parallel-size",
            f"{tp} does not divide num_attention_heads "
            f"{spec.num_attention_heads}: vLLM refuses to start (attention heads must be "
            "divisible by the tensor parallel size)",
        )
    kv = spec.num_kv_heads
    if kv % tp if kv >= tp else tp % kv:
        # vLLM's attention layers (vllm/model_executor/models/llama.py, qwen2.py …): KV heads are split
        # when there are at least TP of them, else replicated, and either way evenly
        raise KVConfigError(
            "--tensor-parallel-size",
            f"{tp} and the {kv} KV heads (num_key_value_heads) do not "
            "divide one another: vLLM cannot split or replicate them evenly",
        )
    per_layer = layer_bytes_per_token(spec, kv_cache_dtype, tensor_parallel_size)
    full, sliding = spec.count(FULL), spec.count(SLIDING)
    state_layers = spec.count(MAMBA) + spec.count(LINEAR)
    state = state_layers * state_bytes_per_layer(spec.state, tensor_parallel_size) if spec.state else 0
    check_physical(full * per_layer, sliding * per_layer, state)
    return KVFootprint(
        bytes_per_token=full * per_layer,
        sliding_bytes_per_token=sliding * per_layer,
        state_bytes_per_request=state,
        layer_bytes_per_token=per_layer,
        full_layers=full,
        sliding_layers=sliding,
        state_layers=state_layers,
        kv_heads_per_gpu=kv_heads_per_gpu(spec, tensor_parallel_size),
        element_bytes=kv_element_bytes(kv_cache_dtype, spec.model_dtype),
        sliding_window=spec.sliding_window,
        estimate=spec.is_hybrid,
    )


def check_physical(bytes_per_token: int, sliding_bytes_per_token: int, state_bytes_per_request: int) -> None:
    """Refuse KV figures no GPU could hold, before they are printed as answers (:mod:`kvpilot.kv.bounds`).

    Raises:
        KVConfigError: naming ``config.json`` when one token's KV on one GPU (full + sliding layers) is above
            :data:`~kvpilot.kv.bounds.MAX_BYTES_PER_TOKEN`, or one request's fixed state above
            :data:`~kvpilot.kv.bounds.MAX_MEMORY_BYTES`.
    """
    per_token = bytes_per_token + sliding_bytes_per_token
    if per_token > MAX_BYTES_PER_TOKEN:
        raise KVConfigError(
            "config.json",
            f"its layers, KV heads and head size give {count(per_token, 'B')} of KV per token per GPU, above "
            f"{count(MAX_BYTES_PER_TOKEN, 'B')} (1 GiB), kvpilot's bound: no GPU holds a request of such tokens",
        )
    if state_bytes_per_request > MAX_MEMORY_BYTES:
        raise KVConfigError(
            "config.json",
            f"its Mamba/linear-attention shapes give {count(state_bytes_per_request, 'B')} of state per request, "
            f"above {count(MAX_MEMORY_BYTES, 'B')} (64 TiB), kvpilot's bound",
        )


def bytes_per_token(config: JsonObject | KVSpec, kv_cache_dtype: str = "auto", tensor_parallel_size: int = 1) -> int:
    """KV bytes each token adds on one GPU (full-attention and MLA layers; sliding/Mamba layers add none).

    ``config`` is a parsed config.json or a :class:`KVSpec`. E.g. Qwen2.5-7B-Instruct, bf16, TP 1:
    ``2 × 28 × 4 × 128 × 2 = 57,344`` (docs/background.md §2).

    Raises:
        KVConfigError: naming the field or option at fault.
    """
    spec = config if isinstance(config, KVSpec) else kv_spec_from_config(config)
    return footprint(spec, kv_cache_dtype, tensor_parallel_size).bytes_per_token
