"""One convention for bad input across commands: exactly one line ``kvpilot: error: [FILE: ]field: message``
and exit 2, whichever package refused the input (``SpecError``, ``DocumentError``, ``KVConfigError``,
``InvalidValueError``), the file first when the input came from one. Click's own usage errors stay click's.

Every expected line is written out by hand from the input and the rule that refuses it.
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.commands._common import fail_input
from kvpilot.kv.spec import KVConfigError
from kvpilot.text.errors import InvalidValueError
from tests.conftest import FIXTURES

QWEN = FIXTURES / "hf-configs" / "Qwen__Qwen2.5-7B-Instruct.json"


def error_line(*args: str) -> str:
    """The one stderr line of ``kvpilot ARGS``, which must exit 2 with nothing else on stderr."""
    result = CliRunner().invoke(cli, list(args))
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


# --------------------------------------------------------------------------- the mapping itself


def test_fail_input_prints_the_file_then_the_field_and_exits_2(capsys):
    with pytest.raises(SystemExit) as exited:
        fail_input(InvalidValueError("workload.rate", "must be > 0 requests/s, got 0"), "scenario.yaml")
    assert exited.value.code == 2
    assert capsys.readouterr().err == "kvpilot: error: scenario.yaml: workload.rate: must be > 0 requests/s, got 0\n"


def test_fail_input_without_a_file_starts_with_the_field(capsys):
    with pytest.raises(SystemExit) as exited:
        fail_input(KVConfigError("--block-size", "24 is not a vLLM block size"))
    assert exited.value.code == 2
    assert capsys.readouterr().err == "kvpilot: error: --block-size: 24 is not a vLLM block size\n"


# --------------------------------------------------------------------------- each kind, through the CLI


def test_spec_error_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "pod.yaml"
    path.write_text("apiVersion: kvpilot.dev/v1alpha1\nkind: Pod\nmetadata: {name: q}\nspec: {model: m}\n")
    assert error_line("render", str(path)) == f"kvpilot: error: {path}: kind: expected VLLMServer, got 'Pod'"


def test_spec_error_in_a_multi_document_file_names_the_document(tmp_path):
    head = "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\n"
    path = tmp_path / "servers.yaml"
    path.write_text(head + "metadata: {name: a}\nspec: {model: m}\n---\n" + head + "spec: {model: m}\n")
    assert error_line("render", str(path)) == (
        f"kvpilot: error: {path} (document 2): metadata: required mapping is missing"
    )


def test_document_error_of_render_names_the_file_and_the_field(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text(
        "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: q}\n"
        "spec: {model: m, ttlSeconds: " + "9" * 101 + "}\n"
    )
    assert error_line("render", str(path)) == (
        f"kvpilot: error: {path}: spec.ttlSeconds: an integer of 101 digits (the bound is 100 digits)"
    )


def qwen_without(path, key: str):
    """``path``, written with Qwen2.5-7B's config.json less ``key``."""
    config = json.loads(QWEN.read_text())
    del config[key]
    path.write_text(json.dumps(config))
    return path


def test_kv_config_error_of_a_config_field_now_names_the_file(tmp_path):
    """Before: ``kvpilot: error: num_attention_heads: missing from config.json`` (which file, for a draft?)."""
    path = qwen_without(tmp_path / "config.json", "num_attention_heads")
    assert error_line("kv", str(path), "--kv-memory", "1GiB") == (
        f"kvpilot: error: {path}: num_attention_heads: missing from config.json"
    )


def test_kv_config_error_of_a_folder_names_its_config_json(tmp_path):
    config = json.loads(QWEN.read_text())
    config["torch_dtype"] = "float7"
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert error_line("kv", str(tmp_path), "--kv-memory", "1GiB") == (
        f"kvpilot: error: {tmp_path / 'config.json'}: torch_dtype: unknown dtype 'float7' "
        "(known: float16, half, bfloat16, float32, float, float64)"
    )


def test_kv_config_error_of_an_option_names_the_option_alone():
    assert error_line("kv", str(QWEN), "--kv-memory", "1GiB", "--gpu-memory-utilization", "1.5") == (
        "kvpilot: error: --gpu-memory-utilization: must be a number in (0, 1], got 1.5"
    )


