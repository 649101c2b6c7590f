"""The operator's KV pre-flight: a ``KVCapacity`` status condition, computed before a GPU is spent.

Pure: the operator fetches the model's config.json (Hub or a ``modelConfigRef`` ConfigMap) and knows the
GPU memory (``spec.resources.gpuMemory`` or the node label ``nvidia.com/gpu.memory`` that NVIDIA GPU
feature discovery sets, in MiB); this module turns them into a condition and an optional warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

from kvpilot.kv.capacity import DEFAULT_BLOCK_SIZE, DEFAULT_GPU_MEMORY_UTILIZATION, capacity
from kvpilot.kv.spec import KVConfigError
from kvpilot.text.documents import JsonObject
from kvpilot.text.numbers import count, gib, number, times

if TYPE_CHECKING:  # the operator's parsed spec; `kvpilot kv` loads no pydantic
    from kvpilot.api.models import EngineSpec

CONDITION_TYPE = "KVCapacity"
#: :class:`~kvpilot.api.models.EngineSpec` fields (``spec.engine``) that are :func:`kvpilot.kv.capacity.capacity`
#: arguments of the same name.
ENGINE_FIELDS = (
    "gpu_memory_utilization",
    "max_model_len",
    "tensor_parallel_size",
    "kv_cache_dtype",
    "max_num_batched_tokens",
)


def gpu_memory_from_node_label(value: str) -> int:
    """Bytes of GPU memory from the node label ``nvidia.com/gpu.memory`` (GPU feature discovery, in MiB).

    Raises:
        KVConfigError: naming ``nvidia.com/gpu.memory`` when the value is not a positive whole number.
    """
    text = str(value).strip()
    if not text.isdigit() or int(text) <= 0:
        raise KVConfigError("nvidia.com/gpu.memory", f"must be MiB as a whole number > 0, got {value!r}")
    return int(text) * 2**20


class PreflightNumbers(TypedDict):
    """The figures of a computed pre-flight: snake_case fields of ``kvpilot.api.models.PreflightStatus``."""

    bytes_per_token: int
    kv_tokens: int | None
    max_concurrency: float | None
    fits: bool | None
    max_model_len_that_fits: int | None
    min_gpu_memory_utilization: float | None
    estimate: bool


@dataclass(frozen=True)
class Preflight:
    """Result of :func:`kv_preflight`.

    Attributes:
        condition: the ``KVCapacity`` condition dict (type, status, reason, message).
        warning: the Event message when one ``maxModelLen`` request cannot fit, else None.
        numbers: snake_case fields of ``kvpilot.api.models.PreflightStatus`` (``bytes_per_token``,
            ``kv_tokens``, ``max_concurrency``, ``fits``, ``max_model_len_that_fits``,
            ``min_gpu_memory_utilization``, ``estimate``); None when not computed.
    """

    condition: dict[str, str]
    warning: str | None
    numbers: PreflightNumbers | None


def kv_preflight(
    config: JsonObject,
    engine: EngineSpec | None = None,
    *,
    gpu_memory_bytes: int | None = None,
    weights_bytes: int | None = None,
    overhead_bytes: int | None = None,
    kv_memory_bytes: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
) -> Preflight:
    """The ``KVCapacity`` condition for a VLLMServer, a warning when vLLM would refuse to start, and the numbers.

    Args:
        config: the model's parsed config.json.
        engine: the VLLMServer's ``spec.engine`` (:data:`ENGINE_FIELDS`: ``gpuMemoryUtilization``, ``maxModelLen``,
            ``tensorParallelSize``, ``kvCacheDtype``, ``maxNumBatchedTokens``); unset fields take vLLM's defaults
            (utilization 0.92, max_model_len from the config, TP 1, dtype auto).
        gpu_memory_bytes: memory of one GPU in bytes (``spec.resources.gpuMemory`` or
            :func:`gpu_memory_from_node_label`).
        weights_bytes: weight bytes per GPU (e.g. the Hub's ``model.safetensors.index.json``
            ``metadata.total_size`` ÷ TP).
        overhead_bytes: non-KV overhead (default :data:`kvpilot.kv.capacity.DEFAULT_OVERHEAD_BYTES`).
        kv_memory_bytes: the KV pool if known (overrides the derivation).
        block_size: tokens per KV block (vLLM ``--block-size``, 16).

    Returns:
        :class:`Preflight` (``condition``, ``warning``, ``numbers``). ``condition`` =
        ``{"type": "KVCapacity", "status": "True"|"False"|"Unknown", "reason": …, "message": …}``
        (Kubernetes condition fields; the caller adds lastTransitionTime and observedGeneration). Status
        True = one ``maxModelLen`` request fits (reason ``Fits``); False = it does not
        (``MaxModelLenExceedsKV`` or ``NoKVMemory``), ``warning`` is then the Event message; Unknown = not computable
        (``InvalidModelConfig``, ``InsufficientInputs``), ``warning`` None. Never raises for bad
        input: the problem is in the condition's message.
    """
    given = {name: getattr(engine, name) for name in ENGINE_FIELDS} if engine is not None else {}
    kwargs = {name: value for name, value in given.items() if value is not None}
    kwargs.setdefault("gpu_memory_utilization", DEFAULT_GPU_MEMORY_UTILIZATION)
    if kv_memory_bytes is None and (gpu_memory_bytes is None or weights_bytes is None):
        missing = "GPU memory" if gpu_memory_bytes is None else "model weight size"
        return Preflight(
            _condition("Unknown", "InsufficientInputs", f"KV capacity not computed: {missing} unknown"), None, None
        )
    try:
        cap = capacity(
            config,
            gpu_memory_bytes=gpu_memory_bytes,
            weights_bytes=weights_bytes,
            overhead_bytes=overhead_bytes,
            kv_memory_bytes=kv_memory_bytes,
            block_size=block_size,
            **kwargs,
        )
    except KVConfigError as exc:
        return Preflight(_condition("Unknown", "InvalidModelConfig", f"KV capacity not computed: {exc}"), None, None)
    est = " (estimate)" if cap.estimate else ""
    figures = (
        f"{count(cap.bytes_per_token, 'B')}/token per GPU; {gib(cap.kv_memory_bytes)} KV = "
        f"{count(cap.kv_tokens)} tokens; max concurrency {times(cap.max_concurrency, 2)} at {count(cap.max_model_len)} "
        f"tokens{est}"
    )
    numbers: PreflightNumbers = {
        "bytes_per_token": cap.bytes_per_token,
        "kv_tokens": cap.kv_tokens,
        "max_concurrency": cap.max_concurrency,
        "fits": cap.fits,
        "max_model_len_that_fits": cap.max_model_len_that_fits,
        "min_gpu_memory_utilization": cap.min_gpu_memory_utilization_to_fit,
        "estimate": cap.estimate,
    }
    if cap.fits:
        return Preflight(_condition("True", "Fits", figures), None, numbers)
    reason = "NoKVMemory" if cap.kv_blocks == 0 else "MaxModelLenExceedsKV"
    fix = [f"maxModelLen <= {count(cap.max_model_len_that_fits)}"] if cap.max_model_len_that_fits else []
    if cap.min_gpu_memory_utilization_to_fit is not None and cap.min_gpu_memory_utilization_to_fit <= 1:
        fix.append(f"gpuMemoryUtilization >= {number(cap.min_gpu_memory_utilization_to_fit, 3)}")
    message = (
        f"one request of maxModelLen {count(cap.max_model_len)} needs {gib(cap.request_bytes)} KV, "
        f"more than {gib(cap.kv_memory_bytes)} available: vLLM would refuse to start; "
        f"{figures}" + (f"; try {' or '.join(fix)}" if fix else "")
    )
    return Preflight(_condition("False", reason, message), message, numbers)


def _condition(status: str, reason: str, message: str) -> dict[str, str]:
    return {"type": CONDITION_TYPE, "status": status, "reason": reason, "message": message}
