"""Pure operator decisions: pod -> phase, conditions, status, pod plan (expected values by hand)."""

from __future__ import annotations

from kvpilot.api.models import VLLMServerStatus
from kvpilot.controller import logic
from kvpilot.sandbox import kubelet

NOW = "2026-11-30T12:00:00Z"
LATER = "2026-11-30T12:05:00Z"


def _pod(name="qwen-abcde", uid="pod-1", spec_hash="abcde12345", owner="srv-1", status=None, deadline=3600):
    return {
        "metadata": {
            "name": name,
            "uid": uid,
            "creationTimestamp": NOW,
            "annotations": {"kvpilot.dev/spec-hash": spec_hash},
            "ownerReferences": [{"uid": owner, "kind": "VLLMServer", "name": "qwen"}],
        },
        "spec": {"activeDeadlineSeconds": deadline, "containers": [{"name": "vllm", "image": "img"}]},
        "status": status or {"phase": "Pending"},
    }


def _server(status=None, generation=1, spec=None):
    body = {"metadata": {"name": "qwen", "namespace": "ns", "uid": "srv-1", "generation": generation}}
    return logic.Server.of({**body, "status": status or {}, **({"spec": spec} if spec is not None else {})})


def _status(fields):
    """A status from its camelCase JSON."""
    return VLLMServerStatus.model_validate(fields)


def _json(status):
    """A status as its camelCase JSON (fields set to None left out)."""
    return status.model_dump(by_alias=True, exclude_none=True)


# ----------------------------------------------------------------------------- pod_report
def test_pod_phases():
    pod = _pod()
    assert logic.pod_report(pod).phase == "Pending"
    assert logic.pod_report(
        {**pod, "status": kubelet.unschedulable(pod, NOW, "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")}
    ) == logic.PodReport("Pending", "Unschedulable", "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert logic.pod_report({**pod, "status": kubelet.scheduled(pod, NOW)}).reason == "ContainerCreating"
    bound = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}
    assert logic.pod_report({**pod, "status": bound}).reason == "Scheduled"
    assert logic.pod_report(pod).reason == "Scheduling"
    assert logic.pod_report({**pod, "status": kubelet.running(pod, NOW)}).phase == "Loading"
    ready = logic.pod_report({**pod, "status": kubelet.running(pod, NOW, ready=True)})
    assert (ready.phase, ready.ready) == ("Ready", True)


def test_deadline_exceeded_is_expired_and_other_failures_are_failed():
    pod = _pod()
    expired = logic.pod_report({**pod, "status": kubelet.deadline_exceeded(pod, NOW)}, ttl_seconds=3600)
    assert (expired.phase, expired.reason) == ("Expired", "DeadlineExceeded")
    assert "ttlSeconds=3600" in expired.message
    oom = logic.pod_report({**pod, "status": kubelet.terminated(pod, NOW, exit_code=137, reason="OOMKilled")})
    assert (oom.phase, oom.reason) == ("Failed", "OOMKilled")
    assert oom.message == "vLLM exited with code 137 (OOMKilled)"


def test_failed_message_keeps_the_last_three_lines_of_the_termination_message():
    pod = _pod()
    status = kubelet.terminated(pod, NOW, exit_code=1, reason="Error", message="a\nb\n\nc\nd\n")
    assert logic.pod_report({**pod, "status": status}).message == "vLLM exited with code 1 (Error): b | c | d"


# ----------------------------------------------------------------------------- conditions
def test_last_transition_time_changes_only_with_status():
    first = logic.set_condition(None, "Ready", "False", "Loading", "loading", now=NOW, generation=1)
    same = logic.set_condition(first, "Ready", "False", "Unschedulable", "no gpu", now=LATER, generation=2)
    flipped = logic.set_condition(same, "Ready", "True", "Ready", "serving", now=LATER, generation=2)
    assert first[0].last_transition_time == NOW
    assert same[0].last_transition_time == NOW
    assert same[0].reason == "Unschedulable"
    assert same[0].observed_generation == 2
    assert flipped[0].last_transition_time == LATER


