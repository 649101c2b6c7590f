"""Every YAML or JSON file a command reads is held to the same bounds: one line naming
the field and the bound, exit 2 (64 for ``diagnose``, its usage code), never a traceback or exit 70.

The inputs are the issue's: affinity nested 500 deep, a 5,000-digit ``ttlSeconds``, and their JSON twins
for the JSON readers. The alias bomb, whose failure before the fix was minutes and gigabytes, is run in a
child process with a time budget in ``tests/integration/test_bounded_inputs.py``.
"""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from tests.conftest import FIXTURES

HEAD = "apiVersion: kvpilot.dev/v1alpha1\nkind: VLLMServer\nmetadata: {name: qwen}\n"
QWEN = FIXTURES / "hf-configs" / "Qwen__Qwen2.5-7B-Instruct.json"


def run(*args: str):
    return CliRunner().invoke(cli, list(args))


def one_line_error(result, code: int = 2) -> str:
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kvpilot: error: "), result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (  # was: internal error: RecursionError, exit 70
            "  model: m\n  affinity: {nodeAffinity: " + "[" * 500 + "]" * 500 + "}\n",
            ": spec.affinity.nodeAffinity[0][0]",
        ),
        (  # was: internal error: ValueError: Exceeds the limit (4300 digits), exit 70
            "  model: m\n  ttlSeconds: " + "9" * 5000 + "\n",
            ": spec.ttlSeconds: an integer of 5000 digits (the bound is 100 digits)",
        ),
    ],
)
def test_render_refuses_the_issues_inputs_naming_the_field(tmp_path, spec, words):
    path = tmp_path / "server.yaml"
    path.write_text(HEAD + "spec:\n" + spec)
    line = one_line_error(run("render", str(path)))
    assert words in line
    # the same through stdin
    assert words in one_line_error(CliRunner().invoke(cli, ["render", "-"], input=path.read_text()))


def test_render_gives_a_100_digit_integer_to_the_fields_own_rule(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text(HEAD + "spec:\n  model: m\n  ttlSeconds: " + "9" * 100 + "\n")  # within the bound
    assert "spec.ttlSeconds: Input should be less than or equal to 2678400" in one_line_error(run("render", str(path)))
    path.write_text(HEAD + "spec:\n  model: m\n  ttlSeconds: 1" + "0" * 100 + "\n")  # 101 digits: beyond it
    assert "spec.ttlSeconds: an integer of 101 digits" in one_line_error(run("render", str(path)))


def test_render_refuses_a_file_over_3_mib_without_reading_it_whole(tmp_path):
    path = tmp_path / "server.yaml"
    path.write_text(HEAD + "spec: {model: m}\n" + "#" * (3 * 1024 * 1024))
    line = one_line_error(run("render", str(path)))
    assert "larger than 3,145,728 bytes" in line


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            '"num_hidden_layers": ' + "9" * 5000,
            "num_hidden_layers: an integer of 5000 digits (the bound is 100 digits)",
        ),
        ('"text_config": ' + "[" * 500 + "]" * 500, "text_config[0][0]"),
        ('"rope_theta": 1e400', "rope_theta: 1e400 is beyond the range of a number"),
    ],
)
def test_kv_refuses_the_same_in_a_config_json_naming_the_key(tmp_path, change, words):
    text = QWEN.read_text().rstrip().rstrip("}") + ", " + change + "}"
    path = tmp_path / "config.json"
    path.write_text(text)
    line = one_line_error(run("kv", str(path), "--kv-memory", "2GiB"))
    assert words in line
    assert str(path) in line


def test_kv_speculative_config_is_bounded_too():
    line = one_line_error(
        run(
            "kv",
            str(QWEN),
            "--kv-memory",
            "2GiB",
            "--speculative-config",
            '{"num_speculative_tokens": ' + "9" * 200 + "}",
        )
    )
    assert "--speculative-config: num_speculative_tokens: an integer of 200 digits" in line


def test_simulate_scenario_file_is_bounded(tmp_path):
    path = tmp_path / "scenario.yaml"
    path.write_text("workload:\n  rate: " + "9" * 5000 + "\n")
    line = one_line_error(run("simulate", "healthy", "--scenario-file", str(path)))
    assert f"--scenario-file: {path}: workload.rate: an integer of 5000 digits" in line


def test_simulate_trace_lines_are_bounded(tmp_path):
    path = tmp_path / "trace.jsonl"
    path.write_text(
        '{"arrival_time": 0, "prompt_tokens": 10}\n{"arrival_time": 1, "prompt_tokens": ' + "9" * 5000 + "}\n"
    )
    line = one_line_error(run("simulate", "--trace", str(path), "--duration", "10s"))
    assert "trace line 2: prompt_tokens: an integer of 5000 digits" in line


def test_diagnose_model_config_is_bounded(tmp_path):
    config = tmp_path / "config.json"
    config.write_text('{"num_hidden_layers": ' + "9" * 5000 + "}")
    recording = FIXTURES / "recordings" / "scenario_healthy.om"
    line = one_line_error(run("diagnose", "--recording", str(recording), "--model-config", str(config)), code=64)
    assert "num_hidden_layers: an integer of 5000 digits" in line
    config.write_text("[1, 2]")
    assert "a config.json is a JSON object" in one_line_error(
        run("diagnose", "--recording", str(recording), "--model-config", str(config)), code=64
    )
