"""The real kopf operator against the sandbox API (a real API server's semantics).

Each test creates VLLMServers with the kubernetes client, plays the scheduler/kubelet where a
node would act, and polls the API (bounded) for what the operator must do.
"""

from __future__ import annotations

import copy
import hashlib
import json

import kubernetes.client
import pytest

from kvpilot.api.crd import crd_manifest
from tests.integration.operator.conftest import SERVERS, wait_for

# Hand-written from docs/background.md §7 (the founding experiment); not read from the repo's examples.
EXPERIMENT = {
    "apiVersion": "kvpilot.dev/v1alpha1",
    "kind": "VLLMServer",
    "metadata": {"name": "qwen"},
    "spec": {
        "model": "Qwen/Qwen2.5-1.5B-Instruct",
        "engine": {"gpuMemoryUtilization": 0.6, "maxModelLen": 8192, "maxNumSeqs": 4, "enablePrefixCaching": True},
        "resources": {"gpus": 1, "memory": "6Gi"},
        "ttlSeconds": 3600,
    },
}

# A vLLM v0.30+ startup log: process prefixes, the device-prefixed one-line KV report, and many
# lines after it (a short tail would miss it).
VLLM_LOG = (
    "\n".join(
        ["INFO 11-30 12:00:00 [__init__.py:216] Automatically detected platform cuda."]
        + [
            "(EngineCore_DP0 pid=312) INFO 11-30 12:00:41 [gpu_worker.py:298] Available KV cache memory: 0.58 GiB",
            "(EngineCore_DP0 pid=312) INFO 11-30 12:00:41 [kv_cache_utils.py:1087] GPU KV cache size: 21,520 tokens, "
            "Maximum concurrency for 8,192 tokens per request: 2.63x",
        ]
        + [f"(APIServer pid=1) INFO 11-30 12:01:{i % 60:02d} [launcher.py:46] Route: /v1/route{i}" for i in range(80)]
    )
    + "\n"
)


def _custom(api):
    return kubernetes.client.CustomObjectsApi(api)


def _create(api, namespace: str, body: dict | None = None) -> dict:
    return _custom(api).create_namespaced_custom_object(
        *SERVERS, namespace, "vllmservers", copy.deepcopy(body or EXPERIMENT)
    )


def _server(cluster, namespace: str, name: str = "qwen") -> dict:
    return cluster.get("kvpilot.dev/v1alpha1/vllmservers", namespace, name) or {}


def _status(cluster, namespace: str, name: str = "qwen") -> dict:
    return _server(cluster, namespace, name).get("status") or {}


def _handled_digest(server: dict) -> str | None:
    """Kopf's record of the last handled spec in ``status.kopf`` (a SHA-256, never the spec itself)."""
    stored = ((server.get("status") or {}).get("kopf") or {}).get("last-handled-digest")
    return json.loads(stored)["sha256"] if stored else None


def _pods(cluster, namespace: str) -> list[dict]:
    return cluster.list("v1/pods", namespace)


def _events(cluster, namespace: str) -> list[dict]:
    return cluster.list("v1/events", namespace)


def _wait_event(cluster, namespace: str, matches) -> dict:
    """Events are posted by kopf asynchronously: wait (bounded) for one that ``matches``."""
    return wait_for(lambda: next((e for e in _events(cluster, namespace) if matches(e)), None), what="the event")


def _one_pod(cluster, namespace: str) -> dict:
    return wait_for(lambda: (_pods(cluster, namespace) or [None])[0], what="the pod")


def _started_pod(cluster, api, namespace: str, kubelet, log: str | None = None) -> dict:
    """Create the server, wait for its pod, and play the kubelet scheduling and starting it; the pod."""
    _create(api, namespace)
    pod = _one_pod(cluster, namespace)
    name = pod["metadata"]["name"]
    kubelet.schedule(namespace, name)
    kubelet.start(namespace, name, log=log)
    return pod


