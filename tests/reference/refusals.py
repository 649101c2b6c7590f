"""The ground truth of a window: which limit refused the head of vLLM's waiting queue, from the driver's steps.

Every step record of ``tests/reference/vllm_driver.py`` carries ``refusal``: why, in that ``schedule()`` call,
the head of vLLM 0.29.0's waiting queue was not admitted, read from the scheduler's own code paths (the driver's
``RefusalProbe``). This module only summarises those records; it never looks at metrics or at kvpilot's engine.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

#: the driver's refusal reasons, in the order a tie between shares is broken
REASONS = ("max_num_seqs", "token_budget", "kv_cache", "lora", "other", "none")
QUEUE_REASONS = REASONS[:-1]


@dataclass(frozen=True)
class Binding:
    """What bound a window ``[t0, t1)`` (simulated seconds).

    Attributes:
        limit: a member of :data:`REASONS`: the reason that refused the head of the queue for the largest share of
            the time a request was left waiting, or ``"none"`` when no request was left waiting for at least
            half of the window.
        queued_share: the share of the window (0-1) covered by steps that left a request waiting.
        shares: reason -> share (0-1) of that queued time, for every member of :data:`QUEUE_REASONS` (all 0 when
            nothing was left waiting).
        steps: how many steps overlap the window.
    """

    limit: str
    queued_share: float
    shares: Mapping[str, float]
    steps: int

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{"limit", "queued_share", "shares", "steps"}`` (shares rounded to 4 decimals)."""
        return {
            "limit": self.limit,
            "queued_share": round(self.queued_share, 4),
            "shares": {k: round(v, 4) for k, v in self.shares.items()},
            "steps": self.steps,
        }


def binding_limit(steps: Iterable[Mapping[str, Any]], t0: float, t1: float) -> Binding:
    """The binding limit of ``[t0, t1)``: the refusal of the head of the queue over most of the queued time.

    Each step holds from ``start`` for ``duration`` seconds (the state ``schedule()`` left lasts until the next
    step); a step's part inside the window weighs its refusal, so a long prefill step counts for its length,
    as a gauge sampled every few seconds would see it. Time without any step (an idle server) had no queue.

    Args:
        steps: the driver's step records (``start``, ``duration``, ``refusal``), full or light.
        t0: start of the window (simulated s).
        t1: end of the window (simulated s), ``t1 > t0``.

    Raises:
        ValueError: ``t1 <= t0``, or a step's ``refusal`` is not one of :data:`REASONS`.
    """
    if t1 <= t0:
        raise ValueError(f"empty window [{t0}, {t1})")
    queued = dict.fromkeys(QUEUE_REASONS, 0.0)
    n = 0
    for step in steps:
        start = float(step["start"])
        a, b = max(t0, start), min(t1, start + float(step["duration"]))
        if b < a or (b == a and not t0 <= start < t1):
            continue
        n += 1
        reason = step["refusal"]
        if reason == "none":
            continue
        if reason not in queued:
            raise ValueError(f"unknown refusal {reason!r} (expected one of {', '.join(REASONS)})")
        queued[reason] += b - a
    total = sum(queued.values())
    share = total / (t1 - t0)
    shares = {k: (v / total if total else 0.0) for k, v in queued.items()}
    if share < 0.5:
        return Binding("none", share, shares, n)
    limit = max(QUEUE_REASONS, key=lambda k: (queued[k], -QUEUE_REASONS.index(k)))
    return Binding(limit, share, shares, n)
