"""How large a replay may be: every replay is bounded in memory and time by construction,
whatever a recording's or Prometheus' gauges and counters say.

**Memory.** A replay creates its requests as the engine reaches them (``kvpilot.advice.simulate``): the queue at
the window's start (``vllm:num_requests_waiting``) is a count, of which only the head the engine's scheduler can
look at is built (:func:`released_ahead`), and the arrivals' times are drawn one scrape interval at a time. What it
holds is the engine's running and waiting requests plus that head, whatever the queue reads (2,000,000 waiting
requests built up front measured 1.9 GB and 45 s; streamed, docs/reliability.md has the figures).

**Time.** The requests a replay serves cost time: :data:`MAX_REPLAY_REQUESTS` (250,000: a five-minute window
arriving at 830 requests/s, beyond what one vLLM server serves) bounds the warm-up's and the window's arrivals, and
:data:`MAX_REPLAY_BACKLOG` the queue at its start; the what-if budget's deadline bounds the rest. A window whose
numbers ask for more, or are not finite, is implausible for one server: it gets a note and no replay.
"""

from __future__ import annotations

import math
from typing import Final

#: Requests one replay may serve: the warm-up's arrivals and the window's.
MAX_REPLAY_REQUESTS: Final = 250_000
#: Requests waiting at the window's start a replay accepts: a vLLM server keeps each waiting request in host memory
#: (its prompt's token ids and the request's state, over 1 KB each), so 100,000,000 of them is more than 100 GB, far
#: beyond any server's queue; only the head the scheduler looks at is ever built (:func:`released_ahead`).
MAX_REPLAY_BACKLOG: Final = 100_000_000


def replay_size_problem(backlog: float, warmup: float, arrivals: float) -> str | None:
    """Why a replay of ``backlog`` waiting requests, ``warmup`` and ``arrivals`` arrivals is refused (a phrase
    for the report's "not replayed: …"), or None when it is within :data:`MAX_REPLAY_BACKLOG` and
    :data:`MAX_REPLAY_REQUESTS`.
    """
    parts = {"requests waiting at the window's start": backlog, "warm-up arrivals": warmup, "arrivals": arrivals}
    for what, value in parts.items():
        if not math.isfinite(value) or value < 0:
            return f"an implausible window: {value} {what}"
    if backlog > MAX_REPLAY_BACKLOG:
        return (
            f"an implausible window for one server: {backlog:,.0f} requests waiting at its start, more than the "
            f"{MAX_REPLAY_BACKLOG:,} one replay accepts"
        )
    served = warmup + arrivals
    if served > MAX_REPLAY_REQUESTS:
        return (
            f"an implausible window for one server: {served:,.0f} requests arriving ({arrivals:,.0f} in the window, "
            f"{warmup:,.0f} in the warm-up), more than the {MAX_REPLAY_REQUESTS:,} one replay serves"
        )
    return None


def released_ahead(max_num_seqs: int, max_num_batched_tokens: int) -> int:
    """How many waiting requests a replay keeps in the engine's queue while more wait behind them (the rest are a
    count until the queue shrinks below this): twice what one step can admit, at least 4,096.

    One step admits at most ``min(max_num_seqs, max_num_batched_tokens)`` requests (each admission takes a running
    slot and at least one token of the budget), and only from the head of the queue, in order, stopping at the first
    that does not fit (``Scheduler.schedule``, ``vllm/v1/core/sched/scheduler.py``, vLLM 0.29.0; a preempted request
    goes back to the head), so a queue topped up to this before every step schedules as the whole queue would.
    """
    return max(4096, 2 * min(max_num_seqs, max_num_batched_tokens) + 1)
