"""The decisions the handlers act on (kvpilot.controller.logic): creates, Events, the pre-flight's order and
verdict, what a pod event does. Expected values are written out by hand from docs/operator.md's rules.
"""

from __future__ import annotations

import hashlib
import json

import pytest

from kvpilot.api.models import Condition, PreflightStatus, VLLMServerStatus
from kvpilot.controller import failures, logic
from kvpilot.sandbox import kubelet

NOW = "2026-11-30T12:00:00Z"


def _pod(name="qwen-abcde", uid="pod-1", spec_hash="abcde12345", owner="srv-1", status=None):
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "resourceVersion": "7",
            "labels": {"kvpilot.dev/server": "qwen"},
            "annotations": {"kvpilot.dev/spec-hash": spec_hash},
            "ownerReferences": [{"uid": owner, "kind": "VLLMServer", "name": "qwen", "controller": True}],
        },
        "spec": {"containers": [{"name": "vllm", "image": "img"}]},
        "status": status or {"phase": "Pending"},
    }


def _server(status=None, generation=1, spec=None):
    return logic.Server.of(
        {
            "metadata": {"name": "qwen", "namespace": "ns", "uid": "srv-1", "generation": generation},
            "spec": spec or {"model": "Qwen/Qwen2.5-1.5B-Instruct"},
            "status": status or {},
        }
    )


def _status(fields):
    """A status from its camelCase JSON."""
    return VLLMServerStatus.model_validate(fields)


def _json(status):
    """A status as its camelCase JSON (fields set to None left out)."""
    return status.model_dump(by_alias=True, exclude_none=True)


# ----------------------------------------------------------------------------- a 409 on create
def test_a_create_conflict_is_adopted_held_or_transient_by_who_owns_the_name():
    ours = {"metadata": {"ownerReferences": [{"uid": "srv-1", "kind": "VLLMServer", "name": "qwen"}]}}
    theirs = {"metadata": {"ownerReferences": [{"uid": "x", "kind": "Deployment", "name": "web", "controller": True}]}}
    nobodys = {"metadata": {"name": "qwen"}}
    assert logic.after_create_conflict(ours, "srv-1") == logic.CreateConflict("adopt")
    assert logic.after_create_conflict(theirs, "srv-1") == logic.CreateConflict("held", "Deployment web")
    assert logic.after_create_conflict(nobodys, "srv-1") == logic.CreateConflict("held", "no controller")
    # 409, then 404: the create raced a deletion (or a stale cache answered): a retry can succeed
    assert logic.after_create_conflict(None, "srv-1") == logic.CreateConflict("vanished")


# ----------------------------------------------------------------------------- Events
def test_a_phase_transition_posts_one_event_led_by_what_was_created():
    old = _status({})
    new = _status({"phase": "Pending", "reason": "Scheduling", "message": "waiting for the scheduler"})
    assert logic.status_events(old, new, "created pod qwen-abcde for spec abcde and service qwen") == [
        logic.Event(
            "Normal",
            "Pending",
            "created pod qwen-abcde for spec abcde and service qwen; Scheduling: waiting for the scheduler",
        )
    ]
    unschedulable = new.model_copy(update={"reason": "Unschedulable", "message": "0/3 nodes are available"})
    assert logic.status_events(new, unschedulable) == [
        logic.Event("Warning", "Pending", "Unschedulable: 0/3 nodes are available")
    ]


def test_without_a_transition_only_a_creation_is_announced():
    same = _status({"phase": "Ready", "reason": "Ready", "message": "serving"})
    assert logic.status_events(same, same.model_copy()) == []
    assert logic.status_events(same, same.model_copy(), "created pod x") == [
        logic.Event("Normal", "PodCreated", "created pod x")
    ]


def test_an_event_message_is_one_line_of_at_most_1024_characters():
    new = _status({"phase": "Failed", "reason": "Error", "message": "a\nb" + "x" * 2000})
    [event] = logic.status_events(_status({}), new)
    assert "\n" not in event.message
    assert len(event.message) <= 1024
    assert event.type == "Warning"


