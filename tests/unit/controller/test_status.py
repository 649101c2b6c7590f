"""The status writer's one path and its ledger, without a cluster: one request per change, a refused write
sent again until it lands, the Events after it, what a pod event may skip, and the status model every write
goes through.
"""

from __future__ import annotations

import logging

import kopf
import kubernetes.client
import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from kvpilot.api.models import Condition, StatusError, VLLMServerStatus
from kvpilot.controller.kube import Kube
from kvpilot.controller.logic import Server
from kvpilot.controller.status import StatusBackoff, StatusWriter

LOG = logging.getLogger("test")
KEY = ("ns", "qwen")
POD = {"metadata": {"uid": "pod-1", "resourceVersion": "7", "name": "qwen-abcde"}}
SERVER = {
    "apiVersion": "kvpilot.dev/v1alpha1",
    "kind": "VLLMServer",
    "metadata": {"name": "qwen", "namespace": "ns", "uid": "srv-1"},
}
PENDING = {"phase": "Pending", "reason": "Scheduling", "message": "waiting for the scheduler", "specHash": "abcde12345"}


def server(status=None):
    return Server.of({**SERVER, "status": status} if status is not None else SERVER)


def status(fields=PENDING):
    return VLLMServerStatus.model_validate(fields)


def served(status):
    return status.model_dump(by_alias=True, exclude_none=True)


@pytest.fixture
def events(monkeypatch):
    posted: list[tuple[str, str, str]] = []
    monkeypatch.setattr(
        kopf, "event", lambda _obj, **event: posted.append((event["type"], event["reason"], event["message"]))
    )
    return posted


@pytest.fixture
def writer():
    # no request is made in these tests: an address nothing listens on
    return StatusWriter(Kube(kubernetes.client.Configuration(host="http://127.0.0.1:9")))


class FakeKube:
    """The status writer's two requests, answered from a script: each PATCH pops the next answer (an
    ApiException or urllib3 error to raise, else the server is stored); a GET answers ``stored``.
    """

    def __init__(self, *refusals: Exception) -> None:
        self.refusals = list(refusals)
        self.patches: list[dict] = []
        self.reads = 0
        self.stored: dict | None = dict(SERVER)

    def patch_server_status(self, _namespace: str, _name: str, patch: dict) -> dict:
        self.patches.append(patch)
        if self.refusals:
            raise self.refusals.pop(0)
        return {**SERVER, "status": patch}

    def read_server(self, _namespace: str, _name: str) -> dict | None:
        self.reads += 1
        return self.stored


def refused(code: int, retry_after: str | None = None) -> ApiException:
    exc = ApiException(status=code, reason="Refused")
    exc.headers = {"Retry-After": retry_after} if retry_after else {}
    return exc


def scripted_writer(kube: FakeKube, slept: list[float]) -> StatusWriter:
    return StatusWriter(kube, backoff=StatusBackoff(base_seconds=0.5, cap_seconds=2.0), sleep=slept.append)  # type: ignore[arg-type]


def test_a_first_status_is_one_request_and_its_event_follows_it(events):
    kube, slept = FakeKube(), []
    updated = scripted_writer(kube, slept).write(server(), status(), LOG, pod=POD, created="created pod x")
    assert kube.patches == [PENDING]
    assert served(updated.status) == PENDING
    assert slept == []
    assert events == [("Normal", "Pending", "created pod x; Scheduling: waiting for the scheduler")]


@pytest.mark.parametrize("code", [409, 404, 429, 500, 503])
def test_a_refused_write_is_sent_again_with_backoff_until_it_lands(events, code):
    # refused four times: waits 0.5, 1, 2, then 2 s (the cap), then lands; one Event, after it landed
    kube, slept = FakeKube(*(refused(code) for _ in range(4))), []
    writer = scripted_writer(kube, slept)
    updated = writer.write(server(), status(), LOG, pod=POD)
    assert kube.patches == [PENDING] * 5
    assert slept == [0.5, 1.0, 2.0, 2.0]
    assert served(updated.status) == PENDING
    assert kube.reads == (4 if code == 404 else 0)  # a 404: the server is read to see whether it is still there
    assert [reason for _, reason, _ in events] == ["Pending"]
    assert writer.ledger.is_from(KEY, POD)


