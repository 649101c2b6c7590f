"""The renderer: every spec field and default, as docs/crd-reference.md ("What every pod gets") specifies.

Expected values are written out from the spec and the design, never computed by the code under test.
"""

from __future__ import annotations

import json

import jinja2
import kubernetes_validate
import pytest

from kvpilot.api import SpecError, parse_spec
from kvpilot.render import pod_name, render_objects, vllm_command
from kvpilot.render.renderer import _environment

#: Kubernetes 1.30 and the newest version kubernetes-validate knows (1.37 with kubernetes-validate 1.37.0).
KUBE_VERSIONS = ["1.30", kubernetes_validate.latest_version()]

MODEL = "Qwen/Qwen2.5-1.5B-Instruct"
OWNER = {
    "apiVersion": "kvpilot.dev/v1alpha1",
    "kind": "VLLMServer",
    "metadata": {"name": "qwen", "namespace": "llm", "uid": "1234-abcd"},
}


def render(owner=None, **fields):
    body = {"model": MODEL}
    body.update(fields)
    pod, service = render_objects("qwen", "llm", parse_spec(body), owner=owner)
    return pod, service


def container(pod):
    (c,) = pod["spec"]["containers"]
    return c


def cmd(**fields):
    return vllm_command(parse_spec({"model": MODEL, **fields}))


def env_of(pod):
    return {e["name"]: e for e in container(pod)["env"]}


# ------------------------------------------------------------------ command line


def test_minimal_spec_renders_no_managed_flag():
    assert cmd() == ["vllm", "serve", MODEL, "--port", "8000"]


def test_experiment_flags():
    assert cmd(
        engine={"gpuMemoryUtilization": 0.60, "maxModelLen": 8192, "maxNumSeqs": 4, "enablePrefixCaching": True}
    ) == [
        "vllm",
        "serve",
        MODEL,
        "--gpu-memory-utilization",
        "0.6",
        "--max-model-len",
        "8192",
        "--max-num-seqs",
        "4",
        "--enable-prefix-caching",
        "--port",
        "8000",
    ]


@pytest.mark.parametrize(
    ("engine", "flags"),
    [
        ({"gpuMemoryUtilization": 0.93}, ["--gpu-memory-utilization", "0.93"]),
        ({"gpuMemoryUtilization": 1}, ["--gpu-memory-utilization", "1.0"]),
        ({"maxModelLen": 16384}, ["--max-model-len", "16384"]),
        ({"maxNumSeqs": 4}, ["--max-num-seqs", "4"]),
        ({"maxNumBatchedTokens": 2048}, ["--max-num-batched-tokens", "2048"]),
        ({"tensorParallelSize": 2}, ["--tensor-parallel-size", "2"]),
        ({"enablePrefixCaching": True}, ["--enable-prefix-caching"]),
        ({"enablePrefixCaching": False}, ["--no-enable-prefix-caching"]),
        ({"enableChunkedPrefill": True}, ["--enable-chunked-prefill"]),
        ({"enableChunkedPrefill": False}, ["--no-enable-chunked-prefill"]),
        ({"kvCacheDtype": "fp8"}, ["--kv-cache-dtype", "fp8"]),
        ({"kvCacheDtype": "auto"}, ["--kv-cache-dtype", "auto"]),
    ],
)
def test_each_engine_field_renders_its_flag_only(engine, flags):
    assert cmd(engine=engine) == ["vllm", "serve", MODEL, *flags, "--port", "8000"]


def test_served_model_name_and_extra_args():
    assert cmd(servedModelName="qwen", engine={"extraArgs": ["--enforce-eager", "--swap-space", "4"]}) == [
        "vllm",
        "serve",
        MODEL,
        "--served-model-name",
        "qwen",
        "--port",
        "8000",
        "--enforce-eager",
        "--swap-space",
        "4",
    ]


