"""Every number `kvpilot simulate` reads (options, scenario files, traces) is bounded and finite where it must be:
a value it cannot use is exit 2 with one ``kvpilot: error:`` line naming the field, never a traceback, a hang, a
run out of memory, a negative latency or a NaN in JSON. The bounds: kvpilot.engine.bounds,
kvpilot.commands.simulate.options.
"""

from __future__ import annotations

import json
import math

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.engine.bounds import MAX_GPU_BLOCKS
from kvpilot.engine.config import EngineConfig

HUGE_POOL = str((MAX_GPU_BLOCKS + 1) * 16)  # one block more than a simulated pool holds, in tokens of 16


def _run(tmp_path, argv, scenario=None, trace=None):
    args = ["simulate", *argv]
    if scenario is not None:
        path = tmp_path / "s.yaml"
        path.write_text(scenario)
        args += ["--scenario-file", str(path)]
    if trace is not None:
        path = tmp_path / "t.jsonl"
        path.write_text(trace)
        args += ["--trace", str(path)]
    return CliRunner().invoke(cli, args)


def _refused(result, field):
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kvpilot: error: ") or lines[0].startswith("Error: "), lines
    assert field in lines[0], lines[0]


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["healthy", "--kv-cache-tokens", "100000000000"], "kv_cache_tokens"),  # 6.25e9 blocks: no such pool
        (["healthy", "--kv-cache-tokens", HUGE_POOL], "kv_cache_tokens"),
        (["healthy", "--serve", "0", "--speed", "nan"], "--speed"),
        (["healthy", "--serve", "0", "--speed", "inf"], "--speed"),
        (["healthy", "--record", "{tmp}/x.om", "--interval", "1ms"], "--interval"),
    ],
)
def test_an_option_out_of_range_is_refused_naming_it(tmp_path, argv, field):
    _refused(_run(tmp_path, [arg.format(tmp=tmp_path) for arg in argv]), field)
    assert not (tmp_path / "x.om").exists()


def test_the_largest_pool_is_simulated():
    # the bound itself is allowed: a pool of MAX_GPU_BLOCKS blocks builds (and one block more is refused above)
    config = EngineConfig(num_gpu_blocks=MAX_GPU_BLOCKS, max_model_len=8192)
    assert config.resolved_num_gpu_blocks() == MAX_GPU_BLOCKS


@pytest.mark.parametrize(
    ("scenario", "field"),
    [
        ("flags: {bandwidth_efficiency: 0}", "bandwidth_efficiency"),
        ("flags: {compute_efficiency: 0}", "compute_efficiency"),
        ("flags: {kv_offload_cpu_bytes: 1000000000, offload_load_bandwidth: 0}", "offload_load_bandwidth"),
        ("flags: {offload_store_bandwidth: .inf}", "offload_store_bandwidth"),
        ("flags: {bytes_per_token: 0}", "bytes_per_token"),
        ("flags: {step_overhead: .nan}", "step_overhead"),
        ("flags: {step_overhead: -1}", "step_overhead"),
        ("flags: {num_gpu_blocks: 18446744073709551616}", "num_gpu_blocks"),  # 2^64
        ("flags: {max_num_seqs: 4294967296}", "max_num_seqs"),
        ("flags: {max_num_seqs: true}", "max_num_seqs"),
        ("duration: -5", "duration"),
        ("duration: .nan", "duration"),
        ("duration: 0", "duration"),
        ("workload: {type: poisson, rate: 1, duration: 60, prompt_len: {dist: exponential, mean: 0}}", "prompt_len"),
        (
            "workload: {type: poisson, rate: 1, duration: 60, prompt_len: {dist: normal, mean: .nan, std: 1}}",
            "prompt_len",
        ),
        (
            "workload: {type: poisson, rate: 1, duration: 60, output_len: {dist: lognormal, mean: 100, sigma: 1000}}",
            "output_len",
        ),
        ("workload: {type: poisson, rate: 1, duration: 60, output_len: {dist: uniform, min: 9, max: 2}}", "output_len"),
        ("workload: {type: poisson, rate: 1, duration: 60, output_len: 1.0e+300}", "output_len"),
        ("workload: {type: document_scan, num_docs: 1000000}", "num_docs"),
    ],
)
def test_a_scenario_file_number_out_of_range_is_refused_naming_it(tmp_path, scenario, field):
    _refused(_run(tmp_path, ["healthy"], scenario=scenario), field)


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"arrival_time": "nan", "prompt_tokens": 10}', "arrival_time"),
        ('{"arrival_time": "-inf", "prompt_tokens": 10}', "arrival_time"),
        ('{"arrival_time": -1e300, "prompt_tokens": 10}', "arrival_time"),
        ('{"arrival_time": -1, "prompt_tokens": 10}', "arrival_time"),
        ('{"arrival_time": 1e300, "prompt_tokens": 10}', "arrival_time"),
        ('{"arrival_time": 0, "prompt_tokens": 1.5}', "prompt_tokens"),
        ('{"arrival_time": 0, "prompt_tokens": true}', "prompt_tokens"),
        ('{"arrival_time": 0, "prompt_tokens": "12"}', "prompt_tokens"),
        ('{"arrival_time": 0, "prompt_tokens": 10, "output_len": 1e12}', "output_len"),
    ],
)
def test_a_trace_number_out_of_range_is_refused_naming_its_line_and_field(tmp_path, line, field):
    result = _run(tmp_path, ["healthy"], trace=line + "\n")
    _refused(result, field)
    assert "trace line 1" in result.stderr


@pytest.mark.parametrize(
    "line",
    [
        '{"arrival_time": 0, "prompt_tokens": 10}',  # the low ends: time 0, whole numbers
        '{"arrival_time": 0.5, "prompt_tokens": 10.0, "output_len": 1}',  # 10.0 is the whole number 10
    ],
)
def test_a_trace_at_the_bounds_runs(tmp_path, line):
    result = _run(tmp_path, ["healthy", "-o", "json", "--duration", "5s"], trace=line + "\n")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["requests"]["arrived"] == 1


@pytest.mark.parametrize("scenario", ["flags: {step_overhead: 0}", "flags: {step_overhead: 0.001}"])
def test_a_report_at_the_bounds_is_finite_json_with_no_negative_latency(tmp_path, scenario):
    result = _run(tmp_path, ["healthy", "-o", "json", "--duration", "20s"], scenario=scenario)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout, parse_constant=lambda name: pytest.fail(f"{name} in JSON"))
    latency = doc["latency_s"]
    assert all(v is None or (math.isfinite(v) and v >= 0) for v in latency.values()), latency
    assert 20 <= doc["simulated_seconds"] < 21  # the run ends with the step that passes --duration