def test_create_makes_pod_and_service_owned_by_the_server(cluster, api, namespace, operator):
    with operator():
        server = _create(api, namespace)
        pod = _one_pod(cluster, namespace)
        service = wait_for(lambda: cluster.get("v1/services", namespace, "qwen"), what="the service")
        status = wait_for(
            lambda: _status(cluster, namespace).get("podName") and _status(cluster, namespace), what="status.podName"
        )
        # One Event for the new server: its Pending transition, saying what was created.
        event = _wait_event(cluster, namespace, lambda e: e["reason"] == "Pending")
    uid = server["metadata"]["uid"]
    for obj in (pod, service):
        refs = obj["metadata"]["ownerReferences"]
        assert [(r["kind"], r["name"], r["uid"], r["controller"]) for r in refs] == [("VLLMServer", "qwen", uid, True)]
    assert status["podName"] == pod["metadata"]["name"]
    assert event["message"].startswith(
        f"created pod {pod['metadata']['name']} for spec {status['specHash']} and service qwen; "
    )
    assert [e["reason"] for e in _events(cluster, namespace)] == ["Pending"]  # no separate PodCreated
    # The name kvpilot render shows for this spec: <name>-<first 5 hex of sha256 of the set fields>
    # (printf '%s' '<sorted compact JSON of EXPERIMENT["spec"]>' | sha256sum -> 2c965c62...).
    assert pod["metadata"]["name"] == "qwen-2c965"
    assert status["phase"] == "Pending"
    assert status["observedGeneration"] == 1
    assert pod["spec"]["activeDeadlineSeconds"] == 3600
    assert service["spec"]["ports"][0]["port"] == 8000
    # Status only holds fields the CRD declares (a real API server would prune the rest); kopf's
    # bookkeeping is the declared status.kopf, holding a digest of the handled spec, not a copy.
    declared = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status) <= set(declared)
    kopf_declared = declared["kopf"]["properties"]
    status = wait_for(lambda: "kopf" in _status(cluster, namespace) and _status(cluster, namespace), what="status.kopf")
    assert set(status["kopf"]) <= set(kopf_declared)
    assert len(_handled_digest(_server(cluster, namespace))) == 64
    assert not [a for a in _server(cluster, namespace)["metadata"].get("annotations") or {} if "kvpilot.dev" in a]


def test_restarted_operator_adopts_the_pod_and_makes_no_second_one(cluster, api, namespace, operator):
    core = kubernetes.client.CoreV1Api(api)
    with operator():
        _create(api, namespace)
        first = _one_pod(cluster, namespace)
        wait_for(lambda: cluster.get("v1/services", namespace, "qwen"), what="the service")
    # While the operator is down, the Service disappears: its return proves the resume handler ran.
    core.delete_namespaced_service("qwen", namespace)
    with operator():
        wait_for(lambda: cluster.get("v1/services", namespace, "qwen"), what="the recreated service")
        pods = _pods(cluster, namespace)
    assert [p["metadata"]["uid"] for p in pods] == [first["metadata"]["uid"]]


def test_spec_change_replaces_the_pod(cluster, api, namespace, operator):
    with operator():
        _create(api, namespace)
        old = _one_pod(cluster, namespace)
        _custom(api).patch_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", "qwen", {"spec": {"engine": {"maxNumSeqs": 8}}}
        )
        new = wait_for(
            lambda: [p for p in _pods(cluster, namespace) if p["metadata"]["uid"] != old["metadata"]["uid"]],
            what="a new pod",
        )[0]
        wait_for(lambda: len(_pods(cluster, namespace)) == 1, what="the old pod gone")
        status = wait_for(
            lambda: (
                _status(cluster, namespace).get("observedGeneration") == 2
                and _status(cluster, namespace).get("podName") == new["metadata"]["name"]
                and _status(cluster, namespace)
            ),
            what="status of generation 2",
        )
        _wait_event(
            cluster, namespace, lambda e: e["reason"] == "PodReplaced" and old["metadata"]["name"] in e["message"]
        )
        # a replacement announces its new pod on its own (only a new server's first pod rides its Pending Event)
        _wait_event(
            cluster, namespace, lambda e: e["reason"] == "PodCreated" and new["metadata"]["name"] in e["message"]
        )
    command = new["spec"]["containers"][0]["command"]
    assert command[command.index("--max-num-seqs") + 1] == "8"
    assert status["command"] == command
    assert new["metadata"]["name"] != old["metadata"]["name"]


