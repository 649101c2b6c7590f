"""Fault injection: the real kopf operator on the sandbox API while the API fails on purpose.

Each case injects failures with :meth:`SandboxCluster.inject` (409, 403 with an admission
message, 429, 500 on pod/service create and on the status write, a watch cut in the middle of an
event, the operator stopped between Service and Pod creation) and checks what a person sees
afterwards: exactly one Pod and one Service per VLLMServer, the right phase and reason, a bounded
number of retries, and Warning Events naming the failure.
"""

from __future__ import annotations

import copy

import kubernetes.client
import pytest

from kvpilot.controller.failures import RetryPolicy
from tests.integration.operator.conftest import SERVERS, wait_for
from tests.support.waiting import stays_false

SERVER = {
    "apiVersion": "kvpilot.dev/v1alpha1",
    "kind": "VLLMServer",
    "metadata": {"name": "qwen"},
    "spec": {"model": "Qwen/Qwen2.5-1.5B-Instruct", "resources": {"gpus": 1, "memory": "6Gi"}},
}
#: The pod's name for SERVER's spec: kvpilot render's <name>-<first 5 hex of the spec hash>.
POD_NAME = (
    "qwen-"
    + __import__("kvpilot.api", fromlist=["spec_hash"]).spec_hash(
        __import__("kvpilot.api", fromlist=["parse_spec"]).parse_spec(SERVER["spec"])
    )[:5]
)
#: Fast backoff for the tests: 0.1 s, 0.2 s, 0.4 s … capped at 0.5 s, 4 retries.
FAST = RetryPolicy(base_seconds=0.1, cap_seconds=0.5, limit=4)
#: The admission message the API server returns for a pod PodSecurity "restricted" refuses
#: (k8s.io/pod-security-admission, the wording of a real 1.30 API server).
PSA_MESSAGE = (
    f'pods "{POD_NAME}" is forbidden: violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false '
    '(container "vllm" must set securityContext.allowPrivilegeEscalation=false)'
)


def _create(api, namespace: str) -> dict:
    return kubernetes.client.CustomObjectsApi(api).create_namespaced_custom_object(
        *SERVERS, namespace, "vllmservers", copy.deepcopy(SERVER)
    )


def _status(cluster, namespace: str) -> dict:
    return (cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, "qwen") or {}).get("status") or {}


def _warnings(cluster, namespace: str, reason: str) -> list[dict]:
    return [e for e in cluster.list("v1/events", namespace) if e.get("type") == "Warning" and e["reason"] == reason]


def _requests(cluster, method: str, path_end: str) -> int:
    """How many requests the sandbox received with ``method`` whose path ends with ``path_end``."""
    return sum(1 for r in cluster.served() if r.method == method and r.path.endswith(path_end))


def _wait_phase(cluster, namespace: str, phase: str, reason: str, timeout: float = 15.0) -> dict:
    return wait_for(
        lambda: (s := _status(cluster, namespace)).get("phase") == phase and s.get("reason") == reason and s,
        timeout=timeout,
        what=f"phase {phase}/{reason}",
    )


def _ready_condition(status: dict) -> dict:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


@pytest.fixture(autouse=True)
def _no_faults_left(cluster):
    yield
    cluster.clear_faults()


def test_unowned_pod_holding_the_name_is_reported_once_not_retried(cluster, api, namespace, operator):
    core = kubernetes.client.CoreV1Api(api)
    squatter = {"metadata": {"name": POD_NAME}, "spec": {"containers": [{"name": "x", "image": "busybox"}]}}
    core.create_namespaced_pod(namespace, squatter)  # someone else's pod with the renderer's name
    with operator(retry_policy=FAST):
        _create(api, namespace)
        status = _wait_phase(cluster, namespace, "Failed", "NameConflict")
        wait_for(lambda: _warnings(cluster, namespace, "NameConflict"), what="the NameConflict event")
        attempts = _requests(cluster, "POST", "/pods")
        # Permanent: no further create while the operator keeps running. Were it a TemporaryError, kopf
        # would make FAST's 4 retries 0.1, 0.2, 0.4 and 0.5 s apart: the window is that whole schedule
        # (1.2 s) plus 1 s of kopf's own latency.
        window = sum(FAST.delay(retry) for retry in range(FAST.limit)) + 1.0
        stays_false(
            lambda: (
                _requests(cluster, "POST", "/pods") > attempts or len(_warnings(cluster, namespace, "NameConflict")) > 1
            ),
            window,
            what="a retried create",
        )
    assert f'pod "{POD_NAME}" already exists' in status["message"]
    assert "no controller" in status["message"]
    assert _ready_condition(status)["reason"] == "NameConflict"
    assert attempts == 2  # the squatter (by the test) and the operator's one attempt
    assert _requests(cluster, "POST", "/pods") == 2
    assert [p["metadata"]["name"] for p in cluster.list("v1/pods", namespace)] == [POD_NAME]
    assert len(_warnings(cluster, namespace, "NameConflict")) == 1


