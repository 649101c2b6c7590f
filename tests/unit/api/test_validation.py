"""Validation of a VLLMServer spec: every rule names its field (camelCase) in one line."""

from __future__ import annotations

import datetime

import pytest

from kvpilot.api import DEFAULT_IMAGE, SpecError, parse_resource, parse_spec, spec_hash


def spec(**over):
    body = {"model": "Qwen/Qwen2.5-1.5B-Instruct"}
    body.update(over)
    return body


def error(body) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_spec(body)
    err = info.value
    assert "\n" not in str(err)
    assert str(err).startswith(err.field + ": ")
    return err


# ------------------------------------------------------------------ defaults


def test_defaults_of_a_minimal_spec():
    s = parse_spec(spec())
    assert s.ttl_seconds == 3600
    assert s.image == DEFAULT_IMAGE == "vllm/vllm-openai:v0.33.0"
    assert s.preflight == "warn"
    assert s.shm_size == "1Gi"
    assert s.resources.gpu_resource_name == "nvidia.com/gpu"
    assert s.gpu_count == 1
    assert s.model_cache.mount_path == "/home/vllm/.cache/huggingface"
    assert s.model_cache.claim_name is None
    e = s.engine
    assert (
        e.gpu_memory_utilization,
        e.max_model_len,
        e.max_num_seqs,
        e.max_num_batched_tokens,
        e.tensor_parallel_size,
        e.enable_prefix_caching,
        e.enable_chunked_prefill,
        e.kv_cache_dtype,
    ) == (None, None, None, None, None, None, None, None)
    assert e.extra_args == []
    assert (s.probes.startup_timeout_seconds, s.probes.period_seconds, s.probes.liveness_failure_threshold) == (
        1800,
        10,
        3,
    )


def test_gpus_default_to_tensor_parallel_size():
    assert parse_spec(spec(engine={"tensorParallelSize": 4})).gpu_count == 4
    assert parse_spec(spec(engine={"tensorParallelSize": 2}, resources={"gpus": 8})).gpu_count == 8


def test_model_config_ref_key_defaults_to_config_json():
    s = parse_spec(spec(modelConfigRef={"name": "qwen-config"}))
    assert (s.model_config_ref.name, s.model_config_ref.key) == ("qwen-config", "config.json")


def test_snake_case_names_are_accepted_too():
    s = parse_spec({"model": "m", "engine": {"max_num_seqs": 4}, "ttl_seconds": 600})
    assert (s.engine.max_num_seqs, s.ttl_seconds) == (4, 600)


def test_quantities_accept_integers_and_keep_them_as_strings():
    s = parse_spec(spec(resources={"memory": 6442450944, "cpu": 4}))
    assert (s.resources.memory, s.resources.cpu) == ("6442450944", "4")