def test_expired_server_keeps_its_pod_and_is_not_recreated(cluster, api, namespace, operator, kubelet):
    core = kubernetes.client.CoreV1Api(api)
    with operator():
        pod = _started_pod(cluster, api, namespace, kubelet)
        name = pod["metadata"]["name"]
        kubelet.deadline_exceeded(namespace, name)
        status = wait_for(
            lambda: _status(cluster, namespace).get("phase") == "Expired" and _status(cluster, namespace),
            what="phase Expired",
        )
        assert status["reason"] == "DeadlineExceeded"
        _wait_event(cluster, namespace, lambda e: e["reason"] == "Expired" and e["type"] == "Warning")
    # Restart the operator (resume); the Service's return proves it ran.
    core.delete_namespaced_service("qwen", namespace)
    with operator():
        wait_for(lambda: cluster.get("v1/services", namespace, "qwen"), what="the recreated service")
        pods = _pods(cluster, namespace)
        assert [p["metadata"]["uid"] for p in pods] == [pod["metadata"]["uid"]]  # kept, not recreated
        assert _status(cluster, namespace)["phase"] == "Expired"
        # A person changes the spec: that does make a new pod.
        _custom(api).patch_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", "qwen", {"spec": {"ttlSeconds": 7200}}
        )
        new = wait_for(
            lambda: [p for p in _pods(cluster, namespace) if p["metadata"]["uid"] != pod["metadata"]["uid"]],
            what="a new pod",
        )[0]
    assert new["spec"]["activeDeadlineSeconds"] == 7200


def test_invalid_spec_is_reported_without_a_pod_or_retries(cluster, api, namespace, operator):
    body = copy.deepcopy(EXPERIMENT)
    body["spec"]["engine"]["extraArgs"] = ["--max-num-seqs=8"]  # a managed flag: refused
    with operator():
        _create(api, namespace, body)
        status = wait_for(
            lambda: _status(cluster, namespace).get("phase") == "Invalid" and _status(cluster, namespace),
            what="phase Invalid",
        )
        server = wait_for(
            lambda: _handled_digest(_server(cluster, namespace)) and _server(cluster, namespace),
            what="the handled spec recorded",
        )
        _wait_event(cluster, namespace, lambda e: e["type"] == "Warning" and "spec.engine.extraArgs" in e["message"])
    assert "spec.engine.extraArgs" in status["message"]
    valid = [c for c in status["conditions"] if c["type"] == "Valid"]
    assert valid
    assert valid[0]["status"] == "False"
    assert "spec.engine.extraArgs" in valid[0]["message"]
    assert _pods(cluster, namespace) == []
    # kopf took the failure as permanent: the spec is recorded as handled (a temporary error
    # would leave it unrecorded and retry), so nothing runs again until the spec changes. The record
    # is a digest of kopf's essence of the server, here only its spec (no labels or annotations):
    # sha256 of the spec as compact JSON with sorted keys, under "spec".
    essence = json.dumps({"spec": server["spec"]}, sort_keys=True, separators=(",", ":")).encode()
    assert _handled_digest(server) == hashlib.sha256(essence).hexdigest()
    assert "reconcile" not in (server["status"]["kopf"].get("progress") or {})  # no retry state pending
    assert server["spec"]["model"] not in json.dumps(server["status"])  # status holds no copy of the spec