def test_forbidden_pod_reports_the_admission_message(cluster, api, namespace, operator):
    cluster.inject("create", "pods", code=403, message=PSA_MESSAGE, times=100, namespace=namespace)
    with operator(retry_policy=FAST):
        _create(api, namespace)
        status = _wait_phase(cluster, namespace, "Failed", "Forbidden")
        event = wait_for(lambda: _warnings(cluster, namespace, "Forbidden"), what="the Forbidden event")[0]
    assert 'violates PodSecurity "restricted:latest"' in status["message"]
    assert status["message"].startswith(f"creating pod {POD_NAME}: HTTP 403")
    assert 'violates PodSecurity "restricted:latest"' in event["message"]
    assert cluster.list("v1/pods", namespace) == []
    assert len(cluster.list("v1/services", namespace)) == 1


@pytest.mark.parametrize(
    ("verb", "plural", "subresource", "code"),
    [
        ("create", "pods", None, 429),
        ("create", "pods", None, 500),
        ("create", "services", None, 503),
        ("create", "services", None, 429),
        # A 409 on create, then no object of that name (a create that raced a deletion, a stale cache in
        # front of the API server): transient for every object the operator creates, not Failed/APIRejected
        # for the 404 of the read that followed the 409 (the Service's case before the fix).
        ("create", "services", None, 409),
        ("create", "pods", None, 409),
    ],
)
def test_transient_failures_back_off_and_converge(cluster, api, namespace, operator, verb, plural, subresource, code):
    fault = cluster.inject(verb, plural, subresource=subresource, code=code, times=2, namespace=namespace)
    with operator(retry_policy=FAST):
        _create(api, namespace)
        status = wait_for(
            lambda: (s := _status(cluster, namespace)).get("podName") and s.get("reason") != "APIError" and s,
            timeout=15,
            what="the pod's status",
        )
        events = wait_for(lambda: _warnings(cluster, namespace, "APIError"), what="an APIError event")
    assert fault.hits == 2
    assert status["phase"] == "Pending"
    assert [p["metadata"]["name"] for p in cluster.list("v1/pods", namespace)] == [POD_NAME]
    assert [s["metadata"]["name"] for s in cluster.list("v1/services", namespace)] == ["qwen"]
    assert any(f"HTTP {code}" in e["message"] and "retry 1 of 4" in e["message"] for e in events)
    assert not _warnings(cluster, namespace, "APIRejected")


@pytest.mark.parametrize("code", [500, 429])
def test_a_failed_first_status_write_is_sent_again(cluster, api, namespace, operator, code):
    """A new server's first status write refused twice: the operator sends it again with its backoff
    (:class:`kvpilot.controller.status.StatusBackoff`: 0.5 s, 1 s) and the status converges without a
    second pod or Service; kopf's record of the handled spec lands in its own patch.
    """
    fault = cluster.inject("update", "vllmservers", subresource="status", code=code, times=2, namespace=namespace)
    with operator(retry_policy=FAST):
        _create(api, namespace)
        status = wait_for(
            lambda: (s := _status(cluster, namespace)).get("podName") and (s.get("kopf") or {}) and s,
            timeout=15,
            what="the status and kopf's record",
        )
    assert fault.hits == 2
    assert status["phase"] == "Pending"
    assert status["podName"] == POD_NAME
    assert status["kopf"]["last-handled-digest"]  # kopf's record landed too: the create is not run again
    assert _requests(cluster, "POST", f"/namespaces/{namespace}/pods") == 1
    assert [s["metadata"]["name"] for s in cluster.list("v1/services", namespace)] == ["qwen"]


