"""Timestamps as the Kubernetes API writes them (``metav1.Time``: RFC 3339, UTC, whole seconds).

Source: Kubernetes API conventions, "Representation of time" (``2026-11-30T13:00:00Z``);
https://github.com/kubernetes/community/blob/master/contributors/devel/sig-architecture/api-conventions.md
"""

from __future__ import annotations

import datetime

#: ``metav1.Time``'s wire format (k8s.io/apimachinery/pkg/apis/meta/v1/time.go, ``RFC3339``).
FORMAT = "%Y-%m-%dT%H:%M:%SZ"


def now_rfc3339() -> str:
    """The current UTC time as Kubernetes writes timestamps: ``2026-11-30T13:00:00Z``."""
    return datetime.datetime.now(datetime.UTC).strftime(FORMAT)


def rfc3339(timestamp: str, plus_seconds: int = 0) -> str:
    """Normalise a timestamp (``…Z`` or ``…+00:00``, as the kubernetes client serialises it) to
    Kubernetes' ``2026-11-30T13:00:00Z``, optionally ``plus_seconds`` later.

    Raises:
        ValueError: for text that is not an ISO 8601 timestamp.
    """
    moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.UTC)
    moment = moment.astimezone(datetime.UTC) + datetime.timedelta(seconds=plus_seconds)
    return moment.strftime(FORMAT)
