"""What the alert hook agrees to diagnose: the namespaces it may read and how many diagnoses a minute.
Pure: no I/O; the clock is passed in.

- :func:`namespace_allowed`: the ``--allowed-namespace`` patterns, read as kopf reads the operator's
  ``--namespace`` patterns (so the chart can hand the hook the namespaces the operator watches).
- :class:`RateLimit`: a token bucket of ``per_minute`` diagnoses, refilled continuously.
- :class:`DiagnosisKey`: what one diagnosis depends on, the key of the hook's cache and of the
  diagnoses in flight: alerts naming the same target share one diagnosis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase


def _matches(name: str, pattern: str) -> bool:
    """One kopf namespace pattern (kopf ``_cogs/structs/references.py`` ``match_namespace``, kopf 1.45):
    comma-separated globs (``*``, ``?``), spaces ignored; a glob starting with ``!`` excludes; the
    first inclusive glob does the initial match and later inclusive ones only re-include what an
    exclusion took out; a pattern starting with an exclusion implies a leading ``*``.
    """
    globs = [glob.strip() for glob in pattern.split(",")]
    if not globs or globs[0].startswith("!"):
        globs.insert(0, "*")
    matches = first = fnmatchcase(name, globs[0])
    for glob in globs[1:]:
        if glob.startswith("!"):
            matches = matches and not fnmatchcase(name, glob[1:])
        else:
            matches = matches or (first and fnmatchcase(name, glob))
    return matches


def namespace_allowed(name: str, patterns: Sequence[str]) -> bool:
    """True when ``patterns`` is empty (no restriction) or one of them matches namespace ``name``.

    Each pattern is a kopf namespace pattern (see :func:`_matches`): ``llm-serving``, ``llm-*``,
    ``*, !kube-*``. Globs are matched case-sensitively (namespace names are lowercase).
    """
    return not patterns or any(_matches(name, p) for p in patterns)


class RateLimit:
    """A token bucket: at most ``per_minute`` diagnoses in any minute, refilled at ``per_minute / 60``
    per second, starting full (a burst of ``per_minute`` is allowed at once).

    Args:
        per_minute: the bucket's size and its refill per minute (> 0).
        now: the current time (seconds, any monotonic clock).
    """

    def __init__(self, per_minute: int, now: float) -> None:
        if per_minute <= 0:
            raise ValueError("per_minute: must be at least 1")
        self.per_minute = per_minute
        self._tokens = float(per_minute)
        self._at = now

    def _refill(self, now: float) -> None:
        if now > self._at:
            self._tokens = min(float(self.per_minute), self._tokens + (now - self._at) * self.per_minute / 60.0)
            self._at = now

    def take(self, wanted: int, now: float) -> int:
        """Take up to ``wanted`` whole tokens; returns how many were granted (0 to ``wanted``)."""
        self._refill(now)
        granted = max(0, min(wanted, math.floor(self._tokens)))
        self._tokens -= granted
        return granted

    def retry_after(self, now: float) -> float:
        """Seconds until one whole token is available (0 when one is)."""
        self._refill(now)
        return max(0.0, (1.0 - self._tokens) * 60.0 / self.per_minute)


@dataclass(frozen=True)
class DiagnosisKey:
    """What a diagnosis depends on: the target's selectors (each label as the alert gave it, the
    server as derived from the pod name), the window and the limit sources. Two alerts with the same
    key get the same diagnosis; a different namespace, pod, server or model is a different key.
    """

    namespace: str
    pod: str
    server: str
    model_name: str
    window_seconds: float
    limits_from_cluster: bool
