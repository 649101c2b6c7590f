"""Each engine scenario, recorded with `kvpilot simulate SCENARIO --record`, shows its defining
signature in the parsed samples (computed here from the samples directly, not by the diagnoser);
promtool accepts every recording; a Prometheus backfilled with one returns the recorded values.

The limits each check compares against are passed on the command line here (the scenarios'
own values, repeated explicitly), so the expectations do not come from the code under test.
"""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest
from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.metrics.recording import read_recording
from tests.support.prom import PrometheusServer, backfill

END = 1_800_000_000  # 2027-01-15T08:00:00Z, a fixed end so timestamps are known
DURATION = 300  # 5 simulated minutes, one snapshot every 5 s -> 61 snapshots
INTERVAL = 5

FLAGS = {
    "max-num-seqs-cap": ["--max-num-seqs", "4"],
    "kv-exhaustion": ["--kv-cache-tokens", "32768", "--max-num-seqs", "256"],
    "token-budget-cap": ["--max-num-batched-tokens", "256", "--max-num-seqs", "128"],
    "compute-bound": [
        "--max-num-batched-tokens",
        "65000",
        "--max-num-seqs",
        "256",
        "--arrival-rate",
        "9",
        "--prompt-tokens",
        "6000",
    ],
    "prefix-thrash": ["--enable-prefix-caching"],
    "healthy": [],
    "idle": [],
    "seed-lru": ["--kv-cache-tokens", "21520"],
}


@pytest.fixture(scope="module")
def recordings(tmp_path_factory):
    out = {}
    base = tmp_path_factory.mktemp("recordings")
    for scenario, flags in FLAGS.items():
        path = base / f"{scenario}.om"
        result = CliRunner().invoke(
            cli,
            [
                "simulate",
                scenario,
                "--record",
                str(path),
                "--duration",
                f"{DURATION}s",
                "--interval",
                f"{INTERVAL}s",
                "--end",
                str(END),
                *flags,
            ],
        )
        assert result.exit_code == 0, result.output
        out[scenario] = path
    return out


class Series:
    """Parsed recording: values of one series in time order, labels model_name/engine ignored."""

    def __init__(self, path):
        self.samples = read_recording(path)
        self.by_key = defaultdict(list)
        for s in self.samples:
            labels = tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model_name", "engine")))
            self.by_key[(s.name, labels)].append((s.timestamp, s.value))

    def values(self, name, **labels):
        key = (name, tuple(sorted(labels.items())))
        assert key in self.by_key, f"no series {key}"
        return [v for _, v in self.by_key[key]]

    def times(self, name):
        return [t for t, _ in self.by_key[(name, ())]]

    def last(self, name, **labels):
        return self.values(name, **labels)[-1]

    def finished(self):
        return sum(self.last("vllm:request_success_total", finished_reason=r) for r in ("stop", "length", "abort"))


