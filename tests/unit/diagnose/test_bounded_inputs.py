"""Inputs that crashed diagnose or were misread: each now gives a number, "unknown", or one line."""

from __future__ import annotations

import pytest

from kvpilot.diagnose.limits import resolve_limits
from kvpilot.diagnose.model import Diagnosis, Report
from kvpilot.diagnose.sources.rows import well_formed as _well_formed
from kvpilot.metrics.exposition import ExpositionError, parse_exposition


def _diag(severity: str) -> Diagnosis:
    return Diagnosis(verdict="x", severity=severity, confidence=1.0, target={})


@pytest.mark.parametrize(
    ("severities", "code"),
    [
        (["ok", "unknown"], 0),  # was 3: one unknown target beside a diagnosed one
        (["warning", "unknown"], 1),
        (["critical", "unknown", "ok"], 2),
        (["unknown", "unknown"], 3),  # nothing but unknowns: could not diagnose
        ([], 3),
    ],
)
def test_exit_code_is_computed_per_target(severities, code):
    assert Report(source="s", window_seconds=1, targets=[_diag(s) for s in severities]).exit_code() == code


def test_samples_after_eof_are_not_data():
    text = "vllm:num_requests_running 1 100\n# EOF\nvllm:num_requests_waiting 9 100\n"
    assert [s.name for s in parse_exposition(text)] == ["vllm:num_requests_running"]


def test_a_400_digit_value_is_an_exposition_error_not_a_crash():
    with pytest.raises(ExpositionError, match="outside the float64 range"):
        parse_exposition("vllm:num_requests_running " + "1" * 400 + "\n")  # was OverflowError


@pytest.mark.parametrize("raw", ["inf", "-inf", "nan", "1e400", "x"])
def test_non_finite_cache_config_numbers_are_not_limits(raw):
    limits = resolve_limits(cache_config={"num_gpu_blocks": raw, "gpu_memory_utilization": raw})
    assert limits.num_gpu_blocks.value is None  # was OverflowError for "inf"
    assert limits.gpu_memory_utilization.source == "default"


@pytest.mark.parametrize(
    "row",
    [
        {"metric": "pod", "value": [1, "1"]},
        {"metric": None, "value": [1, "1"]},
        {"metric": {"pod": ["a"]}, "value": [1, "1"]},
        {"metric": {"pod": 3}, "value": [1, "1"]},
        {"metric": {"pod": "p"}, "value": "1"},
        {"metric": {"pod": "p"}, "value": [1]},
        {"metric": {"pod": "p"}},
    ],
)
def test_malformed_rows_are_not_well_formed(row):
    assert not _well_formed(row)


def test_a_well_formed_row():
    assert _well_formed({"metric": {"pod": "p", "namespace": "n"}, "value": [1.5, "4"]})


def test_a_recording_without_line_breaks_is_refused_at_the_line_bound(tmp_path):
    """33 MiB of NULs (a sparse file: no line break): one line over MAX_LINE_CHARS, refused before read whole."""
    from click.testing import CliRunner

    from kvpilot.cli import cli
    from kvpilot.metrics.recording import MAX_LINE_CHARS

    path = tmp_path / "big.om"
    with open(path, "wb") as fh:
        fh.truncate(33 * 2**20)
    result = CliRunner().invoke(cli, ["diagnose", "--no-what-if", "--recording", str(path), "--no-kube"])
    assert result.exit_code == 3
    assert MAX_LINE_CHARS == 1_048_576
    assert "line 1: line longer than 1,048,576 characters (the limit for a recording)" in result.output