# ----------------------------------------------------------------------------- status
def test_ready_status_has_endpoint_times_and_kv():
    pod = _pod()
    pod["status"] = kubelet.running(pod, "2026-11-30T11:00:00Z", ready=True)
    status = logic.server_status(
        _server(),
        pod,
        now=NOW,
        service_name="qwen",
        spec_hash="abcde12345",
        command=["vllm", "serve", "m"],
        kv=(21520, 2.63),
    )
    status = _json(status)
    assert status["phase"] == "Ready"
    assert status["endpoint"] == "http://qwen.ns.svc:8000"
    assert status["startedAt"] == "2026-11-30T11:00:00Z"
    assert status["expiresAt"] == "2026-11-30T12:00:00Z"  # 11:00 + 3600 s
    assert (status["kvCacheTokens"], status["maxConcurrency"]) == (21520, 2.63)
    assert status["podName"] == "qwen-abcde"
    assert status["observedGeneration"] == 1


def test_kv_numbers_belong_to_their_pod():
    pod = _pod(uid="pod-2")
    pod["status"] = kubelet.running(pod, NOW, ready=True)
    old = {"podUid": "pod-1", "kvCacheTokens": 21520, "maxConcurrency": 2.63}
    status = logic.server_status(_server(old), pod, now=NOW, service_name="qwen", spec_hash="h")
    assert "kvCacheTokens" not in _json(status)
    assert "maxConcurrency" not in _json(status)
    assert logic.status_patch(_status(old), status)["kvCacheTokens"] is None  # removed from the stored status


def test_rfc3339_accepts_the_clients_offset_form():
    assert logic.rfc3339("2026-11-30T13:08:58+00:00", 3600) == "2026-11-30T14:08:58Z"


def test_status_patch_is_empty_when_nothing_changes():
    status = _status({"phase": "Ready", "kvCacheTokens": 1})
    assert logic.status_patch(status, status.model_copy()) == {}
    with_numbers = _status({"phase": "Ready", "preflight": {"kvTokens": 1}})
    assert logic.status_patch(with_numbers, _status({"phase": "Ready"})) == {}  # only the pre-flight sets them
    assert logic.status_patch(with_numbers, _status({"phase": "Ready", "preflight": None})) == {"preflight": None}


def test_status_patch_sends_the_fields_that_changed_and_nulls_the_ones_gone():
    old = _status({"phase": "Loading", "reason": "Loading", "podName": "a", "kvCacheTokens": 1})
    new = _status({"phase": "Ready", "reason": "Loading", "podName": "a", "readyAt": NOW})
    assert logic.status_patch(old, new) == {"phase": "Ready", "readyAt": NOW, "kvCacheTokens": None}


# ----------------------------------------------------------------------------- plan
def test_plan_creates_when_no_pod():
    plan = logic.plan_pods(_server(), [], "abcde12345")
    assert plan.create
    assert plan.keep is None
    assert plan.delete == []


def test_plan_adopts_the_existing_pod():
    pod = _pod()
    plan = logic.plan_pods(_server(), [pod], "abcde12345")
    assert plan.keep is pod
    assert not plan.create
    assert plan.delete == []


def test_plan_replaces_a_pod_of_an_older_spec():
    plan = logic.plan_pods(_server(), [_pod(spec_hash="old0000000")], "abcde12345")
    assert plan.create
    assert plan.delete == ["qwen-abcde"]


def test_plan_never_restarts_an_ended_server_with_the_same_spec():
    server = _server({"phase": "Expired", "specHash": "abcde12345", "podName": "qwen-abcde"})
    assert not logic.plan_pods(server, [], "abcde12345").create  # its pod was removed by a person
    assert logic.plan_pods(server, [], "fffff00000").create  # a person changed the spec