def second_half(values):
    return values[len(values) // 2 :]


def test_timestamps_end_at_end_every_interval(recordings):
    rec = Series(recordings["idle"])
    times = rec.times("vllm:num_requests_running")
    # 300 s every 5 s: snapshots at 0, 5, ..., 300 -> 61, the last on END
    assert len(times) == 61
    assert times[-1] == END
    assert times[0] == END - 300
    assert all(b - a == 5 for a, b in itertools.pairwise(times))


def test_max_num_seqs_cap_signature(recordings):
    rec = Series(recordings["max-num-seqs-cap"])
    running = second_half(rec.values("vllm:num_requests_running"))
    waiting = rec.values("vllm:num_requests_waiting")
    kv = rec.values("vllm:kv_cache_usage_perc")
    # running pinned at the cap of 4 (a snapshot may fall between a finish and the next admission)
    assert max(running) == 4
    assert sum(r == 4 for r in running) >= 0.8 * len(running)
    # waiting grows: every quarter of the window ends higher than the one before
    quarters = [waiting[i * len(waiting) // 4] for i in range(1, 4)] + [waiting[-1]]
    assert quarters == sorted(quarters)
    assert waiting[-1] > 100
    # KV with room: well under a tenth of the cache
    assert max(kv) < 0.1
    assert rec.last("vllm:num_preemptions_total") == 0


def test_kv_exhaustion_signature(recordings):
    rec = Series(recordings["kv-exhaustion"])
    kv = second_half(rec.values("vllm:kv_cache_usage_perc"))
    preemptions = rec.values("vllm:num_preemptions_total")
    running = rec.values("vllm:num_requests_running")
    waiting = rec.values("vllm:num_requests_waiting")
    assert min(kv) >= 0.85  # pinned near the ceiling
    assert max(kv) <= 1.0
    half = len(preemptions) // 2
    assert preemptions[-1] > preemptions[half] > 0  # preemptions keep growing
    assert waiting[-1] > waiting[half] > 0
    assert max(running) < 256  # the cap is not what binds


def test_token_budget_cap_signature(recordings):
    rec = Series(recordings["token-budget-cap"])
    count = rec.last("vllm:iteration_tokens_total_count")
    at_most_128 = rec.last("vllm:iteration_tokens_total_bucket", le="128.0")
    at_most_256 = rec.last("vllm:iteration_tokens_total_bucket", le="256.0")
    at_most_1024 = rec.last("vllm:iteration_tokens_total_bucket", le="1024.0")
    # vLLM 0.29 observes iteration tokens from IterationStats (a step's completed prefills, less cached
    # tokens, plus sampled tokens): the 256-token chunks of the ~2,000-token prompts are never observed, so
    # nothing sits in the budget bucket (128, 256]; steps completing a prompt land above 1,024. This is what
    # vLLM's own stat logger shows for this scenario (tests/fixtures/recordings/vllm/token-budget-cap.om:
    # 0 of 36,516 observations in (128, 256], 4,606 above 1,024), and the engine matches it.
    assert count > 0
    assert at_most_256 - at_most_128 == 0
    assert (count - at_most_1024) / count >= 0.05
    assert max(rec.values("vllm:num_requests_running")) < 128  # cap not reached
    assert max(rec.values("vllm:kv_cache_usage_perc")) < 0.5  # KV has room
    waiting = rec.values("vllm:num_requests_waiting")
    assert waiting[-1] > waiting[len(waiting) // 2] > 0


def test_compute_bound_signature(recordings):
    rec = Series(recordings["compute-bound"])
    waiting = rec.values("vllm:num_requests_waiting")
    assert waiting[-1] > waiting[len(waiting) // 2] > 0  # the queue grows ...
    assert max(rec.values("vllm:num_requests_running")) < 256 / 4  # ... far below the cap
    assert max(rec.values("vllm:kv_cache_usage_perc")) < 0.5  # ... with KV room
    assert rec.last("vllm:num_preemptions_total") == 0
    # offered 9 req/s x 6,000 prompt tokens = 54,000 tokens/s; prefill compute serves less
    served = rec.last("vllm:prompt_tokens_total") / DURATION
    assert served < 0.9 * 54000
    # long, compute-heavy steps: fewer than 2 engine steps per simulated second (> 0.5 s each)
    assert rec.last("vllm:iteration_tokens_total_count") / DURATION < 2


def test_prefix_thrash_signature(recordings):
    rec = Series(recordings["prefix-thrash"])
    queries = rec.last("vllm:prefix_cache_queries_total")
    hits = rec.last("vllm:prefix_cache_hits_total")
    # 100 shared 3,000-token prefixes, 3,200-token prompts: up to 3,000/3,200 = 94 % could hit;
    # the working set (300,000 tokens) far exceeds the cache, so the hit rate collapses
    assert queries > 0
    assert hits / queries < 0.3
    assert hits % 16 == 0  # hits come in whole 16-token blocks


def test_healthy_signature(recordings):
    rec = Series(recordings["healthy"])
    waiting = rec.values("vllm:num_requests_waiting")
    assert max(waiting) <= 1
    assert waiting[-1] == 0
    assert rec.finished() > 0
    assert max(rec.values("vllm:kv_cache_usage_perc")) < 0.5
    assert rec.last("vllm:num_preemptions_total") == 0


def test_idle_signature(recordings):
    rec = Series(recordings["idle"])
    assert rec.finished() == 0
    assert rec.last("vllm:prompt_tokens_total") == 0
    assert set(rec.values("vllm:num_requests_running")) == {0.0}
    assert rec.last("vllm:iteration_tokens_total_count") == 0


def test_seed_lru_signature(recordings):
    rec = Series(recordings["seed-lru"])
    # docs/background.md §9: 30 requests (10 documents x 3 passes) of 5,033 tokens = 150,990 prompt tokens
    # queried; only the reversed pass hits: 1,343 blocks x 16 = 21,488 tokens
    assert rec.last("vllm:prefix_cache_queries_total") == 150990
    assert rec.last("vllm:prefix_cache_hits_total") == 21488
    assert rec.finished() == 30


@pytest.mark.prometheus
def test_promtool_accepts_every_scenario_recording(recordings, tmp_path):
    for scenario, path in recordings.items():
        out = backfill(path, tmp_path / scenario)
        assert "BLOCK ULID" in out, scenario


@pytest.mark.prometheus
def test_backfilled_prometheus_returns_the_recorded_values(recordings, tmp_path):
    path = recordings["kv-exhaustion"]
    rec = Series(path)
    backfill(path, tmp_path / "data")
    at = END - 150  # the snapshot in the middle: index 30 of 61
    expected = {
        "vllm:num_requests_waiting": rec.values("vllm:num_requests_waiting")[30],
        "vllm:num_preemptions_total": rec.values("vllm:num_preemptions_total")[30],
        "vllm:kv_cache_usage_perc": rec.values("vllm:kv_cache_usage_perc")[30],
    }
    with PrometheusServer(tmp_path / "prom", data_dir=tmp_path / "data") as prom:
        prom.wait_for_series("vllm:num_requests_waiting", at=at, timeout=30)
        for name, value in expected.items():
            (result,) = prom.query(name, at=at)
            assert float(result["value"][1]) == pytest.approx(value), name
        (rate,) = prom.query("rate(vllm:num_preemptions_total[5m])", at=END)
        assert float(rate["value"][1]) > 0
