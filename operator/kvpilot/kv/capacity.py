"""KV capacity: tokens, blocks, concurrency and startup feasibility, the way vLLM computes them.

Pure arithmetic, each vLLM formula defined here once (the engine model, the exporter, ``kvpilot simulate``'s
startup line and the demo call these functions). Sources: vLLM 0.29.0 (the reference wheel),
``vllm/v1/core/kv_cache_utils.py`` and ``vllm/v1/worker/`` as cited per function; docs/background.md §2, §4, §7:

* Blocks: ``num_blocks = available_memory // bytes_per_block`` (``get_kv_cache_config_from_groups``), i.e.
  ``kv_memory // (block_size × bytes_per_token)``, rounded down (:func:`pool_blocks`). The count includes block 0,
  the null block ``BlockPool`` reserves, so usable blocks = ``num_blocks - 1`` (docs/background.md §4: 21,520
  tokens = 1,345 blocks, 1,344 usable).
* Concurrency: ``num_blocks / sum of cdiv(max_memory_usage_bytes, page_size_bytes)`` over the groups
  (``get_max_concurrency_for_kv_cache_config``), for full attention ``num_blocks / cdiv(max_model_len,
  block_size)`` (:func:`max_concurrency`); the logged ``GPU KV cache size`` is ``int(max_concurrency ×
  max_model_len)`` (``get_kv_cache_capacity``, :func:`kv_cache_capacity`).
* Fits: startup fails when one ``max_model_len`` request needs more than the available memory less one block,
  the null block (``get_kv_cache_configs`` → ``_check_enough_kv_cache_memory``), i.e. when it needs more blocks
  than the usable ones; the "estimated maximum model length" is the largest length whose blocks fit in the
  usable ones (``_estimate_max_model_len_from_groups``: a binary search).
* Available KV memory from the GPU: ``ceil(total × gpu_memory_utilization)`` (``request_memory``,
  vllm/v1/worker/utils.py) ``− weights − (activation peak + non-torch memory + CUDA graphs)``
  (``Worker.determine_available_memory``, vllm/v1/worker/gpu_worker.py). The overhead is not knowable offline;
  :data:`DEFAULT_OVERHEAD_BYTES` is what the reference deployment leaves (see its comment).
* Startup free-memory check: vLLM refuses to start when ``free < ceil(gpu_memory_utilization × total)``
  ("Free memory on device … on startup is less than desired GPU memory utilization", ``request_memory``), see
  :func:`startup_memory_check`.

vLLM's own defaults (block size, utilization, batch tiers) live in :mod:`kvpilot.vllm.defaults`; the bounds
every option is checked against in :mod:`kvpilot.kv.bounds`.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, replace
from typing import TypedDict

from kvpilot.kv.bounds import MAX_COUNT, MAX_MEMORY_BYTES, MAX_TOKENS
from kvpilot.kv.size import KVFootprint, check_physical, footprint
from kvpilot.kv.spec import KVConfigError, KVSpec, ceil_div, check_whole, kv_spec_from_config
from kvpilot.kv.speculative import DraftLayers
from kvpilot.text.documents import JsonObject
from kvpilot.text.numbers import GIB, count, gib
from kvpilot.vllm.defaults import (
    ALLOW_LONG_MAX_MODEL_LEN_ENV,
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    DEFAULT_MAX_NUM_SEQS,
    HUGE_GPU_MAX_NUM_BATCHED_TOKENS,
    LARGE_GPU_MAX_NUM_BATCHED_TOKENS,
    LARGE_GPU_MAX_NUM_SEQS,
    NULL_BLOCKS,
    VLLM_BLOCK_SIZES,
    is_large_gpu,
    vllm_batch_defaults,
)


def requested_memory_bytes(total_bytes: int | float, gpu_memory_utilization: float) -> int:
    """Bytes vLLM claims of a GPU: ``ceil(total × gpu_memory_utilization)`` (``request_memory``,
    vllm/v1/worker/utils.py, vLLM 0.29.0). The KV pool, the weights and the activations all come out of it.
    """
    return math.ceil(total_bytes * gpu_memory_utilization)


#: The reference deployment (docs/background.md §7, §9): Qwen2.5-1.5B-Instruct on one 8 GiB GPU at
#: ``--gpu-memory-utilization 0.60``, whose vLLM 0.29.0 logged a GPU KV cache of 21,520 tokens of 28,672 bytes
#: (1,345 blocks of 16); its weights are 1,543,714,304 bf16 parameters (the checkpoint's safetensors).
REFERENCE_GPU_MEMORY_BYTES = 8 * GIB
REFERENCE_GPU_MEMORY_UTILIZATION = 0.60
REFERENCE_WEIGHTS_BYTES = 1_543_714_304 * 2
REFERENCE_KV_TOKENS = 21_520
REFERENCE_BYTES_PER_TOKEN = 28_672
#: Estimated non-weight, non-KV GPU memory of a vLLM instance (activation peak of the profiling run, CUDA
#: context/NCCL "non-torch" memory, CUDA graphs), bytes: what the reference deployment leaves after its weights
#: and its KV, ``ceil(8 GiB × 0.60) − 3,087,428,608 − 21,520 × 28,672 = 1,449,510,708`` (1.35 GiB), so a pool
#: derived from the GPU's memory reproduces its 21,520 tokens exactly. vLLM's profile in case C01 (non_torch
#: 0.35 GiB, activation peak ~2 GiB at 20k tokens without chunked prefill) shows it varies with model and flags:
#: pass the real value (``--overhead-memory``) when known.
DEFAULT_OVERHEAD_BYTES = (
    requested_memory_bytes(REFERENCE_GPU_MEMORY_BYTES, REFERENCE_GPU_MEMORY_UTILIZATION)
    - REFERENCE_WEIGHTS_BYTES
    - REFERENCE_KV_TOKENS * REFERENCE_BYTES_PER_TOKEN
)
#: Which vLLM's memory accounting a derived KV pool follows, and how far releases differ (sources: vLLM
#: 0.29 ``vllm/envs.py`` ``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS`` default 1 and its startup log
#: "CUDA graph memory profiling is enabled (default since v0.21.0)"; vLLM PR #30515 added the estimate;
#: vLLM issue #45178 measured 245,840 vs 769,888 KV tokens with it on vs off on a B200).
MEMORY_ACCOUNTING_NOTE = (
    "memory accounting of vLLM 0.21-0.29: total × utilization − weights − activation peak − non-torch memory − "
    "estimated CUDA-graph memory (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=1, the default since 0.21); releases "
    "before 0.21, or that variable at 0, leave the graphs out and size a larger pool by their memory (0.36 GiB "
    "in one vLLM 0.27 log, 3x fewer tokens in vLLM issue 45178): treat the derived figure as within that spread "
    "and pass --kv-memory from the server's 'Available KV cache memory' line when you have it"
)


def pool_blocks(kv_memory_bytes: int, block_size: int, bytes_per_token: int) -> int:
    """Blocks of a pool of ``kv_memory_bytes`` bytes: ``kv_memory // (block_size × bytes_per_token)``, the null
    block included (``get_kv_cache_config_from_groups``: ``available_memory // bytes_per_block``, vLLM 0.29.0).
    """
    return kv_memory_bytes // (block_size * bytes_per_token)


def pool_tokens(kv_memory_bytes: int, block_size: int, bytes_per_token: int) -> int:
    """Tokens of a pool of ``kv_memory_bytes``: its whole blocks (:func:`pool_blocks`) × ``block_size`` (negative
    when the memory is: the blocks it is short of).
    """
    return pool_blocks(kv_memory_bytes, block_size, bytes_per_token) * block_size


def tokens_at_utilization(tokens: int, block: int, bytes_per_token: int, gpu: int, util: float, new: float) -> int:
    """The pool of ``tokens`` tokens after ``--gpu-memory-utilization util -> new`` on a GPU of ``gpu`` bytes: its
    memory grows by ``ceil(gpu × new) − ceil(gpu × util)`` (:func:`requested_memory_bytes`; weights and
    activations stay), cut into whole blocks of ``block`` tokens. E.g. 21,520 tokens of 28,672 B, 8 GiB, 0.6 ->
    0.7: ``(617,021,440 + 858,993,459) // 458,752 = 3,217`` blocks, 51,472 tokens.
    """
    more = requested_memory_bytes(gpu, new) - requested_memory_bytes(gpu, util)
    return pool_tokens(tokens * bytes_per_token + more, block, bytes_per_token)


def usable_blocks(num_blocks: int) -> int:
    """Blocks requests can hold: all but the null block (:data:`~kvpilot.vllm.defaults.NULL_BLOCKS`), never < 0."""
    return max(0, num_blocks - NULL_BLOCKS)


def blocks_per_request(max_model_len: int, block_size: int) -> int:
    """Blocks one full-attention request of ``max_model_len`` tokens holds: ``cdiv(max_model_len, block_size)``
    (``FullAttentionSpec.max_memory_usage_bytes`` / ``page_size_bytes``, vllm/v1/kv_cache_interface.py).
    """
    return ceil_div(max_model_len, block_size)


def max_concurrency(num_blocks: int, blocks_per_full_request: int) -> float:
    """Requests of ``max_model_len`` the pool holds at once: ``num_blocks / blocks per request``
    (``get_max_concurrency_for_kv_cache_config``, vLLM 0.29.0; the null block is counted, as vLLM counts it).
    E.g. 1,345 blocks at 8,192 tokens of 16-token blocks: 1,345 / 512 = 2.626953125 (logged "2.63x").
    """
    return num_blocks / blocks_per_full_request


def kv_cache_capacity(num_gpu_blocks: int, block_size: int, max_model_len: int) -> tuple[int, float]:
    """``(kv_cache_size_tokens, kv_cache_max_concurrency)`` as vLLM 0.29.0 logs and labels them for one
    full-attention group: concurrency :func:`max_concurrency`, tokens ``int(concurrency × max_model_len)``
    (``get_kv_cache_capacity``, vllm/v1/core/kv_cache_utils.py). Equal to ``num_gpu_blocks × block_size`` when
    ``max_model_len`` is a multiple of the block size. Example: 1,345 blocks of 16 at 8,192 → (21520, 2.626953125).
    """
    concurrency = max_concurrency(num_gpu_blocks, blocks_per_request(max_model_len, block_size))
    return int(concurrency * max_model_len), concurrency


def _check_count(value: object, name: str, upper: int = MAX_COUNT) -> int:
    """``value`` as an int in ``[1, upper]`` (a whole number, :func:`~kvpilot.kv.spec.check_whole`)."""
    return check_whole(value, name, upper=upper)


def _check_utilization(value: object, name: str = "--gpu-memory-utilization") -> float:
    """``value`` as a float in (0, 1] (vLLM: ``Field(gt=0, le=1)``); KVConfigError naming ``name`` else."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise KVConfigError(name, f"must be a number in (0, 1], got {value!r}")
    return float(value)


def _check_size(value: object, name: str, *, positive: bool = False) -> int | float:
    """``value`` as a size in bytes in ``[0, MAX_MEMORY_BYTES]`` (above 0 with ``positive``), an int or a finite
    float; KVConfigError naming ``name`` else (:data:`~kvpilot.kv.bounds.MAX_MEMORY_BYTES`, 64 TiB).
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise KVConfigError(name, f"must be a size in bytes, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise KVConfigError(name, f"must be a size {'>' if positive else '>='} 0 bytes, got {value!r}")
    if value > MAX_MEMORY_BYTES:
        raise KVConfigError(name, f"{gib(value)} is above {gib(MAX_MEMORY_BYTES)}, kvpilot's bound for a memory size")
    return value


def check_block_size(value: object, name: str = "--block-size") -> int:
    """``value`` as an int when it is one of :data:`VLLM_BLOCK_SIZES` (tokens per KV block).

    Raises:
        KVConfigError: naming ``name`` for any other value (vLLM refuses it: "invalid choice").
    """
    size = _check_count(value, name, upper=max(VLLM_BLOCK_SIZES) * 2)
    if size not in VLLM_BLOCK_SIZES:
        raise KVConfigError(name, f"{size} is not a vLLM block size (one of {', '.join(map(str, VLLM_BLOCK_SIZES))})")
    return size


@dataclass(frozen=True)
class MemoryBudget:
    """Where the KV memory of one GPU comes from (bytes).

    Attributes:
        kv_memory_bytes: memory for the KV block pool ("Available KV cache memory").
        source: ``kv-memory`` (given) or ``gpu-memory`` (derived: total × utilization − weights − overhead).
        gpu_memory_bytes / gpu_memory_utilization / weights_bytes / overhead_bytes: the inputs, or None.
        non_kv_bytes: ``total × utilization − kv_memory`` (weights, activations, graphs), when total is known.
    """

    kv_memory_bytes: int
    source: str
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float | None = None
    weights_bytes: int | None = None
    overhead_bytes: int | None = None
    non_kv_bytes: int | None = None


def kv_memory_budget(
    *,
    kv_memory_bytes: int | None = None,
    gpu_memory_bytes: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    weights_bytes: int | None = None,
    overhead_bytes: int | None = DEFAULT_OVERHEAD_BYTES,
) -> MemoryBudget | None:
    """The KV memory of one GPU: given (``kv_memory_bytes``) or derived as vLLM 0.29.0 does,
    ``requested − weights − overhead`` with ``requested = ceil(total × utilization)``
    (:func:`requested_memory_bytes`; ``Worker.determine_available_memory``, vllm/v1/worker/gpu_worker.py).

    Returns None when neither ``kv_memory_bytes`` nor ``gpu_memory_bytes`` is given. A negative result
    is clamped to 0 (vLLM: "No available memory for the cache blocks").

    Raises:
        KVConfigError: ``--gpu-memory-utilization`` outside (0, 1]; ``--weights-memory`` missing when the
            budget is derived from ``--gpu-memory``; a size negative, not whole or above 64 TiB; a KV pool
            larger than the GPU it is on (``--kv-memory`` above ``--gpu-memory``).
    """
    util = _check_utilization(gpu_memory_utilization)
    for value, name in (
        (kv_memory_bytes, "--kv-memory"),
        (gpu_memory_bytes, "--gpu-memory"),
        (weights_bytes, "--weights-memory"),
        (overhead_bytes, "--overhead-memory"),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise KVConfigError(name, f"must be a whole number of bytes, got {value!r}")
        if value is not None:
            _check_size(value, name, positive=name == "--gpu-memory")
    if kv_memory_bytes is not None:
        if gpu_memory_bytes is not None and kv_memory_bytes > gpu_memory_bytes:
            raise KVConfigError(
                "--kv-memory",
                f"{gib(kv_memory_bytes)} is more than the GPU's memory, --gpu-memory {gib(gpu_memory_bytes)}: "
                "the KV pool is part of the GPU's memory (give the figures of one GPU)",
            )
        non_kv = None if gpu_memory_bytes is None else requested_memory_bytes(gpu_memory_bytes, util) - kv_memory_bytes
        return MemoryBudget(
            kv_memory_bytes,
            "kv-memory",
            gpu_memory_bytes,
            util if gpu_memory_bytes else None,
            weights_bytes,
            None,
            non_kv,
        )
    if gpu_memory_bytes is None:
        return None
    if weights_bytes is None:
        raise KVConfigError(
            "--weights-memory",
            "needed with --gpu-memory (or give --kv-memory, or a local model folder holding *.safetensors)",
        )
    overhead = DEFAULT_OVERHEAD_BYTES if overhead_bytes is None else overhead_bytes
    non_kv = weights_bytes + overhead
    kv = max(0, requested_memory_bytes(gpu_memory_bytes, util) - non_kv)
    return MemoryBudget(kv, "gpu-memory", gpu_memory_bytes, util, weights_bytes, overhead, non_kv)


@dataclass(frozen=True)
class CapacityInputs:
    """``inputs`` of :class:`KVCapacity`: the options :func:`capacity` used (``-o json``'s ``inputs`` object)."""

    kv_cache_dtype: str
    tensor_parallel_size: int
    data_parallel_size: int
    pipeline_parallel_size: int
    max_model_len: int
    block_size: int
    max_num_batched_tokens: int
    kv_memory_bytes: int | None
    gpu_memory_bytes: int | None
    gpu_memory_utilization: float
    weights_bytes: int | None
    overhead_bytes: int | None
    memory_source: str | None
    speculative_method: str | None


@dataclass(frozen=True)
class KVCapacity:
    """KV numbers of one model on one GPU (one data-parallel replica's rank).

    Attributes (bytes, tokens, blocks; ``None`` when the memory is unknown):
        spec / fp: the model facts and its per-GPU footprint.
        bytes_per_token: bytes each token adds (per GPU, after TP; full-attention/MLA layers).
        state_bytes_per_request: fixed per-request bytes (sliding windows at their maximum + Mamba state).
        request_bytes: what one ``max_model_len`` request holds at most.
        kv_memory_bytes: the KV pool memory.
        kv_blocks: blocks in the pool incl. the null block; usable_blocks = kv_blocks − 1.
        kv_tokens: ``kv_blocks × block_size`` (vLLM's ``GPU KV cache size``).
        max_concurrency: ``kv_blocks / blocks per max_model_len request`` (vLLM's ``Maximum concurrency``).
        fits: one ``max_model_len`` request fits in the usable blocks (else vLLM refuses to start).
        max_model_len_that_fits: the largest ``--max-model-len`` vLLM would start with: what the usable blocks
            hold, capped at the model's context (``spec.context.limit``); ``None``: no limit from KV and no
            context known.
        pool_max_model_len: the longest request the usable blocks hold, uncapped (``None``: any length, e.g.
            no full-attention layers).
        min_gpu_memory_utilization_to_fit: smallest utilization (0–1, may exceed 1 = impossible) at which
            one request fits, when the GPU memory is known and the pool is part of ``utilization × total``.
        estimate: True for hybrid/sliding models or a derived (``--gpu-memory``) budget.
        inputs: the inputs used (for ``-o json``).
        notes: remarks.
    """

    spec: KVSpec
    fp: KVFootprint
    max_model_len: int
    block_size: int
    data_parallel_size: int
    bytes_per_token: int
    state_bytes_per_request: int
    request_bytes: int
    inputs: CapacityInputs
    budget: MemoryBudget | None = None
    kv_memory_bytes: int | None = None
    kv_blocks: int | None = None
    usable_blocks: int | None = None
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    fits: bool | None = None
    max_model_len_that_fits: int | None = None
    pool_max_model_len: int | None = None
    min_gpu_memory_utilization_to_fit: float | None = None
    estimate: bool = False
    notes: tuple[str, ...] = ()
    draft: DraftLayers | None = None
    draft_bytes_per_token: int = 0

    def speculative_json(self) -> JsonObject | None:
        """``-o json``'s ``speculative`` object: the draft's method, KV layers, bytes per token (per GPU) and
        the target's own bytes per token; None without ``--speculative-config``.
        """
        if self.draft is None:
            return None
        return {
            "method": self.draft.method,
            "draft_layers": self.draft.num_layers,
            "draft_layers_source": self.draft.source,
            "draft_bytes_per_token": self.draft_bytes_per_token,
            "target_bytes_per_token": self.bytes_per_token - self.draft_bytes_per_token,
        }

    def to_json(self) -> JsonObject:
        """The ``kvpilot kv -o json`` object (docs/kv.md, "Command line"): ``bytes_per_token``, ``kv_tokens``,
        ``kv_blocks``, ``max_concurrency``, ``fits``, ``max_model_len_that_fits``, more figures, and ``inputs``.
        """
        return {
            "bytes_per_token": self.bytes_per_token,
            "kv_tokens": self.kv_tokens,
            "kv_blocks": self.kv_blocks,
            "usable_blocks": self.usable_blocks,
            "max_concurrency": self.max_concurrency,
            "fits": self.fits,
            "max_model_len_that_fits": self.max_model_len_that_fits,
            "pool_max_model_len": self.pool_max_model_len,
            "derived_max_model_len": None if self.spec.context is None else self.spec.context.limit,
            "min_gpu_memory_utilization_to_fit": self.min_gpu_memory_utilization_to_fit,
            "kv_memory_bytes": self.kv_memory_bytes,
            "request_bytes": self.request_bytes,
            "state_bytes_per_request": self.state_bytes_per_request,
            "slot_bytes_per_token": self.fp.slot_bytes_per_token,
            "kv_tokens_all_replicas": None if self.kv_tokens is None else self.kv_tokens * self.data_parallel_size,
            "estimate": self.estimate,
            "model": {
                "model_type": self.spec.model_type,
                "attention": self.spec.attention,
                "num_layers": self.spec.num_layers,
                "full_attention_layers": self.fp.full_layers,
                "sliding_window_layers": self.fp.sliding_layers,
                "state_layers": self.fp.state_layers,
                "sliding_window": self.spec.sliding_window,
                "num_kv_heads": self.spec.num_kv_heads,
                "kv_heads_per_gpu": self.fp.kv_heads_per_gpu,
                "head_dim": self.spec.head_dim,
                "model_dtype": self.spec.model_dtype,
                "kv_element_bytes": self.fp.element_bytes,
                "defaults_used": list(self.spec.defaults_used),
            },
            "speculative": self.speculative_json(),
            "inputs": asdict(self.inputs),
            "notes": list(self.notes),
        }


def _blocks_for(fp: KVFootprint, tokens: int, block_size: int, mnbt: int) -> int:
    """Pool blocks (of ``block_size`` slots across the per-token layers) one request of ``tokens`` needs."""
    return ceil_div(fp.request_bytes(tokens, block_size, mnbt), block_size * fp.slot_bytes_per_token)


def _max_len_that_fits(fp: KVFootprint, blocks: int, block_size: int, mnbt: int) -> int | None:
    """Largest request length whose blocks fit in ``blocks`` (the usable ones; a binary search, as vLLM's
    ``_estimate_max_model_len_from_groups`` does); None when any length up to :data:`MAX_TOKENS` fits.
    """

    def fits(n: int) -> bool:
        return _blocks_for(fp, n, block_size, mnbt) <= blocks

    if not fits(1):
        return 0
    hi = MAX_TOKENS + 1
    if fits(hi):
        return None
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def capacity(  # noqa: C901
    config: JsonObject | KVSpec,
    *,
    kv_cache_dtype: str = "auto",
    tensor_parallel_size: int = 1,
    data_parallel_size: int = 1,
    max_model_len: int | None = None,
    block_size: int = DEFAULT_BLOCK_SIZE,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    kv_memory_bytes: int | None = None,
    gpu_memory_bytes: int | None = None,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    weights_bytes: int | None = None,
    overhead_bytes: int | None = None,
    pipeline_parallel_size: int = 1,
    draft: DraftLayers | None = None,
    draft_tensor_parallel_size: int | None = None,
) -> KVCapacity:
    """KV capacity of a model on one GPU, with vLLM's rounding (module docstring for sources).

    Args:
        config: parsed config.json or a :class:`KVSpec`.
        kv_cache_dtype: vLLM ``--kv-cache-dtype`` (``auto``, ``bfloat16``, ``fp8``, ``fp8_e4m3`` …).
        tensor_parallel_size: TP size (divides KV heads, not MLA).
        data_parallel_size: replicas (never divides).
        max_model_len: tokens of one request; default the config's ``max_position_embeddings``.
        block_size: tokens per block (16).
        max_num_batched_tokens: bounds sliding-window blocks (2048).
        kv_memory_bytes: KV pool memory per GPU, as vLLM logs "Available KV cache memory".
        gpu_memory_bytes: memory of one GPU (bytes); with ``gpu_memory_utilization``, ``weights_bytes`` and
            ``overhead_bytes`` it derives the pool memory when ``kv_memory_bytes`` is not given; with
            ``kv_memory_bytes`` the GPU memory only serves ``min_gpu_memory_utilization_to_fit``.
        gpu_memory_utilization: vLLM ``--gpu-memory-utilization`` (ratio 0-1).
        weights_bytes: model weight bytes per GPU.
        overhead_bytes: non-KV memory per GPU (activations, CUDA graphs), bytes.
        pipeline_parallel_size: PP stages; each GPU holds the KV of its stage's layers
            (:func:`pp_stage_layers`) and vLLM sizes one block count for all workers, so the stage with
            the most layers binds. Models with sliding-window or Mamba layers are refused with PP.
        draft: the speculative-decoding draft's KV layers (:func:`kvpilot.kv.speculative.draft_layers`):
            they share the pool, so each token costs the target's bytes plus the draft layers' bytes
            (``num_layers x`` one draft layer's bytes at the target's KV dtype); refused with PP > 1.
        draft_tensor_parallel_size: the draft's TP size (vLLM: 1 or the target's), default the target's.

    Returns:
        :class:`KVCapacity`; memory-dependent fields are None when no memory was given.

    Raises:
        KVConfigError: naming the config field or option at fault.
    """
    spec = config if isinstance(config, KVSpec) else kv_spec_from_config(config)
    block_size = check_block_size(block_size, "--block-size")
    dp = _check_count(data_parallel_size, "--data-parallel-size")
    _check_count(tensor_parallel_size, "--tensor-parallel-size")
    mnbt = _check_count(max_num_batched_tokens, "--max-num-batched-tokens", upper=MAX_TOKENS)
    if max_model_len is None:
        if spec.context is None:
            raise KVConfigError(
                "--max-model-len", "needed: the config has no max_position_embeddings (nor another length vLLM reads)"
            )
        max_model_len = spec.context.default
    max_model_len = _check_count(max_model_len, "--max-model-len", upper=MAX_TOKENS)
    fp = footprint(spec, kv_cache_dtype, tensor_parallel_size)
    notes = list(spec.notes)
    stages = pp_stage_layers(spec.num_layers, pipeline_parallel_size)
    if len(stages) > 1:
        if fp.sliding_layers or fp.state_layers or fp.full_layers != spec.num_layers:
            raise KVConfigError(
                "--pipeline-parallel-size", "not modelled for models with sliding-window or Mamba/linear layers"
            )
        binding = max(stages)
        fp = replace(fp, full_layers=binding, bytes_per_token=fp.layer_bytes_per_token * binding)
        notes.append(
            f"pipeline parallel: layers per stage {stages} (vLLM's get_pp_indices); the stage with {binding} "
            "layers binds (vLLM sizes one block count for every worker)"
        )
    draft_bytes = 0
    if draft is not None and draft.num_layers and draft.spec is not None:
        refuse_draft_with_pipeline_parallel(len(stages))
        draft_tp = tensor_parallel_size if draft_tensor_parallel_size is None else draft_tensor_parallel_size
        if draft_tp not in (1, tensor_parallel_size):
            raise KVConfigError(
                "--speculative-config draft_tensor_parallel_size",
                f"must be 1 or the target's tensor parallel size {tensor_parallel_size} (vLLM), got {draft_tp}",
            )
        per_layer = footprint(draft.spec, kv_cache_dtype, draft_tp).layer_bytes_per_token
        draft_bytes = draft.num_layers * per_layer
        fp = replace(
            fp, full_layers=fp.full_layers + draft.num_layers, bytes_per_token=fp.bytes_per_token + draft_bytes
        )
        check_physical(fp.bytes_per_token, fp.sliding_bytes_per_token, fp.state_bytes_per_request)
        notes.append(
            f"speculative decoding ({draft.method}): {draft.num_layers} draft layer(s) ({draft.source}) of "
            f"{count(per_layer, 'B')} per token share the pool: {count(fp.bytes_per_token - draft_bytes)} + "
            f"{count(draft_bytes, 'B')} per token (vLLM puts every attention layer, the drafter's included, in one "
            "KV cache group)"
        )
    elif draft is not None:
        notes.append(f"speculative decoding ({draft.method}): no draft layer holds KV cache ({draft.source})")
    context = spec.context
    if context is not None and max_model_len > context.limit:
        notes.append(
            f"max_model_len {count(max_model_len)} exceeds the model's context, {count(context.limit)} tokens "
            f"({context.source}, as vLLM derives it): vLLM refuses to start unless {ALLOW_LONG_MAX_MODEL_LEN_ENV}=1"
        )
    budget = kv_memory_budget(
        kv_memory_bytes=kv_memory_bytes,
        gpu_memory_bytes=gpu_memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        weights_bytes=weights_bytes,
        overhead_bytes=overhead_bytes,
    )
    request_bytes = fp.request_bytes(max_model_len, block_size, mnbt)
    estimate = fp.estimate
    if fp.estimate:
        notes.append(
            "estimate: vLLM's hybrid KV cache manager groups and pads layers; "
            "sliding-window and Mamba/linear-attention state are modelled as a fixed per-request term"
        )
    inputs = CapacityInputs(
        kv_cache_dtype=kv_cache_dtype,
        tensor_parallel_size=tensor_parallel_size,
        data_parallel_size=dp,
        pipeline_parallel_size=len(stages),
        max_model_len=max_model_len,
        block_size=block_size,
        max_num_batched_tokens=mnbt,
        kv_memory_bytes=kv_memory_bytes,
        gpu_memory_bytes=gpu_memory_bytes,
        gpu_memory_utilization=gpu_memory_utilization,
        weights_bytes=weights_bytes,
        overhead_bytes=None if budget is None or budget.source != "gpu-memory" else budget.overhead_bytes,
        memory_source=None if budget is None else budget.source,
        speculative_method=None if draft is None else draft.method,
    )
    result = KVCapacity(
        spec=spec,
        fp=fp,
        max_model_len=max_model_len,
        block_size=block_size,
        data_parallel_size=dp,
        bytes_per_token=fp.bytes_per_token,
        state_bytes_per_request=request_bytes - ceil_div(max_model_len, block_size) * block_size * fp.bytes_per_token,
        request_bytes=request_bytes,
        inputs=inputs,
        draft=draft,
        draft_bytes_per_token=draft_bytes,
    )
    if budget is None:
        return replace(result, estimate=estimate, notes=tuple(notes))
    if budget.source == "gpu-memory":
        estimate = True
        notes.append(
            f"KV memory derived: {gib(budget.gpu_memory_bytes)} × {budget.gpu_memory_utilization}"
            f" − weights {gib(budget.weights_bytes)} − overhead {gib(budget.overhead_bytes)}"
            " (estimate)"
        )
        notes.append(MEMORY_ACCOUNTING_NOTE)
    block_bytes = block_size * fp.slot_bytes_per_token
    blocks = pool_blocks(budget.kv_memory_bytes, block_size, fp.slot_bytes_per_token)
    usable = usable_blocks(blocks)
    per_request = _blocks_for(fp, max_model_len, block_size, mnbt)
    fits = per_request <= usable  # vLLM plans against the usable blocks: the null block is never a request's
    min_util = None
    if budget.gpu_memory_bytes and budget.non_kv_bytes is not None:
        if budget.non_kv_bytes >= 0:
            min_util = (budget.non_kv_bytes + (per_request + NULL_BLOCKS) * block_bytes) / budget.gpu_memory_bytes
        else:  # the pool is larger than utilization x total: the given figures come from other settings
            notes.append(
                f"--kv-memory {gib(budget.kv_memory_bytes)} is more than --gpu-memory x --gpu-memory-utilization "
                f"({gib(requested_memory_bytes(budget.gpu_memory_bytes, budget.gpu_memory_utilization or 1))}): "
                "the smallest utilization that fits is not computed (give the server's --gpu-memory-utilization)"
            )
    if usable == 0:
        notes.append("No available memory for the cache blocks (vLLM refuses to start)")
    elif not fits:
        notes.append(
            f"one request of max_model_len {count(max_model_len)} needs {gib(request_bytes)} of KV, "
            f"more than the {gib(usable * block_bytes)} of usable blocks ({count(usable)} of {count(blocks)}: "
            "vLLM keeps one as the null block): vLLM refuses to start"
        )
    pool_len = _max_len_that_fits(fp, usable, block_size, mnbt)
    fit_len = pool_len
    if context is not None and (pool_len is None or pool_len > context.limit):
        fit_len = context.limit
        notes.append(
            f"largest max_model_len that fits: the model's context, {count(context.limit)} tokens ({context.source}); "
            + (
                f"the pool could hold one request of {count(pool_len)} tokens"
                if pool_len is not None
                else "the pool holds requests of any length (no layer grows with it)"
                if not fp.bytes_per_token
                else f"the pool could hold one request of more than {count(MAX_TOKENS)} tokens"
            )
        )
    return replace(
        result,
        budget=budget,
        kv_memory_bytes=budget.kv_memory_bytes,
        kv_blocks=blocks,
        usable_blocks=usable,
        kv_tokens=blocks * block_size,
        max_concurrency=max_concurrency(blocks, per_request),
        fits=fits,
        max_model_len_that_fits=fit_len,
        pool_max_model_len=pool_len,
        min_gpu_memory_utilization_to_fit=min_util,
        estimate=estimate,
        notes=tuple(notes),
    )


def refuse_draft_with_pipeline_parallel(pipeline_parallel_size: int) -> None:
    """A draft model's KV layers are not modelled across pipeline stages (which stage holds them is vLLM's
    runner's choice): raises :class:`KVConfigError` naming ``--speculative-config`` when PP is above 1.
    """
    if pipeline_parallel_size > 1:
        raise KVConfigError("--speculative-config", "not modelled with --pipeline-parallel-size above 1")


def pp_stage_layers(num_layers: int, pipeline_parallel_size: int) -> list[int]:
    """Layers per pipeline stage, as vLLM splits them (``get_pp_indices``, ``vllm/distributed/utils.py``,
    vLLM 0.29, without ``VLLM_PP_LAYER_PARTITION``): ``num_layers // pp`` each, the remainder added one
    by one to the stages before the last (``partitions[-i] += 1`` for i = 2 .. remainder + 1).

    Raises:
        KVConfigError: a size below 1 or above the layer count.
    """
    pp = _check_count(pipeline_parallel_size, "--pipeline-parallel-size")
    if pp > num_layers:
        raise KVConfigError("--pipeline-parallel-size", f"{pp} stages for {num_layers} layers")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


class SeqsPoolShare(TypedDict):
    """What ``--max-num-seqs`` full-length requests can use of the KV pool (:func:`seqs_pool_share`)."""

    max_num_seqs: int
    pool_share: float | None
    full_length_requests_at_once: int | None


def seqs_pool_share(cap: KVCapacity, max_num_seqs: int) -> SeqsPoolShare:
    """How much of the KV pool ``max_num_seqs`` full-length requests can ever use.

    One ``max_model_len`` request takes ``kv_blocks / max_concurrency`` blocks (vLLM's concurrency
    figure, ``get_max_concurrency_for_kv_cache_config``), so ``max_num_seqs`` of them take
    ``max_num_seqs / max_concurrency`` of the pool: below 1, the rest of the pool can only hold cached
    prefixes; above 1, at most ``floor(max_concurrency)`` full-length requests fit at once.

    Returns:
        ``{"max_num_seqs", "pool_share" (ratio, capped at 1), "full_length_requests_at_once"}``;
        ``pool_share`` None without a pool size.

    Raises:
        KVConfigError: ``max_num_seqs`` below 1.
    """
    n = _check_count(max_num_seqs, "--max-num-seqs")
    if not cap.max_concurrency:
        return {"max_num_seqs": n, "pool_share": None, "full_length_requests_at_once": None}
    return {
        "max_num_seqs": n,
        "pool_share": min(1.0, n / cap.max_concurrency),
        "full_length_requests_at_once": min(n, int(cap.max_concurrency)),
    }


@dataclass(frozen=True)
class StartupMemoryCheck:
    """vLLM's startup check of free GPU memory against the utilization target (bytes, ratio 0–1).

    ``requested_bytes = ceil(gpu_memory_utilization × total)``; ``feasible`` iff ``free >= requested``;
    ``max_feasible_utilization = free / total``; ``shortfall_bytes = max(0, requested − free)``.
    """

    total_bytes: float
    free_bytes: float
    gpu_memory_utilization: float
    requested_bytes: float
    feasible: bool
    shortfall_bytes: float
    max_feasible_utilization: float

    def to_json(self) -> JsonObject:
        """``kvpilot kv -o json``'s ``startup_memory_check`` object: the fields above (bytes, ratio 0–1)."""
        return {
            "total_bytes": self.total_bytes,
            "free_bytes": self.free_bytes,
            "gpu_memory_utilization": self.gpu_memory_utilization,
            "requested_bytes": self.requested_bytes,
            "feasible": self.feasible,
            "shortfall_bytes": self.shortfall_bytes,
            "max_feasible_utilization": self.max_feasible_utilization,
        }


def startup_memory_check(
    total_bytes: int | float, free_bytes: int | float, gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
) -> StartupMemoryCheck:
    """Would vLLM start, given the GPU's free memory at startup?

    Source: ``request_memory`` (vllm/v1/worker/utils.py, vLLM 0.29.0) raises "Free memory on device … on startup
    is less than desired GPU memory utilization (U, R GiB)" when ``free < ceil(U × total)``
    (:func:`requested_memory_bytes`; case C20a: 19.77 GiB free of 22.05 GiB < 0.9 × 22.05 = 19.845 GiB). Other
    processes (or a larger CUDA context) holding memory make a utilization infeasible; the largest feasible one
    is ``free / total``.

    Raises:
        KVConfigError: for a total that is not above 0, a negative free memory, a free memory above the total,
            either above 64 TiB, or a utilization outside (0, 1].
    """
    _check_size(total_bytes, "--gpu-memory", positive=True)
    util = _check_utilization(gpu_memory_utilization)
    _check_size(free_bytes, "--free-gpu-memory")
    if free_bytes > total_bytes:
        raise KVConfigError(
            "--free-gpu-memory",
            f"{gib(free_bytes)} is more than the GPU's memory, --gpu-memory {gib(total_bytes)}",
        )
    requested = requested_memory_bytes(total_bytes, util)
    return StartupMemoryCheck(
        total_bytes=total_bytes,
        free_bytes=free_bytes,
        gpu_memory_utilization=util,
        requested_bytes=requested,
        feasible=free_bytes >= requested,
        shortfall_bytes=max(0.0, requested - free_bytes),
        max_feasible_utilization=min(1.0, free_bytes / total_bytes),
    )


__all__ = [
    "DEFAULT_BLOCK_SIZE",  # re-exported from kvpilot.vllm.defaults, with the other vLLM defaults below
    "NULL_BLOCKS",
    "REFERENCE_BYTES_PER_TOKEN",
    "REFERENCE_GPU_MEMORY_BYTES",
    "REFERENCE_GPU_MEMORY_UTILIZATION",
    "REFERENCE_KV_TOKENS",
    "REFERENCE_WEIGHTS_BYTES",
    "blocks_per_request",
    "kv_cache_capacity",
    "max_concurrency",
    "pool_blocks",
    "requested_memory_bytes",
    "usable_blocks",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "DEFAULT_OVERHEAD_BYTES",
    "GIB",
    "HUGE_GPU_MAX_NUM_BATCHED_TOKENS",
    "CapacityInputs",
    "KVCapacity",
    "LARGE_GPU_MAX_NUM_BATCHED_TOKENS",
    "LARGE_GPU_MAX_NUM_SEQS",
    "MemoryBudget",
    "StartupMemoryCheck",
    "VLLM_BLOCK_SIZES",
    "capacity",
    "check_block_size",
    "is_large_gpu",
    "kv_memory_budget",
    "startup_memory_check",
    "vllm_batch_defaults",
]
