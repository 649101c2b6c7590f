"""The status writer's one path and its ledger, without a cluster: kopf's patch, the Events it defers,
what a pod event may skip, and the status model every write goes through.
"""

from __future__ import annotations

import asyncio
import logging

import kopf
import kubernetes.client
import pytest

from kvpilot.api.models import StatusError, status_document
from kvpilot.controller.kube import Kube
from kvpilot.controller.status import StatusLedger, StatusWriter

LOG = logging.getLogger("test")
KEY = ("ns", "qwen")
POD = {"metadata": {"uid": "pod-1", "resourceVersion": "7", "name": "qwen-abcde"}}
SERVER = {
    "apiVersion": "kvpilot.dev/v1alpha1",
    "kind": "VLLMServer",
    "metadata": {"name": "qwen", "namespace": "ns", "uid": "srv-1"},
}
PENDING = {"phase": "Pending", "reason": "Scheduling", "message": "waiting for the scheduler", "specHash": "abcde12345"}


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


def test_a_first_status_goes_into_kopfs_patch_and_its_event_waits_for_it_to_land(writer, events):
    patch = kopf.Patch()
    updated = writer.write(dict(SERVER), dict(PENDING), LOG, pod=POD, created="created pod qwen-abcde", via=patch)
    assert patch["status"] == PENDING
    assert updated["status"] == PENDING
    assert events == []  # not stored yet
    assert writer.ledger.is_from(KEY, POD)  # the pod's ADDED of this very state needs no work
    landed = writer.ledger.in_flight(KEY)
    writer.ledger.seen(KEY, {"status": {"phase": "Pending"}}, deleted=False)  # an event without it: not it
    assert not landed.done()
    writer.ledger.seen(KEY, {"status": PENDING}, deleted=False)
    assert landed.result(0) is True
    assert writer.ledger.in_flight(KEY) is None
    assert events == [("Normal", "Pending", "created pod qwen-abcde; Scheduling: waiting for the scheduler")]
    assert not writer.ledger.is_from(KEY, {"metadata": {"uid": "pod-1", "resourceVersion": "8"}})  # a later state


def test_a_wait_that_times_out_keeps_the_events_for_a_late_landing(writer, events):
    writer.write(dict(SERVER), dict(PENDING), LOG, pod=POD, via=kopf.Patch())
    writer.ledger.wait(KEY, timeout=0.05)  # kopf's patch is late (a busy operator), or lost
    assert writer.ledger.in_flight(KEY) is not None
    assert events == []
    writer.ledger.seen(KEY, {"status": PENDING}, deleted=False)  # late, but stored: its Event goes out
    assert [reason for _, reason, _ in events] == ["Pending"]


def test_a_lost_first_status_gives_way_to_the_write_that_replaces_it(writer, events):
    writer.write(dict(SERVER), dict(PENDING), LOG, pod=POD, via=kopf.Patch())
    landed = writer.ledger.in_flight(KEY)
    writer.ledger.superseded(KEY)  # a pod event read the server without it and wrote it itself
    assert landed.result(0) is False
    assert writer.ledger.in_flight(KEY) is None
    writer.ledger.seen(KEY, {"status": PENDING}, deleted=False)  # the replacing write's own event
    assert events == []  # that write posted its own Event: none twice


def test_the_loop_waits_without_a_thread():
    ledger = StatusLedger()
    ledger.handed_to_kopf(KEY, POD, dict(SERVER), [])
    asyncio.run(ledger.wait_async(KEY, timeout=0.05))
    assert ledger.in_flight(KEY) is not None  # timed out: still in flight

    async def lands_meanwhile() -> None:
        asyncio.get_running_loop().call_later(0.01, ledger.seen, KEY, {"status": PENDING}, False)
        await ledger.wait_async(KEY, timeout=10)

    asyncio.run(lands_meanwhile())
    assert ledger.in_flight(KEY) is None
    assert ledger.is_from(KEY, POD)


def test_a_deleted_server_ends_the_wait_without_posting(writer, events):
    writer.write(dict(SERVER), dict(PENDING), LOG, pod=POD, via=kopf.Patch())
    landed = writer.ledger.in_flight(KEY)
    writer.ledger.seen(KEY, {}, deleted=True)
    assert landed.result(0) is False
    assert events == []


def test_an_unchanged_status_sends_nothing_and_vouches_for_the_pod_state(writer, events):
    stored = {**SERVER, "status": dict(PENDING)}
    assert writer.write(stored, dict(PENDING), LOG, pod=POD) is stored  # no request: nothing changed
    assert writer.ledger.is_from(KEY, POD)
    assert events == []
    writer.write(stored, dict(PENDING), LOG, pod=None, created="created pod x")
    assert events == [("Normal", "PodCreated", "created pod x")]
    assert not writer.ledger.is_from(KEY, POD)


def test_every_status_write_goes_through_the_status_model(writer):
    with pytest.raises(StatusError, match=r"status\.podname: not a field"):
        writer.write(dict(SERVER), {**PENDING, "podname": "x"}, LOG, via=kopf.Patch())
    with pytest.raises(StatusError, match=r"status\.observedGeneration"):
        writer.write(dict(SERVER), {**PENDING, "observedGeneration": "1"}, LOG, via=kopf.Patch())


def test_the_status_document_is_the_models_camel_case_json():
    status = {**PENDING, "kvCacheTokens": 21520, "maxConcurrency": 2.63, "endpoint": None, "preflight": {"fits": True}}
    assert status_document(status) == {
        **PENDING,
        "kvCacheTokens": 21520,
        "maxConcurrency": 2.63,
        "preflight": {"fits": True},
    }
    with pytest.raises(StatusError, match=r"status\.phase"):
        status_document({"phase": "Running"})  # not a VLLMServer phase
    with pytest.raises(StatusError, match=r"status\.conditions\.0\.status"):
        status_document({"conditions": [{"type": "Ready", "status": "Yes"}]})


def test_kopfs_record_is_never_written_and_preflight_is_kept_unless_set(writer):
    stored = {**SERVER, "status": {**PENDING, "kopf": {"progress": {}}, "preflight": {"fits": True}}}
    patch = kopf.Patch()
    writer.write(stored, {**PENDING, "reason": "Unschedulable", "kopf": {"x": 1}}, LOG, via=patch)
    assert patch["status"] == {"reason": "Unschedulable"}  # kopf's record and the pre-flight's numbers kept
    patch = kopf.Patch()
    writer.write(stored, {**PENDING, "preflight": None}, LOG, via=patch)
    assert patch["status"] == {"preflight": None}  # an explicit None removes them


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
