"""The severity policy, defined once: how urgent each verdict is (docs/diagnosis.md "Severity").

``kvpilot diagnose`` (each rule's finding, so its exit status), ``kvpilot alert-hook`` (which answers
with that diagnosis) and the alert rules (``kvpilot.alerts.rules``: the ``severity`` label) all
derive their severity from here, so an alert and the hook's answer for the same server say the same.

The policy:

- **critical**: the server's metrics stopped (``target_down``); a queue behind a limit grows by at
  least :data:`GROWTH_REQUESTS` over the window (requests arrive faster than the server admits them,
  so waiting times grow without bound until the limit is raised or the traffic drops); or requests
  are preempted while others queue or the queue grows (work is thrown away while work waits).
- **warning**: a limit binds but the queue stands still (a steady cost: requests wait, but not
  longer and longer), preemptions without a queue, an ineffective prefix cache, metric names that
  other tools will not find.
- **ok**: ``healthy``, ``idle`` and the low-severity prefix note; **unknown**: no diagnosis
  (``no_data``).

Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

from kvpilot.diagnose.model import Severity, Verdict

OK: Final[Severity] = "ok"
WARNING: Final[Severity] = "warning"
CRITICAL: Final[Severity] = "critical"
UNKNOWN: Final[Severity] = "unknown"

#: the queue grows when ``deriv(vllm:num_requests_waiting[w]) x w`` (requests over the window) reaches this:
#: one more request waiting at the window's end than at its start, on the least-squares line through the samples
GROWTH_REQUESTS: Final = 1.0

#: verdicts that name the limit behind a queue: warning while the queue stands, critical while it grows
QUEUE_VERDICTS: Final[tuple[Verdict, ...]] = (
    "max_num_seqs_cap",
    "token_budget_cap",
    "lora_slot_cap",
    "compute_bound",
    "unexplained_queue",
)

#: verdicts whose severity never depends on the queue
FIXED: Final[dict[Verdict, Severity]] = {
    "target_down": CRITICAL,
    "prefix_cache_ineffective": WARNING,
    "metrics_schema_mismatch": WARNING,
    "healthy": OK,
    "idle": OK,
    "no_data": UNKNOWN,
}


def growing(growth_requests: float | None) -> bool:
    """True when the queue grew by at least :data:`GROWTH_REQUESTS` over the window (requests; None: unknown)."""
    return growth_requests is not None and growth_requests >= GROWTH_REQUESTS


def queue_severity(queue_growing: bool) -> Severity:
    """A limit behind a queue (:data:`QUEUE_VERDICTS`): critical while the queue grows, else warning."""
    return CRITICAL if queue_growing else WARNING


def kv_severity(preempted: bool, queued: bool, queue_growing: bool) -> Severity:
    """``kv_cache_exhaustion``: critical when requests are preempted while others queue (or the queue
    grows), else warning (preemptions alone, or a queue at the KV ceiling that stands still).
    """
    return CRITICAL if preempted and (queued or queue_growing) else WARNING