def test_production_fp8_flags():
    assert cmd(
        engine={
            "gpuMemoryUtilization": 0.93,
            "maxModelLen": 16384,
            "maxNumSeqs": 4,
            "maxNumBatchedTokens": 2048,
            "kvCacheDtype": "fp8",
        }
    )[3:] == [
        "--gpu-memory-utilization",
        "0.93",
        "--max-model-len",
        "16384",
        "--max-num-seqs",
        "4",
        "--max-num-batched-tokens",
        "2048",
        "--kv-cache-dtype",
        "fp8",
        "--port",
        "8000",
    ]


def test_command_is_the_container_command():
    pod, _ = render(engine={"maxNumSeqs": 4})
    assert container(pod)["command"] == ["vllm", "serve", MODEL, "--max-num-seqs", "4", "--port", "8000"]


# ------------------------------------------------------------------ pod basics and defaults


def test_pod_defaults():
    pod, _ = render()
    spec = pod["spec"]
    # The pod is named <server>-<first 5 hex of the spec hash>, as the operator names it. The hash is
    # SHA-256 of the set fields as sorted compact JSON; by hand:
    # printf '%s' '{"model":"Qwen/Qwen2.5-1.5B-Instruct"}' | sha256sum -> 661e08a2405e9727...
    assert (pod["apiVersion"], pod["kind"], pod["metadata"]["name"], pod["metadata"]["namespace"]) == (
        "v1",
        "Pod",
        "qwen-661e0",
        "llm",
    )
    assert pod["metadata"]["annotations"]["kvpilot.dev/spec-hash"] == "661e08a2405e9727"
    assert spec["restartPolicy"] == "Never"
    assert spec["activeDeadlineSeconds"] == 3600
    assert spec["enableServiceLinks"] is False
    assert spec["automountServiceAccountToken"] is False
    for absent in (
        "serviceAccountName",
        "runtimeClassName",
        "priorityClassName",
        "nodeSelector",
        "tolerations",
        "affinity",
    ):
        assert absent not in spec, absent
    c = container(pod)
    assert c["name"] == "vllm"
    assert c["image"] == "vllm/vllm-openai:v0.33.0"
    assert "imagePullPolicy" not in c
    assert c["ports"] == [{"name": "http", "containerPort": 8000, "protocol": "TCP"}]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["resources"] == {"limits": {"nvidia.com/gpu": "1"}}
    assert "ownerReferences" not in pod["metadata"]


def test_pod_name_is_the_operators_and_changes_with_the_spec():
    # printf '%s' '{"engine":{"enablePrefixCaching":true,"gpuMemoryUtilization":0.6,"maxModelLen":8192,
    # "maxNumSeqs":4},"model":"Qwen/Qwen2.5-1.5B-Instruct","resources":{"gpus":1,"memory":"6Gi"},
    # "ttlSeconds":3600}' | sha256sum -> 2c965c62...: the founding experiment's spec.
    pod, service = render(
        engine={"gpuMemoryUtilization": 0.6, "maxModelLen": 8192, "maxNumSeqs": 4, "enablePrefixCaching": True},
        resources={"gpus": 1, "memory": "6Gi"},
        ttlSeconds=3600,
    )
    assert pod["metadata"]["name"] == "qwen-2c965"
    assert service["metadata"]["name"] == "qwen"  # the Service keeps the server's name
    assert pod["metadata"]["labels"]["kvpilot.dev/server"] == "qwen"
    assert pod_name("qwen", "2c965c628687aaf1") == "qwen-2c965"


def test_ttl_becomes_active_deadline_seconds():
    pod, _ = render(ttlSeconds=600)
    assert pod["spec"]["activeDeadlineSeconds"] == 600


def test_image_and_pull_policy():
    c = container(render(image="registry.local/vllm:v0.29.0", imagePullPolicy="Always")[0])
    assert (c["image"], c["imagePullPolicy"]) == ("registry.local/vllm:v0.29.0", "Always")