def test_plan_ignores_pods_it_does_not_own_and_removes_duplicates():
    foreign = _pod(name="qwen-other", owner="someone-else")
    first, second = _pod(name="qwen-a", uid="1"), _pod(name="qwen-b", uid="2")
    server = _server({"podName": "qwen-b"})
    plan = logic.plan_pods(server, [foreign, first, second], "abcde12345")
    assert plan.keep is second
    assert plan.delete == ["qwen-a"]
    assert not plan.create


# ----------------------------------------------------------------------------- pod events
def test_an_ended_server_without_a_pod_keeps_the_record_of_its_last_run():
    old = {
        "phase": "Expired",
        "reason": "DeadlineExceeded",
        "message": "pod ended by its deadline",
        "podName": "qwen-abcde",
        "podUid": "pod-1",
        "startedAt": NOW,
        "expiresAt": LATER,
        "finishedAt": LATER,
        "kvCacheTokens": 21520,
        "maxConcurrency": 2.63,
        "endpoint": "http://qwen.ns.svc:8000",  # not part of the record: an ended server serves nothing
    }
    new = {"phase": "Pending", "reason": "PodMissing", "message": "no pod yet", "specHash": "abcde12345"}
    kept = _json(logic.keep_ended_record(_status(new), _status(old)))
    assert kept["phase"] == "Expired"
    assert kept["reason"] == "DeadlineExceeded"
    assert kept["podName"] == "qwen-abcde"
    assert kept["kvCacheTokens"] == 21520
    assert kept["finishedAt"] == LATER
    assert kept["specHash"] == "abcde12345"
    assert "endpoint" not in kept


def test_the_current_pod_is_the_one_in_status_else_the_one_of_the_spec():
    pod = _pod(name="qwen-abcde", spec_hash="abcde12345")
    assert not logic.is_current_pod(_status({}), pod)  # the server handler has not run yet
    assert logic.is_current_pod(_status({"specHash": "abcde12345", "podName": "qwen-abcde"}), pod)
    assert not logic.is_current_pod(_status({"specHash": "abcde12345", "podName": "qwen-fffff"}), pod)  # replaced
    assert logic.is_current_pod(_status({"specHash": "abcde12345"}), pod)  # no pod recorded yet: the spec decides
    assert not logic.is_current_pod(_status({"specHash": "fffff00000"}), pod)  # an older spec's pod


def test_a_deleted_pod_fails_a_running_server_but_not_an_ended_one():
    running = _server({"phase": "Ready", "reason": "Ready", "specHash": "abcde12345", "serviceName": "qwen"})
    new = _json(logic.pod_deleted_status(running, "qwen-abcde", now=LATER))
    assert (new["phase"], new["reason"]) == ("Failed", "PodDeleted")
    assert new["message"] == "pod qwen-abcde was deleted; change the spec or delete the VLLMServer"
    ready = next(c for c in new["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"], ready["lastTransitionTime"]) == ("False", "PodDeleted", LATER)
    expired = _server({"phase": "Expired", "reason": "DeadlineExceeded", "message": "m", "specHash": "abcde12345"})
    assert logic.pod_deleted_status(expired, "qwen-abcde", now=LATER).phase == "Expired"


def _kv_server(kv_status="Unknown", kv_reason="InsufficientInputs", spec=None):
    conditions = [{"type": "KVCapacity", "status": kv_status, "reason": kv_reason}]
    return _server(
        {"conditions": conditions}, spec=spec if spec is not None else {"model": "Qwen/Qwen2.5-1.5B-Instruct"}
    )