def test_a_cut_failure_message_still_reaches_the_transition_event_whole():
    """The failure message is cut (failures.MESSAGE_LIMIT) so that the Event repeating it, after the longest note of
    what was created and the longest reason, is not cut again by the 1 KiB Event limit.
    """
    from kubernetes.client.exceptions import ApiException

    name = "q" * 63  # the longest VLLMServer name (api.rules.check_server_name), so the longest Service name
    note = logic.creation_note(
        logic.PodPlan(create=True),
        _status({}),
        pod_name=f"{name}-abcde",  # render.pod_name: <name>-<5 hex>
        spec_hash="0123456789abcdef",  # api.spec_hash: 16 hex
        service_name=name,
        service_created=False,  # "(service ... existed)" is the longer of the two wordings
        adopted=False,
    )
    exc = ApiException(status=500, reason="Internal Server Error")
    exc.body = json.dumps({"message": "etcd: " + "x" * 5000})
    failure = failures.classify(exc, step=f"creating pod {name}-abcde", retry=10, policy=failures.RetryPolicy())
    assert failure.reason == "ReconcileFailed"  # the longest reason
    assert failure.message.startswith("gave up after 10 retries: creating pod q")
    assert failure.message.endswith("x…")
    status = failures.failure_status(_server(), failure, now=NOW)
    assert status.message == failure.message
    [event] = logic.status_events(_status({"phase": "Pending"}), status, note.created)
    assert event.message == f"{note.created}; ReconcileFailed: {failure.message}"  # nothing cut twice
    assert len(event.message) <= 1024  # what the API server accepts


def test_the_kv_warning_is_posted_once_per_verdict():
    condition = Condition(type="KVCapacity", status="False", reason="MaxModelLenExceedsKV", message="m")
    warned = VLLMServerStatus(conditions=[condition])
    assert logic.kv_warning_event(_status({}), condition, "one request cannot fit") == logic.Event(
        "Warning", "MaxModelLenExceedsKV", "one request cannot fit"
    )
    assert logic.kv_warning_event(warned, condition, "one request cannot fit") is None  # said already
    assert logic.kv_warning_event(_status({}), condition, None) is None  # no warning, no Event


def test_a_new_servers_first_pod_rides_its_pending_event_a_replacement_has_its_own():
    create = logic.PodPlan(create=True)
    args = {"pod_name": "qwen-abcde", "spec_hash": "abcde", "service_name": "qwen"}
    new = logic.creation_note(create, _status({}), service_created=True, adopted=False, **args)
    assert new == logic.CreationNote(created="created pod qwen-abcde for spec abcde and service qwen")
    existed = logic.creation_note(create, _status({}), service_created=False, adopted=False, **args)
    assert existed.created == "created pod qwen-abcde for spec abcde (service qwen existed)"
    replacement = logic.creation_note(
        logic.PodPlan(create=True, delete=["qwen-00000"]), _status({}), service_created=False, adopted=False, **args
    )
    assert replacement == logic.CreationNote(
        event=logic.Event("Normal", "PodCreated", "created pod qwen-abcde for spec abcde")
    )
    after_an_ended_run = logic.creation_note(
        create, _status({"podName": "qwen-00000"}), service_created=False, adopted=False, **args
    )
    assert after_an_ended_run.event is not None
    assert after_an_ended_run.created is None
    # nothing said when the pod was adopted (an earlier attempt made it) or none was created
    assert logic.creation_note(create, _status({}), service_created=True, adopted=True, **args) == logic.CreationNote()
    assert (
        logic.creation_note(logic.PodPlan(), _status({}), service_created=True, adopted=False, **args)
        == logic.CreationNote()
    )


def test_a_deleted_stale_pod_is_announced():
    assert logic.replaced_event("qwen-00000") == logic.Event(
        "Normal", "PodReplaced", "deleted pod qwen-00000: it was made from an older spec (or is a duplicate)"
    )


def test_a_failed_reconcile_posts_a_warning_named_by_its_reason():
    failure = failures.Failure("APIError", "creating pod x: HTTP 500\nboom", permanent=False, delay=2.0)
    assert failures.failure_event(failure) == logic.Event("Warning", "APIError", "creating pod x: HTTP 500 boom")


# ----------------------------------------------------------------------------- the KV pre-flight
def test_enforce_runs_the_preflight_before_the_pod_warn_after_it_off_never():
    assert [logic.preflight_order(m) for m in ("enforce", "warn", "off")] == ["before", "after", "never"]
    with pytest.raises(KeyError):
        logic.preflight_order("sometimes")


