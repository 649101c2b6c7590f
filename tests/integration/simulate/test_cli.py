"""`kvpilot simulate` end to end in-process: the founding-experiment contract, vLLM's command line,
scenario files, --vllm-version through a recording, --help.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.metrics.recording import read_recording


def _json(args):
    result = CliRunner().invoke(cli, ["simulate", *args, "-o", "json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_seed_lru_contract():
    # docs/background.md §9: 21,520 tokens = 1,345 blocks of 16, 1,344 usable; hits 0, 0, 21,488
    out = _json(["seed-lru"])
    assert out["kv_cache_tokens"] == 21520
    assert out["usable_blocks"] == 1344
    assert [(p["name"], p["prefix_cache_hit_tokens"]) for p in out["passes"]] == [
        ("first", 0),
        ("second", 0),
        ("reversed", 21488),
    ]


def test_seed_lru_with_cpu_offload_contract():
    # LMCache 1.5 GB: pass 2 hits nothing on the GPU and 10 documents x 19 full 256-token chunks
    # = 48,640 tokens in the CPU tier
    out = _json(["seed-lru", "--kv-offload-cpu", "1.5GiB"])
    second = [p for p in out["passes"] if p["name"] == "second"][0]
    assert second["prefix_cache_hit_tokens"] == 0
    assert second["external_prefix_cache_hit_tokens"] == 48640


def test_vllm_args_set_the_engine_flags():
    out = _json(
        [
            "--vllm-args",
            "serve Qwen/Qwen2.5-1.5B-Instruct --max-num-seqs 4 --gpu-memory-utilization 0.6",
            "--duration",
            "60",
        ]
    )
    assert out["scenario"] == "healthy"
    assert out["config"]["max_num_seqs"] == 4
    assert out["config"]["gpu_memory_utilization"] == 0.6
    assert out["config"]["model"] == "qwen2.5-1.5b"


def test_scenario_file_and_cli_flags(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("scenario: max-num-seqs-cap\nmax_num_seqs: 2\nduration: 60\n")
    out = _json(["--scenario-file", str(path)])
    assert out["scenario"] == "max-num-seqs-cap"
    assert out["config"]["max_num_seqs"] == 2
    assert out["peaks"]["running"] == 2  # the cap from the file binds
    # a command-line flag wins over the file
    out = _json(["--scenario-file", str(path), "--max-num-seqs", "3"])
    assert out["peaks"]["running"] == 3


def test_arrival_rate_and_duration_in_report_mode():
    # idle has no arrivals; --arrival-rate 1 for 60 s turns it into a Poisson stream of ~60 requests
    out = _json(["idle", "--arrival-rate", "1", "--duration", "60"])
    assert 30 <= out["requests"]["arrived"] <= 90
    assert 60 <= out["simulated_seconds"] < 61


def test_old_vllm_version_recording_uses_old_names_and_blocks(tmp_path):
    path = tmp_path / "old.om"
    result = CliRunner().invoke(
        cli,
        [
            "simulate",
            "seed-lru",
            "--vllm-version",
            "0.8.0",
            "--record",
            str(path),
            "--duration",
            "60s",
            "--end",
            "1700000000",
        ],
    )
    assert result.exit_code == 0, result.output
    samples = read_recording(path)
    names = {s.name for s in samples}
    assert "vllm:gpu_cache_usage_perc" in names
    assert "vllm:kv_cache_usage_perc" not in names
    assert "vllm:time_per_output_token_seconds_count" in names
    assert all("engine" not in s.labels for s in samples)
    last = {s.name: s.value for s in samples}
    # before 0.9.0 prefix counters count 16-token blocks: 21,488 / 16 = 1,343 hit blocks;
    # queries 150,990 tokens -> floor(150,990 / 16) = 9,436 blocks
    assert last["vllm:gpu_prefix_cache_hits_total"] == 1343
    assert last["vllm:gpu_prefix_cache_queries_total"] == 9436


def test_v010_recording_has_both_generations(tmp_path):
    path = tmp_path / "v010.om"
    result = CliRunner().invoke(
        cli, ["simulate", "idle", "--vllm-version", "0.10.1", "--record", str(path), "--duration", "30s"]
    )
    assert result.exit_code == 0, result.output
    names = {s.name for s in read_recording(path)}
    assert {
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:prefix_cache_hits_total",
    } <= names


def test_help_has_examples():
    result = CliRunner().invoke(cli, ["simulate", "--help"])
    assert result.exit_code == 0
    assert "Examples:" in result.output
    assert "kvpilot simulate seed-lru -o json" in result.output
    assert "--vllm-args" in result.output
    assert "--record" in result.output


def test_unknown_scenario_and_bad_vllm_args_exit_2():
    result = CliRunner().invoke(cli, ["simulate", "no-such"])
    assert result.exit_code == 2
    assert "SCENARIO" in result.output
    result = CliRunner().invoke(cli, ["simulate", "--vllm-args", "serve m --max-num-seqs lots"])
    assert result.exit_code == 2
    assert "--max-num-seqs" in result.output
    assert "Traceback" not in result.output
    result = CliRunner().invoke(cli, ["simulate", "idle", "--vllm-version", "latest"])
    assert result.exit_code == 2
    assert "--vllm-version" in result.output


# ------------------------------------------------------------------ --trace FILE.jsonl

TRACE = """\
# a three-request trace: a comment and a blank line are skipped
{"arrival_time": 0, "prompt_tokens": 100, "output_len": 10}

