"""KV cache math from a model's config.json: bytes per token, capacity, concurrency, startup feasibility.

Pure (no I/O), except :mod:`kvpilot.kv.hub` (the time-bounded Hugging Face Hub fetch used by
``kvpilot kv`` and the operator, not imported here). Public API:

* :func:`kv_spec_from_config` (config dict → :class:`KVSpec`), :func:`context_length` (vLLM's ``max_model_len``),
* :func:`bytes_per_token` (per GPU, bytes), :func:`footprint` (:class:`KVFootprint`),
* :func:`capacity` (:class:`KVCapacity`, ``to_json()`` = ``kvpilot kv -o json``),
* :func:`startup_memory_check` (free memory vs ``gpu_memory_utilization``),
* :func:`kvpilot.kv.preflight.kv_preflight` (the operator's ``KVCapacity`` condition, its warning and numbers).

Errors are :class:`KVConfigError` (``.field`` names the config field or option).
"""

from kvpilot.kv.capacity import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_OVERHEAD_BYTES,
    GIB,
    VLLM_BLOCK_SIZES,
    KVCapacity,
    MemoryBudget,
    StartupMemoryCheck,
    capacity,
    check_block_size,
    kv_memory_budget,
    seqs_pool_share,
    startup_memory_check,
    vllm_batch_defaults,
)
from kvpilot.kv.size import KVFootprint, bytes_per_token, footprint, kv_element_bytes
from kvpilot.kv.spec import ContextLength, KVConfigError, KVSpec, context_length, kv_spec_from_config

__all__ = [
    "seqs_pool_share",
    "ContextLength",
    "context_length",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_OVERHEAD_BYTES",
    "GIB",
    "KVCapacity",
    "KVConfigError",
    "KVFootprint",
    "KVSpec",
    "MemoryBudget",
    "StartupMemoryCheck",
    "VLLM_BLOCK_SIZES",
    "bytes_per_token",
    "capacity",
    "check_block_size",
    "footprint",
    "kv_element_bytes",
    "kv_memory_budget",
    "kv_spec_from_config",
    "startup_memory_check",
    "vllm_batch_defaults",
]
