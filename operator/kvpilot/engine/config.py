"""``EngineConfig``: the vLLM flags and hardware the engine model runs with.

Defaults are vLLM's (:mod:`kvpilot.vllm.defaults`, vLLM 0.29.0): ``block_size`` 16,
``gpu_memory_utilization`` 0.92, prefix caching and chunked prefill on, and the batch limits
``EngineArgs`` gives ``vllm serve`` on the configured GPU (:func:`kvpilot.vllm.defaults.resolve_batch_limits`:
``max_num_seqs`` 256 and ``max_num_batched_tokens`` 2048, or 1024 and 8192 from 70 GiB unless an A100,
1024 and 16384 from 160 GiB, then vLLM's clamps). The KV pool, bytes per token and the startup fit check
are :mod:`kvpilot.kv`'s, so the engine and ``kvpilot kv`` give one answer for one server. Hardware numbers
live in :mod:`kvpilot.engine.hardware`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

from kvpilot.engine.bounds import FIELD_BOUNDS, MAX_GPU_BLOCKS
from kvpilot.engine.hardware import (
    BANDWIDTH_EFFICIENCY,
    COMPUTE_EFFICIENCY,
    STEP_OVERHEAD_S,
    ModelProfile,
    model_profile,
)
from kvpilot.gpus import gpu_profile
from kvpilot.kv.capacity import (
    DEFAULT_OVERHEAD_BYTES,
    blocks_per_request,
    kv_memory_budget,
    pool_blocks,
    requested_memory_bytes,
    usable_blocks,
)
from kvpilot.kv.offload import OFFLOAD_CHUNK_TOKENS, OFFLOAD_LOAD_BANDWIDTH, OFFLOAD_STORE_BANDWIDTH
from kvpilot.kv.size import footprint
from kvpilot.kv.spec import KVConfigError
from kvpilot.text.documents import JsonObject
from kvpilot.text.errors import InvalidValueError
from kvpilot.text.numbers import gib
from kvpilot.vllm.args import VLLMFlags
from kvpilot.vllm.defaults import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    NULL_BLOCKS,
    BatchLimits,
    resolve_batch_limits,
)

#: kvpilot.kv's option names -> the engine field each comes from (its errors name the engine's field).
_KV_OPTION_FIELDS = {
    "--tensor-parallel-size": "tensor_parallel_size",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--gpu-memory-utilization": "gpu_memory_utilization",
    "--gpu-memory": "gpu",
    "--weights-memory": "weight_bytes",
    "--overhead-memory": "non_kv_reserve_bytes",
}


def _engine_error(exc: KVConfigError) -> InvalidValueError:
    """A :class:`KVConfigError` of :mod:`kvpilot.kv` naming the engine's field instead of ``kvpilot kv``'s option."""
    return InvalidValueError(_KV_OPTION_FIELDS.get(exc.field, exc.field), exc.message)


class EngineFlags(VLLMFlags, total=False):
    """:class:`EngineConfig` fields to set, by name, typed as the fields (every field but ``profile``, an object
    only code sets): the flags a vLLM command line states (:class:`~kvpilot.vllm.args.VLLMFlags`) and the
    engine model's own. :func:`parse_engine_flags` reads them from a document.
    """

    scheduler_reserve_full_isl: bool
    offload_chunk_tokens: int
    offload_load_bandwidth: float
    offload_store_bandwidth: float
    gpu: str
    bytes_per_token: int | None
    non_kv_reserve_bytes: int
    weight_bytes: int | None
    bandwidth_efficiency: float
    compute_efficiency: float
    step_overhead: float


@dataclass
class EngineConfig:
    """Flags and hardware of one simulated vLLM server.

    Capacity: ``num_gpu_blocks`` (total, including the null block) wins; else ``kv_cache_tokens``
    (vLLM's logged "GPU KV cache size", tokens; blocks = tokens // block_size, vLLM's own relation
    ``kv_cache_size_tokens = num_gpu_blocks * block_size``); else derived as ``kvpilot kv`` derives it
    (:func:`kvpilot.kv.capacity.kv_memory_budget`): ``ceil(gpu memory x gpu_memory_utilization) - weights / TP -
    non_kv_reserve_bytes``, in blocks of ``bytes/token x block_size``. ``non_kv_reserve_bytes`` (activations,
    CUDA graphs, non-torch memory) defaults to :data:`kvpilot.kv.capacity.DEFAULT_OVERHEAD_BYTES`, what the
    reference deployment leaves (docs/background.md §9: 8 GiB x 0.60 gives its 1,345 blocks).

    ``bytes_per_token`` defaults to :func:`kvpilot.kv.size.footprint` of the model profile for
    ``kv_cache_dtype`` and ``tensor_parallel_size`` (docs/background.md §2). ``kv_offload_cpu_bytes`` > 0 turns on
    the LMCache-like CPU tier (chunks of ``offload_chunk_tokens``); its bandwidths are calibrated on §9:
    4,864 tokens x 28,672 B loaded in ~8.5 ms (16 GB/s) and stored for +22.3 ms (6.25 GB/s).

    ``scheduler_reserve_full_isl`` (vLLM ``SchedulerConfig.scheduler_reserve_full_isl``, PR #37307,
    default True in vLLM 0.29.0): a waiting request is admitted only if blocks for its whole prompt
    are free, not just for its first chunk; False models the releases before that PR.
    """

    block_size: int = DEFAULT_BLOCK_SIZE
    num_gpu_blocks: int | None = None
    kv_cache_tokens: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    max_model_len: int = 32768
    enable_prefix_caching: bool = True
    enable_chunked_prefill: bool = True
    scheduler_reserve_full_isl: bool = True
    kv_offload_cpu_bytes: int = 0
    offload_chunk_tokens: int = OFFLOAD_CHUNK_TOKENS
    offload_load_bandwidth: float = OFFLOAD_LOAD_BANDWIDTH
    offload_store_bandwidth: float = OFFLOAD_STORE_BANDWIDTH
    gpu: str = "h100-sxm"
    model: str = "qwen2.5-1.5b"
    bytes_per_token: int | None = None
    kv_cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION
    non_kv_reserve_bytes: int = DEFAULT_OVERHEAD_BYTES
    weight_bytes: int | None = None
    bandwidth_efficiency: float = BANDWIDTH_EFFICIENCY
    compute_efficiency: float = COMPUTE_EFFICIENCY
    step_overhead: float = STEP_OVERHEAD_S
    served_model_name: str | None = None
    profile: ModelProfile | None = None

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_dict(cls, data: JsonObject | EngineFlags | None) -> EngineConfig:
        """Build from a dict (YAML/CLI overrides, or typed flags), read by :func:`parse_engine_flags`.

        Raises:
            InvalidValueError: ``"<field>: unknown field"`` or a type error naming the field.
        """
        return cls().replace(data or {})

    def replace(self, overrides: JsonObject | EngineFlags) -> EngineConfig:
        """A copy with ``overrides`` applied (same key rules and errors as :meth:`from_dict`)."""
        return dataclasses.replace(self, **parse_engine_flags(overrides))

    def resolved(self) -> EngineConfig:
        """A copy with ``max_num_seqs``/``max_num_batched_tokens`` left ``None`` set as vLLM sets them for this
        GPU and ``max_model_len`` (:func:`kvpilot.vllm.defaults.resolve_batch_limits`). The engine runs on the
        resolved copy.

        Raises:
            InvalidValueError: unknown GPU profile.
        """
        if self.max_num_seqs is not None and self.max_num_batched_tokens is not None:
            return self
        limits = self.batch_limits()
        return dataclasses.replace(
            self, max_num_seqs=limits.max_num_seqs, max_num_batched_tokens=limits.max_num_batched_tokens
        )

    def batch_limits(self) -> BatchLimits:
        """``max_num_seqs`` and ``max_num_batched_tokens`` as the engine runs with them: as given, or as vLLM sets
        them for this GPU and ``max_model_len`` when left ``None``
        (:func:`kvpilot.vllm.defaults.resolve_batch_limits`).

        Raises:
            ValueError: a limit is left to vLLM and the GPU profile is unknown.
        """
        if self.max_num_seqs is not None and self.max_num_batched_tokens is not None:
            return BatchLimits(self.max_num_seqs, self.max_num_batched_tokens)
        gpu = gpu_profile(self.gpu)
        return resolve_batch_limits(
            gpu.memory_bytes,
            gpu.name,
            max_model_len=int(self.max_model_len),
            max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens,
            enable_chunked_prefill=bool(self.enable_chunked_prefill),
        )

    def to_dict(self) -> JsonObject:
        """Plain dict of every field (JSON-able); ``profile`` only when the model's own profile is set."""
        out = dataclasses.asdict(self)
        if self.profile is None:
            del out["profile"]
        return out

    # ------------------------------------------------------------------ derived values
    def resolved_model_profile(self) -> ModelProfile:
        """The served model's own profile when given (``profile``: from its config.json,
        :func:`kvpilot.engine.hardware.profile_from_config`), else the named one (``model``).
        """
        return self.profile if self.profile is not None else model_profile(self.model)

    def resolved_bytes_per_token(self) -> int:
        """KV bytes per token per GPU (see the class docstring).

        Raises:
            InvalidValueError: ``"<field>: <reason>"`` for a KV dtype vLLM does not know or a tensor-parallel size vLLM
                refuses for the model (one that does not divide its attention heads, or that neither divides
                nor is a multiple of its KV heads).
        """
        if self.bytes_per_token is not None:
            return int(self.bytes_per_token)
        try:
            fp = footprint(self.resolved_model_profile().kv_spec(), self.kv_cache_dtype, int(self.tensor_parallel_size))
        except KVConfigError as exc:
            raise _engine_error(exc) from None
        return fp.bytes_per_token

    def resolved_weight_bytes(self) -> int:
        """Weight bytes of the whole model (the profile's checkpoint bytes unless ``weight_bytes`` is set)."""
        if self.weight_bytes is not None:
            return int(self.weight_bytes)
        return self.resolved_model_profile().weight_bytes

    def resolved_num_gpu_blocks(self) -> int:
        """Total physical blocks including the null block (see the class docstring).

        Raises:
            InvalidValueError: no memory left for the KV cache (vLLM: "No available memory for the cache
                blocks").
        """
        if self.num_gpu_blocks is not None or self.kv_cache_tokens is not None:
            given = "num_gpu_blocks" if self.num_gpu_blocks is not None else "kv_cache_tokens"
            value = int(getattr(self, given))
            blocks = value if given == "num_gpu_blocks" else value // self.block_size
            if blocks < NULL_BLOCKS + 1:  # block 0 is the null block (docs/background.md §4)
                raise InvalidValueError(
                    given,
                    f"{value} gives {blocks} block(s) of {self.block_size} tokens; "
                    "at least 2 are needed (the null block and one usable block)",
                )
            return _check_pool(given, blocks, self.block_size)
        gpu = gpu_profile(self.gpu)
        tp = max(1, int(self.tensor_parallel_size))
        try:
            budget = kv_memory_budget(
                gpu_memory_bytes=gpu.memory_bytes,
                gpu_memory_utilization=self.gpu_memory_utilization,
                weights_bytes=self.resolved_weight_bytes() // tp,
                overhead_bytes=int(self.non_kv_reserve_bytes),
            )
        except KVConfigError as exc:
            raise _engine_error(exc) from None
        if budget is None:  # kv_memory_budget derives one whenever the GPU's memory is given
            raise ValueError(f"gpu: {self.gpu!r} has no memory size to derive the KV cache from")
        blocks = pool_blocks(budget.kv_memory_bytes, self.block_size, self.resolved_bytes_per_token())
        if blocks < NULL_BLOCKS + 1:
            left = requested_memory_bytes(gpu.memory_bytes, self.gpu_memory_utilization) - (budget.non_kv_bytes or 0)
            raise InvalidValueError(
                "gpu_memory_utilization",
                f"no available memory for the cache blocks ({gib(left)} left after weights and activations)",
            )
        return _check_pool("bytes_per_token" if self.bytes_per_token is not None else "gpu", blocks, self.block_size)

    def kv_cache_tokens_resolved(self) -> int:
        """``num_gpu_blocks * block_size``: vLLM's "GPU KV cache size" in tokens."""
        return self.resolved_num_gpu_blocks() * self.block_size

    def _check_bounds(self) -> None:
        """Every numeric field within its range (:data:`kvpilot.engine.bounds.FIELD_BOUNDS`)."""
        for f in fields(self):
            _check_bound(f.name, getattr(self, f.name))

    def validate(self) -> None:
        """VLLM's own checks (vllm/config SchedulerConfig and the startup KV check).

        Raises:
            InvalidValueError: ``"<field>: <reason>"`` for non-positive sizes, ``max_num_batched_tokens <
                max_num_seqs``, ``max_num_batched_tokens < max_model_len`` without chunked prefill,
                an offload chunk not a multiple of the block size, or one ``max_model_len`` request
                not fitting the KV cache (vLLM refuses to start then, docs/background.md §2).
        """
        if self.max_num_seqs is None or self.max_num_batched_tokens is None:
            self.resolved().validate()
            return
        self._check_bounds()
        for name in (
            "block_size",
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "offload_chunk_tokens",
            "tensor_parallel_size",
        ):
            if int(getattr(self, name)) < 1:
                raise InvalidValueError(name, f"must be >= 1, got {getattr(self, name)}")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise InvalidValueError("gpu_memory_utilization", f"must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_offload_cpu_bytes < 0:
            raise InvalidValueError("kv_offload_cpu_bytes", "must be >= 0")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise InvalidValueError(
                "max_num_batched_tokens", f"{self.max_num_batched_tokens} must be >= max_num_seqs ({self.max_num_seqs})"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise InvalidValueError(
                "max_num_batched_tokens",
                f"{self.max_num_batched_tokens} is smaller "
                f"than max_model_len ({self.max_model_len}) and chunked prefill is off",
            )
        if self.offload_chunk_tokens % self.block_size:
            raise InvalidValueError(
                "offload_chunk_tokens",
                f"{self.offload_chunk_tokens} must be a multiple of block_size ({self.block_size})",
            )
        gpu_profile(self.gpu)
        self.resolved_model_profile()
        blocks = self.resolved_num_gpu_blocks()
        need = blocks_per_request(self.max_model_len, self.block_size)
        usable = usable_blocks(blocks)
        if need > usable:  # vLLM plans the fit against the usable blocks (kvpilot.kv.capacity)
            raise InvalidValueError(
                "max_model_len",
                f"to serve at least one request with the model's max seq len "
                f"({self.max_model_len}), {need} blocks are needed, which is larger than the "
                f"available KV cache ({usable} usable blocks = {usable * self.block_size}"
                f" tokens); the estimated maximum model length is {usable * self.block_size}",
            )


_FIELDS = {f.name: f for f in fields(EngineConfig)}


def parse_engine_flags(given: Mapping[str, object]) -> EngineFlags:
    """:class:`EngineFlags` from a mapping a document or a caller gives (YAML, CLI overrides, a scenario's flags):
    dashes in keys read as underscores, each value converted to its field's type (``"4"`` is 4, ``"off"`` False)
    and held to its range (:data:`kvpilot.engine.bounds.FIELD_BOUNDS`); a later key wins over an earlier one of
    the same field.

    Raises:
        InvalidValueError: ``"<field>: unknown engine field"``, a value not of the field's type, or out of its range,
            naming the field (the first such in the mapping's order).
    """
    clean: dict[str, object] = {}
    for key, value in given.items():
        name = str(key).replace("-", "_")
        if name not in _FIELDS:
            raise InvalidValueError(key, f"unknown engine field (known: {', '.join(sorted(_FIELDS))})")
        if name == "profile":  # an object code sets (EngineConfig(profile=...)), never a document's value
            if value is not None:
                raise InvalidValueError(name, f"{value!r} is not a model profile (give model instead)")
            continue
        clean[name] = _coerce(name, value, _FIELDS[name].type)
        _check_bound(name, clean[name])
    return cast(EngineFlags, clean)  # every key a field of EngineFlags, its value of the field's type


def _check_bound(name: str, value: Any) -> None:
    """Refuse a numeric field outside its range (:data:`kvpilot.engine.bounds.FIELD_BOUNDS`), naming it."""
    bound = FIELD_BOUNDS.get(name)
    if bound is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        problem = bound.problem(value)
        if problem is not None:
            raise InvalidValueError(name, problem)


def _check_pool(field: str, blocks: int, block_size: int) -> int:
    """``blocks`` when the engine can hold them (:data:`kvpilot.engine.bounds.MAX_GPU_BLOCKS`), else refused."""
    if blocks > MAX_GPU_BLOCKS:
        raise InvalidValueError(
            field,
            f"gives a KV pool of {blocks:,} blocks, above the {MAX_GPU_BLOCKS:,} one simulated server holds "
            f"({MAX_GPU_BLOCKS * block_size:,} tokens of {block_size})",
        )
    return blocks


def _coerce(name: str, value: Any, typ: Any) -> Any:  # noqa: C901
    text = str(typ)
    try:
        if value is None:
            if "None" in text:
                return None
            raise TypeError("null")
        if text.startswith("bool"):
            if isinstance(value, str):
                low = value.strip().lower()
                if low in {"true", "1", "yes", "on"}:
                    return True
                if low in {"false", "0", "no", "off"}:
                    return False
                raise TypeError(value)
            return bool(value)
        if text.startswith("int"):
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise TypeError(value)
            return int(value)
        if text.startswith("float"):
            if isinstance(value, bool):
                raise TypeError(value)
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise InvalidValueError(name, f"{value!r} is not a valid {text.split(' ')[0]}") from None
