"""The same recordings through a real Prometheus (backfilled with promtool) and through the replay.

Requires the same signals within 2 % (docs/diagnosis.md, "Signals"): PromQL evaluated by Prometheus 2.42 via
kvpilot's `--prometheus` source against kvpilot's own implementation of the same functions on the
recording's samples.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kvpilot.diagnose.promql import histogram_quantile
from kvpilot.diagnose.signals import compute_signals
from kvpilot.diagnose.sources.prometheus import PrometheusSource
from kvpilot.diagnose.sources.recording import read_window
from tests.support.prom import PrometheusServer, backfill

pytestmark = pytest.mark.prometheus

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
SCENARIO_END = 1_764_600_000.0
# (recording, end, window): cases over their timeline's span (PROVENANCE.md), scenarios over 5 m
CASES = [
    ("case_C11.om", 1_764_500_195.0, 165.0),
    ("case_C12.om", 1_764_500_180.0, 180.0),
    ("case_C14.om", 1_764_500_120.0, 120.0),
    ("case_C17.om", 1_764_500_004.0, 4.0),
    ("scenario_kv-exhaustion_v0.10.1.om", SCENARIO_END, 120.0),
]
SCENARIOS = [(p.name, SCENARIO_END, 300.0) for p in sorted(RECORDINGS.glob("scenario_*.om")) if "v0.10.1" not in p.name]


def _same(a, b) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=0.02, abs_tol=1e-9)


def _escaped_copy(src: Path, dst: Path) -> Path:
    """The recording with every colon name written as prometheus_client escapes it (``vllm_``)."""
    lines = [ln.replace("vllm:", "vllm_") for ln in src.read_text().splitlines()]
    dst.write_text("\n".join(lines) + "\n")
    return dst


def _compare(recording: Path, end: float, window: float, tmp_path: Path) -> None:
    backfill(recording, tmp_path / "data")
    replay = compute_signals(read_window(recording, window, end).samples, window, end)
    with PrometheusServer(tmp_path, data_dir=tmp_path / "data") as prom:
        result = PrometheusSource(prom.url).fetch(window, end)
        assert result.notes == []
        assert set(result.signals) == set(replay)
        assert replay
        for key, from_prom in result.signals.items():
            mine = replay[key]
            diffs = {
                n: (v, mine.values.get(n)) for n, v in from_prom.values.items() if not _same(v, mine.values.get(n))
            }
            assert diffs == {}, f"{recording.name}: signals differ (prometheus, replay): {diffs}"
            assert set(from_prom.values) == set(mine.values)
            assert from_prom.spelling == mine.spelling
            assert from_prom.cache_config == mine.cache_config
            # the step-time sub-windows: the same ranges ([w/5] offset ...), the same points
            assert len(from_prom.step_points) == len(mine.step_points)
            for (n1, t1), (n2, t2) in zip(from_prom.step_points, mine.step_points, strict=True):
                assert _same(n1, n2), (from_prom.step_points, mine.step_points)
                assert _same(t1, t2), (from_prom.step_points, mine.step_points)
            assert {k: (q.lower, q.upper) for k, q in from_prom.quantiles.items()} == {
                k: (q.lower, q.upper) for k, q in mine.quantiles.items()
            }
        # kvpilot's histogram_quantile against PromQL's own, on the same bucket increases
        rows = prom.query(
            'histogram_quantile(0.99, sum by (le) (increase({__name__=~"vllm[:_]time_to_first_token_'
            f'seconds_bucket"}}[{int(window)}s])))',
            at=end,
        )
        buckets = next(iter(replay.values())).buckets.get("ttft")
        if rows and buckets and rows[0]["value"][1] != "NaN":
            assert histogram_quantile(0.99, buckets).value == pytest.approx(float(rows[0]["value"][1]), rel=0.02)


@pytest.mark.parametrize(("name", "end", "window"), CASES + SCENARIOS)
def test_prometheus_and_replay_agree(name, end, window, tmp_path):
    _compare(RECORDINGS / name, end, window, tmp_path)


def test_escaped_names_agree(tmp_path):
    src = _escaped_copy(RECORDINGS / "scenario_kv-exhaustion_v0.10.1.om", tmp_path / "escaped.om")
    _compare(src, SCENARIO_END, 120.0, tmp_path)


def test_a_single_regex_over_both_generations_is_refused_by_prometheus(tmp_path):
    """Why kvpilot's queries use one `or` arm per spelling (sources/prometheus.py docstring)."""
    backfill(RECORDINGS / "scenario_kv-exhaustion_v0.10.1.om", tmp_path / "data")
    with PrometheusServer(tmp_path, data_dir=tmp_path / "data") as prom:
        with pytest.raises(RuntimeError, match="same labelset"):
            prom.query(
                'avg_over_time({__name__=~"vllm[:_](kv_cache_usage_perc|gpu_cache_usage_perc)"}[120s])', at=SCENARIO_END
            )
        # and a 2.42 range includes its start: 13 samples every 10 s in [end-120, end]
        rows = prom.query("count_over_time(vllm:num_requests_running[120s])", at=SCENARIO_END)
        assert rows[0]["value"][1] == "13"


VLLM_RECORDINGS = sorted(p.name for p in (RECORDINGS / "vllm").glob("*.om") if p.name != "idle.om")


@pytest.mark.parametrize("name", VLLM_RECORDINGS)
@pytest.mark.parametrize("window", [300.0, 120.0])
def test_the_fit_signals_agree(name, window, tmp_path):
    """The prediction's second round (``fetch_fit``) against ``compute_signals(fit=True)``: the values at the
    window's start (``offset``), the histograms' sums and counts, the length histograms' buckets, the series.
    """
    recording = RECORDINGS / "vllm" / name
    backfill(recording, tmp_path / "data")
    replay = compute_signals(read_window(recording, window, SCENARIO_END).samples, window, SCENARIO_END, fit=True)
    with PrometheusServer(tmp_path, data_dir=tmp_path / "data") as prom:
        fetched = PrometheusSource(prom.url).fetch_fit(window, SCENARIO_END)
    assert set(fetched) == set(replay)
    for key, rows in fetched.items():
        values, buckets, mine = rows.values, rows.buckets, replay[key]
        # every fit value is known from both paths (vLLM 0.29.0 exports every family read)
        assert set(values) == {k for k, v in mine.fit.items() if v is not None}
        diffs = {n: (v, mine.fit.get(n)) for n, v in values.items() if not _same(v, mine.fit.get(n))}
        assert diffs == {}, f"{name}: fit values differ (prometheus, replay): {diffs}"
        assert set(buckets) == set(mine.fit_buckets) == {"output_len"}
        for hist, counts in buckets.items():
            assert [le for le, _ in counts] == [le for le, _ in mine.fit_buckets[hist]]
            assert all(_same(a, b) for (_, a), (_, b) in zip(counts, mine.fit_buckets[hist], strict=True))
        # the series: the instant selector at the same 61 instants (a range query, and the recording's samples)
        assert set(rows.series) == set(mine.fit_series) == {"finished", "running", "waiting"}
        for name, points in rows.series.items():
            assert len(points) == len(mine.fit_series[name]) == 61
            assert all(_same(a, b) for a, b in zip(points, mine.fit_series[name], strict=True)), (name, points)
    # the value at the window's start is the recording's sample at end - window (one is written every 10 s)
    start = [
        s.value
        for s in read_window(recording, None).samples
        if s.name == "vllm:num_requests_running" and s.timestamp == SCENARIO_END - window
    ]
    assert [v.fit["running_first"] for v in replay.values()] == start
