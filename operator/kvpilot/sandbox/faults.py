"""Fault injection: the sandbox API answering a failure instead of serving a request (for the operator's tests).

:meth:`kvpilot.sandbox.SandboxCluster.inject` adds a :class:`Fault`; the emulator checks the faults
in order before it serves a resource request, and the first matching one that is not spent answers
instead: a Kubernetes ``Status`` failure with the HTTP code (and ``Retry-After``), or, for a watch,
half of the next event's JSON line and a closed connection (what a network cut looks like).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Literal, TypedDict

from kvpilot.sandbox.objects import WatchEvent

#: ``reason`` of the Kubernetes ``Status`` a fault answers with, by HTTP code (apimachinery
#: ``metav1.StatusReason``: k8s.io/apimachinery/pkg/apis/meta/v1/types.go).
FAULT_REASONS = {
    400: "BadRequest",
    403: "Forbidden",
    404: "NotFound",
    409: "AlreadyExists",
    422: "Invalid",
    429: "TooManyRequests",
    500: "InternalError",
    503: "ServiceUnavailable",
    504: "Timeout",
}


class StatusPayload(TypedDict):
    """A ``metav1.Status`` failure as the API serves it; ``details``: ``name``, ``group``, ``kind`` when known."""

    kind: Literal["Status"]
    apiVersion: Literal["v1"]
    metadata: dict[str, str]
    status: Literal["Failure"]
    message: str
    reason: str
    details: dict[str, str | None]
    code: int


def status_payload(code: int, reason: str, message: str, **details: str | None) -> StatusPayload:
    """A Kubernetes ``Status`` failure (``metav1.Status``), what the clients turn into their API errors."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "details": details,
        "code": code,
    }


@dataclass
class Fault:
    """A failure the sandbox answers instead of serving a matching request.

    Attributes:
        verb: ``create``, ``update`` (PATCH/PUT), ``delete``, ``get``, ``list`` or ``watch``.
        plural: the resource (``pods``, ``services``, ``vllmservers``, ``events``).
        subresource: ``status`` for ``/status`` writes; None for the object itself.
        code: the HTTP status answered (a Kubernetes ``Status`` with the reason of
            :data:`FAULT_REASONS`); ignored with ``cut_watch``.
        message: the ``Status`` message (an admission webhook's or PodSecurity's text for a 403).
        times: how many matching requests fail (then the fault is spent).
        retry_after: seconds for a ``Retry-After`` header (what a 429 carries), or None.
        cut_watch: for ``watch``: the stream sends half of its next event's JSON line and closes.
        namespace: only requests in this namespace; None for any.
        hits: matching requests answered so far.
    """

    verb: str
    plural: str
    subresource: str | None = None
    code: int = 500
    message: str = "injected fault"
    times: int = 1
    retry_after: int | None = None
    cut_watch: bool = False
    namespace: str | None = None
    hits: int = 0

    def matches(self, verb: str | None, plural: str | None, subresource: str | None, namespace: str | None) -> bool:
        """True when a request (its verb, resource, subresource, namespace) is one this fault answers, unspent."""
        return (
            self.hits < self.times
            and plural == self.plural
            and verb == self.verb
            and (subresource or None) == self.subresource
            and (self.namespace is None or namespace == self.namespace)
        )

    def answer(self, name: str | None) -> tuple[int, StatusPayload, dict[str, str]]:
        """``(HTTP code, Status payload, headers)`` this fault answers with."""
        payload = status_payload(self.code, FAULT_REASONS.get(self.code, "InternalError"), self.message, name=name)
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}
        return self.code, payload, headers


def first_match(
    faults: list[Fault], verb: str | None, plural: str | None, subresource: str | None, namespace: str | None
) -> Fault | None:
    """The first unspent fault matching the request, counted as hit; None when none does."""
    fault = next((f for f in faults if f.matches(verb, plural, subresource, namespace)), None)
    if fault is not None:
        fault.hits += 1
    return fault


def half_a_line(event: WatchEvent) -> bytes:
    """The first half of a watch event's JSON line: what a cut connection delivered of it."""
    line = json.dumps(event).encode()
    return line[: len(line) // 2]