# ------------------------------------------------------------------ single-field rules


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "spec.model"),
        (spec(model=""), "spec.model"),
        (spec(model="two words"), "spec.model"),
        (spec(engine={"gpuMemoryUtilization": 0}), "spec.engine.gpuMemoryUtilization"),
        (spec(engine={"gpuMemoryUtilization": -0.5}), "spec.engine.gpuMemoryUtilization"),
        (spec(engine={"gpuMemoryUtilization": 1.01}), "spec.engine.gpuMemoryUtilization"),
        (spec(engine={"gpuMemoryUtilization": "0.6"}), "spec.engine.gpuMemoryUtilization"),
        (spec(engine={"maxModelLen": 0}), "spec.engine.maxModelLen"),
        (spec(engine={"maxModelLen": -8192}), "spec.engine.maxModelLen"),
        (spec(engine={"maxModelLen": 10_000_001}), "spec.engine.maxModelLen"),
        (spec(engine={"maxNumSeqs": 0}), "spec.engine.maxNumSeqs"),
        (spec(engine={"maxNumSeqs": 65_537}), "spec.engine.maxNumSeqs"),
        (spec(engine={"maxNumSeqs": 4.5}), "spec.engine.maxNumSeqs"),
        (spec(engine={"maxNumSeqs": "4"}), "spec.engine.maxNumSeqs"),
        (spec(engine={"maxNumBatchedTokens": 0}), "spec.engine.maxNumBatchedTokens"),
        (spec(engine={"tensorParallelSize": 0}), "spec.engine.tensorParallelSize"),
        (spec(engine={"tensorParallelSize": 65}), "spec.engine.tensorParallelSize"),
        (spec(engine={"enablePrefixCaching": "yes"}), "spec.engine.enablePrefixCaching"),
        (spec(engine={"kvCacheDtype": "fp4"}), "spec.engine.kvCacheDtype"),
        (spec(engine={"kvCacheDtype": "float16"}), "spec.engine.kvCacheDtype"),
        (spec(engine={"extraArgs": "--enforce-eager"}), "spec.engine.extraArgs"),
        (spec(engine={"extraArgs": ["--enforce-eager", 3]}), "spec.engine.extraArgs[1]"),
        (spec(engine={"maxNumSeq": 4}), "spec.engine.maxNumSeq"),
        (spec(ttlSeconds=59), "spec.ttlSeconds"),
        (spec(ttlSeconds=0), "spec.ttlSeconds"),
        (spec(ttlSeconds=31 * 24 * 3600 + 1), "spec.ttlSeconds"),
        (spec(resources={"gpus": 0}), "spec.resources.gpus"),
        (spec(resources={"gpus": -1}), "spec.resources.gpus"),
        (spec(resources={"memory": "6 gigs"}), "spec.resources.memory"),
        (spec(resources={"memory": "-6Gi"}), "spec.resources.memory"),
        (spec(resources={"memory": "0"}), "spec.resources.memory"),
        (spec(resources={"gpuResourceName": "gpu"}), "spec.resources.gpuResourceName"),
        (spec(resources={"gpuMemory": "lots"}), "spec.resources.gpuMemory"),
        (spec(shmSize="1GB"), "spec.shmSize"),
        (spec(kvOffload={"backend": "disk", "cpuMemory": "1Gi"}), "spec.kvOffload.backend"),
        (spec(kvOffload={"backend": "lmcache"}), "spec.kvOffload.cpuMemory"),
        (spec(hfTokenSecretRef={"name": "Not_A_Name"}), "spec.hfTokenSecretRef.name"),
        (spec(modelConfigRef={}), "spec.modelConfigRef.name"),
        (spec(preflight="block"), "spec.preflight"),
        (spec(probes={"livenessFailureThreshold": 2}), "spec.probes.livenessFailureThreshold"),
        (spec(probes={"startupTimeoutSeconds": 30}), "spec.probes.startupTimeoutSeconds"),
        (spec(tolerations=[{"operator": "Maybe"}]), "spec.tolerations[0].operator"),
        (spec(modelCache={"mountPath": "relative/path"}), "spec.modelCache.mountPath"),
        (spec(unknownField=1), "spec.unknownField"),
        (spec(engine={"gpuMemoryUtilization": float("nan")}), "spec.engine.gpuMemoryUtilization"),
        (spec(ttlSeconds=float("inf")), "spec.ttlSeconds"),
        (spec(model=datetime.date(2024, 1, 1)), "spec.model"),  # YAML turns 2024-01-01 into a date
        (spec(engine=None), "spec.engine"),
        (spec(engine=[1]), "spec.engine"),
        (spec(nodeSelector={"zone": 1}), "spec.nodeSelector.zone"),
    ],
)
def test_single_field_rules_name_the_field(body, field):
    assert error(body).field == field


def test_messages_say_what_was_given():
    assert "got 0" in str(error(spec(engine={"maxNumSeqs": 0})))
    assert "unknown field" in str(error(spec(engine={"maxNumSeq": 4})))
    assert "required" in str(error({}))
    assert "quantity" in str(error(spec(resources={"memory": "6 gigs"})))


@pytest.mark.parametrize("value", [1e-9, 0.6, 0.93, 1])
def test_gpu_memory_utilization_bounds_are_open_at_zero_and_closed_at_one(value):
    assert parse_spec(spec(engine={"gpuMemoryUtilization": value})).engine.gpu_memory_utilization == value