def test_ready_pod_log_fills_kv_capacity(cluster, api, namespace, operator, kubelet):
    with operator():
        name = _started_pod(cluster, api, namespace, kubelet, log=VLLM_LOG)["metadata"]["name"]
        wait_for(lambda: _status(cluster, namespace).get("phase") == "Loading", what="phase Loading")
        kubelet.ready(namespace, name)
        status = wait_for(
            lambda: _status(cluster, namespace).get("kvCacheTokens") and _status(cluster, namespace),
            what="kvCacheTokens",
        )
        for phase in ("Loading", "Ready"):
            _wait_event(cluster, namespace, lambda e, phase=phase: e["reason"] == phase)
    assert status["phase"] == "Ready"
    assert status["kvCacheTokens"] == 21520
    assert status["maxConcurrency"] == pytest.approx(2.63)
    assert status["endpoint"] == f"http://qwen.{namespace}.svc:8000"
    assert status["startedAt"]
    assert status["expiresAt"] > status["startedAt"]
    ready = [c for c in status["conditions"] if c["type"] == "Ready"][0]
    assert ready["status"] == "True"
    assert ready["observedGeneration"] == 1


def test_unschedulable_pod_shows_the_schedulers_reason(cluster, api, namespace, operator, kubelet):
    message = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    with operator():
        _create(api, namespace)
        name = _one_pod(cluster, namespace)["metadata"]["name"]
        kubelet.unschedulable(namespace, name, message=message)
        status = wait_for(
            lambda: _status(cluster, namespace).get("reason") == "Unschedulable" and _status(cluster, namespace),
            what="reason Unschedulable",
        )
        _wait_event(
            cluster, namespace, lambda e: e["type"] == "Warning" and "Insufficient nvidia.com/gpu" in e["message"]
        )
    assert status["phase"] == "Pending"
    assert status["message"] == message


def test_failed_start_reports_the_termination_message_and_is_not_restarted(cluster, api, namespace, operator, kubelet):
    tail = (
        "ValueError: To serve at least one request with the model's max seq len (32768), (0.88 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (0.58 GiB)."
    )
    with operator():
        pod = _started_pod(cluster, api, namespace, kubelet)
        name = pod["metadata"]["name"]
        kubelet.fail(namespace, name, exit_code=1, reason="Error", message=f"Traceback:\n  line\n  line\n{tail}\n")
        status = wait_for(
            lambda: _status(cluster, namespace).get("phase") == "Failed" and _status(cluster, namespace),
            what="phase Failed",
        )
        # a label edit (not a spec change) re-runs the update handler: still no second pod
        before = _handled_digest(_server(cluster, namespace))
        _custom(api).patch_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", "qwen", {"metadata": {"labels": {"team": "ml"}}}
        )
        wait_for(lambda: _handled_digest(_server(cluster, namespace)) not in (before, None), what="the update handled")
        pods = _pods(cluster, namespace)
    assert status["reason"] == "Error"
    assert status["message"].startswith("vLLM exited with code 1 (Error)")
    assert status["message"].endswith(tail)
    assert [p["metadata"]["uid"] for p in pods] == [pod["metadata"]["uid"]]


def test_failed_start_puts_vllms_root_cause_first(cluster, api, namespace, operator, kubelet, fixtures_dir):
    # vLLM V1's last lines only say "See root cause above"; the kubelet keeps the last 2,048 bytes of
    # the log as the termination message (FallbackToLogsOnError), which miss the cause: the operator
    # reads the end of the log (bounded) once the pod failed.
    log = (fixtures_dir / "vllm-failures" / "v1-kv-cache-too-small.log").read_text()
    termination = log.encode()[-2048:].decode()
    cause = next(line for line in log.splitlines() if line.startswith("(EngineCore_DP0 pid=312) ValueError: "))
    cause = cause.removeprefix("(EngineCore_DP0 pid=312) ")
    with operator():
        pod = _started_pod(cluster, api, namespace, kubelet, log=log)
        kubelet.fail(namespace, pod["metadata"]["name"], exit_code=1, reason="Error", message=termination)
        status = wait_for(
            lambda: _status(cluster, namespace).get("phase") == "Failed" and _status(cluster, namespace),
            what="phase Failed",
        )
        event = _wait_event(cluster, namespace, lambda e: e["reason"] == "Failed")
        # a later event of the same pod (a label on it) keeps the message
        kubernetes.client.CoreV1Api(api).patch_namespaced_pod(
            pod["metadata"]["name"], namespace, {"metadata": {"labels": {"seen": "yes"}}}
        )
        wait_for(lambda: _pods(cluster, namespace)[0]["metadata"]["labels"].get("seen"), what="the pod label")
        later = _status(cluster, namespace)
    assert status["message"].startswith(f"vLLM exited with code 1 (Error): {cause}; log ends: ")
    assert status["message"].endswith(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore_DP0': 1}"
    )
    assert cause in event["message"]
    assert later["message"] == status["message"]
    path = f"/api/v1/namespaces/{namespace}/pods/{pod['metadata']['name']}/log"
    logs = [p for m, p, _ in cluster.requests() if m == "GET" and p == path]
    assert len(logs) == 1  # read once, for the failure