def test_labels_and_annotations():
    pod, service = render(
        podLabels={"team": "ml"}, podAnnotations={"example.com/owner": "alice", "prometheus.io/scrape": "false"}
    )
    managed = {
        "app.kubernetes.io/name": "vllm",
        "app.kubernetes.io/instance": "qwen",
        "app.kubernetes.io/managed-by": "kvpilot",
        "kvpilot.dev/server": "qwen",
    }
    assert pod["metadata"]["labels"] == {**managed, "team": "ml"}
    assert service["metadata"]["labels"] == managed
    ann = pod["metadata"]["annotations"]
    assert ann["kvpilot.dev/model"] == MODEL  # a model id is not a valid label value
    assert MODEL not in pod["metadata"]["labels"].values()
    assert ann["example.com/owner"] == "alice"
    assert ann["prometheus.io/scrape"] == "false"  # a person may turn scraping off
    assert (ann["prometheus.io/port"], ann["prometheus.io/path"]) == ("8000", "/metrics")
    assert len(ann["kvpilot.dev/spec-hash"]) == 16


def test_prometheus_scrape_annotations_by_default():
    ann = render()[0]["metadata"]["annotations"]
    assert (ann["prometheus.io/scrape"], ann["prometheus.io/port"], ann["prometheus.io/path"]) == (
        "true",
        "8000",
        "/metrics",
    )


def test_spec_hash_annotation_follows_the_spec():
    a = render(engine={"maxNumSeqs": 4})[0]["metadata"]["annotations"]["kvpilot.dev/spec-hash"]
    b = render(engine={"maxNumSeqs": 8})[0]["metadata"]["annotations"]["kvpilot.dev/spec-hash"]
    assert a != b


def test_scheduling_fields():
    tolerations = [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "gpu.product", "operator": "In", "values": ["L4"]}]}
                ]
            }
        }
    }
    pod, _ = render(
        nodeSelector={"nvidia.com/gpu.present": "true"},
        tolerations=tolerations,
        affinity=affinity,
        runtimeClassName="nvidia",
        priorityClassName="gpu-experiments",
        serviceAccountName="vllm",
    )
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert spec["tolerations"] == tolerations
    assert spec["affinity"] == affinity
    assert (spec["runtimeClassName"], spec["priorityClassName"], spec["serviceAccountName"]) == (
        "nvidia",
        "gpu-experiments",
        "vllm",
    )
    assert "automountServiceAccountToken" not in spec


# ------------------------------------------------------------------ resources


def test_gpu_limit_defaults_to_tensor_parallel_size():
    assert container(render(engine={"tensorParallelSize": 2})[0])["resources"]["limits"] == {"nvidia.com/gpu": "2"}


def test_gpus_and_gpu_resource_name():
    limits = container(render(resources={"gpus": 3, "gpuResourceName": "amd.com/gpu"})[0])["resources"]["limits"]
    assert limits == {"amd.com/gpu": "3"}


def test_memory_is_request_and_limit_cpu_is_request_only():
    res = container(render(resources={"gpus": 1, "memory": "6Gi", "cpu": "4"})[0])["resources"]
    assert res == {"limits": {"nvidia.com/gpu": "1", "memory": "6Gi"}, "requests": {"memory": "6Gi", "cpu": "4"}}


def test_gpu_memory_is_not_rendered():
    res = container(render(resources={"gpuMemory": "8Gi"})[0])["resources"]
    assert res == {"limits": {"nvidia.com/gpu": "1"}}


def test_quantities_are_strings():
    res = container(render(resources={"gpus": 1, "memory": 6442450944, "cpu": 2})[0])["resources"]
    assert res["limits"]["memory"] == "6442450944"
    assert res["requests"]["cpu"] == "2"
    assert all(isinstance(v, str) for part in res.values() for v in part.values())


# ------------------------------------------------------------------ KV offload