@pytest.mark.parametrize("dtype", ["auto", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla"])
def test_every_vllm_cache_dtype_is_accepted(dtype):
    assert parse_spec(spec(engine={"kvCacheDtype": dtype})).engine.kv_cache_dtype == dtype


def test_ttl_bounds_are_inclusive():
    assert parse_spec(spec(ttlSeconds=60)).ttl_seconds == 60
    assert parse_spec(spec(ttlSeconds=31 * 24 * 3600)).ttl_seconds == 2_678_400


def test_spec_must_be_a_mapping():
    assert parse_spec.__name__  # keep the import used
    with pytest.raises(SpecError) as info:
        parse_spec(["model"])
    assert info.value.field == "spec"
    with pytest.raises(SpecError) as info:
        parse_spec(None)
    assert info.value.field == "spec"


# ------------------------------------------------------------------ cross-field rules


def test_batched_tokens_must_cover_max_num_seqs():
    err = error(spec(engine={"maxNumSeqs": 256, "maxNumBatchedTokens": 255}))
    assert err.field == "spec.engine.maxNumBatchedTokens"
    assert "255" in err.message
    assert "256" in err.message
    assert parse_spec(spec(engine={"maxNumSeqs": 256, "maxNumBatchedTokens": 256}))


def test_batched_tokens_below_max_model_len_needs_chunked_prefill():
    # chunked prefill explicitly off: 2048 < 16384 is refused
    err = error(spec(engine={"maxModelLen": 16384, "maxNumBatchedTokens": 2048, "enableChunkedPrefill": False}))
    assert err.field == "spec.engine.maxNumBatchedTokens"
    assert "16384" in err.message
    assert "chunked prefill" in err.message
    # chunked prefill on (explicitly, or vLLM V1's default when unset): allowed
    assert parse_spec(spec(engine={"maxModelLen": 16384, "maxNumBatchedTokens": 2048, "enableChunkedPrefill": True}))
    assert parse_spec(spec(engine={"maxModelLen": 16384, "maxNumBatchedTokens": 2048}))
    # off, but the budget covers a whole request: allowed
    assert parse_spec(spec(engine={"maxModelLen": 8192, "maxNumBatchedTokens": 8192, "enableChunkedPrefill": False}))


def test_gpus_must_hold_tensor_parallel_size():
    err = error(spec(engine={"tensorParallelSize": 4}, resources={"gpus": 2}))
    assert err.field == "spec.resources.gpus"
    assert "4" in err.message
    assert parse_spec(spec(engine={"tensorParallelSize": 4}, resources={"gpus": 4})).gpu_count == 4


@pytest.mark.parametrize(
    ("env", "field"),
    [
        ([{"name": "HF_HOME", "value": "/x"}], "spec.env[0].name"),
        ([{"name": "HF_TOKEN", "value": "hf_abc"}], "spec.env[0].value"),
        ([{"name": "HUGGING_FACE_HUB_TOKEN", "value": "hf_abc"}], "spec.env[0].value"),
        ([{"name": "A", "value": "1"}, {"name": "A", "value": "2"}], "spec.env[1].name"),
        ([{"name": "A", "value": "1", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}], "spec.env[0]"),
        ([{"name": "1BAD"}], "spec.env[0].name"),
    ],
)
def test_env_rules(env, field):
    assert error(spec(env=env)).field == field


def test_hf_token_through_value_from_is_allowed_without_secret_ref_only():
    from_secret = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "token"}}}
    assert parse_spec(spec(env=[from_secret]))
    err = error(spec(env=[from_secret], hfTokenSecretRef={"name": "hf"}))
    assert err.field == "spec.env[0].name"


def test_lmcache_env_is_managed_only_with_lmcache_offload():
    var = [{"name": "LMCACHE_MAX_LOCAL_CPU_SIZE", "value": "5"}]
    assert parse_spec(spec(env=var))
    assert error(spec(env=var, kvOffload={"backend": "lmcache", "cpuMemory": "1Gi"})).field == "spec.env[0].name"
    assert parse_spec(spec(env=var, kvOffload={"backend": "native", "cpuMemory": "1Gi"}))


@pytest.mark.parametrize(
    ("labels", "field"),
    [
        ({"app.kubernetes.io/name": "other"}, "spec.podLabels.app.kubernetes.io/name"),
        ({"kvpilot.dev/server": "x"}, "spec.podLabels.kvpilot.dev/server"),
        ({"model": "Qwen/Qwen2.5-1.5B-Instruct"}, "spec.podLabels.model"),
        ({"team": "x" * 64}, "spec.podLabels.team"),
        ({"bad key!": "x"}, "spec.podLabels.bad key!"),
    ],
)
def test_pod_label_rules(labels, field):
    assert error(spec(podLabels=labels)).field == field


