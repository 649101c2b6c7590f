"""A window longer than its data: the report says so, on both sides of Prometheus' 1.1-interval
threshold (``extrapolatedRate``, promql/functions.go v2.42: beyond it a series is taken to start at its first sample).
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.diagnose.run import coverage_note, prometheus_coverage
from kvpilot.diagnose.signals import TargetKey

END = 1_764_600_000.0


def _every_10s(first: float) -> list[float]:
    return [END - first + 10 * i for i in range(int(first // 10) + 1)]


def test_sixty_seconds_of_data_in_a_five_minute_window_is_said():
    # 7 scrapes 10 s apart over the last 60 s: the first 240 s after the window's start (24 intervals); a rate over
    # 300 s of an increase over 60 s reads 300 / 60 = 5x low
    note = coverage_note(_every_10s(60.0), END, 300.0)
    assert note == (
        "the data covers 60 s of the 300 s window (its first sample 240 s after the window's start): every rate "
        "and average is read over those 60 s, never over time without data; --window 60s fits the data."
    )


def test_data_from_the_window_s_start_or_within_1_1_intervals_of_it_is_not_short():
    assert coverage_note(_every_10s(300.0), END, 300.0) is None  # from the start
    # first sample 10.9 s after the start, then every 10 s: within 1.1 x 10 s, Prometheus extrapolates to the start
    late = [END - 289.1 + 10 * i for i in range(29)] + [END]
    assert coverage_note(late, END, 300.0) is None
    # 11.5 s after it, the average interval (288.5 / 29 = 9.95 s) x 1.1 = 10.9 s: short
    later = [END - 288.5 + 10 * i for i in range(29)] + [END]
    assert coverage_note(later, END, 300.0) is not None
    # samples outside the window, and a single instant, say nothing
    assert coverage_note([END - 400.0, END - 350.0], END, 300.0) is None
    assert coverage_note([END], END, 300.0) is None


def test_diagnose_on_a_short_recording_notes_it_in_text_and_json(tmp_path):
    lines = ["# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{model_name="m"}} 1 {t}' for t in _every_10s(60.0)]
    lines += ["# EOF"]
    path = tmp_path / "short.om"
    path.write_text("\n".join(lines) + "\n")
    args = ["diagnose", "--no-kube", "--no-what-if", "--recording", str(path)]
    text = " ".join(CliRunner().invoke(cli, [*args, "-o", "text"]).output.split())  # wrapped at the terminal's width
    assert "window: 300 s" in text
    # the note comes first, before the answer
    assert text.split(" window: 300 s ", 1)[1].startswith("note: the data covers 60 s of the 300 s window")
    doc = json.loads(CliRunner().invoke(cli, [*args, "-o", "json"]).output)
    assert any(n.startswith("the data covers 60 s of the 300 s window") for n in doc["notes"])
    # the window the data fills: no note
    doc = json.loads(CliRunner().invoke(cli, [*args, "--window", "60s", "-o", "json"]).output)
    assert not any("the data covers" in n for n in doc["notes"])


def test_a_rate_is_read_over_the_seconds_with_data_not_the_whole_window(tmp_path):
    # 2 requests a second for the last 60 s of a 300 s window: 120 requests in 60 s is 2/s (over 300 s, 0.4/s)
    lines = ["# TYPE vllm:request_success counter", "# TYPE vllm:num_requests_running gauge"]
    for i, t in enumerate(_every_10s(60.0)):
        lines.append(f'vllm:request_success_total{{model_name="m",finished_reason="stop"}} {20 * i} {t}')
        lines.append(f'vllm:num_requests_running{{model_name="m"}} 1 {t}')
    lines += ["# EOF"]
    path = tmp_path / "short.om"
    path.write_text("\n".join(lines) + "\n")
    args = ["diagnose", "--no-kube", "--no-what-if", "--recording", str(path), "-o", "json"]
    doc = json.loads(CliRunner().invoke(cli, args).output)
    (target,) = doc["targets"]
    assert doc["window_seconds"] == 300
    assert abs(target["signals"]["requests_finished_per_s"] - 2.0) < 1e-9


def test_prometheus_targets_are_read_over_the_shortest_span_with_data():
    # per target: (first sample's time, samples in the window, last sample's time), as the coverage query answers
    old, new = TargetKey(pod="qwen-0"), TargetKey(pod="qwen-1")
    whole = (END - 300.0 - 5.0, 30.0, END)  # a sample before the window's start (the lookback): covered
    late = (END - 210.0, 22.0, END)  # 22 samples 10 s apart from 90 s after the start
    assert prometheus_coverage({old: whole}, END, 300.0) is None
    note, read = prometheus_coverage({old: whole, new: late}, END, 300.0)
    assert read == 210.0
    assert note.startswith("the data covers 210 s of the 300 s window (its first sample 90 s after")
    assert note.endswith(
        "1 of the 2 targets start later than the window; all are read over the shortest span, "
        "qwen-1's (--pod or --server reads one target over its own)."
    )
    # within 1.1 of its 10 s intervals of the start, Prometheus extrapolates: covered; one sample: no interval
    assert prometheus_coverage({new: (END - 289.5, 30.0, END)}, END, 300.0) is None
    assert prometheus_coverage({new: (END - 10.0, 1.0, END - 10.0)}, END, 300.0) is None
