"""``diagnose --prometheus`` against both Prometheus-API backends: Prometheus 2.42 and VictoriaMetrics 1.79.

Each engine scenario's recording is loaded into a real server on loopback (Prometheus: promtool
backfill; VictoriaMetrics: its ``/api/v1/import/prometheus`` API) and diagnosed by the CLI: both
backends must give the scenario's own verdict (``scenario_flags.EXPECTED``).

VictoriaMetrics answers the same HTTP API with MetricsQL, whose arithmetic differs from PromQL's in
two ways (https://docs.victoriametrics.com/MetricsQL.html, "rollup functions"), and the signal test
holds it to the replay with those differences, not with a wider tolerance:

- a range ``[w]`` at ``t`` holds the samples in ``(t - w, t]`` (the start excluded, as in Prometheus 3;
  Prometheus 2.42 includes it): the ``*_over_time`` and ``deriv`` signals equal the replay over
  ``w - 1 ms`` (recording timestamps are whole milliseconds, so it selects exactly those samples);
- ``rate``/``increase`` take the last sample before the range as their base and do not extrapolate:
  with scrapes that land on the range's start, as in these recordings (10 s scrapes, 300 s window),
  that is Prometheus 2.42's value (no extrapolation is needed there), so the replay over ``w``.
  The 24 s step-time sub-windows of the 120 s v0.10.1 recording do not land on scrapes: there
  Prometheus extrapolates and VictoriaMetrics does not, so only their count is compared.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.diagnose.signals import SIGNAL_DEFS, compute_signals
from kvpilot.diagnose.sources.prometheus import PrometheusSource
from kvpilot.diagnose.sources.recording import read_window
from tests.integration.diagnose.scenario_flags import EXPECTED, scenario_cli_args
from tests.support.prom import PrometheusServer, backfill
from tests.support.vm import VictoriaMetricsServer

pytestmark = pytest.mark.prometheus

RECORDINGS = Path(__file__).resolve().parents[2] / "fixtures" / "recordings"
END = 1_764_600_000.0
BACKENDS = ["prometheus", "victoriametrics"]
#: MetricsQL range functions that exclude the range's start (see the module docstring)
_START_EXCLUDED = {"avg", "max", "min", "last", "count", "deriv", "median"}


@contextmanager
def serving(backend: str, recording: Path, tmp_path: Path) -> Iterator[str]:
    """The recording in a fresh server of ``backend`` on 127.0.0.1; yields its URL."""
    if backend == "prometheus":
        backfill(recording, tmp_path / "data")
        with PrometheusServer(tmp_path, data_dir=tmp_path / "data") as prom:
            yield prom.url
    else:
        with VictoriaMetricsServer(tmp_path) as vm:
            vm.import_openmetrics(recording)
            yield vm.url


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_every_scenario_gets_its_verdict_from_both_backends(backend, scenario, tmp_path):
    with serving(backend, RECORDINGS / f"scenario_{scenario}.om", tmp_path) as url:
        args = [
            "diagnose",
            "--no-what-if",
            "--prometheus",
            url,
            "--no-kube",
            "--end",
            str(END),
            "--window",
            "300s",
            "-o",
            "json",
        ]
        result = CliRunner().invoke(cli, args + scenario_cli_args(scenario))
    doc = json.loads(result.output)
    assert doc["notes"] == []  # every query answered
    assert [t["verdict"] for t in doc["targets"]] == [EXPECTED[scenario]], doc["targets"][0]["evidence"]


def _same(a: float | None, b: float | None) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(a, b, rel_tol=0.02, abs_tol=1e-9)


CASES = [(f"scenario_{s}.om", END, 300.0) for s in sorted(EXPECTED)] + [
    ("case_C11.om", 1_764_500_195.0, 165.0),
    ("case_C12.om", 1_764_500_180.0, 180.0),
    ("case_C14.om", 1_764_500_120.0, 120.0),
    ("case_C17.om", 1_764_500_004.0, 4.0),
    ("scenario_kv-exhaustion_v0.10.1.om", END, 120.0),
]


@pytest.mark.parametrize(("name", "end", "window"), CASES)
def test_victoriametrics_signals_are_the_replay_with_metricsql_ranges(name, end, window, tmp_path):
    samples = read_window(RECORDINGS / name, window, end).samples  # what `diagnose --recording` keeps
    with_start = compute_signals(samples, window, end)  # [t - w, t]: Prometheus 2.42
    without_start = compute_signals(samples, window - 0.001, end)  # (t - w, t]: MetricsQL's *_over_time
    fn = {sd.name: sd.fn for sd in SIGNAL_DEFS}
    with serving("victoriametrics", RECORDINGS / name, tmp_path) as url:
        result = PrometheusSource(url).fetch(window, end)
    assert result.notes == []
    assert set(result.signals) == set(with_start)
    assert with_start
    for key, got in result.signals.items():
        diffs = {}
        for n, v in got.values.items():
            expected = (without_start if fn.get(n) in _START_EXCLUDED else with_start)[key].values.get(n)
            if not _same(v, expected):
                diffs[n] = (v, expected)
        assert diffs == {}, f"{name}: signals differ (victoriametrics, replay): {diffs}"
        mine = with_start[key]
        assert set(got.values) == set(mine.values)
        assert got.spelling == mine.spelling
        assert got.cache_config == mine.cache_config
        assert {k: (q.lower, q.upper) for k, q in got.quantiles.items()} == {
            k: (q.lower, q.upper) for k, q in mine.quantiles.items()
        }
        assert len(got.step_points) == len(mine.step_points)
        if name != "scenario_kv-exhaustion_v0.10.1.om":  # its 24 s sub-windows miss the scrapes (docstring)
            for (n1, t1), (n2, t2) in zip(got.step_points, mine.step_points, strict=True):
                assert _same(n1, n2), (got.step_points, mine.step_points)
                assert _same(t1, t2), (got.step_points, mine.step_points)
