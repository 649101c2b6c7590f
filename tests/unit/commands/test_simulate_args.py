"""`kvpilot simulate` argument handling that needs no engine: durations, --end, --serve address,
cache_config labels, and one-line exit-2 errors.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.commands._common import parse_duration
from kvpilot.commands.simulate.options import parse_end, parse_listen
from kvpilot.commands.simulate.session import cache_config_labels
from kvpilot.commands.simulate.shim import vllm_shim
from kvpilot.engine.config import EngineConfig
from kvpilot.engine.core import Engine


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("600", 600.0), ("90s", 90.0), ("10m", 600.0), ("1.5h", 5400.0), ("500ms", 0.5), ("1d", 86400.0)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text, "--duration") == seconds


@pytest.mark.parametrize("text", ["0", "-5", "ten", "5x", "1h30m", ""])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError, match="--duration"):
        parse_duration(text, "--duration")


def test_parse_end():
    assert parse_end(None, 123.0) == 123.0
    assert parse_end("now", 123.0) == 123.0
    assert parse_end("1700000000", 0) == 1700000000.0
    # 2023-11-14T22:13:20Z is 1,700,000,000 s after the epoch
    assert parse_end("2023-11-14T22:13:20Z", 0) == 1700000000.0
    with pytest.raises(ValueError, match="time zone"):
        parse_end("2023-11-14T22:13:20", 0)
    with pytest.raises(ValueError, match="--end"):
        parse_end("yesterday", 0)


def test_parse_listen():
    assert parse_listen("8123", "127.0.0.1") == ("127.0.0.1", 8123)
    assert parse_listen("0.0.0.0:80", "127.0.0.1") == ("0.0.0.0", 80)
    assert parse_listen("[::1]:9000", "127.0.0.1") == ("::1", 9000)
    for bad in ["host:", "host:http", "70000"]:
        with pytest.raises(ValueError, match="--serve"):
            parse_listen(bad, "127.0.0.1")


def test_cache_config_labels_from_engine_config():
    # The founding measurement (docs/engine.md): vLLM 0.29.0 on an 8 GB GPU logged 1,345 blocks of 16 tokens
    # = 21,520 tokens ("GPU KV cache size"),
    # and "Maximum concurrency for 8,192 tokens per request: 2.63x": 21,520 / 8,192 = 2.627 -> 2.63.
    engine = Engine(
        EngineConfig(
            num_gpu_blocks=1345, block_size=16, max_model_len=8192, gpu_memory_utilization=0.6, kv_cache_dtype="auto"
        )
    )
    labels = cache_config_labels(engine)
    assert labels == {
        "block_size": "16",
        "num_gpu_blocks": "1345",
        "kv_cache_size_tokens": "21520",
        "kv_cache_max_concurrency": "2.63",
        "gpu_memory_utilization": "0.6",
        "enable_prefix_caching": "True",
        "cache_dtype": "auto",
    }


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["simulate", "healthy", "--serve", "x:y"], "--serve"),
        (["simulate", "healthy", "--duration", "soon"], "--duration"),
        (["simulate", "healthy", "--max-num-seqs", "0"], "--max-num-seqs"),
        (["simulate", "healthy", "--serve", "1", "--record", "f.om"], "--serve and --record"),
        (["simulate", "healthy", "--kv-offload-cpu", "lots"], "--kv-offload-cpu"),
    ],
)
def test_bad_input_exits_2_with_one_line(argv, field):
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 2, result.output
    assert field in result.output
    assert "Traceback" not in result.output


def test_vllm_shim_refuses_other_subcommands(capsys):
    with pytest.raises(SystemExit) as info:
        vllm_shim(["bench", "serve"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "vllm serve MODEL" in err


def test_scenario_file_must_be_a_mapping(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("- just\n- a list\n")
    result = CliRunner().invoke(cli, ["simulate", "healthy", "--scenario-file", str(path)])
    assert result.exit_code == 2
    assert "--scenario-file" in result.output
    assert "mapping" in result.output


def test_vllm_args_unbalanced_quote_exits_2_with_one_line():
    # shlex cannot split `serve m "unclosed`: a user's typo, not a crash
    result = CliRunner().invoke(cli, ["simulate", "--vllm-args", 'serve m "unclosed'])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)  # fail(), not a crash
    assert result.output.count("\n") == 1
    assert "--vllm-args" in result.output


def test_record_into_missing_folder_exits_2_with_one_line(tmp_path):
    target = tmp_path / "no-such-folder" / "x.om"
    result = CliRunner().invoke(cli, ["simulate", "idle", "--record", str(target), "--duration", "10s"])
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert result.output.count("\n") == 1
    assert "--record" in result.output
    assert not target.exists()


@pytest.mark.parametrize(
    ("argv", "option", "code"),
    [
        (["diagnose", "--window", "0s"], "--window", 64),  # diagnose's usage error is 64 (its exit-code table)
        (["simulate", "healthy", "--kv-offload-cpu", "lots"], "--kv-offload-cpu", 2),
    ],
)
def test_a_bad_duration_or_size_names_its_option_once(argv, option, code):
    # click says "Invalid value for '--window': ..."; the parser's own "--window: " prefix is not repeated
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == code, result.output
    assert f"Invalid value for '{option}': '" in result.output, result.output
    assert result.output.count(option) == 1, result.output


def test_size_error_names_the_option_as_typed():
    # the option is --kv-offload-cpu; its Python name (kv_offload_cpu_bytes) is not a flag a user can type
    result = CliRunner().invoke(cli, ["simulate", "healthy", "--kv-offload-cpu", "lots"])
    assert result.exit_code == 2
    assert "--kv-offload-cpu-bytes" not in result.output


@pytest.mark.parametrize(
    "argv", [["--help"], ["-h"], ["serve", "--help"], ["serve", "Qwen/Qwen2.5-1.5B-Instruct", "-h"]]
)
def test_vllm_shim_help_prints_usage_and_exits_0(argv):
    import subprocess
    import sys

    # The console script runs the shim in its own process: --help must print usage and exit 0, as
    # vllm --help does, never start serving (the subprocess timeout bounds that).
    proc = subprocess.run(
        [sys.executable, "-c", "from kvpilot.commands.simulate.shim import vllm_shim; vllm_shim()", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage: vllm serve MODEL")
    assert "KVPILOT_SCENARIO" in proc.stdout
    assert proc.stderr == ""


def test_simulate_refuses_a_block_size_vllm_refuses(tmp_path):
    # vllm/config/cache.py: BlockSize = Literal[1, 8, 16, 32, 64, 128, 256]
    scenario = tmp_path / "s.yaml"
    scenario.write_text("block_size: 7\n")
    for argv, where in (
        (["simulate", "healthy", "--block-size", "7"], "'--block-size'"),
        (["simulate", "--vllm-args", "serve m --block-size 7"], "--block-size"),
        (["simulate", "healthy", "--scenario-file", str(scenario)], "block_size"),
    ):
        result = CliRunner().invoke(cli, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert where in result.output, (argv, result.output)
        assert "7" in result.output, (argv, result.output)
        assert "256" in result.output, (argv, result.output)  # the message lists vLLM's sizes
        assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--arrival-rate", "1e9"], ["--arrival-rate", "1000"]),  # was an unbounded run (3e11 requests)
        # 1,000 requests/s x 2,000 s = 2,000,000 requests > the 1,000,000 of one run
        (["--arrival-rate", "1000", "--duration", "2000"], ["--arrival-rate", "2,000,000", "1,000,000"]),
        (["--num-requests", "2000000"], ["--num-requests", "1000000"]),
        (["--duration", "25h"], ["--duration", "90,000 s", "86,400"]),  # 25 h = 90,000 s > one day
        (["--serve", "127.0.0.1:0", "--speed", "1e6"], ["--speed", "1000"]),
    ],
)
def test_runs_above_the_documented_bounds_are_refused_naming_the_option(args, words):
    result = CliRunner().invoke(cli, ["simulate", "healthy", *args])
    assert result.exit_code == 2, result.output
    for word in words:
        assert word in result.output, (word, result.output)
    assert "Traceback" not in result.output


def test_scenario_file_and_trace_are_bounded_too(tmp_path, monkeypatch):
    from kvpilot.commands.simulate import options

    fast = tmp_path / "fast.yaml"
    fast.write_text("workload: {type: poisson, rate: 5000, duration: 10}\n")
    result = CliRunner().invoke(cli, ["simulate", "healthy", "--scenario-file", str(fast)])
    assert result.exit_code == 2, result.output
    assert "--scenario-file workload.rate" in result.output, result.output
    # the file's top-level arrival_rate and num_requests set the same workload keys (--arrival-rate's and
    # --num-requests' own), and are bounded alike: 1e30 requests/s once ran the recording out of memory
    for text, words in (
        ("arrival_rate: 1.0e+30\n", ["--scenario-file arrival_rate", "maximum 1,000"]),
        ("arrival_rate: 5\nnum_requests: 2000000\n", ["--scenario-file num_requests", "1,000,000"]),
    ):
        fast.write_text(text)
        for mode in ([], ["--record", str(tmp_path / "r.om"), "--duration", "10s"]):
            result = CliRunner().invoke(cli, ["simulate", "healthy", "--scenario-file", str(fast), *mode])
            assert result.exit_code == 2, result.output
            for word in words:
                assert word in result.output, (word, result.output)
    monkeypatch.setattr(options, "MAX_REQUESTS", 2)  # a 3-request trace stands for a too-long one
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"arrival_time": {i}, "prompt_tokens": 10}}\n' for i in range(3)))
    result = CliRunner().invoke(cli, ["simulate", "--trace", str(trace)])
    assert result.exit_code == 2, result.output
    assert "--trace" in result.output, result.output
    assert "maximum 2" in result.output, result.output


def test_a_run_at_the_bounds_is_accepted():
    # 1,000 requests/s for 1 s: about 1,000 requests, well inside the bounds
    result = CliRunner().invoke(cli, ["simulate", "healthy", "--arrival-rate", "1000", "--duration", "1", "-o", "json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["requests"]["arrived"] > 0


@pytest.mark.parametrize(
    ("vllm_args", "flags", "expected"),
    [
        # no --max-model-len: the model's own context, as vLLM derives it from config.json
        # (max_position_embeddings: 32,768 for Qwen2.5, 131,072 for Llama-3.1, whose llama3 RoPE keeps it)
        ("serve Qwen/Qwen2.5-1.5B-Instruct --max-num-seqs 4", [], 32_768),
        ("serve meta-llama/Llama-3.1-8B-Instruct", [], 131_072),
        # what the command line or kvpilot's own flag says wins
        ("serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 8k", [], 8000),
        ("serve Qwen/Qwen2.5-1.5B-Instruct", ["--max-model-len", "4096"], 4096),
    ],
)
def test_vllm_args_take_max_model_len_from_the_model_as_vllm_does(vllm_args, flags, expected):
    from kvpilot.commands.simulate.cli import kv_cache_log_line

    result = CliRunner().invoke(cli, ["simulate", "--vllm-args", vllm_args, *flags, "--duration", "1s", "-o", "json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["config"]["max_model_len"] == expected
    line = kv_cache_log_line(16, report["usable_blocks"] + 1, report["config"]["max_model_len"])
    assert f"Maximum concurrency for {expected:,} tokens per request" in line


def test_vllm_args_help_names_the_gpu_the_engine_assumes():
    from kvpilot.engine.scenarios import SCENARIOS
    from kvpilot.gpus import gpu_profile

    text = " ".join(CliRunner().invoke(cli, ["simulate", "--help"], env={"COLUMNS": "200"}).output.split())
    gpu = SCENARIOS["healthy"].flags["gpu"]
    assert f"SCENARIO's GPU (healthy, the default: {gpu}, {gpu_profile(gpu).memory_bytes // 2**30} GiB)" in text
    assert "Without --max-model-len the model's own context is used" in text


@pytest.mark.parametrize(("value", "code"), [("1" + "0" * 30, 64), ("2147483648", 64), ("2147483647", None)])
def test_shared_prefix_tokens_is_a_token_count(value, code):
    # 10^30 was taken and printed through a float; the largest count is a signed 32-bit int
    result = CliRunner().invoke(cli, ["diagnose", "--shared-prefix-tokens", value, "--recording", "/nonexistent.om"])
    if code is None:
        assert "--shared-prefix-tokens" not in result.output
    else:
        assert result.exit_code == code, result.output
        assert "--shared-prefix-tokens" in result.output
