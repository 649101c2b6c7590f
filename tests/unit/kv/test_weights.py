"""Weight bytes from a safetensors index or the Hub's parameter counts (expected values by hand)."""

from __future__ import annotations

from kvpilot.kv.hub import HubModel, HubModelCache
from kvpilot.kv.weights import weights_from_index, weights_from_parameters


def test_the_index_total_size_is_the_weight_bytes():
    # an index as transformers writes it: "metadata": {"total_size": <bytes of every tensor>}, "weight_map": {...}
    assert weights_from_index({"metadata": {"total_size": 15231233024}, "weight_map": {}}) == 15231233024
    for bad in ({}, {"metadata": {}}, {"metadata": {"total_size": 0}}, {"metadata": {"total_size": "1"}}, [], None):
        assert weights_from_index(bad) is None
    assert weights_from_index({"metadata": {"total_size": True}}) is None  # a bool is not a size


def test_parameter_counts_times_dtype_sizes():
    # 1,543,714,304 BF16 parameters (2 bytes each) = 3,087,428,608 bytes
    assert weights_from_parameters({"BF16": 1_543_714_304}) == 3_087_428_608
    # GPTQ-style mix: 100 I32 (4 B) + 10 F16 (2 B) + 3 F4 (4 bits: 12 bits -> 2 bytes rounded up) = 422
    assert weights_from_parameters({"I32": 100, "F16": 10, "F4": 3}) == 400 + 20 + 2
    assert weights_from_parameters({"BF16": 10, "Q4_K": 10}) is None  # an unknown dtype: size unknown
    assert weights_from_parameters({}) is None
    assert weights_from_parameters(None) is None


def test_the_hub_cache_keeps_a_success_and_retries_a_failure_after_ten_minutes():
    calls = []
    now = [1000.0]
    answers = {"ok/model": HubModel({"model_type": "qwen2"}, 3_087_428_608, "the Hub (ok/model)")}

    def fetch(repo_id):
        calls.append(repo_id)
        return answers.get(repo_id, HubModel(None, None, "the Hub: no answer within 5 s"))

    cache = HubModelCache(fetch=fetch, clock=lambda: now[0])
    assert cache.get("ok/model").weights_bytes == 3_087_428_608
    assert cache.get("down/model").config is None
    now[0] += 3600  # an hour later
    assert cache.get("ok/model").config == {"model_type": "qwen2"}  # kept: not asked again
    assert calls == ["ok/model", "down/model"]
    now[0] += 1  # the failure was kept 3,601 s > 600 s: asked again
    cache.get("down/model")
    assert calls == ["ok/model", "down/model", "down/model"]
    now[0] += 599  # 599 s after that retry: still within 600 s
    cache.get("down/model")
    assert calls == ["ok/model", "down/model", "down/model"]
