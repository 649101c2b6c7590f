"""Report mode's streamed statistics: the same report as when every finished request was kept.

The golden reports (tests/fixtures/engine/reports, README there) were written by the former report code, which
kept every finished request and sorted its latencies; the percentile examples below are worked by hand.
"""

from __future__ import annotations

import json
import statistics
from collections import Counter
from pathlib import Path

import pytest

from kvpilot.engine.report_stats import percentile, weighted_percentile
from kvpilot.engine.scenarios import SCENARIOS, build, resolve, run_scenario

REPORTS = Path(__file__).parents[2] / "fixtures" / "engine" / "reports"
OFFLOAD = 1610612736  # 1.5 GiB
CASES = [(name, None, name) for name in SCENARIOS] + [
    ("seed-lru", {"kv_offload_cpu_bytes": OFFLOAD}, "seed-lru-offload"),
    ("kv-exhaustion", {"kv_offload_cpu_bytes": OFFLOAD, "duration": 120}, "kv-exhaustion-offload"),
]


@pytest.mark.parametrize(("name", "overrides", "fixture"), CASES, ids=[c[2] for c in CASES])
def test_every_scenario_reports_what_it_reported_when_it_kept_every_request(name, overrides, fixture):
    expected = json.loads((REPORTS / f"{fixture}.json").read_text())
    got = json.loads(json.dumps(run_scenario(name, overrides=overrides)))
    assert got == expected


def test_percentiles_interpolate_between_closest_ranks():
    # [1, 2, 3, 4]: p50 at rank 1.5 -> 2 + 0.5 x (3 - 2) = 2.5; p95 at rank 2.85 -> 3 + 0.85 = 3.85
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.5
    assert percentile([4.0, 1.0, 3.0, 2.0], 0.95) == pytest.approx(3.85)
    assert percentile([7.0], 0.95) == 7.0 and percentile([], 0.5) is None
    # {0.01: 3, 0.02: 1} is [0.01, 0.01, 0.01, 0.02]: p50 at rank 1.5 -> 0.01; p95 at 2.85 -> 0.01 + 0.85 x 0.01
    assert weighted_percentile(Counter({0.02: 1, 0.01: 3}), 0.5) == 0.01
    assert weighted_percentile(Counter({0.02: 1, 0.01: 3}), 0.95) == pytest.approx(0.0185)
    assert weighted_percentile(Counter(), 0.5) is None


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_weighted_percentile_is_the_percentile_of_the_expanded_list(seed):
    import random

    rng = random.Random(seed)
    counts = Counter({round(rng.uniform(0.001, 0.05), 4): rng.randint(1, 40) for _ in range(200)})
    expanded = sorted(counts.elements())
    for q in (0.0, 0.25, 0.5, 0.95, 1.0):
        assert weighted_percentile(counts, q) == percentile(expanded, q)
    # and both are numpy's default ("inclusive" in the statistics module's terms)
    cuts = statistics.quantiles(expanded, n=100, method="inclusive")
    assert percentile(expanded, 0.5) == pytest.approx(cuts[49], rel=1e-12)
    assert percentile(expanded, 0.95) == pytest.approx(cuts[94], rel=1e-12)


def test_report_latencies_are_those_of_the_kept_requests():
    # independent of the golden files: keep every request, compute with the statistics module
    sc = resolve("healthy", {"duration": 60})
    engine, workload = build(sc, keep_finished=True)
    engine.run(workload, until=sc.duration)
    fin = engine.finished
    rep = run_scenario("healthy", {"duration": 60})
    assert rep["requests"]["finished"] == len(fin) > 50

    def p(values, q):
        return round(statistics.quantiles(values, n=100, method="inclusive")[q - 1], 6)

    lat = rep["latency_s"]
    assert lat["ttft_p50"] == pytest.approx(p([r.first_token_time - r.arrival_time for r in fin], 50), abs=2e-6)
    assert lat["ttft_p95"] == pytest.approx(p([r.first_token_time - r.arrival_time for r in fin], 95), abs=2e-6)
    assert lat["e2e_p50"] == pytest.approx(p([r.finish_time - r.arrival_time for r in fin], 50), abs=2e-6)
    assert lat["queue_p50"] == pytest.approx(p([r.scheduled_time - r.arrival_time for r in fin], 50), abs=2e-6)
