"""Where samples and signals come from; the only I/O of kvpilot.diagnose (all read-only).

- :mod:`.recording` reads a recording file (``--recording``);
- :mod:`.scrape` scrapes a ``/metrics`` endpoint repeatedly (``--metrics-url``, ``--quick``);
- :mod:`.prometheus` asks a Prometheus, one PromQL query per signal for all targets (``--prometheus``);
- :mod:`.kube` reads VLLMServer specs and pods (GET only) for the limits.
"""

from __future__ import annotations


class SourceError(Exception):
    """A source could not be read at all (unreachable, unreadable input): exit status 3.

    ``str(error)`` is one line naming the source.
    """