def test_a_pod_change_before_the_first_status_landed_is_not_lost(cluster, api, namespace, operator, kubelet):
    """The pod is scheduled while the operator still retries the new server's first status (refused
    once: 0.5 s): the pod's event waits for that status to land, then reports the scheduling, instead of
    finding no status, ignoring the pod and leaving "waiting for the scheduler" behind.
    """
    fault = cluster.inject("update", "vllmservers", subresource="status", code=500, times=1, namespace=namespace)
    with operator(retry_policy=FAST):
        _create(api, namespace)
        wait_for(lambda: fault.hits == 1, what="the first status write refused")
        kubelet.unschedulable(namespace, POD_NAME, message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
        status = _wait_phase(cluster, namespace, "Pending", "Unschedulable")
    assert status["message"] == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    assert status["podName"] == POD_NAME


def test_retries_are_bounded_then_failed(cluster, api, namespace, operator):
    fault = cluster.inject("create", "pods", code=500, message="etcd is down", times=1000, namespace=namespace)
    with operator(retry_policy=FAST):
        _create(api, namespace)
        status = _wait_phase(cluster, namespace, "Failed", "ReconcileFailed", timeout=20)
        wait_for(lambda: _warnings(cluster, namespace, "ReconcileFailed"), what="the ReconcileFailed event")
    # one first attempt + FAST.limit (4) retries, then a permanent stop
    assert fault.hits == 1 + 4
    assert "gave up after 4 retries" in status["message"]
    assert "etcd is down" in status["message"]
    assert cluster.list("v1/pods", namespace) == []


def test_watch_cut_mid_event_still_reconciles(cluster, api, namespace, operator):
    servers = cluster.inject("watch", "vllmservers", cut_watch=True, times=1)
    pods = cluster.inject("watch", "pods", cut_watch=True, times=1)
    with operator(retry_policy=FAST):
        _create(api, namespace)
        status = wait_for(lambda: _status(cluster, namespace).get("podName") and _status(cluster, namespace))
    assert servers.hits == 1
    assert pods.hits == 1
    assert status["podName"] == POD_NAME
    assert status["phase"] == "Pending"
    assert len(cluster.list("v1/pods", namespace)) == 1
    assert len(cluster.list("v1/services", namespace)) == 1


def test_operator_stopped_between_service_and_pod(cluster, api, namespace, operator):
    fault = cluster.inject("create", "pods", code=500, times=1000, namespace=namespace)
    # kopf keeps the retry's due time in the object's annotations, so the next operator honours it
    with operator(retry_policy=RetryPolicy(base_seconds=1, cap_seconds=1, limit=4)):
        _create(api, namespace)
        wait_for(lambda: fault.hits >= 1, what="the first pod create")
        assert len(cluster.list("v1/services", namespace)) == 1  # the Service exists, the Pod does not
    cluster.clear_faults()
    with operator(retry_policy=FAST):  # a new operator process: kopf resumes the server
        status = wait_for(lambda: _status(cluster, namespace).get("podName") and _status(cluster, namespace))
    assert status["podName"] == POD_NAME
    assert [p["metadata"]["name"] for p in cluster.list("v1/pods", namespace)] == [POD_NAME]
    assert [s["metadata"]["name"] for s in cluster.list("v1/services", namespace)] == ["qwen"]


def test_own_pod_missed_by_a_stale_list_is_adopted(cluster, api, namespace, monkeypatch):
    """A 409 on create for a pod this server owns (an earlier attempt created it, the list missed it):
    the reconcile adopts it instead of failing or creating a second one.
    """
    import logging

    from kvpilot.controller.handlers import Controller
    from kvpilot.render import render_objects

    server = _create(api, namespace)
    pod_obj, _ = render_objects("qwen", namespace, SERVER["spec"], owner=server)
    kubernetes.client.CoreV1Api(api).create_namespaced_pod(namespace, pod_obj)
    import kopf

    events: list[dict] = []
    monkeypatch.setattr(kopf, "event", lambda _obj, **event: events.append(event))  # no kopf context here
    controller = Controller(cluster.configuration(), hub=False, retry_policy=FAST)
    stale_index: dict = {}  # kopf's pod index before the pod's ADDED reached it: no pod seen
    controller.reconcile_server(
        body=server, namespace=namespace, name="qwen", logger=logging.getLogger("t"), pods_by_server=stale_index
    )
    status = _status(cluster, namespace)
    assert status["podName"] == POD_NAME
    assert status["phase"] == "Pending"
    assert len(cluster.list("v1/pods", namespace)) == 1
    assert not [e for e in events if e["type"] == "Warning"]


@pytest.mark.parametrize("code", [409, 404])
def test_a_refused_first_status_write_then_a_starting_pod_announces_each_transition_once(
    cluster, api, namespace, operator, kubelet, code
):
    """A 409 or 404 on a new server's first status write while its pod is found unschedulable, then
    scheduled and ready: the status follows the pod, for the spec's own hash, and each transition gets
    one Event.
    """
    fault = cluster.inject("update", "vllmservers", subresource="status", code=code, times=1, namespace=namespace)
    with operator(retry_policy=FAST):
        _create(api, namespace)
        wait_for(lambda: fault.hits == 1, what="the first status write refused")
        kubelet.unschedulable(namespace, POD_NAME, message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
        status = _wait_phase(cluster, namespace, "Pending", "Unschedulable", timeout=15)
        kubelet.schedule(namespace, POD_NAME)
        kubelet.ready(namespace, POD_NAME)
        ready = _wait_phase(cluster, namespace, "Ready", "Ready", timeout=15)
        wait_for(lambda: any(e["reason"] == "Ready" for e in cluster.list("v1/events", namespace)), what="Ready")
    assert status["podName"] == POD_NAME
    assert status["specHash"].startswith(POD_NAME[-5:])
    assert status["message"] == "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    assert ready["endpoint"] == f"http://qwen.{namespace}.svc:8000"
    assert [p["metadata"]["name"] for p in cluster.list("v1/pods", namespace)] == [POD_NAME]
    said = [(e["reason"], e["message"]) for e in cluster.list("v1/events", namespace)]
    assert len(said) == len(set(said))  # no transition announced twice (the lost patch's Event is not posted)
    assert [r for r, _ in said].count("Ready") == 1


#: What the scheduler says of the pod, twice: it stays Pending (no GPU free), and the second answer differs.
NO_GPU = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.",
)


@pytest.mark.parametrize("code", [409, 404])
@pytest.mark.parametrize("refused", ["first", "second", "later"])
def test_a_refused_status_write_lands_while_the_pod_stays_pending(
    cluster, api, namespace, operator, kubelet, code, refused
):
    """One 409 or 404 on a status write of a new server whose pod stays Pending: the operator sends the
    write again until it lands, with no later event to help. On the first write (the server's first
    status: before, kopf's patch carried it, kopf did not retry it, the pod's ADDED had nothing new to
    say and the status stayed null for good), on the second (the scheduler's answer) and on a later one
    (the scheduler's next answer).
    """

    def refuse_the_next_write():
        return cluster.inject("update", "vllmservers", subresource="status", code=code, times=1, namespace=namespace)

    with operator(retry_policy=FAST):
        fault = refuse_the_next_write() if refused == "first" else None
        _create(api, namespace)
        first = _wait_phase(cluster, namespace, "Pending", "Scheduling")
        # kopf's record too (its own patch): the next /status request is the operator's
        wait_for(lambda: (_status(cluster, namespace).get("kopf") or {}).get("last-handled-digest"), what="the record")
        if refused == "second":
            fault = refuse_the_next_write()
        kubelet.unschedulable(namespace, POD_NAME, message=NO_GPU[0])
        second = _wait_phase(cluster, namespace, "Pending", "Unschedulable")
        if refused == "later":
            fault = refuse_the_next_write()
        kubelet.unschedulable(namespace, POD_NAME, message=NO_GPU[1])
        later = wait_for(
            lambda: (s := _status(cluster, namespace)).get("message") == NO_GPU[1] and s, what="the next answer"
        )
    assert fault is not None
    assert fault.hits == 1
    assert first["podName"] == POD_NAME
    assert first["specHash"].startswith(POD_NAME[-5:])
    assert second["message"] == NO_GPU[0]
    assert (later["phase"], later["reason"], later["podName"]) == ("Pending", "Unschedulable", POD_NAME)
    assert [p["metadata"]["name"] for p in cluster.list("v1/pods", namespace)] == [POD_NAME]
    assert [s["metadata"]["name"] for s in cluster.list("v1/services", namespace)] == ["qwen"]