def test_lmcache_offload():
    pod, _ = render(resources={"memory": "6Gi"}, kvOffload={"backend": "lmcache", "cpuMemory": "1536Mi"})
    c = container(pod)
    i = c["command"].index("--kv-transfer-config")
    assert json.loads(c["command"][i + 1]) == {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    env = env_of(pod)
    assert env["LMCACHE_LOCAL_CPU"]["value"] == "True"
    assert env["LMCACHE_MAX_LOCAL_CPU_SIZE"]["value"] == "1.5"  # 1536Mi = 1.5 GiB
    assert env["LMCACHE_CHUNK_SIZE"]["value"] == "256"
    # 6Gi + 1536Mi = 6144Mi + 1536Mi = 7680Mi
    assert c["resources"]["requests"]["memory"] == c["resources"]["limits"]["memory"] == "7680Mi"
    assert "--kv-offloading-backend" not in c["command"]


def test_lmcache_size_is_per_tensor_parallel_worker():
    pod, _ = render(
        engine={"tensorParallelSize": 2},
        resources={"memory": "24Gi"},
        kvOffload={"backend": "lmcache", "cpuMemory": "3Gi"},
    )
    # 3 GiB over 2 ranks = 1.5 GiB per LMCache engine; the pod gets the whole 3Gi: 24Gi + 3Gi = 27Gi
    assert env_of(pod)["LMCACHE_MAX_LOCAL_CPU_SIZE"]["value"] == "1.5"
    assert container(pod)["resources"]["limits"]["memory"] == "27Gi"


def test_native_offload_size_is_the_total():
    c = container(render(engine={"tensorParallelSize": 2}, kvOffload={"backend": "native", "cpuMemory": "3Gi"})[0])
    assert c["command"][c["command"].index("--kv-offloading-size") + 1] == "3"  # vLLM divides by the ranks


def test_lmcache_chunk_size_can_be_set_by_env():
    pod, _ = render(
        kvOffload={"backend": "lmcache", "cpuMemory": "1Gi"}, env=[{"name": "LMCACHE_CHUNK_SIZE", "value": "512"}]
    )
    chunk = [e for e in container(pod)["env"] if e["name"] == "LMCACHE_CHUNK_SIZE"]
    assert chunk == [{"name": "LMCACHE_CHUNK_SIZE", "value": "512"}]


def test_native_offload():
    pod, _ = render(resources={"memory": "16Gi"}, kvOffload={"backend": "native", "cpuMemory": "8Gi"})
    c = container(pod)
    assert c["command"][3:] == ["--kv-offloading-backend", "native", "--kv-offloading-size", "8", "--port", "8000"]
    assert not any(e["name"].startswith("LMCACHE_") for e in c["env"])
    assert c["resources"]["limits"]["memory"] == "24Gi"  # 16Gi + 8Gi


def test_offload_without_memory_requests_the_offload_size():
    res = container(render(kvOffload={"backend": "native", "cpuMemory": "1.5Gi"})[0])["resources"]
    assert res == {"limits": {"nvidia.com/gpu": "1"}, "requests": {"memory": "1536Mi"}}


# ------------------------------------------------------------------ volumes and env


def test_shm_is_memory_backed_with_a_size_limit():
    pod, _ = render()
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": "1Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container(pod)["volumeMounts"]
    vols = {v["name"]: v for v in render(shmSize="8Gi")[0]["spec"]["volumes"]}
    assert vols["dshm"]["emptyDir"]["sizeLimit"] == "8Gi"


def test_model_cache_default_is_an_empty_dir_at_hf_home():
    pod, _ = render()
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["model-cache"] == {"name": "model-cache", "emptyDir": {}}
    assert {"name": "model-cache", "mountPath": "/home/vllm/.cache/huggingface"} in container(pod)["volumeMounts"]
    assert env_of(pod)["HF_HOME"] == {"name": "HF_HOME", "value": "/home/vllm/.cache/huggingface"}


def test_model_cache_pvc_and_mount_path():
    pod, _ = render(modelCache={"claimName": "hf-cache", "mountPath": "/models"})
    vols = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert vols["model-cache"] == {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}
    assert {"name": "model-cache", "mountPath": "/models"} in container(pod)["volumeMounts"]
    assert env_of(pod)["HF_HOME"]["value"] == "/models"


def test_model_cache_empty_dir_size_limit():
    vols = {v["name"]: v for v in render(modelCache={"sizeLimit": "50Gi"})[0]["spec"]["volumes"]}
    assert vols["model-cache"]["emptyDir"] == {"sizeLimit": "50Gi"}


def test_hf_token_only_through_secret_key_ref():
    pod, _ = render(hfTokenSecretRef={"name": "hf-token", "key": "HF_TOKEN"})
    assert env_of(pod)["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "HF_TOKEN"}},
    }
    assert "value" not in env_of(pod)["HF_TOKEN"]
    assert not any("hf-token" in a or "HF_TOKEN" in a for a in container(pod)["command"])
    default_key = env_of(render(hfTokenSecretRef={"name": "hf"})[0])["HF_TOKEN"]
    assert default_key["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}


def test_no_hf_token_without_a_secret_ref():
    assert "HF_TOKEN" not in env_of(render()[0])


def test_env_is_passed_through_after_kvpilots_own():
    env = [
        {"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"},
        {"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
    ]
    names = [e["name"] for e in container(render(env=env)[0])["env"]]
    assert names == ["HOME", "HF_HOME", "VLLM_LOGGING_LEVEL", "NODE"]
    assert container(render(env=env)[0])["env"][2:] == env


# ------------------------------------------------------------------ probes


def test_probes_defaults():
    c = container(render()[0])
    assert c["startupProbe"] == {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 180,
    }  # 1800 s / 10 s
    assert c["readinessProbe"] == {
        "httpGet": {"path": "/v1/models", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }
    assert c["livenessProbe"] == {
        "httpGet": {"path": "/health", "port": "http"},
        "periodSeconds": 10,
        "timeoutSeconds": 5,
        "failureThreshold": 3,
    }


def test_probe_overrides():
    c = container(
        render(
            probes={
                "startupTimeoutSeconds": 1000,
                "periodSeconds": 15,
                "timeoutSeconds": 8,
                "readinessFailureThreshold": 2,
                "livenessFailureThreshold": 6,
            }
        )[0]
    )
    assert c["startupProbe"]["failureThreshold"] == 67  # ceil(1000 / 15) = ceil(66.7)
    assert c["startupProbe"]["periodSeconds"] == c["livenessProbe"]["periodSeconds"] == 15
    assert c["readinessProbe"]["timeoutSeconds"] == 8
    assert c["readinessProbe"]["failureThreshold"] == 2
    assert c["livenessProbe"]["failureThreshold"] == 6


# ------------------------------------------------------------------ service and owner


def test_service_on_port_8000_selects_the_pod():
    pod, service = render()
    assert (service["apiVersion"], service["kind"], service["metadata"]["name"]) == ("v1", "Service", "qwen")
    assert service["metadata"]["namespace"] == "llm"
    assert service["spec"]["type"] == "ClusterIP"
    assert service["spec"]["ports"] == [{"name": "http", "port": 8000, "targetPort": "http", "protocol": "TCP"}]
    selector = service["spec"]["selector"]
    assert selector == {"kvpilot.dev/server": "qwen", "app.kubernetes.io/managed-by": "kvpilot"}
    assert selector.items() <= pod["metadata"]["labels"].items()


def test_owner_references_on_both_objects():
    expected = [
        {
            "apiVersion": "kvpilot.dev/v1alpha1",
            "kind": "VLLMServer",
            "name": "qwen",
            "uid": "1234-abcd",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    pod, service = render(owner=OWNER)
    assert pod["metadata"]["ownerReferences"] == expected
    assert service["metadata"]["ownerReferences"] == expected


def test_owner_without_uid_is_refused():
    with pytest.raises(SpecError) as info:
        render(owner={"metadata": {"name": "qwen"}})
    assert info.value.field == "metadata.uid"


@pytest.mark.parametrize("name", ["Qwen", "q" * 64, "1qwen", "qwen_1", "qwen."])
def test_names_that_cannot_name_a_service_are_refused(name):
    with pytest.raises(SpecError) as info:
        render_objects(name, "llm", {"model": MODEL})
    assert info.value.field == "metadata.name"


def test_a_raw_spec_dict_is_validated():
    pod, _ = render_objects("qwen", "llm", {"model": MODEL, "engine": {"maxNumSeqs": 2}})
    assert "--max-num-seqs" in container(pod)["command"]
    with pytest.raises(SpecError) as info:
        render_objects("qwen", "llm", {"model": MODEL, "engine": {"maxNumSeqs": -2}})
    assert info.value.field == "spec.engine.maxNumSeqs"


# ------------------------------------------------------------------ templates and validity


def test_templates_use_strict_undefined():
    env = _environment()
    assert env.undefined is jinja2.StrictUndefined
    with pytest.raises(jinja2.UndefinedError):
        env.get_template("service.yaml.j2").render(name="x", _values=[])  # renderer._render passes the value list


def test_strings_cannot_inject_yaml():
    tricky = 'x"\n  evil: [1]\n# ' + "'{{ name }}'"
    pod, _ = render(podAnnotations={"example.com/note": tricky}, model='org/model"name:{x}')
    assert pod["metadata"]["annotations"]["example.com/note"] == tricky
    assert container(pod)["command"][2] == 'org/model"name:{x}'
    assert "evil" not in pod["metadata"]


FULL = {
    "model": MODEL,
    "servedModelName": "qwen",
    "image": "vllm/vllm-openai:v0.33.0",
    "imagePullPolicy": "IfNotPresent",
    "engine": {
        "gpuMemoryUtilization": 0.9,
        "maxModelLen": 8192,
        "maxNumSeqs": 8,
        "maxNumBatchedTokens": 8192,
        "tensorParallelSize": 2,
        "enablePrefixCaching": False,
        "enableChunkedPrefill": False,
        "kvCacheDtype": "fp8_e4m3",
        "extraArgs": ["--enforce-eager"],
    },
    "ttlSeconds": 7200,
    "resources": {"gpus": 2, "gpuResourceName": "nvidia.com/gpu", "memory": "24Gi", "cpu": "8", "gpuMemory": "24Gi"},
    "kvOffload": {"backend": "lmcache", "cpuMemory": "4Gi"},
    "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-L4"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}}
            ]
        }
    },
    "runtimeClassName": "nvidia",
    "priorityClassName": "high",
    "serviceAccountName": "vllm",
    "shmSize": "4Gi",
    "modelCache": {"claimName": "hf-cache"},
    "hfTokenSecretRef": {"name": "hf"},
    "modelConfigRef": {"name": "qwen-config"},
    "preflight": "enforce",
    "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "INFO"}],
    "podLabels": {"team": "ml"},
    "podAnnotations": {"example.com/a": "b"},
    "probes": {"startupTimeoutSeconds": 3600},
}


@pytest.mark.parametrize("kube_version", KUBE_VERSIONS)
@pytest.mark.parametrize(
    "body",
    [
        {"model": MODEL},
        FULL,
        {"model": MODEL, "kvOffload": {"backend": "native", "cpuMemory": "2Gi"}},
        {"model": MODEL, "modelCache": {"sizeLimit": "20Gi"}},
    ],
    ids=["minimal", "full", "native-offload", "cache-limit"],
)
def test_rendered_objects_validate_strictly(body, kube_version):
    for obj in render_objects("qwen", "llm", parse_spec(body), owner=OWNER):
        kubernetes_validate.validate(obj, kube_version, strict=True)


def test_strict_validation_would_catch_an_unknown_field():
    pod, _ = render()
    pod["spec"]["notAField"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(pod, "1.37", strict=True)


# ------------------------------------------------------------------ property: any valid engine renders valid objects

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@st.composite
def engines(draw):
    engine = {}
    if draw(st.booleans()):
        engine["gpuMemoryUtilization"] = draw(st.floats(min_value=0.01, max_value=1.0))
    if draw(st.booleans()):
        engine["maxModelLen"] = draw(st.integers(min_value=1, max_value=131072))
    if draw(st.booleans()):
        engine["maxNumSeqs"] = draw(st.integers(min_value=1, max_value=1024))
    if draw(st.booleans()):
        engine["maxNumBatchedTokens"] = draw(st.integers(min_value=engine.get("maxNumSeqs", 1), max_value=65536))
    if draw(st.booleans()):
        engine["tensorParallelSize"] = draw(st.sampled_from([1, 2, 4, 8]))
    for name in ("enablePrefixCaching", "enableChunkedPrefill"):
        value = draw(st.sampled_from([None, True, False]))
        if value is not None:
            engine[name] = value
    if engine.get("enableChunkedPrefill") is False and "maxModelLen" in engine and "maxNumBatchedTokens" in engine:
        engine["maxNumBatchedTokens"] = max(engine["maxNumBatchedTokens"], engine["maxModelLen"])
    return engine


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(engines())
def test_any_valid_engine_renders_exactly_its_flags(engine):
    command = cmd(engine=engine)
    flags = {
        "gpuMemoryUtilization": "--gpu-memory-utilization",
        "maxModelLen": "--max-model-len",
        "maxNumSeqs": "--max-num-seqs",
        "maxNumBatchedTokens": "--max-num-batched-tokens",
        "tensorParallelSize": "--tensor-parallel-size",
    }
    for field, flag in flags.items():
        if field in engine:
            assert command[command.index(flag) + 1] == str(engine[field])
        else:
            assert flag not in command
    for field, on, off in (
        ("enablePrefixCaching", "--enable-prefix-caching", "--no-enable-prefix-caching"),
        ("enableChunkedPrefill", "--enable-chunked-prefill", "--no-enable-chunked-prefill"),
    ):
        expected = {True: [on], False: [off], None: []}[engine.get(field)]
        assert [a for a in command if a in (on, off)] == expected
    pod, service = render_objects("qwen", "llm", {"model": MODEL, "engine": engine})
    assert container(pod)["resources"]["limits"]["nvidia.com/gpu"] == str(engine.get("tensorParallelSize", 1))
    kubernetes_validate.validate(pod, "1.37", strict=True)


@pytest.mark.parametrize("char", ["\x7f", "\x85", "\u2028", "\u2029", "\x9b", "\ufeff", "\U0001f600"])
def test_characters_json_allows_reach_the_pod_unchanged(char):
    """The renderer's YAML read-back never refuses (U+007F raised yaml.ReaderError) or folds
    (U+0085/U+2028 became a space) a character JSON allows.
    """
    value = f"a{char}b"
    model = "org/m" + ("" if char.isspace() else char) + "x"  # spec.model refuses whitespace (pattern ^\\S+$)
    pod, _ = render_objects(
        "s", "default", {"model": model, "env": [{"name": "A", "value": value}], "podAnnotations": {"x": value}}
    )
    container = pod["spec"]["containers"][0]
    assert container["command"][2] == model
    assert container["env"][-1] == {"name": "A", "value": value}
    assert pod["metadata"]["annotations"]["x"] == value


# Pod Security Standards, "restricted" profile (https://kubernetes.io/docs/concepts/security/pod-security-standards/),
# written out as its controls: each entry is (control, check on the rendered pod).
_RESTRICTED_VOLUME_TYPES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _restricted_violations(pod: dict) -> list[str]:  # noqa: C901
    spec, out = pod["spec"], []
    psc = spec.get("securityContext") or {}
    for flag in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(flag):
            out.append(f"Host Namespaces: {flag}")
    for vol in spec.get("volumes") or []:
        kinds = set(vol) - {"name"}
        if not kinds <= _RESTRICTED_VOLUME_TYPES:
            out.append(f"Volume Types: {vol['name']} {kinds}")
    if (psc.get("seccompProfile") or {}).get("type") not in ("RuntimeDefault", "Localhost"):
        out.append("Seccomp: pod seccompProfile.type must be RuntimeDefault or Localhost")
    if psc.get("sysctls"):
        out.append("Sysctls")
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            out.append("Privileged Containers")
        if sc.get("allowPrivilegeEscalation") is not False:
            out.append("Privilege Escalation: allowPrivilegeEscalation must be false")
        if not (
            sc.get("runAsNonRoot") is True or (psc.get("runAsNonRoot") is True and sc.get("runAsNonRoot") is not False)
        ):
            out.append("Running as Non-root: runAsNonRoot must be true")
        if 0 in (sc.get("runAsUser"), psc.get("runAsUser")):
            out.append("Running as Non-root user: runAsUser must not be 0")
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            out.append("Capabilities: must drop ALL")
        if set(caps.get("add") or []) - {"NET_BIND_SERVICE"}:
            out.append("Capabilities: may add only NET_BIND_SERVICE")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            out.append("Host Ports")
        if sc.get("procMount") not in (None, "Default"):
            out.append("/proc Mount Type")
    return out


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"kvOffload": {"backend": "lmcache", "cpuMemory": "8Gi"}},
        {"modelCache": {"claimName": "hf-cache"}, "serviceAccountName": "vllm", "runtimeClassName": "nvidia"},
    ],
)
def test_the_default_pod_passes_pod_security_restricted(spec):
    pod = render(**spec)[0]
    assert _restricted_violations(pod) == []
    assert pod["spec"]["securityContext"]["runAsUser"] == 1000
    assert {"name": "HOME", "value": "/home/vllm"} in container(pod)["env"]
    mounts = {m["mountPath"] for m in container(pod)["volumeMounts"]}
    assert {"/home/vllm", "/home/vllm/.cache/huggingface", "/dev/shm"} <= mounts or spec.get("modelCache")


