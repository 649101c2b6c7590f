"""What a failed reconcile becomes: a phase, a reason, a one-line message and retry-or-stop. Pure.

Every exception a reconcile raises is classified here (:func:`classify`), so none leaves a
VLLMServer without a phase while kopf retries it forever:

============================================  ============  =================  ===================
failure                                       phase         reason             then
============================================  ============  =================  ===================
HTTP 403 (RBAC, PodSecurity, an admission     Failed        ``Forbidden``      PermanentError
webhook): the API's message is reported
HTTP 409 creating an object whose name an     Failed        ``NameConflict``   PermanentError
object this server does not own holds
HTTP 400/404/405/410/413/415/422 on a write   Failed        ``APIRejected``    PermanentError
(the cluster refuses what kvpilot sent)
HTTP 408/409/425/429/5xx, a timeout or a      Pending (no   ``APIError``       retry, exponential
connection error                              pod yet)                         backoff, bounded
any other exception (a bug in kvpilot)        Failed        ``InternalError``  PermanentError
retries exhausted                             Failed        ``ReconcileFailed``  PermanentError
============================================  ============  =================  ===================

The retryable codes are the ones Kubernetes clients retry: ``client-go`` retries 429 and 5xx
honouring ``Retry-After`` (k8s.io/client-go/rest/request.go, ``checkWait``/``IsRetryableError``),
and a 409 ``Conflict`` on an update is the optimistic-concurrency answer that asks for a retry
(Kubernetes API conventions, "Concurrency Control and Consistency").
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvpilot.api.models import Phase, VLLMServerStatus
from kvpilot.controller.logic import EVENT_MESSAGE_LIMIT, Event, Server, set_condition
from kvpilot.text.numbers import fig
from kvpilot.text.safe import one_line

#: HTTP codes after which the same request may succeed unchanged.
RETRYABLE_CODES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
#: Longest failure message kept (status ``message``, the ``Ready`` condition, the Events): the step and the API's
#: refusal it quotes in about six 80-column lines of ``kubectl describe``, and whole in the transition Event, which
#: :func:`~kvpilot.controller.logic.status_events` leads with what was created and the reason: at most 208 characters
#: (a 69-character pod name, a 16-hex spec hash, a 63-character Service name, ``ReconcileFailed``), 208 + 480 < 1 KiB
#: (:data:`EVENT_MESSAGE_LIMIT`).
MESSAGE_LIMIT = 480


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff for transient API failures: ``min(cap, base * 2**retry)`` seconds.

    Defaults: 2 s, 4 s, 8 s … capped at 300 s, 10 retries (about 19 minutes in all), then the
    server is ``Failed`` with reason ``ReconcileFailed`` (a spec change or an operator restart
    tries again).
    """

    base_seconds: float = 2.0
    cap_seconds: float = 300.0
    limit: int = 10

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        """Seconds before retry number ``retry`` (0-based); at least ``Retry-After``, never over the cap."""
        delay = min(self.cap_seconds, self.base_seconds * 2.0 ** min(retry, 62))
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.cap_seconds))
        return delay


@dataclass(frozen=True)
class Failure:
    """A classified reconcile failure.

    Attributes:
        reason: ``Forbidden``, ``NameConflict``, ``APIRejected``, ``APIError``, ``InternalError``
            or ``ReconcileFailed`` (the status ``reason``, the condition reason and the Event reason).
        message: one line, control characters stripped and secrets redacted, naming the step.
        permanent: True when retrying cannot help (the spec or the cluster must change first).
        delay: seconds until the retry (None when permanent).
    """

    reason: str
    message: str
    permanent: bool
    delay: float | None = None

    @property
    def phase(self) -> Phase:
        """``Failed`` for a permanent failure, ``Pending`` while retrying."""
        return "Failed" if self.permanent else "Pending"


def api_message(body: Any) -> str:
    """The ``message`` of a Kubernetes ``Status`` body (JSON text or bytes), else the body itself."""
    if isinstance(body, bytes):
        body = body.decode("utf-8", errors="replace")
    try:
        data = json.loads(body) if isinstance(body, str) else body
    except ValueError:
        return str(body or "")
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return str(body or "")