def test_document_error_of_kv_names_the_file_and_the_key(tmp_path):
    path = tmp_path / "config.json"
    path.write_text(QWEN.read_text().rstrip().rstrip("}") + ', "rope_theta": 1e400}')
    assert error_line("kv", str(path), "--kv-memory", "1GiB") == (
        f"kvpilot: error: {path}: rope_theta: 1e400 is beyond the range of a number"
    )


def test_kv_config_error_of_a_draft_names_the_draft_s_file(tmp_path):
    path = qwen_without(tmp_path / "draft.json", "num_attention_heads")
    spec = json.dumps({"method": "eagle", "model": str(path), "num_speculative_tokens": 2})
    assert error_line("kv", str(QWEN), "--kv-memory", "1GiB", "--speculative-config", spec) == (
        f"kvpilot: error: --speculative-config model: {path}: num_attention_heads: missing from config.json"
    )


def test_invalid_value_of_a_trace_names_the_file_the_line_and_the_field(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text('{"arrival_time": 0, "prompt_tokens": 10}\n{"arrival_time": 1}\n')
    assert error_line("simulate", "--trace", str(path)) == (
        f"kvpilot: error: --trace: {path}: trace line 2: prompt_tokens: required"
    )


def test_invalid_value_of_a_scenario_file_names_the_field(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text("workload: {type: nope}\n")
    assert error_line("simulate", "healthy", "--scenario-file", str(path)) == (
        "kvpilot: error: scenario healthy: workload.type: 'nope' is not one of poisson, closed_loop, "
        "document_scan, trace, idle"
    )


@pytest.mark.parametrize(
    ("text", "line"),
    [
        # each was an exception out of the command before (a TypeError, an AttributeError)
        ("workload: [1, 2]\n", "kvpilot: error: --scenario-file workload: must be a mapping, not a list"),
        ("flags: [1, 2]\n", "kvpilot: error: scenario healthy: scenario.flags: must be a mapping of engine fields"),
        (
            "profile: qwen\n",
            "kvpilot: error: scenario healthy: profile: 'qwen' is not a model profile (give model instead)",
        ),
    ],
)
def test_a_scenario_file_setting_of_the_wrong_kind_is_named(tmp_path, text, line):
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    assert error_line("simulate", "healthy", "--scenario-file", str(path)) == line


def test_invalid_value_of_an_engine_field_names_the_field():
    # the engine's own check: 8 > 4 (vLLM: max_num_batched_tokens must be >= max_num_seqs)
    assert error_line("simulate", "healthy", "--max-num-seqs", "8", "--max-num-batched-tokens", "4") == (
        "kvpilot: error: scenario healthy: max_num_batched_tokens: 4 must be >= max_num_seqs (8)"
    )


def test_invalid_value_of_vllm_argv_names_the_flag():
    assert error_line("simulate", "--vllm-args", "serve Qwen/Qwen2.5-1.5B-Instruct --swap-space 4") == (
        "kvpilot: error: --vllm-args: --swap-space: flags the engine model does not simulate "
        "(it would run vLLM's default instead)"
    )


def test_invalid_value_of_an_option_parser_names_the_option():
    assert error_line("simulate", "healthy", "--end", "yesterday") == (
        "kvpilot: error: --end: 'yesterday' is neither Unix seconds nor ISO 8601"
    )


def test_invalid_value_of_a_secret_file_names_the_option_and_the_file(tmp_path):
    path = tmp_path / "token"
    path.write_text("  \n")
    assert error_line("alert-hook", "--prometheus", "http://127.0.0.1:9", "--bearer-token-file", str(path)) == (
        f"kvpilot: error: --bearer-token-file: {path} is empty"
    )


def test_click_usage_errors_stay_click_s():
    result = CliRunner().invoke(cli, ["kv", str(QWEN), "--kv-memory", "lots"])
    assert result.exit_code == 2
    assert result.stderr.startswith("Usage: ")
    assert " kv [OPTIONS] CONFIG\n" in result.stderr
    assert "Invalid value for '--kv-memory': 'lots' is not a size (examples: 1.5GiB, 512MiB, 16GB)" in result.stderr
    assert "kvpilot: error:" not in result.stderr
