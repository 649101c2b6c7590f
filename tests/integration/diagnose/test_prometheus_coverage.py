"""``diagnose --prometheus`` when the data starts part-way through the window (a Prometheus that began scraping
3.5 minutes ago, read over the default 5 minutes): the report says so at the top with the span the data covers,
and reads every rate over that span, never over seconds without a sample.

The max_num_seqs-cap recording (10 s scrapes over the 300 s to ``END``) is cut to its last 210 s and loaded into
a real Prometheus 2.42 and VictoriaMetrics 1.79 on loopback. Without the cut the window is covered: no note.
The expected rate is arithmetic on the recording's own counter: the requests finished between the first kept
sample and ``END``, over those 210 s. Read over the 300 s window instead, it would be 210 / 300 = 0.7 of that
(Prometheus extrapolates a series that starts late by half a scrape interval only: promql/functions.go v2.42,
``extrapolatedRate``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from tests.integration.diagnose.test_prometheus_backends import BACKENDS, END, RECORDINGS, serving

pytestmark = pytest.mark.prometheus

SOURCE = RECORDINGS / "scenario_max-num-seqs-cap.om"
KEPT = 210.0  # seconds of data kept before END: 3.5 minutes of a 5-minute window
_SAMPLE = re.compile(r"^(?P<name>[^{\s]+)(?P<labels>\{[^}]*\})? (?P<value>\S+) (?P<ts>\S+)$")


def _cut(path: Path, first: float) -> Path:
    """The recording without its samples before ``first`` (Unix seconds): a server scraped from then on."""
    out = []
    for line in SOURCE.read_text().splitlines():
        m = _SAMPLE.match(line)
        if m and float(m["ts"]) < first:
            continue
        out.append(line)
    path.write_text("\n".join(out) + "\n")
    return path


def _finished(at: float) -> float:
    """``vllm:request_success_total`` summed over its series at ``at``, read from the recording's text."""
    total = 0.0
    for line in SOURCE.read_text().splitlines():
        m = _SAMPLE.match(line)
        if m and m["name"] == "vllm:request_success_total" and float(m["ts"]) == at:
            total += float(m["value"])
    return total


def _diagnose(url: str) -> dict:
    args = ["diagnose", "--no-what-if", "--no-kube", "--prometheus", url, "--end", str(END), "--window", "5m"]
    result = CliRunner().invoke(cli, [*args, "-o", "json"])
    doc = json.loads(result.output)
    assert result.exit_code == 2, doc  # a critical finding (diagnose --help, "exit codes")
    return doc


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_from_part_way_through_the_window_is_said_and_rates_read_over_it(backend, tmp_path):
    first = END - KEPT
    served = (_finished(END) - _finished(first)) / KEPT  # requests a second over the span with data
    assert served > 0
    with serving(backend, _cut(tmp_path / "cut.om", first), tmp_path) as url:
        doc = _diagnose(url)
        text = CliRunner().invoke(
            cli, ["diagnose", "--no-what-if", "--no-kube", "--prometheus", url, "--end", str(END), "--window", "5m"]
        )
    assert doc["window_seconds"] == 300
    short = [n for n in doc["notes"] if n.startswith("the data covers")]
    assert len(short) == 1, doc["notes"]
    assert short[0].startswith("the data covers 210 s of the 300 s window (its first sample 90 s after"), short
    (target,) = doc["targets"]
    assert target["signals"]["requests_finished_per_s"] == pytest.approx(served, rel=1e-6)
    # the text report leads with it, before the first target's answer
    flat = " ".join(text.output.split())
    assert flat.index("note: the data covers 210 s of the 300 s window") < flat.index("max_num_seqs")


def test_the_replay_of_a_short_window_is_the_recording_s(tmp_path):
    # the replay reads the covered span too: its queue at the span's start (an offset by the span, not the window,
    # where there was no sample) and its rates, so the prediction is the one `diagnose --recording` makes of the
    # same samples (tests/unit/diagnose/test_coverage.py holds that one to arithmetic)
    cut = _cut(tmp_path / "cut.om", END - KEPT)
    args = ["diagnose", "--no-kube", "--end", str(END), "--window", "5m", "-o", "json"]
    recording = json.loads(CliRunner().invoke(cli, [*args, "--recording", str(cut)]).output)
    with serving("prometheus", cut, tmp_path) as url:
        prometheus = json.loads(CliRunner().invoke(cli, [*args, "--prometheus", url]).output)
    (want,), (got,) = recording["targets"], prometheus["targets"]
    assert want["what_if"], want["evidence"]
    assert got["what_if"][0]["change"] == want["what_if"][0]["change"]
    for name, value in want["what_if"][0]["predicted"].items():
        if isinstance(value, float):
            assert got["what_if"][0]["predicted"][name] == pytest.approx(value, rel=0.02, abs=1e-6), name
        else:
            assert got["what_if"][0]["predicted"][name] == value, name


@pytest.mark.parametrize("backend", BACKENDS)
def test_data_over_the_whole_window_has_no_note(backend, tmp_path):
    served = (_finished(END) - _finished(END - 300.0)) / 300.0
    with serving(backend, SOURCE, tmp_path) as url:
        doc = _diagnose(url)
    assert not any("the data covers" in n for n in doc["notes"])
    (target,) = doc["targets"]
    assert target["signals"]["requests_finished_per_s"] == pytest.approx(served, rel=1e-6)
