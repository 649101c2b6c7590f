"""Read vLLM's startup log: the KV-capacity report and the configured limits (pure).

The limits (:func:`startup_limits`) come from two lines vLLM prints at startup:

- ``non-default args: {...}`` - the engine arguments that differ from vLLM's defaults, as a Python
  dict repr (``log_non_default_args``: ``vllm/entrypoints/utils.py`` in vLLM 0.10,
  ``vllm/entrypoints/serve/utils/api_utils.py`` in 0.29), e.g. from a public vLLM log
  (github.com/noonghunna/club-3090 issue 295)::

      (APIServer pid=1) INFO 06-01 09:20:16 [utils.py:278] non-default args: {'model_tag': '...',
      'max_model_len': 262144, 'tensor_parallel_size': 2, 'kv_cache_dtype': 'fp8_e5m2',
      'enable_prefix_caching': True, 'max_num_batched_tokens': 8192, 'max_num_seqs': 2, ...}

- ``Chunked prefill is enabled with max_num_batched_tokens=2048.`` - the budget the scheduler uses,
  default or not (``vllm/config/scheduler.py``; e.g. vLLM PR 24162's log);

plus the KV capacity below (``kv_cache_tokens``).

vLLM logs the KV cache it allocated once, at startup, in one of these formats
(``vllm/v1/core/kv_cache_utils.py``; docs/background.md §2):

- up to v0.27, two lines::

      INFO 11-30 12:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 21,520 tokens
      INFO 11-30 12:00:00 [kv_cache_utils.py:1091] Maximum concurrency for 8,192 tokens per request: 2.63x

- v0.28–v0.29, one line (``logger.info_once("GPU KV cache size: %s tokens, Maximum concurrency
  for %s tokens per request: %.2fx")``)::

      GPU KV cache size: 21,520 tokens, Maximum concurrency for 8,192 tokens per request: 2.63x

- from v0.30 the same line starts with the platform's device name
  (``"%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx"``,
  ``GPU`` on CUDA; other platforms and plugins print e.g. ``XPU``, ``CPU``, ``Spyre``).

Counts carry thousands separators (``f"{n:,}"``) in vLLM itself and none in some platform
plugins; lines may be prefixed by the engine process (``(EngineCore_DP0 pid=123)``). vLLM logs
dozens of lines after this one, so the whole log is searched from the start, never a tail.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Any, cast

from kvpilot.vllm.args import VLLMFlags

_SIZE_RE = re.compile(r"(?:^|[\s\]])(?P<device>[A-Za-z][A-Za-z0-9_-]*) KV cache size: (?P<tokens>\d[\d,]*) tokens")
_CONCURRENCY_RE = re.compile(r"Maximum concurrency for (?P<len>\d[\d,]*) tokens per request: (?P<conc>\d+(?:\.\d+)?)x")


@dataclass(frozen=True)
class KVCacheReport:
    """What vLLM reported about its KV cache at startup.

    Attributes:
        kv_cache_tokens: KV cache capacity in tokens (``GPU KV cache size``).
        max_concurrency: requests of ``max_model_len`` tokens that fit at once (the ``…x``
            figure, 2 decimals as vLLM prints it); None when the log lacks the line.
        max_model_len: the ``tokens per request`` of that line; None when absent.
        device: the prefix vLLM printed (``GPU``, ``XPU`` …).
    """

    kv_cache_tokens: int
    max_concurrency: float | None
    max_model_len: int | None
    device: str


def _int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_kv_cache_report(log: str) -> KVCacheReport | None:
    """Find the first KV-capacity report in a vLLM log (any format above).

    Args:
        log: the pod's log text (the whole of it, or at least its start).

    Returns:
        the report, or None when the log has no ``KV cache size`` line (vLLM still loading, or
        not a vLLM log). The concurrency is taken from the same line or the first later line.
    """
    lines = log.splitlines()
    for index, line in enumerate(lines):
        size = _SIZE_RE.search(line)
        if size is None:
            continue
        for candidate in lines[index:]:
            conc = _CONCURRENCY_RE.search(candidate)
            if conc is not None:
                return KVCacheReport(_int(size["tokens"]), float(conc["conc"]), _int(conc["len"]), size["device"])
        return KVCacheReport(_int(size["tokens"]), None, None, size["device"])
    return None


_NON_DEFAULT_RE = re.compile(r"non-default args: (?P<args>\{.*\})\s*$")
_CHUNKED_RE = re.compile(r"Chunked prefill is enabled with max_num_batched_tokens=(?P<budget>\d+)")

#: longest ``non-default args`` dict read (characters): a line longer than this is not parsed
MAX_ARGS_CHARS = 65536

#: ``non-default args`` keys (vLLM's EngineArgs field names) -> the limit they set, and its type
_LIMIT_ARGS: dict[str, type] = {
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "max_model_len": int,
    "gpu_memory_utilization": float,
    "block_size": int,
    "kv_cache_dtype": str,
    "tensor_parallel_size": int,
    "enable_prefix_caching": bool,
}


def parse_non_default_args(log: str) -> dict[str, Any] | None:
    """The first ``non-default args: {...}`` dict of a vLLM log, or None (no such line, or not a literal).

    Read with :func:`ast.literal_eval` (literals only, nothing is executed), bounded to
    :data:`MAX_ARGS_CHARS`.
    """
    for line in log.splitlines():
        match = _NON_DEFAULT_RE.search(line)
        if match is None:
            continue
        text = match["args"]
        if len(text) > MAX_ARGS_CHARS:
            return None
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
        return value if isinstance(value, dict) else None
    return None


def startup_limits(log: str) -> VLLMFlags:
    """The limits a vLLM startup log states: ``{limit name: value}`` (names as vLLM's flags, snake case).

    From ``non-default args`` (the keys of :data:`_LIMIT_ARGS`, values of the wrong type skipped),
    the ``Chunked prefill ... max_num_batched_tokens=N`` line (the budget even when it is vLLM's
    default), and ``kv_cache_tokens`` from the KV-capacity report. Empty when the log states none.
    """
    stated: dict[str, int | float | str | bool] = {}
    args = parse_non_default_args(log) or {}
    for name, kind in _LIMIT_ARGS.items():
        value = args.get(name)
        if value is None or isinstance(value, bool) != (kind is bool):
            continue
        if kind is not bool and not isinstance(value, (int, float, str)):
            continue
        try:
            stated[name] = kind(value)
        except (TypeError, ValueError):
            continue
    out = cast(VLLMFlags, stated)  # each of _LIMIT_ARGS converted to its field's type
    match = _CHUNKED_RE.search(log)
    if match and "max_num_batched_tokens" not in out:
        out["max_num_batched_tokens"] = int(match["budget"])
    report = parse_kv_cache_report(log)
    if report is not None:
        out["kv_cache_tokens"] = report.kv_cache_tokens
    return out
