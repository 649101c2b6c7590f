"""A replay is bounded by construction: its queue is streamed, and a window asking for more requests than one replay
serves or accepts waiting (or for numbers that are not finite) gets a note and no replay, before any request is built.
"""

from __future__ import annotations

import json
import re
import resource
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.advice.limits import (
    MAX_REPLAY_BACKLOG,
    MAX_REPLAY_REQUESTS,
    MIN_STEP_SECONDS,
    finish_rate_problem,
    replay_size_problem,
)
from kvpilot.cli import cli

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"


def test_the_caps_on_both_sides():
    # the requests a replay serves: the warm-up's and the window's arrivals
    assert replay_size_problem(0.0, 100.0, MAX_REPLAY_REQUESTS - 100.0) is None  # exactly the cap
    problem = replay_size_problem(0.0, 101.0, MAX_REPLAY_REQUESTS - 100.0)  # one request more
    assert problem is not None
    assert "250,001 requests arriving" in problem
    # the queue at the window's start: a count, streamed, so its cap is far larger
    assert replay_size_problem(float(MAX_REPLAY_BACKLOG), 0.0, 10.0) is None
    problem = replay_size_problem(float(MAX_REPLAY_BACKLOG + 1), 0.0, 10.0)
    assert problem is not None
    assert "100,000,001 requests waiting" in problem


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -1.0])
def test_a_number_that_is_no_count_is_refused(value):
    assert "implausible window" in (replay_size_problem(value, 0.0, 10.0) or "")


def _queue(tmp_path: Path, waiting: float) -> Path:
    text = (RECORDINGS / "scenario_kv-exhaustion.om").read_text()
    hostile = re.sub(
        r"^(vllm:num_requests_waiting\{[^}]*\}) [0-9.]+ ", rf"\g<1> {waiting!r} ", text, flags=re.MULTILINE
    )
    path = tmp_path / "queue.om"
    path.write_text(hostile)
    return path


@pytest.mark.parametrize("waiting", [2e6, 1e7])
def test_a_recording_whose_queue_reads_millions_is_replayed_within_bounds(tmp_path, waiting):
    """The window's queue gauge at 2,000,000 (10,000,000) at every scrape: built up front those were 1.9 GB and 45 s
    (a MemoryError at 10,000,000); streamed, the replay holds what the engine can schedule, and its waiting gauge
    counts the whole queue.
    """
    path = _queue(tmp_path, waiting)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(path), "-o", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    doc = json.loads(result.stdout)
    (target,) = doc["targets"]
    predicted = target["replay"]["predicted"]
    assert predicted is not None, target["replay"]
    # the queue served at about 1.3 requests/s for 300 s: it stays within 400 requests of where it started
    assert waiting - 1_000 < predicted["mean_waiting"] <= waiting
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 256 * 1024  # KiB: under 256 MiB more


def test_a_queue_beyond_the_cap_is_a_note_and_no_replay(tmp_path):
    path = _queue(tmp_path, float(MAX_REPLAY_BACKLOG + 1))
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(path), "-o", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    (target,) = json.loads(result.stdout)["targets"]
    assert target["replay"]["predicted"] is None
    assert any("100,000,001 requests waiting" in m for m in target["replay"]["misses"]), target["replay"]


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


def test_a_finish_rate_beyond_any_server_on_both_sides():
    # two instants 10 s apart, scrapes every 10 s: the counter shows what finished within 20 s; at max_num_seqs 256
    # and a step of at least 1 ms a server finishes at most 256 x 20 / 0.001 = 5,120,000 requests in that time
    most = 256 * 20 / 1e-3
    assert MIN_STEP_SECONDS == 1e-3
    assert finish_rate_problem([0.0, most], 10.0, 10.0, 256) is None
    problem = finish_rate_problem([0.0, most + 1], 10.0, 10.0, 256)
    assert problem is not None
    assert "5,120,001 requests within 20 s" in problem
    assert "at most max_num_seqs = 256 a step" in problem
    # a counter that went down restarted: its new value is what finished since
    assert finish_rate_problem([9e9, 10.0, None, 20.0], 30.0, 10.0, 256) is None
    assert finish_rate_problem([9e9, most + 1], 10.0, 10.0, 256) is not None


def test_a_success_counter_scaled_by_a_million_is_a_note_and_no_replay(tmp_path):
    """vllm:request_success_total x 10^6: 16,000,000 requests within 15 s (instants 5 s apart, scrapes 10 s apart)
    where at most 256 x 15 / 0.001 = 3,840,000 finish; was an arrival profile of a billion floats (MemoryError).
    """
    text = (RECORDINGS / "scenario_kv-exhaustion.om").read_text()

    def scaled(m: re.Match[str]) -> str:
        return f"{m.group(1)} {float(m.group(2)) * 1e6!r} "

    path = tmp_path / "r.om"
    path.write_text(re.sub(r"^(vllm:request_success_total\{[^}]*\}) (\S+) ", scaled, text, flags=re.MULTILINE))
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(path), "-o", "json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    (target,) = json.loads(result.stdout)["targets"]
    assert target["replay"]["predicted"] is None
    (miss,) = target["replay"]["misses"]
    assert "vllm:request_success grew by 16,000,000 requests within 15 s" in miss
    assert "3,840,000" in miss


def test_the_recording_as_it_is_is_a_plausible_window():
    path = RECORDINGS / "scenario_kv-exhaustion.om"
    result = CliRunner().invoke(cli, ["diagnose", "--no-kube", "--recording", str(path), "-o", "json"])
    (target,) = json.loads(result.stdout)["targets"]
    assert target["replay"]["predicted"] is not None, target["replay"]
