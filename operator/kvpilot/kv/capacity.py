"""KV capacity: tokens, blocks, concurrency and startup feasibility, the way vLLM computes them.

Pure arithmetic. Sources (vLLM main, the v0.3x line: vllm/v1/core/kv_cache_utils.py at commit 001cabc1;
docs/background.md §2, §4, §7):

* Blocks: ``num_blocks = available_memory // page_size // num_layers`` (``get_num_blocks``,
  vllm/v1/core/kv_cache_utils.py), i.e. ``kv_memory // (block_size × bytes_per_token)``, rounded down.
* Tokens: ``GPU KV cache size: N tokens`` logs ``num_blocks // num_groups × block_size``
  (``_report_kv_cache_config``): the block count *including* block 0, the reserved null block
  (``BlockPool``), so usable blocks = ``num_blocks - 1`` (docs/background.md §4: 21,520 tokens = 1,345 blocks,
  1,344 usable).
* Concurrency: ``num_blocks / ceil(max_memory_usage_per_request / memory_per_block)``
  (``get_max_concurrency_for_kv_cache_config``), logged as ``Maximum concurrency for N tokens per request: X.XXx``.
* Fits: startup fails when one ``max_model_len`` request needs more KV memory than is available
  (``check_enough_kv_cache_memory``); the "estimated maximum model length" is the largest length whose
  blocks fit (``_estimate_max_model_len_from_groups``: binary search over ``ceil(len / block) × page``).
* Available KV memory from the GPU: ``total × gpu_memory_utilization − weights − (activation peak +
  non-torch memory + CUDA graphs)`` (vLLM's memory profiling, ``Memory profiling results`` log). The
  overhead is not knowable offline; :data:`DEFAULT_OVERHEAD_BYTES` is an estimate (see its comment).
* Startup free-memory check: vLLM refuses to start when ``free < gpu_memory_utilization × total``
  ("Free memory on device … on startup is less than desired GPU memory utilization"), see
  :func:`startup_memory_check`.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, overload

from kvpilot.kv.size import KVFootprint, footprint
from kvpilot.kv.spec import KVConfigError, KVSpec, ceil_div, kv_spec_from_config
from kvpilot.kv.speculative import DraftLayers
from kvpilot.text.numbers import count, gib

GIB = 2**30
#: vLLM's default ``--block-size`` for CUDA attention backends (CacheConfig), docs/background.md §4.
DEFAULT_BLOCK_SIZE = 16
#: The block sizes vLLM's ``--block-size`` accepts: ``BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]``
#: in ``vllm/config/cache.py`` (argparse choices come from the Literal). Newer sources type the field
#: ``int > 0`` and leave the check to the attention backends, which support only some sizes; kvpilot
#: keeps the listed set.
VLLM_BLOCK_SIZES = (1, 8, 16, 32, 64, 128, 256)
#: vLLM's default ``--gpu-memory-utilization`` for v0.30–v0.33 (0.9 up to v0.19), docs/background.md §7.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.92
#: vLLM's default ``--max-num-batched-tokens`` on < 70 GiB GPUs (docs/background.md §7); bounds sliding-window blocks.
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
#: vLLM's GPU-tier defaults beside it (docs/background.md §7, ``EngineArgs._set_default_args`` in
#: vllm/engine/arg_utils.py, v0.30-v0.33, OpenAI server usage context): ``--max-num-seqs`` 256, and
#: on GPUs with >= 70 GiB that are not A100s 1024 sequences and 8192 batched tokens; 16384 batched
#: tokens from 160 GiB.
DEFAULT_MAX_NUM_SEQS = 256
LARGE_GPU_MAX_NUM_SEQS = 1024
LARGE_GPU_MAX_NUM_BATCHED_TOKENS = 8192
HUGE_GPU_MAX_NUM_BATCHED_TOKENS = 16384
#: Estimated non-weight, non-KV GPU memory of a vLLM instance (activation peak of the profiling run,
#: CUDA context/NCCL "non-torch" memory, CUDA graphs), bytes. 1.35 GiB is what the reference deployment
#: leaves after weights and KV (docs/background.md §7/§9: Qwen2.5-1.5B-Instruct on an 8 GiB GPU at
#: utilization 0.60 logged 21,520 KV tokens: 0.60 × 8 GiB − 2.875 GiB weights (1,543,714,304 bf16
#: parameters) − 0.575 GiB KV = 1.35 GiB). vLLM's profile in case C01 (non_torch 0.35 GiB, activation peak
#: ~2 GiB at 20k tokens without chunked prefill) shows it varies with model and flags: pass the real value
#: (``--overhead-memory``) when known.
DEFAULT_OVERHEAD_BYTES = int(1.35 * GIB)
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


def is_large_gpu(gpu_memory_bytes: int | None, gpu_name: str | None) -> bool:
    """True for vLLM's large-GPU tier: >= 70 GiB of memory (bytes) and not an A100 (name, any case);
    False when the memory is unknown. Source: as :data:`LARGE_GPU_MAX_NUM_SEQS`.
    """
    return bool(gpu_memory_bytes and gpu_memory_bytes >= 70 * GIB and "a100" not in (gpu_name or "").lower())


def vllm_batch_defaults(gpu_memory_bytes: int | None, gpu_name: str | None) -> tuple[int, int]:
    """VLLM's default ``(max_num_seqs, max_num_batched_tokens)`` for a GPU of ``gpu_memory_bytes``
    bytes called ``gpu_name`` (either may be None: unknown counts as the small tier).

    256 and 2048; 1024 and 8192 on :func:`is_large_gpu`; the budget is 16384 from 160 GiB.
    Source: as :data:`LARGE_GPU_MAX_NUM_SEQS`.
    """
    large = is_large_gpu(gpu_memory_bytes, gpu_name)
    seqs = LARGE_GPU_MAX_NUM_SEQS if large else DEFAULT_MAX_NUM_SEQS
    budget = (
        HUGE_GPU_MAX_NUM_BATCHED_TOKENS
        if gpu_memory_bytes and gpu_memory_bytes >= 160 * GIB
        else LARGE_GPU_MAX_NUM_BATCHED_TOKENS
        if large
        else DEFAULT_MAX_NUM_BATCHED_TOKENS
    )
    return seqs, budget


@overload
def _check_positive(value: object, name: str, *, integer: Literal[True] = True, upper: float | None = None) -> int: ...
@overload
def _check_positive(value: object, name: str, *, integer: Literal[False], upper: float | None = None) -> float: ...
def _check_positive(value: object, name: str, *, integer: bool = True, upper: float | None = None) -> int | float:
    """``value`` as an int (``integer``) or a float when it is a number > 0 (and <= ``upper``); KVConfigError else."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or (integer and value != int(value))
        or value <= 0
        or (upper is not None and value > upper)
    ):
        rule = "a whole number > 0" if integer else f"a number in (0, {upper}]" if upper else "a number > 0"
        raise KVConfigError(name, f"must be {rule}, got {value!r}")
    return int(value) if integer else float(value)


