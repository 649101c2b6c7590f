"""`kvpilot diagnose` text output at 80 and 200 columns: lines fit the terminal, wrap on spaces, and never
split a verdict, flag or metric name.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.diagnose.model import VERDICTS

RECORDINGS = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "recordings"
#: identifiers a reader copies: flags, snake_case names, metric names
_NAMES = re.compile(r"--[a-z][a-z0-9-]*[a-z0-9]|vllm:[a-z_]+|[a-z]+(?:_[a-z0-9]+)+")


def _text(recording: str, width: int, *flags: str) -> str:
    result = CliRunner().invoke(
        cli,
        ["diagnose", "--no-what-if", "--no-kube", "--recording", str(RECORDINGS / recording), *flags],
        env={"COLUMNS": str(width)},
    )
    assert result.exit_code in (0, 1, 2), result.output  # a verdict was reached (3: could not diagnose)
    return result.output


@pytest.mark.parametrize("width", [80, 200])
@pytest.mark.parametrize("recording", sorted(p.name for p in RECORDINGS.glob("scenario_*.om")))
def test_text_fits_the_terminal_and_splits_no_name(recording, width):
    text = _text(recording, width)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= width
    assert not any(line != line.rstrip() for line in lines)  # no padding to the terminal's width
    # The same report on a terminal too wide to wrap anything holds every name whole; a name split
    # across lines at this width would be missing from (or changed in) the names found line by line.
    unwrapped = _text(recording, 10_000)
    assert Counter(_NAMES.findall(text)) == Counter(_NAMES.findall(unwrapped))
    assert any(v in text for v in VERDICTS)


def test_wide_terminal_keeps_the_verdict_line_and_change_on_one_line():
    text = _text("scenario_max-num-seqs-cap.om", 200, "--max-num-seqs", "4")
    verdict = next(line for line in text.splitlines() if ": max_num_seqs_cap (severity" in line)
    assert "confidence" in verdict
    change = next(line for line in text.splitlines() if line.strip().startswith("change: "))
    assert change.strip().startswith("change: --max-num-seqs 4 -> ")


@pytest.mark.parametrize("width", range(60, 121))
def test_the_header_never_parts_the_window_from_its_unit(width):
    """``window: 3 s`` stays whole however long the source is ("window: 3" / "s" split it before)."""
    from kvpilot.diagnose.model import Report
    from kvpilot.diagnose.report import to_text

    report = Report(source="recording " + "/x" * 30 + "/cap.om", window_seconds=3.0)
    header = to_text(report, width=width).split("no targets")[0]
    assert "window: 3 s" in " ".join(header.split())
    assert not re.search(r"window: 3\s*\n\s*s", header), header


@pytest.mark.parametrize("width", range(78, 83))
@pytest.mark.parametrize("port", ["80", "8000", "38211", "1"])
def test_the_header_never_parts_the_window_label_from_its_value(width, port):
    """``window: 3 s`` stays whole: "... window:" ending one line and "3 s" starting the next split it before.

    By hand: "kvpilot diagnose  source: metrics-url http://127.0.0.1:8000/metrics  window: 3 s" is
    16 + 2 + 7 + 1 + 11 + 1 + 29 + 2 + 7 + 1 + 3 = 80 characters, "window:" ending at column 76; each port
    digit more or less moves it by one, so 1 to 5 digits at 78-82 columns put the line's edge between
    "window:" and "3 s" (port 38211 at 78-80 columns split them).
    """
    from kvpilot.diagnose.model import Report
    from kvpilot.diagnose.report import to_text

    report = Report(source=f"metrics-url http://127.0.0.1:{port}/metrics", window_seconds=3.0)
    header = to_text(report, width=width).split("no targets")[0]
    lines = [line.rstrip() for line in header.splitlines() if line.strip()]
    assert not any(line.endswith("window:") for line in lines), header
    assert any("window: 3 s" in line for line in lines), header
