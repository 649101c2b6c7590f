"""A replay is bounded by construction: a window asking for more requests than one replay builds (or for
numbers that are not finite) gets a note and no replay, before any request is built.
"""

from __future__ import annotations

import json
import re
import resource
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.advice.limits import MAX_REPLAY_REQUESTS, replay_size_problem
from kvpilot.cli import cli

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def test_the_cap_on_both_sides():
    assert replay_size_problem(100.0, 0.0, MAX_REPLAY_REQUESTS - 100.0) is None  # exactly the cap
    problem = replay_size_problem(101.0, 0.0, MAX_REPLAY_REQUESTS - 100.0)  # one request more
    assert problem is not None
    assert "250,001 requests to replay" in problem


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_a_number_that_is_no_count_is_refused(value):
    assert "implausible window" in (replay_size_problem(value, 0.0, 10.0) or "")


def test_a_recording_whose_queue_reads_two_million_is_not_replayed_within_bounds(tmp_path):
    # the window's queue gauge at 2,000,000 (was: 2,000,000 requests built up front, 1.9 GB and 87 s)
    text = (RECORDINGS / "scenario_kv-exhaustion.om").read_text()
    hostile = re.sub(r"^(vllm:num_requests_waiting\{[^}]*\}) [0-9.]+ ", r"\1 2000000.0 ", text, flags=re.MULTILINE)
    path = tmp_path / "queue.om"
    path.write_text(hostile)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(path), "-o", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "internal error" not in result.output
    doc = json.loads(result.stdout)
    (target,) = doc["targets"]
    assert any("implausible window" in m for m in target["replay"]["misses"]), target["replay"]
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 1024 * 1024  # KiB: under 1 GiB more


def test_a_block_size_of_zero_in_cache_config_info_is_no_replay_not_a_division_by_zero(tmp_path):
    # cache_config_info block_size="0" on a queue window was a ZeroDivisionError (exit 70)
    text = (RECORDINGS / "scenario_kv-exhaustion.om").read_text().replace('block_size="16"', 'block_size="0"')
    path = tmp_path / "bs0.om"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(path), "-o", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    (target,) = json.loads(result.stdout)["targets"]
    assert any("block_size" in m for m in target["replay"]["misses"]), target["replay"]


@pytest.mark.parametrize("value", ["+Inf", "NaN"])
def test_a_running_gauge_that_is_not_finite_is_no_workload_to_fit(tmp_path, value):
    """vllm:num_requests_running at +Inf (or NaN) from the second scrape on: the arrival profile would round an
    infinity (an OverflowError escaped before); the fit refuses it and says which series.
    """
    text, seen = (RECORDINGS / "scenario_kv-exhaustion.om").read_text(), 0

    def change(m: re.Match[str]) -> str:
        nonlocal seen
        seen += 1
        return m.group(0) if seen < 2 else f"{m.group(1)} {value} "

    path = tmp_path / "r.om"
    path.write_text(re.sub(r"^(vllm:num_requests_running(?:\{[^}]*\})?) (\S+) ", change, text, flags=re.MULTILINE))
    result = CliRunner().invoke(cli, ["diagnose", "--recording", str(path), "--no-kube", "-o", "json"])
    assert result.exit_code in (0, 1, 2), result.output
    (target,) = json.loads(result.stdout)["targets"]
    assert target["replay"]["predicted"] is None
    assert any("running series holds a value that is not a finite number" in m for m in target["replay"]["misses"])


def test_prompt_buckets_at_infinity_are_no_histogram_and_no_nan_in_json(tmp_path):
    """Every vllm:request_prompt_tokens bucket at +Inf: the length fit's weights were NaN, which JSON cannot hold;
    counts that are not finite are an unknown histogram, so the report stays valid JSON.
    """
    text = (RECORDINGS / "scenario_kv-exhaustion.om").read_text()
    hostile = re.sub(r"^(vllm:request_prompt_tokens_bucket\{[^}]*\}) (\S+) ", r"\1 +Inf ", text, flags=re.MULTILINE)
    path = tmp_path / "r.om"
    path.write_text(hostile)
    result = CliRunner().invoke(cli, ["diagnose", "--recording", str(path), "--no-kube", "-o", "json"])
    assert result.exit_code in (0, 1, 2), result.output
    doc = json.loads(result.stdout)  # json.loads accepts NaN: check the text itself
    assert "NaN" not in result.stdout
    assert "Infinity" not in result.stdout
    assert doc["targets"][0]["verdict"] == "kv_cache_exhaustion"