def test_the_preflight_waits_for_the_nodes_gpu_memory_label_only_when_it_lacked_it():
    scheduled = _pod()
    scheduled["spec"]["nodeName"] = "gpu-node-1"
    assert logic.waits_for_node_gpu_memory(_kv_server(), scheduled)
    assert not logic.waits_for_node_gpu_memory(_kv_server(), _pod())  # not scheduled: no node to read
    assert not logic.waits_for_node_gpu_memory(_kv_server("True", "Fits"), scheduled)  # already computed
    assert not logic.waits_for_node_gpu_memory(_kv_server(kv_reason="NoModelConfig"), scheduled)  # not the GPU
    gpu_given = {"model": "m", "resources": {"gpuMemory": "80Gi"}}
    assert not logic.waits_for_node_gpu_memory(_kv_server(spec=gpu_given), scheduled)
    assert not logic.waits_for_node_gpu_memory(_kv_server(spec={"model": "m", "preflight": "off"}), scheduled)
    assert not logic.waits_for_node_gpu_memory(_server(), scheduled)  # no KVCapacity condition at all
    # an invalid spec (maxNumSeqs must be >= 1) has no pre-flight: the reconcile reports the spec instead
    invalid = {"model": "m", "engine": {"maxNumSeqs": 0}}
    assert not logic.waits_for_node_gpu_memory(_kv_server(spec=invalid), scheduled)


# ----------------------------------------------------------------------------- statuses from a real cluster
# Pod statuses as a real cluster reported them, copied from Red Hat's OpenShift Container Platform 3.11
# Developer Guide, "Diagnosing an OOM kill" (`oc get pod test -o yaml` after an OOM kill, without and
# with a restart): https://docs.redhat.com/zh-cn/documentation/openshift_container_platform/3.11/html/developer_guide/diagnosing-an-oom-kill
# (the YAML is the same in every language of the page). Only the fields the page shows are set.
OOM_KILLED_NOT_RESTARTED = {
    "containerStatuses": [
        {
            "name": "test",
            "ready": False,
            "restartCount": 0,
            "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
        }
    ],
    "phase": "Failed",
}
OOM_KILLED_RESTARTED = {
    "containerStatuses": [
        {
            "name": "test",
            "ready": True,
            "restartCount": 1,
            "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}},
            "state": {"running": None},
        }
    ],
    "phase": "Running",
}


def test_a_real_oom_killed_pod_is_failed_with_the_kernels_reason_and_exit_code():
    report = logic.pod_report(_pod(status=OOM_KILLED_NOT_RESTARTED))
    assert (report.phase, report.reason, report.ready) == ("Failed", "OOMKilled", False)
    # exit code 137 = 128 + SIGKILL (9): the kernel's OOM killer
    assert report.message == "vLLM exited with code 137 (OOMKilled)"


def test_a_real_restarted_pod_without_a_ready_condition_is_still_loading():
    # the page's restarted pod is Running with its container ready, but the captured status has no
    # conditions list: kvpilot calls a server Ready only on the pod's Ready condition (Kubernetes
    # "Pod Lifecycle": Ready is a pod condition), so this pod reads as Loading, not Ready.
    report = logic.pod_report(_pod(status=OOM_KILLED_RESTARTED))
    assert (report.phase, report.ready) == ("Loading", False)
    with_condition = dict(OOM_KILLED_RESTARTED, conditions=[{"type": "Ready", "status": "True"}])
    assert logic.pod_report(_pod(status=with_condition)).phase == "Ready"


def test_a_termination_message_with_a_secret_beside_an_escape_reaches_status_and_events_redacted():
    token = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmN"
    pod = {
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {"state": {"terminated": {"exitCode": 1, "reason": "Error", "message": f"login \x1b[1m{token}\x1b[0m"}}}
            ],
        }
    }
    report = logic.pod_report(pod)
    status = logic.safe_status(VLLMServerStatus(phase=report.phase, reason=report.reason, message=report.message))
    assert "a1B2c3D4" not in (status.message or "")
    assert (status.message or "").endswith("login [REDACTED]")
    (event,) = logic.status_events(
        VLLMServerStatus(), VLLMServerStatus(phase="Failed", reason="Error", message=report.message)
    )
    assert "a1B2c3D4" not in event.message
    assert "[REDACTED]" in event.message
