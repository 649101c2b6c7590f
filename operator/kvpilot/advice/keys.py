"""The keys ``kvpilot diagnose --what-if KEY=VALUE`` takes, apart so ``--help`` can list them without the engine.

vLLM's engine-arg names (``EngineArgs``, ``vllm/engine/arg_utils.py``), plus ``kv_cache_tokens`` (the KV capacity
itself) and ``replicas`` (data-parallel copies of the server). :mod:`kvpilot.advice.whatif` says what each does.
"""

WHAT_IF_KEYS: tuple[str, ...] = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "kv_cache_tokens",
    "gpu_memory_utilization",
    "kv_cache_memory_bytes",
    "kv_cache_dtype",
    "enable_prefix_caching",
    "replicas",
)
