"""`--metrics-url`: repeated scrapes become a timeline (injected clock: no waiting), formats and failures."""

from __future__ import annotations

import itertools

import pytest

from kvpilot.diagnose.signals import compute_signals
from kvpilot.diagnose.sources import SourceError
from kvpilot.diagnose.sources.scrape import scrape_series
from tests.integration.diagnose.fakes import LoopbackServer


def exposition(n: int, escaped: bool) -> str:
    """A vLLM-like body; request n: preemptions 50 x n, waiting 2 x n, 4 running, a pid-labelled KV gauge."""
    p = "vllm_" if escaped else "vllm:"
    return (
        f'{p}num_requests_running{{engine="0",model_name="m"}} 4.0\n'
        f'{p}num_requests_waiting{{engine="0",model_name="m"}} {2 * n}.0\n'
        f'{p}gpu_cache_usage_perc{{engine="0",model_name="m",pid="7"}} 0.5\n'
        f'{p}num_preemptions_total{{engine="0",model_name="m"}} {50 * n}.0\n'
        f'{p}num_preemptions_created{{engine="0",model_name="m"}} 1.7e9\n'
    )


@pytest.mark.parametrize("escaped", [False, True])
def test_scrapes_form_a_timeline(escaped):
    counter = itertools.count()
    sleeps = []

    def handle(_method, _path, _query, _body):
        return 200, exposition(next(counter), escaped)

    clock = itertools.count(1_000_000, 10)  # every clock() call advances 10 s
    with LoopbackServer(handle) as server:
        samples, scrapes = scrape_series(
            server.url + "/metrics",
            window_seconds=30,
            interval_seconds=10,
            clock=lambda: float(next(clock)),
            sleep=sleeps.append,
        )
    # floor(30 / 10) + 1 = 4 scrapes, one GET each, sleeping between them (never after the last)
    assert scrapes == 4
    assert len(server.requests) == 4
    assert len(sleeps) == 3
    sig = next(iter(compute_signals(samples, 60.0).values()))
    # scrape i at t = 1,000,000 + 20 i (two clock reads per scrape): preemptions 0, 50, 100, 150 over 60 s
    assert sig.get("preemptions_increase") == pytest.approx(150.0)
    assert sig.get("waiting_trend_per_s") == pytest.approx(2.0 / 20.0)  # +2 per 20 s
    assert sig.get("kv_usage_avg") == 0.5
    assert sig.get("running_avg") == 4.0


def test_scrapes_keep_a_fixed_schedule_at_millisecond_stamps():
    """Each scrape costs 13.7 ms and every sleep overshoots by 0.4 ms: the next scrape still starts one
    interval after the first, not after the previous one (no drift), and is stamped at a millisecond, as a saved
    recording stores it (so the live window and the recording read again select the same scrapes).
    """
    now = [1_000_000.0004]
    sleeps: list[float] = []

    def clock() -> float:
        return now[0]

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        now[0] += seconds + 0.0004

    def handle(_method, _path, _query, _body):
        now[0] += 0.0137
        return 200, exposition(0, False)

    with LoopbackServer(handle) as server:
        samples, scrapes = scrape_series(
            server.url + "/metrics", window_seconds=4, interval_seconds=1, clock=clock, sleep=sleep
        )
    assert scrapes == 5
    stamps = sorted({s.timestamp for s in samples})
    # scrape k starts 0.4 ms after 1,000,000.0004 + k s (the sleep's overshoot), stamped to the millisecond
    assert stamps == [1_000_000.0, 1_000_001.001, 1_000_002.001, 1_000_003.001, 1_000_004.001]
    # the sleeps aim at 1,000,000.0004 + k: 1 s less the scrape's 13.7 ms and, after the first, the 0.4 ms overshoot
    assert sleeps == pytest.approx([1 - 0.0137, 1 - 0.0137 - 0.0004, 1 - 0.0137 - 0.0004, 1 - 0.0137 - 0.0004])


def test_quick_takes_two_scrapes():
    with LoopbackServer(lambda _m, _p, _q, _b: (200, exposition(1, False))) as server:
        _, scrapes = scrape_series(server.url, window_seconds=300, quick=True, sleep=lambda _s: None)
    assert scrapes == 2
    assert len(server.requests) == 2