@pytest.mark.parametrize("key", ["kvpilot.dev/model", "kvpilot.dev/spec-hash", "bad key"])
def test_pod_annotation_rules(key):
    assert error(spec(podAnnotations={key: "x"})).field == f"spec.podAnnotations.{key}"


def test_valid_pod_labels_and_annotations():
    s = parse_spec(
        spec(
            podLabels={"team": "ml", "example.com/tier": "gpu-a"},
            podAnnotations={"example.com/note": "Qwen/Qwen2.5 any text"},
        )
    )
    assert s.pod_labels["example.com/tier"] == "gpu-a"


# ------------------------------------------------------------------ whole objects


def _obj(**over):
    obj = {"apiVersion": "kvpilot.dev/v1alpha1", "kind": "VLLMServer", "metadata": {"name": "qwen"}, "spec": spec()}
    obj.update(over)
    return obj


def test_parse_resource_returns_name_namespace_and_spec():
    name, namespace, s = parse_resource(_obj(metadata={"name": "qwen", "namespace": "llm"}))
    assert (name, namespace, s.model) == ("qwen", "llm", "Qwen/Qwen2.5-1.5B-Instruct")


@pytest.mark.parametrize(
    ("obj", "field"),
    [
        (_obj(kind="Pod"), "kind"),
        (_obj(apiVersion="kvpilot.dev/v1"), "apiVersion"),
        (_obj(metadata=None), "metadata"),
        (_obj(metadata={}), "metadata.name"),
        (_obj(metadata={"name": 123}), "metadata.name"),
        (_obj(metadata={"name": "qwen", "namespace": 5}), "metadata.namespace"),
        (_obj(metadata={"name": "Qwen"}), "metadata.name"),
        (_obj(metadata={"name": "1qwen"}), "metadata.name"),
        (_obj(metadata={"name": "q" * 64}), "metadata.name"),
        (_obj(spec=None), "spec"),
        (_obj(spec={"model": "m", "engine": {"maxNumSeqs": 0}}), "spec.engine.maxNumSeqs"),
        ("just text", "(document)"),
    ],
)
def test_parse_resource_errors_name_the_field(obj, field):
    with pytest.raises(SpecError) as info:
        parse_resource(obj)
    assert info.value.field == field


def test_spec_hash_changes_with_the_spec_only():
    a = parse_spec(spec(engine={"maxNumSeqs": 4}))
    b = parse_spec(spec(engine={"maxNumSeqs": 4}))
    c = parse_spec(spec(engine={"maxNumSeqs": 8}))
    assert spec_hash(a) == spec_hash(b) != spec_hash(c)
    assert len(spec_hash(a)) == 16
    assert int(spec_hash(a), 16) >= 0


# ------------------------------------------------------------------ bounds of a body kopf decoded


def test_a_huge_integer_names_its_field_and_the_bound():
    # was: ValueError "Exceeds the limit (4300 digits)" while the error message was formatted (an InternalError)
    err = error(spec(ttlSeconds=10**5000))
    assert (err.field, err.message) == ("spec.ttlSeconds", "an integer of 5001 digits (the bound is 100 digits)")
    # 100 digits is within the bound: the field's own rule answers, showing the number
    err = error(spec(ttlSeconds=10**100 - 1))
    assert err.field == "spec.ttlSeconds"
    assert "less than or equal to 2678400" in err.message


def test_a_deep_value_names_where_it_passes_the_bound():
    deep: list = []
    for _ in range(62):  # 63 lists: spec is level 1, affinity 2, the lists 3..65
        deep = [deep]
    err = error(spec(affinity={"nodeAffinity": deep}))
    path = "spec.affinity.nodeAffinity" + "[0]" * 62  # 212 characters: cut at 200 in the message
    assert err.field == path[:200] + "…"
    assert "the bound is 64" in err.message
    # one level less is within the bound: the affinity's own check answers
    assert error(spec(affinity={"nodeAffinity": deep[0]})).message == "must be of type object (got array)"


def test_a_shared_structure_is_counted_as_expanded():
    leaf = ["x"] * 9
    for _ in range(8):  # 9^9 leaves if expanded, one list per level in memory
        leaf = [leaf] * 9
    err = error(spec(env=[{"name": "X", "valueFrom": {"a": leaf}}]))
    assert err.field.startswith("spec.env[0].valueFrom.a[0]")
    assert "more than 100,000 nodes" in err.message