def check_block_size(value: object, name: str = "--block-size") -> int:
    """``value`` as an int when it is one of :data:`VLLM_BLOCK_SIZES` (tokens per KV block).

    Raises:
        KVConfigError: naming ``name`` for any other value (vLLM refuses it: "invalid choice").
    """
    size = _check_positive(value, name)
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
    """The KV memory of one GPU: given (``kv_memory_bytes``) or ``floor(total × util) − weights − overhead``.

    Returns None when neither ``kv_memory_bytes`` nor ``gpu_memory_bytes`` is given. A negative result
    is clamped to 0 (vLLM: "No available memory for the cache blocks").

    Raises:
        KVConfigError: ``--gpu-memory-utilization`` outside (0, 1]; ``--weights-memory`` missing when the
            budget is derived from ``--gpu-memory``; negative sizes.
    """
    util = _check_positive(gpu_memory_utilization, "--gpu-memory-utilization", integer=False, upper=1.0)
    for value, name in (
        (kv_memory_bytes, "--kv-memory"),
        (gpu_memory_bytes, "--gpu-memory"),
        (weights_bytes, "--weights-memory"),
        (overhead_bytes, "--overhead-memory"),
    ):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise KVConfigError(name, f"must be a size >= 0 bytes, got {value!r}")
    if gpu_memory_bytes is not None:
        _check_positive(gpu_memory_bytes, "--gpu-memory")
    if kv_memory_bytes is not None:
        non_kv = None if gpu_memory_bytes is None else int(gpu_memory_bytes * util) - kv_memory_bytes
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
    kv = max(0, int(gpu_memory_bytes * util) - non_kv)
    return MemoryBudget(kv, "gpu-memory", gpu_memory_bytes, util, weights_bytes, overhead, non_kv)


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
        fits: one ``max_model_len`` request fits (else vLLM refuses to start).
        max_model_len_that_fits: the largest length that fits (``None``: no limit from KV, e.g. no full layers).
        min_gpu_memory_utilization_to_fit: smallest utilization (0–1, may exceed 1 = impossible) at which
            one request fits, when the GPU memory is known.
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
    budget: MemoryBudget | None = None
    kv_memory_bytes: int | None = None
    kv_blocks: int | None = None
    usable_blocks: int | None = None
    kv_tokens: int | None = None
    max_concurrency: float | None = None
    fits: bool | None = None
    max_model_len_that_fits: int | None = None
    min_gpu_memory_utilization_to_fit: float | None = None
    estimate: bool = False
    inputs: dict[str, Any] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    draft: DraftLayers | None = None
    draft_bytes_per_token: int = 0

    def speculative_json(self) -> dict[str, Any] | None:
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

    def to_json(self) -> dict[str, Any]:
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
            "inputs": dict(self.inputs),
            "notes": list(self.notes),
        }