def test_first_scrape_failing_is_a_source_error_later_ones_end_the_series():
    with (
        LoopbackServer(lambda _m, _p, _q, _b: (503, "engine dead")) as server,
        pytest.raises(SourceError, match="HTTP 503"),
    ):
        scrape_series(server.url, window_seconds=30, interval_seconds=10, sleep=lambda _s: None)
    answers = iter([(200, exposition(0, False)), (200, exposition(1, False)), (500, "x"), (200, exposition(3, False))])
    with LoopbackServer(lambda _m, _p, _q, _b: next(answers)) as server:
        samples, scrapes = scrape_series(server.url, window_seconds=30, interval_seconds=10, sleep=lambda _s: None)
    assert scrapes == 2
    assert samples


def test_not_prometheus_text_is_a_source_error():
    with (
        LoopbackServer(lambda _m, _p, _q, _b: (200, 'vllm:num_requests_running{engine="0" 4\n')) as server,
        pytest.raises(SourceError, match="not Prometheus text"),
    ):
        scrape_series(server.url, window_seconds=10, interval_seconds=10, sleep=lambda _s: None)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (200, '{"version": "0.32.0"}', "0.32.0"),  # vLLM's answer (entrypoints/serve/instrumentator/basic.py)
        (200, '{"version": "0.33.0+cpu"}', "0.33.0+cpu"),
        (404, '{"detail": "Not Found"}', None),  # not a vLLM server: no version, no error
        (200, '{"version": "\\u001b[1mhf_secret"}', None),  # not a version: never printed
        (200, "x" * 10_000, None),  # more than a version answer can be
        (200, "[1, 2]", None),
    ],
)
def test_server_version_from_the_same_origin(status, body, expected):
    from kvpilot.diagnose.sources.scrape import server_version

    with LoopbackServer(lambda _m, path, _q, _b: (status, body) if path == "/version" else (500, "")) as server:
        assert server_version(server.url + "/metrics") == expected
        assert [r[1] for r in server.requests] == ["/version"]


def test_server_version_of_a_closed_port_is_none():
    from kvpilot.diagnose.sources.scrape import server_version
    from tests.support.prom import free_port

    assert server_version(f"http://127.0.0.1:{free_port()}/metrics", timeout=2.0) is None


def test_each_scrape_reports_the_scrapes_and_seconds_left():
    told = []
    with LoopbackServer(lambda _m, _p, _q, _b: (200, exposition(1, False))) as server:
        scrape_series(
            server.url + "/metrics",
            window_seconds=30,
            interval_seconds=10,
            sleep=lambda _s: None,
            progress=lambda *args: told.append(args),
        )
    # 4 scrapes 10 s apart: after the first, 3 left = 30 s; after the last, none
    assert told == [(1, 4, 30.0), (2, 4, 20.0), (3, 4, 10.0), (4, 4, 0.0)]


def test_a_diagnosis_over_metrics_url_tells_its_progress_then_replays():
    from kvpilot.advice.run import AdviceOptions, diagnose_and_predict
    from kvpilot.diagnose.run import Options

    told: list[str] = []
    counter = itertools.count()
    with LoopbackServer(lambda _m, _p, _q, _b: (200, exposition(next(counter), False))) as server:
        url = server.url + "/metrics"
        report = diagnose_and_predict(
            Options(metrics_url=url, window_seconds=2, scrape_interval=1, use_kube=False, progress=told.append),
            AdviceOptions(budget_seconds=30),
        )
    assert report.targets
    # 2 s at 1 s: 3 scrapes; after each, the scrapes and seconds left
    assert told[:3] == [
        f"scraping {url}: 1 of 3 scrapes, 2 s left",
        f"scraping {url}: 2 of 3 scrapes, 1 s left",
        f"scraping {url}: 3 of 3 scrapes, 0 s left",
    ]
    # the queue (waiting grows) is replayed: one line per target replayed
    assert told[3:] == ["replaying the window in the engine model: target 1 of 1"]
