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
