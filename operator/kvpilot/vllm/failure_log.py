"""Why vLLM did not start, from the end of its log. Pure.

vLLM V1 runs the engine in a child process; when that process fails to start, the server's last
lines are the API server's wrapper exception, which names no cause::

    (APIServer pid=1) RuntimeError: Engine core initialization failed. See root cause above.
    Failed core proc(s): {'EngineCore_DP0': 1}

(vllm/v1/engine/utils.py, ``wait_for_engine_startup``, vLLM 0.29.0; likewise "Frontend process
failed during engine core initialization. See root cause above." and, for workers,
"WorkerProc initialization failed due to an exception in a background process. See stack trace
for root cause." in vllm/v1/executor/multiproc_executor.py). The cause is the last exception line
printed before it, by the engine process (``EngineCore failed to start.`` and its traceback,
vllm/v1/engine/core.py), for example:

- ``ValueError: To serve at least one request with the model's max seq len (32768), (4.00 GiB KV
  cache is needed, which is larger than the available KV cache memory (1.50 GiB). …``
  (vllm/v1/core/kv_cache_utils.py, ``_check_enough_kv_cache_memory``);
- ``ValueError: No available memory for the cache blocks. …`` (same function);
- ``ValueError: Free memory on device cuda:0 (… GiB) on startup is less than desired GPU memory
  utilization (0.9, … GiB). …`` (vllm/v1/worker/utils.py);
- ``RuntimeError: CUDA out of memory occurred when warming up sampler with 256 dummy requests. …``
  (vllm/v1/worker/gpu_model_runner.py) or PyTorch's own ``torch.OutOfMemoryError: CUDA out of
  memory. Tried to allocate …``.

:func:`root_cause` finds that line: the last Python exception line (``Name: message`` where the
name ends in ``Error``, ``Exception`` or ``Exit``, optionally dotted) before the first wrapper
line, skipping wrapper lines themselves; without a wrapper, the last exception line of the text.
Log prefixes (``(EngineCore_DP0 pid=312)``, ``ERROR 11-30 12:00:41 [core.py:1374]``) are removed.
"""

from __future__ import annotations

import re

from kvpilot.text.safe import one_line

#: A vLLM log line's process prefix and level/time/location prefix (vllm/logger.py's format,
#: ``%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s``; the process decorator
#: ``(EngineCore_DP0 pid=312)`` comes from vllm/utils/system_utils.py ``decorate_logs``).
_PREFIX_RE = re.compile(
    r"^(?:\((?:[A-Za-z0-9_]+)(?: pid=\d+)?\)\s*)?"
    r"(?:(?:DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?\s+\[[^\]]*\]\s*)?"
)
#: A Python exception line as the traceback module prints it (``ValueError: …``,
#: ``torch.OutOfMemoryError: …``, ``vllm.x.SomeException: …``).
_EXCEPTION_RE = re.compile(r"^(?:[A-Za-z_][A-Za-z0-9_]*\.)*[A-Za-z_][A-Za-z0-9_]*(?:Error|Exception|Exit)\b: \S")
#: Exceptions that only say "the cause is above" (vLLM's wrappers).
_WRAPPER_MARKERS = (
    "See root cause above",
    "See stack trace for root cause",
    "WorkerProc initialization failed",
)
#: Longest root cause kept (vLLM's longest start-up messages, the KV-cache one, are about 430).
LIMIT = 600


def _strip(line: str) -> str:
    return _PREFIX_RE.sub("", line.strip(), count=1).strip()


def _is_wrapper(line: str) -> bool:
    return any(marker in line for marker in _WRAPPER_MARKERS)


def root_cause(text: str | None) -> str | None:
    """The exception line that made vLLM fail to start, one line, control characters stripped
    and secrets redacted (:func:`kvpilot.text.safe.one_line`), at most :data:`LIMIT` characters;
    None when the text holds no exception line other than a wrapper.
    """
    lines = [_strip(line) for line in (text or "").splitlines()]
    wrapper = next((i for i, line in enumerate(lines) if _EXCEPTION_RE.match(line) and _is_wrapper(line)), None)
    searched = lines[:wrapper] if wrapper is not None else lines
    for line in reversed(searched):
        if _EXCEPTION_RE.match(line) and not _is_wrapper(line):
            return one_line(line, limit=LIMIT)
    return None