def _model_config_map(api, namespace: str, fixtures_dir) -> None:
    config = (fixtures_dir / "hf-configs" / "Qwen__Qwen2.5-1.5B-Instruct.json").read_text()
    # Qwen2.5-1.5B-Instruct in bf16: 1,543,714,304 parameters x 2 bytes (its safetensors index total_size)
    index = json.dumps({"metadata": {"total_size": 3_087_428_608}, "weight_map": {}})
    kubernetes.client.CoreV1Api(api).create_namespaced_config_map(
        namespace,
        {"metadata": {"name": "qwen-config"}, "data": {"config.json": config, "model.safetensors.index.json": index}},
    )


def test_preflight_sets_kv_capacity_condition(cluster, api, namespace, operator, fixtures_dir):
    _model_config_map(api, namespace, fixtures_dir)
    body = copy.deepcopy(EXPERIMENT)
    body["spec"]["modelConfigRef"] = {"name": "qwen-config"}
    body["spec"]["resources"]["gpuMemory"] = "8Gi"
    with operator():
        _create(api, namespace, body)
        _one_pod(cluster, namespace)
        status = wait_for(
            lambda: (
                any(c["type"] == "KVCapacity" for c in _status(cluster, namespace).get("conditions", []))
                and _status(cluster, namespace)
            ),
            what="KVCapacity",
        )
    kv = next(c for c in status["conditions"] if c["type"] == "KVCapacity")
    assert (kv["status"], kv["reason"]) == ("True", "Fits")
    # 2 (K,V) x 28 layers x 2 KV heads x 128 head_dim x 2 bytes (bf16) = 28,672 bytes per token
    assert "28,672 B/token" in kv["message"]
    assert kv["observedGeneration"] == 1
    numbers = status["preflight"]
    assert numbers["bytesPerToken"] == 28_672
    assert numbers["fits"] is True
    assert numbers["configSource"].startswith("ConfigMap") or "qwen-config" in numbers["configSource"]
    # 8 GiB x 0.6 = 4.8 GiB, minus 2.875 GiB weights and an overhead estimate leaves under 1.93 GiB:
    # at most 1.925 x 2^30 / 28,672 = 72,089 tokens, and certainly more than one 8,192-token request.
    assert 8_192 <= numbers["kvTokens"] < 72_089


def test_preflight_enforce_refuses_a_spec_that_cannot_start(cluster, api, namespace, operator, fixtures_dir):
    _model_config_map(api, namespace, fixtures_dir)
    body = copy.deepcopy(EXPERIMENT)
    body["spec"].update(modelConfigRef={"name": "qwen-config"}, preflight="enforce")
    body["spec"]["resources"]["gpuMemory"] = "4Gi"
    body["spec"]["engine"].update(gpuMemoryUtilization=0.9, maxModelLen=32768, maxNumBatchedTokens=32768)
    # 4 GiB x 0.9 = 3.6 GiB minus 2.875 GiB of weights leaves at most 0.725 GiB for KV, less than
    # the 0.875 GiB one 32,768-token request needs (docs/background.md §2): vLLM would refuse to start.
    with operator():
        _create(api, namespace, body)
        status = wait_for(
            lambda: _status(cluster, namespace).get("phase") == "Invalid" and _status(cluster, namespace),
            what="phase Invalid",
        )
        events = wait_for(
            lambda: [
                e for e in _events(cluster, namespace) if e["type"] == "Warning" and "refuse to start" in e["message"]
            ],
            what="the warning event",
        )
    kv = next(c for c in status["conditions"] if c["type"] == "KVCapacity")
    assert kv["status"] == "False"
    assert kv["reason"] in ("MaxModelLenExceedsKV", "NoKVMemory")
    assert status["reason"] == kv["reason"]
    assert "spec.engine.maxModelLen" in status["message"]
    assert _pods(cluster, namespace) == []
    assert events