{"arrival_time": 0.5, "prompt_tokens": 200, "output_len": 5, "prefix_group": "a", "prefix_len": 64}
{"arrival_time": 1.0, "prompt_tokens": 200, "output_len": 5, "prefix_group": "a", "prefix_len": 64}
"""


def test_trace_replay_end_to_end(tmp_path):
    import subprocess
    import sys

    trace = tmp_path / "requests.jsonl"
    trace.write_text(TRACE)
    proc = subprocess.run(
        [sys.executable, "-m", "kvpilot.cli", "simulate", "--trace", str(trace), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["scenario"] == "healthy"  # the default engine for a trace
    assert out["requests"] == {"arrived": 3, "finished": 3}
    # prompt tokens 100 + 200 + 200 = 500; output tokens 10 + 5 + 5 = 20
    assert out["counters"]["prompt_tokens"] == 500
    assert out["counters"]["generation_tokens"] == 20
    # The third request arrives after the second finished and shares its 64-token prefix: 64 / 16 = 4 full
    # blocks, all cached, so 64 tokens hit (the first two requests share nothing cached).
    assert out["counters"]["prefix_cache_hits"] == 64


def test_trace_runs_past_the_scenarios_time_to_its_last_arrival(tmp_path):
    trace = tmp_path / "late.jsonl"
    trace.write_text(TRACE + '{"arrival_time": 400, "prompt_tokens": 50, "output_len": 2}\n')
    out = _json(["--trace", str(trace)])
    # healthy runs 300 s; the last arrival at 400 s plus the 60 s tail = 460 simulated seconds
    assert out["simulated_seconds"] == 460.0
    assert out["requests"] == {"arrived": 4, "finished": 4}
    assert out["counters"]["prompt_tokens"] == 550  # 500 + 50


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"arrival_time": 1, "prompt_tokens": "many"}', ["trace line 3", "prompt_tokens", "not a number"]),
        ('{"prompt_tokens": 10}', ["trace line 3", "arrival_time", "required"]),
        ('{"arrival_time": 1, "prompt_tokens": 0}', ["trace line 3", "prompt_tokens", ">= 1"]),
        ('{"arrival_time": 1, "prompt_tokens": 10, "output_len": 0}', ["trace line 3", "output_len"]),
        (
            '{"arrival_time": 1, "prompt_tokens": 10, "prefix_group": "g", "prefix_len": 10}',
            ["trace line 3", "prefix_len"],
        ),
        ("not json", ["trace line 3", "not valid JSON"]),
        ("[1, 2]", ["trace line 3", "expected an object"]),
    ],
)
def test_bad_trace_line_exits_2_naming_line_and_field(tmp_path, line, words):
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"arrival_time": 0, "prompt_tokens": 10}\n\n' + line + "\n")
    result = CliRunner().invoke(cli, ["simulate", "--trace", str(trace)])
    assert result.exit_code == 2, result.output
    assert result.output.count("\n") == 1
    assert "Traceback" not in result.output
    for word in ["--trace", *words]:
        assert word in result.output, (word, result.output)


def test_trace_missing_empty_or_mixed_with_workload_flags(tmp_path):
    missing = CliRunner().invoke(cli, ["simulate", "--trace", str(tmp_path / "none.jsonl")])
    assert missing.exit_code == 2
    assert "--trace: cannot read" in missing.output
    empty = tmp_path / "empty.jsonl"
    empty.write_text("# nothing\n")
    result = CliRunner().invoke(cli, ["simulate", "--trace", str(empty)])
    assert result.exit_code == 2
    assert "no request" in result.output
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    mixed = CliRunner().invoke(cli, ["simulate", "--trace", str(trace), "--arrival-rate", "5"])
    assert mixed.exit_code == 2
    assert "--arrival-rate" in mixed.output


def test_vllm_args_refuse_unknown_models_and_flags():
    result = CliRunner().invoke(cli, ["simulate", "--vllm-args", "serve my/model --max-num-seqs 4"])
    assert result.exit_code == 2
    assert "'my/model'" in result.output
    assert "--vllm-args" in result.output
    result = CliRunner().invoke(
        cli, ["simulate", "--vllm-args", "serve Qwen/Qwen2.5-1.5B-Instruct --pipeline-parallel-size 2"]
    )
    assert result.exit_code == 2
    assert "--pipeline-parallel-size" in result.output


def test_no_fast_forward_gives_the_same_report_and_recording(tmp_path):
    args = ["healthy", "--duration", "60"]
    assert _json([*args, "--no-fast-forward"]) == _json(args)
    bodies = []
    for flag in ("--fast-forward", "--no-fast-forward"):
        path = tmp_path / f"{flag}.om"
        record = ["simulate", *args, "--record", str(path), "--interval", "5s", "--end", "1700000000", flag]
        result = CliRunner().invoke(cli, record)
        assert result.exit_code == 0, result.output
        bodies.append([line for line in path.read_text().splitlines() if "_created" not in line])
    assert bodies[0] == bodies[1]
    assert len(bodies[0]) > 1000