@pytest.mark.usefixtures("events")
def test_a_connection_that_failed_is_retried_and_retry_after_is_honoured():
    kube, slept = FakeKube(urllib3.exceptions.ProtocolError("cut"), refused(429, retry_after="1.5")), []
    scripted_writer(kube, slept).write(server(), status(), LOG)
    assert slept == [0.5, 1.5]  # the second wait: 1 s by the backoff, 1.5 s by Retry-After
    assert len(kube.patches) == 3


def test_a_404_for_a_server_that_is_gone_ends_the_write_without_events(events):
    kube, slept = FakeKube(refused(404)), []
    kube.stored = None
    writer = scripted_writer(kube, slept)
    gone = server()
    assert writer.write(gone, status(), LOG, pod=POD) is gone
    assert (len(kube.patches), kube.reads, slept) == (1, 1, [])
    assert events == []
    assert not writer.ledger.is_from(KEY, POD)
    kube.refusals, kube.stored = [refused(404)], {**SERVER, "metadata": {**SERVER["metadata"], "uid": "srv-2"}}
    assert writer.write(gone, status(), LOG) is gone  # a new server of the same name is not this one
    assert events == []


@pytest.mark.parametrize("code", [400, 403, 422])
def test_a_write_the_api_rejects_as_wrong_is_not_sent_again(events, code):
    kube, slept = FakeKube(refused(code)), []
    with pytest.raises(ApiException):
        scripted_writer(kube, slept).write(server(), status(), LOG)
    assert (len(kube.patches), slept, events) == (1, [], [])


def test_the_backoff_doubles_up_to_its_cap():
    backoff = StatusBackoff()
    assert [backoff.delay(n) for n in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    assert backoff.delay(0, retry_after=30.0) == 10.0
    assert backoff.delay(10**6) == 10.0


def test_an_unchanged_status_sends_nothing_and_vouches_for_the_pod_state(writer, events):
    stored = server(dict(PENDING))
    assert writer.write(stored, status(), LOG, pod=POD) is stored  # no request: nothing changed
    assert writer.ledger.is_from(KEY, POD)
    assert events == []
    writer.write(stored, status(), LOG, pod=None, created="created pod x")
    assert events == [("Normal", "PodCreated", "created pod x")]
    assert not writer.ledger.is_from(KEY, POD)


def test_every_status_write_goes_through_the_status_model(writer):
    # fields assigned after construction are not validated there: the writer validates the status again
    for field, value, where in (
        ("observed_generation", "1", r"status\.observedGeneration"),
        ("phase", "Running", r"status\.phase"),  # not a VLLMServer phase
        ("conditions", [Condition.model_construct(type="Ready", status="Yes")], r"status\.conditions\.0\.status"),
    ):
        bad = status()
        setattr(bad, field, value)
        with pytest.raises(StatusError, match=where):
            writer.write(server(), bad, LOG)


@pytest.mark.usefixtures("events")
def test_kopfs_record_is_never_written_and_preflight_is_kept_unless_set():
    kube, slept = FakeKube(), []
    writer = scripted_writer(kube, slept)
    stored = server({**PENDING, "kopf": {"progress": {}}, "preflight": {"fits": True}})
    writer.write(stored, status({**PENDING, "reason": "Unschedulable", "kopf": {"dummy": "x"}}), LOG)
    writer.write(stored, status({**PENDING, "preflight": None}), LOG)
    # kopf's record and the pre-flight's numbers kept; an explicit None removes them
    assert kube.patches == [{"reason": "Unschedulable"}, {"preflight": None}]


def test_a_pod_event_of_the_state_the_status_came_from_needs_no_work():
    from kvpilot.controller.handlers import Controller

    controller = Controller(kubernetes.client.Configuration(host="http://127.0.0.1:9"), hub=False)
    pod = {"metadata": {**POD["metadata"], "labels": {"kvpilot.dev/server": "qwen"}}}
    assert not controller.pod_event_changes_nothing({"type": "ADDED", "object": pod}, "ns")
    controller.ledger.stored(KEY, pod)
    assert controller.pod_event_changes_nothing({"type": "ADDED", "object": pod}, "ns")
    assert not controller.pod_event_changes_nothing({"type": "DELETED", "object": pod}, "ns")  # a deletion always works
    later = {"metadata": {**pod["metadata"], "resourceVersion": "8"}}
    assert not controller.pod_event_changes_nothing({"type": "MODIFIED", "object": later}, "ns")
    assert controller.pod_event_changes_nothing({"type": "ADDED", "object": {"metadata": {}}}, "ns")  # not a server's
