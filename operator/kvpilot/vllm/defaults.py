"""vLLM's defaults and fixed numbers: each one defined here once, with the vLLM file and release it comes from.

Every other module (the KV math, the engine model, the diagnoser, the commands) imports these names
instead of restating a number. Unless a constant says otherwise it was read from vLLM 0.29.0, the release
the reference tier installs and runs (``tests/reference/``); ``tests/unit/vllm/test_defaults.py`` reads the
same values out of that wheel, so a constant that drifts from vLLM fails a test.

Pure: numbers and small functions on them, no I/O; imports only the unit :data:`GIB`.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvpilot.text.numbers import GIB

#: The vLLM release the constants below were read from (the reference tier's wheel).
VLLM_SOURCE_VERSION = "0.29.0"

# --- the KV cache: vllm/config/cache.py ``CacheConfig``, vllm/v1/core/block_pool.py ``BlockPool`` ---------------------

#: ``CacheConfig.DEFAULT_BLOCK_SIZE``: tokens per KV block when ``--block-size`` is not given.
DEFAULT_BLOCK_SIZE = 16
#: The ``--block-size`` values kvpilot accepts: vLLM's ``BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]``
#: (``vllm/config/cache.py`` up to the v0.2x line, where argparse took its choices from the Literal). vLLM 0.29.0
#: types the field ``int > 0`` and leaves the check to the attention backends, which support only some sizes;
#: kvpilot keeps the listed set.
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: The block size vLLM's CPU platform sets when ``--block-size`` is not given (vLLM 0.32.0,
#: ``vllm/platforms/cpu.py`` ``CpuPlatform.check_and_update_config``: ``cache_config.block_size = 128``; CUDA keeps
#: :data:`DEFAULT_BLOCK_SIZE` unless an attention backend prefers another).
CPU_DEFAULT_BLOCK_SIZE = 128
#: ``CacheConfig.gpu_memory_utilization`` default (``Field(default=0.92, gt=0, le=1)``).
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
#: Blocks of the pool vLLM never hands out: ``BlockPool.__init__`` takes block 0 as ``null_block``, and
#: ``get_kv_cache_configs`` / ``check_enough_kv_cache_memory`` (vllm/v1/core/kv_cache_utils.py) plan the startup
#: fit check and the estimated maximum model length against the usable blocks (available memory minus one
#: block). docs/background.md §4: 21,520 tokens = 1,345 blocks, 1,344 usable.
NULL_BLOCKS = 1
#: FlashMLA sparse FP8 format (``--kv-cache-dtype fp8_ds_mla``): 656 bytes per token per layer
#: (vllm/v1/attention/backends/mla/flashmla_sparse.py, "each token's KV cache is 656 Bytes").
FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER = 656

# --- the batch defaults: vllm/engine/arg_utils.py ``EngineArgs.get_batch_defaults`` -----------------------------------
# The OpenAI API server's usage context (``vllm serve``); ``LLM(...)`` (the LLM_CLASS context) has larger ones.

#: ``--max-num-seqs`` below the large tier.
DEFAULT_MAX_NUM_SEQS = 256
#: ``--max-num-batched-tokens`` below the large tier; also the step budget that bounds a sliding window's blocks.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
#: The large tier: GPUs with at least this much memory whose name does not contain :data:`LARGE_TIER_EXCLUDED_NAME`.
LARGE_GPU_MEMORY_BYTES = 70 * GIB
#: "NOTE(Kuntai): Setting large `max_num_batched_tokens` for A100 reduces throughput, see PR #17885".
LARGE_TIER_EXCLUDED_NAME = "a100"
LARGE_GPU_MAX_NUM_SEQS = 1024
LARGE_GPU_MAX_NUM_BATCHED_TOKENS = 8192
#: The largest tier ("GPUs like B200/B300"), checked first and whatever the name.
HUGE_GPU_MEMORY_BYTES = 160 * GIB
HUGE_GPU_MAX_NUM_SEQS = 1024
HUGE_GPU_MAX_NUM_BATCHED_TOKENS = 16384

# --- the admission cap below max_num_seqs: vllm/config/scheduler.py ``SchedulerConfig`` (vLLM 0.31+) ------------------
#: The first release with ``max_num_active_seqs`` ("Maximum number of requests the scheduler admits into RUNNING";
#: ``Scheduler.max_num_active_reqs``, vllm/v1/core/sched/scheduler.py, default ``max_num_seqs``, at most it): an
#: admission cap that no metric shows (read from the vLLM 0.32.0 wheel).
MAX_NUM_ACTIVE_SEQS_SINCE = (0, 31)


def has_max_num_active_seqs(version: tuple[int, ...]) -> bool:
    """True when vLLM ``version`` (``(0, 32, 0)``) has ``--max-num-active-seqs``."""
    return version[:2] >= MAX_NUM_ACTIVE_SEQS_SINCE


# --- max_model_len: vllm/config/model.py ``_get_and_verify_max_len``, ------------------------------------------------
# vllm/transformers_utils/model_arch_config_convertor.py ``derive_max_model_len_and_key``

#: The text config's keys vLLM takes the model's context from: the smallest present wins, and a truthy
#: ``model_max_length`` overrides them all.
MAX_MODEL_LEN_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
#: RoPE types whose ``factor`` does not lengthen the context (``rope_type not in ("su", "longrope", "llama3")``);
#: ``yarn`` restarts from ``original_max_position_embeddings`` before the factor applies.
ROPE_TYPES_WITHOUT_CONTEXT_FACTOR = ("su", "longrope", "llama3")
#: ``model_type``s whose context is already scaled ("Gemma3's max_model_len (128K) is already scaled by RoPE").
ROPE_PRESCALED_MODEL_TYPES = ("gemma3",)
#: Legacy RoPE type names vLLM rewrites before it reads them (vllm/transformers_utils/config.py
#: ``patch_legacy_rope_type``): ``su`` is ``longrope``, ``mrope`` is ``default``.
LEGACY_ROPE_TYPES = {"su": "longrope", "mrope": "default"}
#: The environment variable that lets ``--max-model-len`` exceed the derived length.
ALLOW_LONG_MAX_MODEL_LEN_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"


def is_large_gpu(gpu_memory_bytes: int | None, gpu_name: str | None) -> bool:
    """True when vLLM gives a GPU of ``gpu_memory_bytes`` bytes called ``gpu_name`` the large batch defaults
    (1,024 sequences): at least :data:`HUGE_GPU_MEMORY_BYTES`, or at least :data:`LARGE_GPU_MEMORY_BYTES` and
    not an A100 (name, any case). False when the memory is unknown (vLLM: no device, memory 0).
    """
    memory = gpu_memory_bytes or 0
    if memory >= HUGE_GPU_MEMORY_BYTES:
        return True
    return memory >= LARGE_GPU_MEMORY_BYTES and LARGE_TIER_EXCLUDED_NAME not in (gpu_name or "").lower()


def vllm_batch_defaults(gpu_memory_bytes: int | None, gpu_name: str | None) -> tuple[int, int]:
    """The default ``(max_num_seqs, max_num_batched_tokens)`` of ``vllm serve`` on a GPU of ``gpu_memory_bytes``
    bytes called ``gpu_name`` (either may be None: unknown counts as the small tier), before the clamps of
    :func:`resolve_batch_limits`.

    ``EngineArgs.get_batch_defaults`` (vllm/engine/arg_utils.py, vLLM 0.29.0, OPENAI_API_SERVER): 1,024 and 16,384
    from 160 GiB; 1,024 and 8,192 from 70 GiB unless the name says A100; else 256 and 2,048.
    """
    memory = gpu_memory_bytes or 0
    if memory >= HUGE_GPU_MEMORY_BYTES:
        return HUGE_GPU_MAX_NUM_SEQS, HUGE_GPU_MAX_NUM_BATCHED_TOKENS
    if is_large_gpu(memory, gpu_name):
        return LARGE_GPU_MAX_NUM_SEQS, LARGE_GPU_MAX_NUM_BATCHED_TOKENS
    return DEFAULT_MAX_NUM_SEQS, DEFAULT_MAX_NUM_BATCHED_TOKENS


@dataclass(frozen=True)
class BatchLimits:
    """The two scheduler limits a server runs with (``max_num_seqs`` requests, ``max_num_batched_tokens`` tokens)."""

    max_num_seqs: int
    max_num_batched_tokens: int


def resolve_batch_limits(
    gpu_memory_bytes: int | None,
    gpu_name: str | None,
    *,
    max_model_len: int,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    enable_chunked_prefill: bool = True,
    throughput_mode: bool = False,
) -> BatchLimits:
    """The limits vLLM runs with when ``max_num_seqs`` / ``max_num_batched_tokens`` (None: not set) are left to it.

    As ``EngineArgs._set_default_max_num_seqs_and_batched_tokens_args`` (vllm/engine/arg_utils.py, vLLM 0.29.0)
    sets them, in its order:

    1. each unset limit takes the GPU tier's default (:func:`vllm_batch_defaults`), doubled by
       ``--performance-mode throughput`` (``throughput_mode``);
    2. an unset budget: at least ``max_model_len`` without chunked prefill, then at most
       ``max_num_seqs × max_model_len``;
    3. an unset ``max_num_seqs``: at most the budget.

    A limit the user set is kept as given.
    """
    seqs_default, budget_default = vllm_batch_defaults(gpu_memory_bytes, gpu_name)
    seqs = seqs_default * (2 if throughput_mode else 1) if max_num_seqs is None else max_num_seqs
    if max_num_batched_tokens is None:
        budget = budget_default * (2 if throughput_mode else 1)
        if not enable_chunked_prefill:
            budget = max(max_model_len, budget)
        budget = min(seqs * max_model_len, budget)
    else:
        budget = max_num_batched_tokens
    if max_num_seqs is None:
        seqs = min(seqs, budget)
    return BatchLimits(seqs, budget)


__all__ = [
    "ALLOW_LONG_MAX_MODEL_LEN_ENV",
    "BatchLimits",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER",
    "HUGE_GPU_MAX_NUM_BATCHED_TOKENS",
    "HUGE_GPU_MAX_NUM_SEQS",
    "HUGE_GPU_MEMORY_BYTES",
    "LARGE_GPU_MAX_NUM_BATCHED_TOKENS",
    "LARGE_GPU_MAX_NUM_SEQS",
    "LARGE_GPU_MEMORY_BYTES",
    "LARGE_TIER_EXCLUDED_NAME",
    "LEGACY_ROPE_TYPES",
    "MAX_MODEL_LEN_KEYS",
    "NULL_BLOCKS",
    "ROPE_PRESCALED_MODEL_TYPES",
    "ROPE_TYPES_WITHOUT_CONTEXT_FACTOR",
    "VLLM_BLOCK_SIZES",
    "VLLM_SOURCE_VERSION",
    "is_large_gpu",
    "resolve_batch_limits",
    "vllm_batch_defaults",
]
