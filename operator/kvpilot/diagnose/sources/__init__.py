"""Where samples and signals come from; the only I/O of kvpilot.diagnose (all read-only).

- :mod:`.recording` reads a recording file (``--recording``);
- :mod:`.scrape` scrapes a ``/metrics`` endpoint repeatedly (``--metrics-url``, ``--quick``);
- :mod:`.prometheus` asks a Prometheus, one PromQL query per signal for all targets (``--prometheus``);
- :mod:`.kube` reads VLLMServer specs and pods (GET only) for the limits.
"""

from __future__ import annotations

import requests

from kvpilot.text.numbers import fig


class SourceError(Exception):
    """A source could not be read at all (unreachable, unreadable input): exit status 3.

    ``str(error)`` is one line naming the source.
    """


def request_failure_reason(exc: Exception, timeout: float) -> str:
    """One short reason for a failed HTTP request (requests' messages embed the whole URL).

    ``timeout`` (seconds) is quoted for timeouts. Returns e.g. ``"connection refused"``,
    ``"no complete answer within 10 s (the whole-request deadline)"``, ``"unknown host"``.
    """
    text = str(exc)
    if isinstance(exc, requests.Timeout) or "timed out" in text.lower():
        return f"no complete answer within {fig(timeout, 3)} s (the whole-request deadline)"
    if "limit" in text and ("larger than" in text or "more than" in text):
        return text
    if "refused" in text.lower():
        return "connection refused"
    if "Name or service not known" in text or "nodename nor servname" in text:
        return "unknown host"
    return f"{type(exc).__name__}: {text.split(':')[0][:120]}"