def test_only_enforce_with_a_warning_refuses_the_spec():
    condition = Condition(type="KVCapacity", status="False", reason="MaxModelLenExceedsKV", message="m")
    refused = logic.preflight_refusal(
        _server(), "enforce", condition, "one 32,768-token request needs 0.875 GiB", now=NOW
    )
    assert refused is not None
    refused = _json(refused)
    assert (refused["phase"], refused["reason"]) == ("Invalid", "MaxModelLenExceedsKV")
    assert refused["message"] == "spec.engine.maxModelLen: one 32,768-token request needs 0.875 GiB"
    valid = next(c for c in refused["conditions"] if c["type"] == "Valid")
    assert (valid["status"], valid["reason"]) == ("False", "MaxModelLenExceedsKV")
    assert logic.preflight_refusal(_server(), "enforce", condition, None, now=NOW) is None  # it fits
    assert logic.preflight_refusal(_server(), "warn", condition, "does not fit", now=NOW) is None  # warn only warns


def test_the_kv_condition_and_numbers_go_into_the_status():
    fields = {"type": "KVCapacity", "status": "True", "reason": "Fits", "message": "fits"}
    condition = Condition.model_validate(fields)
    numbers = PreflightStatus(kv_tokens=8)
    pending = _status({"phase": "Pending"})
    status = _json(logic.with_kv_condition(_server(generation=3), pending, condition, numbers, now=NOW))
    assert status["phase"] == "Pending"
    assert status["preflight"] == {"kvTokens": 8}
    assert status["conditions"] == [{**fields, "lastTransitionTime": NOW, "observedGeneration": 3}]
    none = logic.with_kv_condition(_server(), _status({}), condition, None, now=NOW)
    assert logic.status_patch(_status({"preflight": {"kvTokens": 8}}), none)["preflight"] is None  # none: removed


# ----------------------------------------------------------------------------- pod events
STATUS = {
    "specHash": "abcde12345",
    "podName": "qwen-abcde",
    "podUid": "pod-1",
    "serviceName": "qwen",
    "command": ["vllm"],
}


def test_an_invalid_server_ignores_its_pods_until_its_spec_changes():
    invalid = {"phase": "Invalid", "observedGeneration": 2, **STATUS}
    assert logic.pod_event_plan(_server(invalid, generation=2), _pod(), "MODIFIED").action == "ignore"
    assert logic.pod_event_plan(_server(invalid, generation=3), _pod(), "MODIFIED").action == "update"


def test_only_the_current_pod_changes_the_status():
    plan = logic.pod_event_plan(_server({**STATUS, "phase": "Pending"}), _pod(), "MODIFIED")
    assert (plan.action, plan.spec_hash, plan.command, plan.service_name) == ("update", "abcde12345", ["vllm"], "qwen")
    old = _pod(name="qwen-00000", uid="pod-0", spec_hash="0000000000")
    assert logic.pod_event_plan(_server({**STATUS, "phase": "Pending"}), old, "MODIFIED").action == "ignore"
    assert logic.pod_event_plan(_server({**STATUS, "phase": "Ready"}), _pod(), "DELETED").action == "deleted"


def test_a_status_that_never_landed_is_computed_for_the_specs_own_hash():
    """The first status never landed (kopf lost its patch on a 409 or 404): the pod event computes it afresh."""
    spec = {"model": "Qwen/Qwen2.5-1.5B-Instruct"}
    # the renderer's hash: sha256 of the spec as compact JSON with sorted keys, its first 16 hex
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]
    assert logic.current_spec(_server({}, spec=spec)) == (digest, ["vllm", "serve", spec["model"], "--port", "8000"])
    plan = logic.pod_event_plan(_server({}, spec=spec), _pod(spec_hash=digest), "ADDED")
    assert (plan.action, plan.spec_hash, plan.command, plan.service_name) == (
        "update",
        digest,
        ["vllm", "serve", spec["model"], "--port", "8000"],
        "qwen",
    )
    invalid = _server({}, spec={"model": spec["model"], "engine": {"maxNumSeqs": 0}})
    assert logic.current_spec(invalid) is None
    assert logic.pod_event_plan(invalid, _pod(spec_hash=digest), "ADDED").action == "ignore"  # the reconcile says why
    assert logic.pod_event_plan(_server({}, spec=spec), _pod(spec_hash=digest, owner="x"), "ADDED").action == "ignore"
    assert logic.pod_event_plan(_server({}, spec=spec), _pod(), "ADDED").action == "ignore"  # another spec's pod


