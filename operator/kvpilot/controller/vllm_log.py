"""Read vLLM's KV-capacity report from its startup log (pure).

vLLM logs the KV cache it allocated once, at startup, in one of these formats
(``vllm/v1/core/kv_cache_utils.py``; background.md §2):

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

import re
from dataclasses import dataclass

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