def test_run_as_root_is_the_documented_opt_out_to_baseline():
    pod = render(runAsRoot=True)[0]
    assert _restricted_violations(pod) == ["Running as Non-root: runAsNonRoot must be true"]
    assert "runAsUser" not in pod["spec"]["securityContext"]
    assert container(pod)["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"env": [{"name": "HOME", "value": "/root"}]}, "spec.env[0].name"),
        ({"modelCache": {"mountPath": "/home/vllm"}}, "spec.modelCache.mountPath"),
        ({"modelCache": {"mountPath": "/dev/shm/"}}, "spec.modelCache.mountPath"),
    ],
)
def test_paths_kvpilot_mounts_are_refused(spec, field):
    with pytest.raises(SpecError) as info:
        render(**spec)
    assert info.value.field == field


# ------------------------------------------------------------------ the parsed-skeleton cache


def _render_whole_yaml(template, **context):
    """The renderer's earlier path, as reference: every value's JSON inside the YAML, the YAML parsed whole."""
    import yaml

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("kvpilot.render", "templates"),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
    )
    env.filters["tojson"] = lambda value: json.dumps(value, ensure_ascii=True)  # \uXXXX: YAML-safe
    return yaml.safe_load(env.get_template(template).render(**context))


@pytest.mark.parametrize(
    "body",
    [
        {"model": MODEL},
        FULL,
        {"model": MODEL, "kvOffload": {"backend": "native", "cpuMemory": "2Gi"}},
        {"model": MODEL, "modelCache": {"sizeLimit": "20Gi"}, "podAnnotations": {"a/b": 'x"\n  evil: [1]\x85\u2028'}},
    ],
    ids=["minimal", "full", "native-offload", "tricky-strings"],
)
def test_cached_skeleton_gives_what_parsing_the_whole_yaml_gives(body, monkeypatch):
    from kvpilot.render import renderer

    captured = {}
    real = renderer._render

    def spy(template, **context):
        captured[template] = context
        return real(template, **context)

    monkeypatch.setattr(renderer, "_render", spy)
    pod, service = render_objects("qwen", "llm", parse_spec(body), owner=OWNER)
    assert pod == _render_whole_yaml("pod.yaml.j2", **captured["pod.yaml.j2"])
    assert service == _render_whole_yaml("service.yaml.j2", **captured["service.yaml.j2"])


def test_skeleton_is_parsed_once_per_shape_and_never_shared():
    from kvpilot.render import renderer

    renderer._parse_skeleton.cache_clear()
    first, _ = render_objects("a1", "llm", parse_spec({"model": MODEL}), owner=OWNER)
    first["metadata"]["labels"]["mutated"] = "yes"
    first["spec"]["volumes"].clear()
    second, _ = render_objects("a2", "llm", parse_spec({"model": MODEL}), owner=OWNER)
    # Two servers of one spec: one pod skeleton and one service skeleton parsed, then hits.
    info = renderer._parse_skeleton.cache_info()
    assert (info.misses, info.hits) == (2, 2)
    assert second["metadata"]["name"].startswith("a2-")
    assert "mutated" not in second["metadata"]["labels"]
    assert [v["name"] for v in second["spec"]["volumes"]] == ["dshm", "home", "model-cache"]