def _blocks_for(fp: KVFootprint, tokens: int, block_size: int, mnbt: int) -> int:
    """Pool blocks (of ``block_size`` slots across the per-token layers) one request of ``tokens`` needs."""
    return ceil_div(fp.request_bytes(tokens, block_size, mnbt), block_size * fp.slot_bytes_per_token)


def _max_len_that_fits(fp: KVFootprint, blocks: int, block_size: int, mnbt: int) -> int | None:
    """Largest request length whose blocks fit in ``blocks`` (binary search, as vLLM's estimate does)."""

    def fits(n: int) -> bool:
        return _blocks_for(fp, n, block_size, mnbt) <= blocks

    if not fits(1):
        return 0
    hi = 2**40
    if fits(hi):
        return None
    lo = 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def capacity(
    config: dict[str, Any] | KVSpec,
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
    dp = _check_positive(data_parallel_size, "--data-parallel-size")
    mnbt = _check_positive(max_num_batched_tokens, "--max-num-batched-tokens")
    if max_model_len is None:
        if spec.max_position_embeddings is None:
            raise KVConfigError("--max-model-len", "needed: the config has no max_position_embeddings")
        max_model_len = spec.max_position_embeddings
    max_model_len = _check_positive(max_model_len, "--max-model-len")
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
        notes.append(
            f"speculative decoding ({draft.method}): {draft.num_layers} draft layer(s) ({draft.source}) of "
            f"{count(per_layer, 'B')} per token share the pool: {count(fp.bytes_per_token - draft_bytes)} + "
            f"{count(draft_bytes, 'B')} per token (vLLM puts every attention layer, the drafter's included, in one "
            "KV cache group)"
        )
    elif draft is not None:
        notes.append(f"speculative decoding ({draft.method}): no draft layer holds KV cache ({draft.source})")
    if spec.max_position_embeddings is not None and max_model_len > spec.max_position_embeddings:
        notes.append(
            f"max_model_len {max_model_len} exceeds the config's max_position_embeddings "
            f"{spec.max_position_embeddings}: vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 "
            "(or rope scaling extends the context)"
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
    inputs = {
        "kv_cache_dtype": kv_cache_dtype,
        "tensor_parallel_size": tensor_parallel_size,
        "data_parallel_size": dp,
        "pipeline_parallel_size": len(stages),
        "max_model_len": max_model_len,
        "block_size": block_size,
        "max_num_batched_tokens": mnbt,
        "kv_memory_bytes": kv_memory_bytes,
        "gpu_memory_bytes": gpu_memory_bytes,
        "gpu_memory_utilization": gpu_memory_utilization,
        "weights_bytes": weights_bytes,
        "overhead_bytes": None if budget is None or budget.source != "gpu-memory" else budget.overhead_bytes,
        "memory_source": None if budget is None else budget.source,
        "speculative_method": None if draft is None else draft.method,
    }
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
    blocks = budget.kv_memory_bytes // block_bytes
    per_request = _blocks_for(fp, max_model_len, block_size, mnbt)
    fits = per_request <= blocks
    min_util = None
    if budget.gpu_memory_bytes and budget.non_kv_bytes is not None:
        min_util = (budget.non_kv_bytes + per_request * block_bytes) / budget.gpu_memory_bytes
    if blocks == 0:
        notes.append("No available memory for the cache blocks (vLLM refuses to start)")
    elif not fits:
        notes.append(
            f"one request of max_model_len {max_model_len} needs {gib(request_bytes)} of KV, "
            f"more than the {gib(budget.kv_memory_bytes)} available: vLLM refuses to start"
        )
    return replace(
        result,
        budget=budget,
        kv_memory_bytes=budget.kv_memory_bytes,
        kv_blocks=blocks,
        usable_blocks=max(0, blocks - 1),
        kv_tokens=blocks * block_size,
        max_concurrency=blocks / per_request,
        fits=fits,
        max_model_len_that_fits=_max_len_that_fits(fp, blocks, block_size, mnbt),
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
    pp = _check_positive(pipeline_parallel_size, "--pipeline-parallel-size")
    if pp > num_layers:
        raise KVConfigError("--pipeline-parallel-size", f"{pp} stages for {num_layers} layers")
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


def seqs_pool_share(cap: KVCapacity, max_num_seqs: int) -> dict[str, Any]:
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
    n = _check_positive(max_num_seqs, "--max-num-seqs")
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

    ``requested_bytes = gpu_memory_utilization × total``; ``feasible`` iff ``free >= requested``;
    ``max_feasible_utilization = free / total``; ``shortfall_bytes = max(0, requested − free)``.
    """

    total_bytes: float
    free_bytes: float
    gpu_memory_utilization: float
    requested_bytes: float
    feasible: bool
    shortfall_bytes: float
    max_feasible_utilization: float

    def to_json(self) -> dict[str, Any]:
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

    Source: vLLM's GPU worker raises "Free memory on device … on startup is less than desired GPU memory
    utilization (U, R GiB)" when ``free < U × total`` (the V1 GPU worker's startup memory snapshot; case C20a:
    19.77 GiB free of 22.05 GiB < 0.9 × 22.05 = 19.845 GiB). Other processes (or a larger CUDA context)
    holding memory make a utilization infeasible; the largest feasible one is ``free / total``.

    Raises:
        KVConfigError: for non-positive total, negative free memory, or utilization outside (0, 1].
    """
    _check_positive(total_bytes, "--gpu-memory", integer=False)
    util = _check_positive(gpu_memory_utilization, "--gpu-memory-utilization", integer=False, upper=1.0)
    if isinstance(free_bytes, bool) or not isinstance(free_bytes, (int, float)) or free_bytes < 0:
        raise KVConfigError("--free-gpu-memory", f"must be a size >= 0 bytes, got {free_bytes!r}")
    requested = util * total_bytes
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
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "DEFAULT_MAX_NUM_BATCHED_TOKENS",
    "DEFAULT_MAX_NUM_SEQS",
    "DEFAULT_OVERHEAD_BYTES",
    "GIB",
    "HUGE_GPU_MAX_NUM_BATCHED_TOKENS",
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