def test_fixing_an_invalid_spec_starts_the_server(cluster, api, namespace, operator):
    body = copy.deepcopy(EXPERIMENT)
    body["spec"]["engine"]["maxNumBatchedTokens"] = 2  # below maxNumSeqs (4): vLLM's own rule refuses it
    with operator():
        _create(api, namespace, body)
        wait_for(lambda: _status(cluster, namespace).get("phase") == "Invalid", what="phase Invalid")
        assert "spec.engine.maxNumBatchedTokens" in _status(cluster, namespace)["message"]
        _custom(api).patch_namespaced_custom_object(
            *SERVERS, namespace, "vllmservers", "qwen", {"spec": {"engine": {"maxNumBatchedTokens": 8192}}}
        )
        _one_pod(cluster, namespace)
        status = wait_for(
            lambda: _status(cluster, namespace).get("phase") == "Pending" and _status(cluster, namespace),
            what="phase Pending",
        )
    valid = next(c for c in status["conditions"] if c["type"] == "Valid")
    assert valid["status"] == "True"
    assert valid["observedGeneration"] == 2


def test_a_silent_hub_never_delays_the_pod(cluster, api, namespace, monkeypatch):
    """With ``preflight: warn`` the pod comes first: a Hub that never answers (a loopback socket that
    accepts connections but sends nothing) delays only the KVCapacity condition, never the pod.
    """
    import socket

    import huggingface_hub.constants
    from kopf.testing import KopfRunner

    from kvpilot.controller.handlers import build_registry
    from kvpilot.controller.settings import make_settings
    from tests.integration.operator.conftest import wait_for as wait

    body = copy.deepcopy(EXPERIMENT)
    body["spec"]["model"] = "kvpilot-test/silent-hub"  # never cached: the lookup must ask the Hub
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{silent.getsockname()[1]}")
        monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
        monkeypatch.setenv("HF_HUB_ETAG_TIMEOUT", "30")  # the Hub would hold the handler 30 s per request
        with KopfRunner(
            ["run", "--standalone", "--namespace", namespace],
            registry=build_registry(cluster.configuration(), hub=True),
            settings=make_settings(),
            timeout=10,
        ):
            _create(api, namespace, body)
            # 10 s < the 30 s the Hub request may take: the pod must not wait for it.
            pod = wait(lambda: (_pods(cluster, namespace) or [None])[0], timeout=10, what="the pod")
            silent.close()  # the pending request is reset: the lookup fails now
            kv = wait(
                lambda: next(
                    (c for c in _status(cluster, namespace).get("conditions", []) if c["type"] == "KVCapacity"), None
                ),
                what="KVCapacity",
            )
    assert pod["metadata"]["name"].startswith("qwen-")
    assert (kv["status"], kv["reason"]) == ("Unknown", "NoModelConfig")
    assert "the Hub" in kv["message"]


