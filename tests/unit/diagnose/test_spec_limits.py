"""The limits a VLLMServer's spec sets, read through the spec's model (kvpilot.api.models.EngineSpec)."""

from __future__ import annotations

from kvpilot.api import parse_spec
from kvpilot.api.models import EngineSpec
from kvpilot.diagnose.limits import SPEC_FIELDS, resolve_limits


def test_the_limits_a_spec_sets_are_the_engine_models_fields():
    # chunked prefill and the extra arguments are flags no diagnosis limit holds; every other field is read
    assert set(EngineSpec.model_fields) - set(SPEC_FIELDS) == {"enable_chunked_prefill", "extra_args"}
    assert set(SPEC_FIELDS) <= set(EngineSpec.model_fields)


def test_a_parsed_spec_gives_its_limits_below_the_command_line():
    engine = parse_spec(
        {"model": "m", "engine": {"maxNumSeqs": 4, "gpuMemoryUtilization": 0.6, "kvCacheDtype": "fp8"}}
    ).engine
    limits = resolve_limits(engine, cli={"max_num_seqs": 8})
    assert (limits.max_num_seqs.value, limits.max_num_seqs.source) == (8, "cli")  # the command line overrides
    assert (limits.gpu_memory_utilization.value, limits.gpu_memory_utilization.source) == (0.6, "spec")
    assert (limits.kv_cache_dtype.value, limits.kv_cache_dtype.source) == ("fp8", "spec")
    assert limits.max_model_len.source != "spec"  # unset in the spec: not read from it