def test_the_failure_log_is_read_once_when_the_pod_has_just_failed():
    failed = _pod()
    failed["status"] = kubelet.terminated(failed, NOW, exit_code=1, reason="Error", message="boom")
    loading = {**STATUS, "phase": "Loading", "reason": "Loading"}
    assert logic.pod_event_plan(_server(loading), failed, "MODIFIED").read_failure_log
    said = {**STATUS, "phase": "Failed", "reason": "Error"}  # this pod's failure is in status already
    assert not logic.pod_event_plan(_server(said), failed, "MODIFIED").read_failure_log
    other_pod_failed = {**said, "podUid": "pod-0"}
    assert logic.pod_event_plan(_server(other_pod_failed), failed, "MODIFIED").read_failure_log
    assert not logic.pod_event_plan(_server(loading), _pod(), "MODIFIED").read_failure_log  # not failed


def test_the_kv_line_is_read_once_when_the_pod_is_ready():
    ready = _pod()
    ready["status"] = kubelet.running(ready, NOW, ready=True)
    loading = {**STATUS, "phase": "Loading"}
    assert logic.pod_event_plan(_server(loading), ready, "MODIFIED").read_kv_log
    known = {**STATUS, "phase": "Ready", "kvCacheTokens": 21520}
    assert not logic.pod_event_plan(_server(known), ready, "MODIFIED").read_kv_log
    assert logic.pod_event_plan(_server({**known, "podUid": "pod-0"}), ready, "MODIFIED").read_kv_log  # another pod's
    running = _pod()
    running["status"] = kubelet.running(running, NOW)
    assert not logic.pod_event_plan(_server(loading), running, "MODIFIED").read_kv_log  # not ready yet


def test_a_scheduled_pod_reruns_a_preflight_that_lacked_the_gpu_memory():
    waiting = {
        **STATUS,
        "conditions": [{"type": "KVCapacity", "status": "Unknown", "reason": "InsufficientInputs"}],
    }
    scheduled = _pod()
    scheduled["spec"]["nodeName"] = "gpu-node-1"
    assert logic.pod_event_plan(_server(waiting), scheduled, "MODIFIED").preflight_again
    assert not logic.pod_event_plan(_server(waiting), _pod(), "MODIFIED").preflight_again  # no node yet


# ----------------------------------------------------------------------------- the reconcile's own
def test_a_body_without_status_is_a_new_server():
    assert logic.is_new_server({"metadata": {"name": "qwen"}})
    assert logic.is_new_server({"metadata": {"name": "qwen"}, "status": {}})
    assert not logic.is_new_server({"status": {"phase": "Pending"}})


def test_the_service_is_read_first_only_when_the_status_names_one():
    assert not logic.service_read_first(_server({}))  # new: create first, a 409 is adopted
    assert logic.service_read_first(_server({"serviceName": "qwen"}))


def test_an_ended_server_without_a_pod_keeps_its_record_through_a_reconcile():
    ended = {
        "phase": "Expired",
        "reason": "DeadlineExceeded",
        "message": "m",
        "specHash": "abcde12345",
        "podName": "qwen-abcde",
    }
    kept = logic.reconciled_status(
        _server(ended), logic.PodPlan(), None, now=NOW, service_name="qwen", spec_hash="abcde12345", command=None
    )
    assert (kept.phase, kept.reason, kept.pod_name) == ("Expired", "DeadlineExceeded", "qwen-abcde")
    fresh = logic.reconciled_status(
        _server({}),
        logic.PodPlan(create=True),
        _pod(),
        now=NOW,
        service_name="qwen",
        spec_hash="abcde12345",
        command=None,
    )
    assert (fresh.phase, fresh.reason, fresh.pod_name) == ("Pending", "Scheduling", "qwen-abcde")


def test_a_pod_event_names_its_server_by_the_label():
    assert logic.pod_event_server({"type": "ADDED", "object": _pod()}) == "qwen"
    assert logic.pod_event_server({"type": None, "object": _pod()}) is None  # kopf's initial listing
    assert logic.pod_event_server({"type": "ADDED", "object": {"metadata": {"labels": {}}}}) is None


def test_the_pod_index_keys_a_pod_by_its_namespace_and_server():
    from kvpilot.controller.handlers import pods_by_server

    pod = _pod()
    assert pods_by_server("ns", pod["metadata"]["labels"], pod) == {("ns", "qwen"): pod}
    assert pods_by_server("ns", {}, pod) is None  # not a server's pod
    assert pods_by_server(None, pod["metadata"]["labels"], pod) is None  # pods are namespaced
