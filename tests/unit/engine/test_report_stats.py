"""Report mode's streamed statistics: exact counts, and percentiles within the sketch's stated relative error.

Exact values come from the test itself (sorted lists, the statistics module, hand arithmetic) or from the golden
reports (tests/fixtures/engine/reports, README there), which the former report code wrote when it kept every
finished request and sorted its latencies.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.engine.report_stats import RELATIVE_ACCURACY, Quantiles
from kvpilot.engine.scenarios import SCENARIOS, build, resolve, run_scenario

REPORTS = Path(__file__).parents[2] / "fixtures" / "engine" / "reports"
OFFLOAD = 1610612736  # 1.5 GiB
CASES = [(name, None, name) for name in SCENARIOS] + [
    ("seed-lru", {"kv_offload_cpu_bytes": OFFLOAD}, "seed-lru-offload"),
    ("kv-exhaustion", {"kv_offload_cpu_bytes": OFFLOAD, "duration": 120}, "kv-exhaustion-offload"),
]
A = RELATIVE_ACCURACY
#: float rounding on top of the bound (DDSketch's logarithms and powers; the interpolation)
FLOAT = 1e-12


def exact(values, q):
    """Numpy's default percentile, by hand: linear interpolation between the closest ranks of the sorted list."""
    v = sorted(values)
    pos = (len(v) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def within(got, want, decimals=None):
    """``got`` is ``want`` within the relative bound, after both were rounded to ``decimals`` (half a unit each)."""
    half = 0.5 * 10.0**-decimals if decimals is not None else 0.0
    return abs(got - want) <= A * (abs(want) + half) + 2 * half + FLOAT * max(1.0, abs(want))


def test_the_bound_is_the_one_the_help_and_docs_state():
    from click.testing import CliRunner

    from kvpilot.cli import cli

    shown = " ".join(CliRunner().invoke(cli, ["simulate", "--help"]).output.split())
    assert f"within {A * 100:g} % of the exact values" in shown  # 0.01 %
    docs = " ".join((Path(__file__).parents[3] / "docs" / "engine.md").read_text().split())
    assert f"within {A * 100:g} % of the exact" in docs


@pytest.mark.parametrize(("name", "overrides", "fixture"), CASES, ids=[c[2] for c in CASES])
def test_every_scenario_reports_what_it_reported_when_it_kept_every_request(name, overrides, fixture):
    """Every count, sum, peak and share as before, figure for figure; each percentile within the bound."""
    expected = json.loads((REPORTS / f"{fixture}.json").read_text())
    got = json.loads(json.dumps(run_scenario(name, overrides=overrides)))
    assert {k: v for k, v in got.items() if k not in ("latency_s", "passes")} == {
        k: v for k, v in expected.items() if k not in ("latency_s", "passes")
    }
    assert got["latency_s"].keys() == expected["latency_s"].keys()
    for key, want in expected["latency_s"].items():
        if want is None:
            assert got["latency_s"][key] is None, key
        else:
            assert within(got["latency_s"][key], want, decimals=6), (key, got["latency_s"][key], want)
    assert len(got.get("passes", [])) == len(expected.get("passes", []))
    for have, want in zip(got.get("passes", []), expected.get("passes", []), strict=True):
        assert {k: v for k, v in have.items() if k != "ttft_p50_ms"} == {
            k: v for k, v in want.items() if k != "ttft_p50_ms"
        }
        assert within(have["ttft_p50_ms"], want["ttft_p50_ms"], decimals=1), (have, want)


def test_percentiles_by_hand():
    q = Quantiles()
    for x in (4.0, 1.0, 3.0, 2.0):
        q.add(x)
    # [1, 2, 3, 4]: p50 at rank 1.5 -> 2 + 0.5 x (3 - 2) = 2.5; p95 at rank 2.85 -> 3 + 0.85 x (4 - 3) = 3.85
    assert q.count == 4
    assert abs(q.percentile(0.5) - 2.5) <= A * 2.5 + FLOAT
    assert abs(q.percentile(0.95) - 3.85) <= A * 3.85 + FLOAT
    one = Quantiles()
    one.add(7.0)
    assert abs(one.percentile(0.95) - 7.0) <= A * 7.0 + FLOAT
    assert Quantiles().percentile(0.5) is None
    assert Quantiles().count == 0
    # counted values: {0.01: 3, 0.02: 1} is [0.01, 0.01, 0.01, 0.02]: p50 at rank 1.5 -> 0.01;
    # p95 at rank 2.85 -> 0.01 + 0.85 x 0.01 = 0.0185
    gaps = Quantiles()
    gaps.add(0.02, 1)
    gaps.add(0.01, 3)
    assert gaps.count == 4
    assert abs(gaps.percentile(0.5) - 0.01) <= A * 0.01 + FLOAT
    assert abs(gaps.percentile(0.95) - 0.0185) <= A * 0.0185 + FLOAT
    # zeros are counted apart and come back exactly: [0, 0, 0, 5] p50 = 0
    zeros = Quantiles()
    zeros.add(0.0, 3)
    zeros.add(5.0)
    assert zeros.percentile(0.5) == 0.0
    assert zeros.percentile(0.0) == 0.0


@pytest.mark.slow  # make test-unit skips it, make test runs it
@settings(max_examples=300, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.just(0.0), st.floats(min_value=1e-9, max_value=1e5, allow_nan=False, allow_infinity=False)),
        min_size=1,
        max_size=300,
    ),
    counts=st.lists(st.integers(min_value=1, max_value=50), min_size=300, max_size=300),
    q=st.one_of(st.sampled_from([0.0, 0.5, 0.95, 0.99, 1.0]), st.floats(min_value=0.0, max_value=1.0)),
)
def test_every_percentile_is_within_the_relative_bound_of_the_sorted_list(values, counts, q):
    """The docstring's proof, checked: any non-negative values, any multiplicities, any quantile."""
    sketch = Quantiles()
    expanded = []
    for value, n in zip(values, counts, strict=False):
        sketch.add(value, n)
        expanded += [value] * n
    want = exact(expanded, q)
    got = sketch.percentile(q)
    assert sketch.count == len(expanded)
    assert abs(got - want) <= A * want + FLOAT * max(want, 1e-300), (got, want)


def test_the_exact_reference_is_numpys_default_method():
    """The test's own ``exact`` is the statistics module's "inclusive" method (numpy's default)."""
    values = [0.3, 0.01, 0.2, 0.05, 0.7, 0.11, 0.4]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    assert exact(values, 0.5) == pytest.approx(cuts[49], rel=1e-12)
    assert exact(values, 0.95) == pytest.approx(cuts[94], rel=1e-12)


def test_report_latencies_are_those_of_the_kept_requests_within_the_bound():
    # independent of the golden files: keep every request, compute each percentile from the sorted list
    sc = resolve("healthy", {"duration": 60})
    engine, workload = build(sc, keep_finished=True)
    engine.run(workload, until=sc.duration)
    fin = engine.finished
    rep = run_scenario("healthy", {"duration": 60})
    assert rep["requests"]["finished"] == len(fin) > 50
    lat = rep["latency_s"]
    ttft = [r.first_token_time - r.arrival_time for r in fin]
    assert within(lat["ttft_p50"], exact(ttft, 0.5), decimals=6)
    assert within(lat["ttft_p95"], exact(ttft, 0.95), decimals=6)
    assert within(lat["e2e_p50"], exact([r.finish_time - r.arrival_time for r in fin], 0.5), decimals=6)
    assert within(lat["queue_p50"], exact([r.scheduled_time - r.arrival_time for r in fin], 0.5), decimals=6)