def _retry_after(headers: Any) -> float | None:
    try:
        value = (headers or {}).get("Retry-After")
        return float(value) if value is not None else None
    except (TypeError, ValueError, AttributeError):
        return None


def _is_transport_error(exc: BaseException) -> bool:
    """A timeout or a connection failure (urllib3's ``HTTPError`` family, OSError, TimeoutError)."""
    if isinstance(exc, (TimeoutError, ConnectionError, OSError)):
        return True
    return any(cls.__module__.startswith("urllib3") for cls in type(exc).__mro__)


def classify(
    exc: BaseException, *, step: str, retry: int, policy: RetryPolicy, conflict_owner: str | None = None
) -> Failure:
    """The :class:`Failure` an exception raised during ``step`` (``"creating pod qwen-1a2b3"``) becomes.

    Args:
        exc: what was raised (a ``kubernetes`` ``ApiException`` carries ``status``, ``reason``,
            ``body`` and ``headers``; anything else is a transport error or a bug).
        step: what the reconcile was doing, for the message.
        retry: kopf's 0-based retry count of this handler.
        policy: the backoff.
        conflict_owner: for a 409 on create, who holds the name (``"nobody"``, ``"VLLMServer x"``);
            None when the conflicting object could not be read or belongs to this server.
    """
    code = getattr(exc, "status", None)
    if isinstance(code, int) and hasattr(exc, "body"):
        detail = one_line(api_message(getattr(exc, "body", None)) or getattr(exc, "reason", "") or "")
        what = f"{step}: HTTP {code} {one_line(getattr(exc, 'reason', '') or '')}: {detail}"
        if code == 403:
            return _permanent("Forbidden", what + " (the namespace's policy or RBAC refused it)")
        if code == 409 and conflict_owner is not None:
            return _permanent(
                "NameConflict",
                f"{what} (owned by {conflict_owner}); delete that object or rename the VLLMServer",
            )
        if code in RETRYABLE_CODES:
            return _transient(what, retry, policy, _retry_after(getattr(exc, "headers", None)))
        return _permanent("APIRejected", what)
    if _is_transport_error(exc):
        return _transient(f"{step}: {type(exc).__name__}: {one_line(exc)}", retry, policy, None)
    return _permanent(
        "InternalError", f"{step}: {type(exc).__name__}: {one_line(exc)} (a bug in kvpilot: please report this)"
    )


def _permanent(reason: str, message: str) -> Failure:
    return Failure(reason, one_line(message, limit=MESSAGE_LIMIT), permanent=True)


def _transient(message: str, retry: int, policy: RetryPolicy, retry_after: float | None) -> Failure:
    if retry >= policy.limit:
        return _permanent("ReconcileFailed", f"gave up after {retry} retries: {message}")
    delay = policy.delay(retry, retry_after)
    message = f"{message}; retry {retry + 1} of {policy.limit} in {fig(delay, 3)} s"
    return Failure("APIError", one_line(message, limit=MESSAGE_LIMIT), permanent=False, delay=delay)


def failure_status(server: Server, failure: Failure, *, now: str) -> VLLMServerStatus:
    """The status a failure leaves: ``phase`` (:attr:`Failure.phase`), ``reason``, ``message`` and a
    ``Ready=False`` condition with the same reason, for this ``observedGeneration``.

    A server already ``Loading`` or ``Ready`` keeps its status through a transient failure (its pod
    runs; the Warning Event reports the retry); other status fields are kept as they were.
    """
    old = server.status
    if not failure.permanent and old.phase in ("Loading", "Ready"):
        return old
    conditions = set_condition(
        old.conditions, "Ready", "False", failure.reason, failure.message, now=now, generation=server.generation
    )
    update = {"phase": failure.phase, "reason": failure.reason, "message": failure.message, "endpoint": None}
    return old.model_copy(update={**update, "observed_generation": server.generation, "conditions": conditions})


def failure_event(failure: Failure) -> Event:
    """The Warning Event a failed reconcile posts: reason = :attr:`Failure.reason`, the message on one line."""
    return Event("Warning", failure.reason, one_line(failure.message, limit=EVENT_MESSAGE_LIMIT))
