"""How large a replay may be: the requests one replay builds, so every replay is bounded in memory and time by
construction, whatever a recording's or Prometheus' gauges and counters say.

A replay builds its window's queue at the start (``vllm:num_requests_waiting``), the warm-up's arrivals and each
of the window's arrivals (``vllm:request_success_total`` and the queue's change) as request objects: about 1 KB
each (2,000,000 waiting requests measured 1.9 GB and 87 s). :data:`MAX_REPLAY_REQUESTS` is 250,000 (about
250 MB): a five-minute window arriving at 830 requests/s, beyond what one vLLM server serves. A window whose
numbers ask for more (or are not finite) is implausible for one server: it gets a note and no replay.
"""

from __future__ import annotations

import math
from typing import Final

#: Requests one replay may build: the queue at the window's start, the warm-up's and the window's arrivals.
MAX_REPLAY_REQUESTS: Final = 250_000


def replay_size_problem(backlog: float, warmup: float, arrivals: float) -> str | None:
    """Why a replay of ``backlog`` waiting requests, ``warmup`` and ``arrivals`` arrivals is refused (a phrase
    for the report's "not replayed: …"), or None when it is within :data:`MAX_REPLAY_REQUESTS`.
    """
    parts = {"requests waiting at the window's start": backlog, "warm-up arrivals": warmup, "arrivals": arrivals}
    for what, value in parts.items():
        if not math.isfinite(value) or value < 0:
            return f"an implausible window: {value} {what}"
    total = backlog + warmup + arrivals
    if total > MAX_REPLAY_REQUESTS:
        return (
            f"an implausible window for one server: {total:,.0f} requests to replay ({backlog:,.0f} waiting at its "
            f"start, {arrivals:,.0f} arriving), more than the {MAX_REPLAY_REQUESTS:,} one replay builds"
        )
    return None
