"""How large a replay may be, and what no server can do: every replay is bounded in memory and time by construction,
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

**Rates.** No server finishes more than ``max_num_seqs`` requests in one engine step (a request finishes in a step
it is scheduled in, and a step schedules at most ``max_num_seqs``: ``vllm/v1/core/sched/scheduler.py``, vLLM 0.29.0),
and no step takes less than :data:`MIN_STEP_SECONDS`. A ``vllm:request_success`` that grows by more between two
instants of the window than that allows (:func:`finish_rate_problem`) is no server's: a note and no replay.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Final

#: Requests one replay may serve: the warm-up's arrivals and the window's.
MAX_REPLAY_REQUESTS: Final = 250_000
#: Requests waiting at the window's start a replay accepts: a vLLM server keeps each waiting request in host memory
#: (its prompt's token ids and the request's state, over 1 KB each), so 100,000,000 of them is more than 100 GB, far
#: beyond any server's queue; only the head the scheduler looks at is ever built (:func:`released_ahead`).
MAX_REPLAY_BACKLOG: Final = 100_000_000
#: The shortest engine step of any vLLM server (s): 1 ms, ten times below the smallest bucket of vLLM's
#: ``vllm:inter_token_latency_seconds`` histogram (0.01 s, ``vllm/v1/metrics/loggers.py``, vLLM 0.29.0; a step is
#: one inter-token gap) and below the engine model's own per-step overhead (1.5 ms, ``kvpilot.engine.hardware``).
MIN_STEP_SECONDS: Final = 1e-3


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


def finish_rate_problem(
    finished: Sequence[float | None], window: float, sample_interval: float, max_num_seqs: int
) -> str | None:
    """Why ``finished`` (``vllm:request_success`` at evenly spaced instants over ``window`` seconds, the last scrape
    at or before each: ``Signals.fit_series``) is no server's, or None.

    Between two instants ``step`` apart the counter can only show what finished since the scrape before the first,
    at most ``step + sample_interval`` seconds; a server finishes at most ``max_num_seqs`` requests a step and takes
    at least :data:`MIN_STEP_SECONDS` a step (module docstring). A counter that went down restarted: its new value is
    what finished since.
    """
    if len(finished) < 2:
        return None
    step = window / (len(finished) - 1)
    span = step + sample_interval
    most = max_num_seqs * span / MIN_STEP_SECONDS
    for before, after in zip(finished, finished[1:], strict=False):
        if before is None or after is None:
            continue
        grew = after - before if after >= before else after
        if grew > most:
            return (
                f"an implausible window: vllm:request_success grew by {grew:,.0f} requests within {span:.3g} s, more "
                f"than any server finishes in that time (at most max_num_seqs = {max_num_seqs:,} a step, a step at "
                f"least {MIN_STEP_SECONDS * 1e3:g} ms: {most:,.0f})"
            )
    return None