def test_preflight_reads_the_gpu_memory_label_once_the_pod_is_scheduled(
    cluster, api, namespace, operator, kubelet, fixtures_dir
):
    """No spec.resources.gpuMemory: KVCapacity is Unknown until the pod lands on a node, then the node's
    nvidia.com/gpu.memory label (MiB, NVIDIA GPU feature discovery) gives the GPU memory.
    """
    _model_config_map(api, namespace, fixtures_dir)
    core = kubernetes.client.CoreV1Api(api)
    if cluster.get("v1/nodes", None, kubelet.node) is None:  # the node the sandbox's Kubelet schedules onto
        core.create_node({"metadata": {"name": kubelet.node, "labels": {"nvidia.com/gpu.memory": "8192"}}})
    body = copy.deepcopy(EXPERIMENT)
    body["spec"]["modelConfigRef"] = {"name": "qwen-config"}

    def kv_condition():
        return next((c for c in _status(cluster, namespace).get("conditions", []) if c["type"] == "KVCapacity"), None)

    with operator():
        _create(api, namespace, body)
        pod = _one_pod(cluster, namespace)
        before = wait_for(kv_condition, what="KVCapacity before scheduling")
        assert (before["status"], before["reason"]) == ("Unknown", "InsufficientInputs")
        assert "GPU memory unknown" in before["message"]
        kubelet.schedule(namespace, pod["metadata"]["name"])
        after = wait_for(lambda: (c := kv_condition()) and c["status"] != "Unknown" and c, what="KVCapacity known")
    status = _status(cluster, namespace)
    assert (after["status"], after["reason"]) == ("True", "Fits")
    numbers = status["preflight"]
    # By hand: GPU 8192 MiB = 8,589,934,592 B; vLLM claims ceil(x 0.6) = 5,153,960,756 B; minus weights
    # 3,087,428,608 B (the ConfigMap's index total_size) minus the overhead estimate 1,449,510,708 B (what the
    # founding deployment leaves, docs/kv.md) leaves 617,021,440 B of KV. One block = 16 tokens x 28,672 B =
    # 458,752 B: 617,021,440 // 458,752 = 1,345 blocks = 21,520 tokens, what vLLM logged. One 8,192-token request
    # needs 8,192 / 16 = 512 blocks: concurrency 1,345 / 512 = 2.626953125, it fits, and the largest maxModelLen
    # that fits the 1,344 usable blocks (vLLM keeps the null block out) is 1,344 x 16 = 21,504 tokens.
    assert numbers["bytesPerToken"] == 28_672
    assert numbers["kvTokens"] == 21_520
    assert numbers["maxConcurrency"] == pytest.approx(2.626953125)
    assert numbers["fits"] is True
    assert numbers["maxModelLenThatFits"] == 21_504
    # (weights + overhead + 512 blocks + the null block) / GPU = (4,536,939,316 + 513 x 458,752) / 8,589,934,592
    assert numbers["minGpuMemoryUtilization"] == pytest.approx(0.555566, abs=1e-5)
    assert numbers["gpuMemory"] == f"8192 MiB (node {kubelet.node} label nvidia.com/gpu.memory)"
    assert "21,520 tokens" in after["message"]


def _assert_invalid(cluster, api, namespace, operator, body: dict, field: str, words: str) -> None:
    """The server goes ``Invalid``: a ``Valid=False`` condition and a Warning Event naming ``field``, no pod."""
    with operator():
        _create(api, namespace, body)
        status = wait_for(
            lambda: _status(cluster, namespace).get("phase") == "Invalid" and _status(cluster, namespace),
            what="phase Invalid",
        )
        event = _wait_event(cluster, namespace, lambda e: e["type"] == "Warning" and field in e["message"])
    valid = [c for c in status["conditions"] if c["type"] == "Valid"]
    assert valid
    assert valid[0]["status"] == "False"
    assert field in valid[0]["message"]
    assert words in event["message"]
    assert _pods(cluster, namespace) == []


def test_an_affinity_the_api_server_refuses_makes_the_server_invalid(cluster, api, namespace, operator):
    """A required node-affinity ``In`` without values (ValidateNodeSelectorRequirement): Invalid, no pod."""
    body = copy.deepcopy(EXPERIMENT)
    terms = [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In"}]}]
    body["spec"]["affinity"] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}
    }
    field = (
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0]"
        ".matchExpressions[0].values"
    )
    _assert_invalid(
        cluster, api, namespace, operator, body, field, "must be specified when `operator` is 'In' or 'NotIn'"
    )


