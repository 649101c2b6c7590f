"""The configured limits a diagnosis compares the signals against, and where each came from.

Precedence per field (docs/diagnosis.md "Limits"): the command line (it overrides), else the
VLLMServer spec (when a cluster is reachable), else the pod's container command line (``pod
args``), else the pod's startup log (``pod log``: ``non-default args``, the chunked-prefill budget
and KV capacity lines), else the kvpilot operator's ``kvpilot_vllmserver_limit`` gauge (read from
the same Prometheus, kvpilot.controller.metrics), else ``vllm:cache_config_info`` labels, else vLLM's
defaults for the GPU tier (``EngineArgs.get_batch_defaults``, ``vllm/engine/arg_utils.py``). Every value carries its
source, and the report says it. The tier's memory is the one given, else that of the kvpilot GPU profile the
GPU's name names (``kvpilot.gpus``), the one place a named GPU's memory comes from.

Pure: the caller passes the spec's ``engine`` (:class:`kvpilot.api.models.EngineSpec`), the options, the pod's
limits and the info labels.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypedDict, get_args, overload

from kvpilot.diagnose.signals import OPERATOR_LIMIT_METRIC
from kvpilot.gpus import gpu_profile
from kvpilot.text.numbers import fig, gib
from kvpilot.text.safe import one_line
from kvpilot.vllm.defaults import (  # vLLM's defaults and GPU tiers, one home
    DEFAULT_BLOCK_SIZE,
    DEFAULT_GPU_MEMORY_UTILIZATION,
    HUGE_GPU_MEMORY_BYTES,
    LARGE_GPU_MEMORY_BYTES,
    is_large_gpu,
    vllm_batch_defaults,
)

if TYPE_CHECKING:  # a diagnosis without a cluster loads no pydantic; sources.kube parses the spec
    from kvpilot.api.models import EngineSpec
    from kvpilot.vllm.args import VLLMFlags

#: field -> (whether a VLLMServer's ``spec.engine`` sets it: the :class:`~kvpilot.api.models.EngineSpec` field of
#: the same name, its ``vllm:cache_config_info`` label or "")
_FIELDS: dict[str, tuple[bool, str]] = {
    "max_num_seqs": (True, ""),
    "max_num_batched_tokens": (True, ""),
    "max_model_len": (True, ""),
    "gpu_memory_utilization": (True, "gpu_memory_utilization"),
    "kv_cache_dtype": (True, "cache_dtype"),
    "block_size": (False, "block_size"),
    "num_gpu_blocks": (False, "num_gpu_blocks"),
    "kv_cache_tokens": (False, "kv_cache_size_tokens"),
    "kv_cache_memory_bytes": (False, "kv_cache_memory_bytes"),
    "enable_prefix_caching": (True, "enable_prefix_caching"),
    "tensor_parallel_size": (True, ""),
    "shared_prefix_tokens": (False, ""),  # the traffic's, not the server's: the command line only
    "max_num_active_seqs": (False, ""),  # vLLM 0.31+: an admission cap no metric shows
    "vllm_version": (False, ""),  # the server's vLLM release, when stated
}
SPEC_FIELDS = frozenset(name for name, (in_spec, _) in _FIELDS.items() if in_spec)
#: the limits converted to int, float and bool (others are strings); the Literals type :meth:`Limits.value`
_IntName = Literal[
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "block_size",
    "num_gpu_blocks",
    "kv_cache_tokens",
    "kv_cache_memory_bytes",
    "tensor_parallel_size",
    "shared_prefix_tokens",
    "max_num_active_seqs",
]
_FloatName = Literal["gpu_memory_utilization"]
_BoolName = Literal["enable_prefix_caching"]
_INT, _FLOAT, _BOOL = set(get_args(_IntName)), set(get_args(_FloatName)), set(get_args(_BoolName))
#: a limit's value: int (:data:`_INT`), float (:data:`_FLOAT`), bool (:data:`_BOOL`), str (others), None unknown
LimitValue = int | float | bool | str | None


class GivenLimits(TypedDict, total=False):
    """Limits as the command line gives them (``kvpilot diagnose --max-num-seqs ...``), by :class:`Limits` field
    name; a None value is not given.
    """

    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    max_model_len: int | None
    gpu_memory_utilization: float | None
    kv_cache_dtype: str | None
    block_size: int | None
    num_gpu_blocks: int | None
    kv_cache_tokens: int | None
    kv_cache_memory_bytes: int | None
    enable_prefix_caching: bool | None
    tensor_parallel_size: int | None
    shared_prefix_tokens: int | None
    max_num_active_seqs: int | None
    vllm_version: str | None


@dataclass(frozen=True)
class Limit:
    """One limit: ``value`` (None when unknown) and ``source``.

    ``source`` is ``cli`` (diagnose options), ``spec`` (VLLMServer), ``pod args`` (the container's
    command line), ``pod log`` (its startup log), ``kvpilot_vllmserver_limit`` (the operator's
    limits metric), ``cache_config_info``,
    ``derived`` (computed from other limits), ``default`` (vLLM's default for the GPU tier) or
    ``unknown``.
    """

    value: LimitValue
    source: str = "unknown"


@dataclass(frozen=True)
class Limits:
    """The limits of one target. Attribute names are vLLM's flags with underscores.

    ``kv_cache_memory_bytes`` is the KV pool's size when the server sets it in bytes (``--kv-cache-memory-bytes``,
    or on CPU ``VLLM_CPU_KVCACHE_SPACE``; ``vllm:cache_config_info`` labels ``None`` otherwise): vLLM then sizes the
    pool from it and not from ``--gpu-memory-utilization``.

    ``shared_prefix_tokens`` is no server flag but a fact of its traffic the user states
    (``--shared-prefix-tokens``): the length of the prompt prefix requests share (a system prompt), which no
    vLLM metric gives; the prefix rule judges reuse against it. ``max_num_active_seqs`` (vLLM 0.31+) is an
    admission cap at or below ``max_num_seqs`` that no metric shows; ``vllm_version`` the server's release, which
    says whether it has one.
    """

    max_num_seqs: Limit = Limit(None)
    max_num_batched_tokens: Limit = Limit(None)
    max_model_len: Limit = Limit(None)
    gpu_memory_utilization: Limit = Limit(None)
    kv_cache_dtype: Limit = Limit(None)
    block_size: Limit = Limit(None)
    num_gpu_blocks: Limit = Limit(None)
    kv_cache_tokens: Limit = Limit(None)
    kv_cache_memory_bytes: Limit = Limit(None)
    enable_prefix_caching: Limit = Limit(None)
    tensor_parallel_size: Limit = Limit(None)
    shared_prefix_tokens: Limit = Limit(None)
    max_num_active_seqs: Limit = Limit(None)
    vllm_version: Limit = Limit(None)
    gpu_memory_bytes: int | None = None
    gpu_name: str | None = None
    notes: tuple[str, ...] = field(default=())

    @overload
    def value(self, name: _IntName) -> int | None: ...
    @overload
    def value(self, name: _FloatName) -> float | None: ...
    @overload
    def value(self, name: _BoolName) -> bool | None: ...
    @overload
    def value(self, name: str) -> LimitValue: ...
    def value(self, name: str) -> LimitValue:
        """The value of limit ``name`` (None when unknown; its type as :func:`resolve_limits` converts it)."""
        limit: Limit = getattr(self, name)
        return limit.value

    def sources(self) -> dict[str, str]:
        """``{field: source}`` for every known field."""
        return {name: getattr(self, name).source for name in _FIELDS if getattr(self, name).value is not None}

    def describe(self, inferred: Mapping[str, float | None] | None = None) -> str:
        """One sentence: ``max_num_seqs 4 (cli), max_num_batched_tokens 2048 (default), ...``.

        ``inferred``: limits the rules inferred from the gauges (``{name: value}``); such a limit
        prints as ``256 (inferred; vLLM's default 2,048 not read)``.
        """
        inferred = {k: v for k, v in (inferred or {}).items() if v is not None}
        parts = []
        for name in (
            "max_num_seqs",
            "max_num_batched_tokens",
            "max_model_len",
            "kv_cache_tokens",
            "gpu_memory_utilization",
            "kv_cache_dtype",
            "block_size",
        ):
            lim: Limit = getattr(self, name)
            if name in inferred:
                default = lim.value if isinstance(lim.value, (int, float)) else None
                parts.append(f"{name} {fig(inferred[name], 4)} (inferred; vLLM's default {fig(default, 4)} not read)")
            elif lim.value is not None:
                value = fig(lim.value, 4) if isinstance(lim.value, (int, float)) else lim.value
                parts.append(f"{name} {value} ({lim.source})")
        return "Limits: " + (", ".join(parts) if parts else "none known") + "."


def _convert(name: str, raw: Any) -> LimitValue:
    """``raw`` (a JSON value, an option or a label string) as limit ``name``'s type; None when empty or not one."""
    if raw is None or raw == "":
        return None
    try:
        if name in _INT:
            return int(float(raw))  # "inf" raises OverflowError, "nan" ValueError: not a limit
        if name in _FLOAT:
            value = float(raw)
            return value if math.isfinite(value) else None
        if name in _BOOL:
            return raw if isinstance(raw, bool) else str(raw).strip().lower() in {"true", "1", "yes"}
        return str(raw)
    except (TypeError, ValueError, OverflowError):
        return None


def _profile_memory(gpu_name: str | None) -> tuple[int | None, str]:
    """The memory (bytes) of the GPU profile ``gpu_name`` names (:func:`kvpilot.gpus.gpu_profile`: ``H100`` is
    ``h100-sxm``) and the profile's name; ``(None, "")`` for no name or one kvpilot has no profile for.
    """
    if not gpu_name:
        return None, ""
    try:
        gpu = gpu_profile(gpu_name)
    except ValueError:
        return None, ""
    return gpu.memory_bytes, gpu.name


def _tier(gpu_memory_bytes: int | None, gpu_name: str | None) -> str:
    """The GPU tier of vLLM's batch defaults (:func:`vllm_batch_defaults`), as a note names it."""
    memory = gpu_memory_bytes or 0
    if memory >= HUGE_GPU_MEMORY_BYTES:
        return "a >= 160 GiB GPU"
    if is_large_gpu(memory, gpu_name):
        return "a >= 70 GiB non-A100 GPU"
    if memory >= LARGE_GPU_MEMORY_BYTES:
        return "an A100, which keeps the small-GPU defaults under 160 GiB"
    return "an unknown or < 70 GiB GPU"


def _fill_defaults(
    values: dict[str, Limit], gpu_memory_bytes: int | None, gpu_name: str | None, profile: str
) -> list[str]:
    """Fill the limits ``values`` lacks with vLLM's defaults for the GPU tier; the notes saying so.

    ``profile``: the kvpilot GPU profile the memory came from ("" when given or unknown), named in the note.
    """
    max_num_seqs, max_num_batched_tokens = vllm_batch_defaults(gpu_memory_bytes, gpu_name)
    defaults = {
        "max_num_seqs": max_num_seqs,
        "max_num_batched_tokens": max_num_batched_tokens,
        "gpu_memory_utilization": DEFAULT_GPU_MEMORY_UTILIZATION,
        "block_size": DEFAULT_BLOCK_SIZE,
    }
    tier = _tier(gpu_memory_bytes, gpu_name)
    if profile:
        tier += f" ({gib(gpu_memory_bytes, 0)}: the {profile} profile)"
    elif gpu_name and gpu_memory_bytes is None:  # named, but neither its memory nor a profile: say how to fix it
        tier += f" (GPU {one_line(gpu_name)!r} has no kvpilot profile: --gpu-memory gives its tier)"
    notes: list[str] = []
    for name, default in defaults.items():
        if name not in values:
            values[name] = Limit(default, "default")
            if name in ("max_num_seqs", "max_num_batched_tokens"):
                notes.append(
                    f"{name} not configured anywhere readable: assumed vLLM's default {fig(default)} for {tier}"
                )
    return notes


def resolve_limits(
    spec_engine: EngineSpec | None = None,
    cli: GivenLimits | None = None,
    cache_config: Mapping[str, str] | None = None,
    gpu_memory_bytes: int | None = None,
    gpu_name: str | None = None,
    pod_args: VLLMFlags | None = None,
    pod_log: VLLMFlags | None = None,
    operator_metric: Mapping[str, float] | None = None,
) -> Limits:
    """Resolve every limit with its source.

    Args:
        spec_engine: ``spec.engine`` of the VLLMServer, or None.
        cli: diagnose options with vLLM flag names in snake case (``max_num_seqs``, ...; None values
            ignored).
        cache_config: ``vllm:cache_config_info`` labels (strings such as ``"True"``, ``"0.9"``).
        gpu_memory_bytes: memory of the GPU (bytes), for the defaults that depend on its tier. None: the
            memory of the kvpilot GPU profile ``gpu_name`` names (:func:`kvpilot.gpus.gpu_profile`), else
            unknown (the small tier).
        gpu_name: the GPU's product name, for the same defaults (vLLM: an A100 keeps the small tier).
        pod_args: limits from the pod's ``vllm serve`` command line (snake-case names).
        pod_log: limits from the pod's startup log (snake-case names).
        operator_metric: the operator's ``kvpilot_vllmserver_limit`` values for the pod (``limit`` label
            -> value: ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``,
            ``gpu_memory_utilization``, ``kv_cache_tokens``).

    Returns:
        :class:`Limits` (its ``gpu_memory_bytes`` the memory the tier was picked from). ``kv_cache_tokens``
        falls back to ``num_gpu_blocks x block_size`` (``derived``); ``max_num_seqs``/``max_num_batched_tokens``/
        ``gpu_memory_utilization``/``block_size`` fall back to vLLM's defaults (source ``default``).

    Source: ``EngineArgs.get_batch_defaults`` (``vllm/engine/arg_utils.py``, defaults per GPU tier);
    ``vllm:cache_config_info`` labels from ``CacheConfig`` (``vllm/config/cache.py``).
    """
    cli, cache_config = cli or {}, cache_config or {}
    pod_args, pod_log, operator_metric = pod_args or {}, pod_log or {}, operator_metric or {}
    values: dict[str, Limit] = {}
    for name, (in_spec, info_label) in _FIELDS.items():
        for source, raw in (
            ("cli", cli.get(name)),
            ("spec", getattr(spec_engine, name) if spec_engine is not None and in_spec else None),
            ("pod args", pod_args.get(name)),
            ("pod log", pod_log.get(name)),
            (OPERATOR_LIMIT_METRIC, operator_metric.get(name)),
            ("cache_config_info", cache_config.get(info_label) if info_label else None),
        ):
            value = _convert(name, raw)
            if value is not None:
                values[name] = Limit(value, source)
                break
    if "kv_cache_tokens" not in values and "num_gpu_blocks" in values:
        blocks, block = values["num_gpu_blocks"].value, values.get("block_size", Limit(DEFAULT_BLOCK_SIZE)).value
        if isinstance(blocks, int) and isinstance(block, int):  # always: _convert makes both ints
            values["kv_cache_tokens"] = Limit(blocks * block, "derived")
    profile = ""
    if gpu_memory_bytes is None:  # a GPU kvpilot has a profile for: its memory picks the tier
        gpu_memory_bytes, profile = _profile_memory(gpu_name)
    notes = _fill_defaults(values, gpu_memory_bytes, gpu_name, profile)
    return Limits(**values, gpu_memory_bytes=gpu_memory_bytes, gpu_name=gpu_name, notes=tuple(notes))


#: who reads a diagnosis: ``cli`` (a person running ``kvpilot diagnose``, who can add flags) or
#: ``service`` (an answer of ``kvpilot alert-hook`` or the demo: its reader cannot pass flags)
Reader = Literal["cli", "service"]


def confirm_inferred(inferred: Sequence[str], reader: Reader, pod_read: bool, pod_unread: str = "") -> str | None:
    """What the reader can do to replace limits the rules inferred from the gauges, in one sentence.

    Args:
        inferred: the limits inferred (``max_num_seqs``, ``max_num_batched_tokens``); none: no sentence.
        reader: who reads it (:data:`Reader`).
        pod_read: the run read the pod (``--pod`` or the target's pod label, with cluster access), so
            "pass --pod" would change nothing: the pod's command line and log did not state the limit.
        pod_unread: why the pod the run looked up could not be read (no Kubernetes configuration, an HTTP
            error); "" when no pod was looked up or it was read. The pod's command line was never seen, so
            the sentence says so rather than that it does not state the limit.

    Returns:
        the sentence, or None when nothing was inferred.
    """
    if not inferred:
        return None
    names = " and ".join(inferred)
    flags = " and ".join(f"--{n.replace('_', '-')} N" for n in inferred)
    head = f"Lower confidence: {names} inferred from the gauges, not read"
    if reader == "service":
        return (
            f"{head}. To have it read: deploy the server through the kvpilot operator (a VLLMServer), or have "
            "this Prometheus scrape the kvpilot operator's /metrics (kvpilot_vllmserver_limit for the pod)."
        )
    if pod_unread:
        fix = (
            "run with access to the cluster (--kubeconfig, --context)"
            if pod_unread.startswith("no Kubernetes configuration")
            else "check --pod, -n and the access to the cluster"
        )
        return f"{head} (the pod could not be read: {pod_unread}): pass {flags}, or {fix}, to confirm."
    if pod_read:
        return f"{head} (the pod's command line and startup log do not state it): pass {flags} to confirm."
    return f"{head}: pass {flags}, or --pod with access to the cluster to read it from the pod, to confirm."