def test_an_env_value_from_the_api_server_refuses_makes_the_server_invalid(cluster, api, namespace, operator):
    """Two sources in one valueFrom (validateEnvVarValueFrom): Invalid, no pod. Before, the pod create was
    sent and refused by the API server, and the server ended Failed/APIRejected.
    """
    body = copy.deepcopy(EXPERIMENT)
    sources = {"secretKeyRef": {"name": "a", "key": "k"}, "configMapKeyRef": {"name": "b", "key": "k"}}
    body["spec"]["env"] = [{"name": "X", "valueFrom": sources}]
    words = "may not have more than one field specified at a time"
    _assert_invalid(cluster, api, namespace, operator, body, "spec.env[0].valueFrom", words)


def test_a_new_server_costs_five_requests_and_no_read_back(cluster, api, namespace, operator):
    """Per new server: the Service, the Pod, the operator's status write, kopf's patch of its own record,
    and one Event (the Pending transition, naming the Pod and Service), as docs/performance.md counts
    them; never a read of the server or its Service and no pod list, also when the pod's ADDED arrives
    while the status is being written.
    """
    from kvpilot.controller.metrics import OperatorMetrics

    metrics = OperatorMetrics()
    names = [f"burst-{i}" for i in range(6)]
    with operator(metrics=metrics):
        for name in names:
            _create(api, namespace, {**EXPERIMENT, "metadata": {"name": name}})
        for name in names:
            _wait_event(
                cluster, namespace, lambda e, n=name: (e["reason"], e["involvedObject"]["name"]) == ("Pending", n)
            )
        # every pod's ADDED handled (the handler's own counter), so a read-back would have happened by now
        wait_for(
            lambda: (
                metrics.registry.get_sample_value(
                    "kvpilot_reconcile_total", {"handler": "pod_event", "outcome": "success"}
                )
                >= len(names)
            ),
            what="the pod events handled",
        )
    prefix = f"/namespaces/{namespace}/"
    served = cluster.served()
    seen = [(r.method, r.path.split(prefix, 1)[1]) for r in served if prefix in r.path]
    for name in names:
        assert seen.count(("PATCH", f"vllmservers/{name}")) == 0  # kopf writes nothing outside status
        assert seen.count(("PATCH", f"vllmservers/{name}/status")) == 2
        writes = [r.data["status"] for r in served if r.path.endswith(f"vllmservers/{name}/status")]
        [write] = [w for w in writes if "kopf" not in w]
        [record] = [w for w in writes if "kopf" in w]
        assert write["phase"] == "Pending"
        assert write["podName"].startswith(f"{name}-")
        assert set(record) == {"kopf"}  # kopf's patch carries its record only
        assert set(record["kopf"]) == {"last-handled-digest"}
        assert seen.count(("GET", f"vllmservers/{name}")) == 0
        assert seen.count(("GET", f"services/{name}")) == 0
    assert seen.count(("POST", "services")) == seen.count(("POST", "pods")) == len(names)
    assert seen.count(("POST", "events")) == len(names)
    # no list of one server's pods (kopf's own list and watch select by managed-by, not by server)
    assert not [r for r in served if "kvpilot.dev/server" in r.query_string]


def test_pod_event_threads_end_with_the_operator(cluster, api, namespace, operator, kubelet):
    import threading

    def pod_threads() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if t.name.startswith("kvpilot-pod-event")]

    before = set(pod_threads())
    with operator():
        pod = _started_pod(cluster, api, namespace, kubelet)  # its scheduling and start are pod events with work
        wait_for(lambda: _status(cluster, namespace).get("phase") == "Loading", what="phase Loading")
        assert set(pod_threads()) - before, "a pod event ran in the operator's pod-event threads"
    wait_for(lambda: not set(pod_threads()) - before, what="the pod-event threads ended")
    assert pod["metadata"]["name"].startswith("qwen-")
