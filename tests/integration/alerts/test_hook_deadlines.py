"""A diagnosis that outlives its deadline is cancelled with it: against a Prometheus stand-in that never
answers (or trickles), the real ``kvpilot alert-hook --max-concurrency 1 --timeout 3s`` answers each
alert within its deadline, and the stand-in sees every query of a diagnosis let go by then; the queries of
two diagnoses are never open at the same time (the concurrency limit counts what really runs).
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.integration.alerts.hook_support import HookProcess, StandIn, alert_body, counter
from tests.support.waiting import wait_for

TIMEOUT_S = 3.0
SLACK_S = 2.0  # a loaded machine: process scheduling and the stand-in's 50 ms polling


@pytest.mark.parametrize("mode", ["never", "slow"])
def test_timed_out_diagnoses_stop_querying_and_never_overlap(tmp_path, mode):
    with (
        StandIn(mode) as prom,
        HookProcess(
            tmp_path, "--prometheus", prom.url, "--max-concurrency", "1", "--timeout", f"{TIMEOUT_S}s", "--cache", "1ms"
        ) as hook,
    ):
        answers: dict[str, tuple[float, float, int, dict]] = {}

        def send(pod: str) -> None:
            started = time.monotonic()
            status, answer, _ = hook.post(alert_body({"namespace": "llm", "pod": pod}))
            answers[pod] = (started, time.monotonic(), status, answer)

        senders = [threading.Thread(target=send, args=(f"qwen-{i}",)) for i in range(3)]
        for t in senders:
            t.start()
        for t in senders:
            t.join(timeout=60)
        # every query ends: none is left open a moment after the last answer
        wait_for(lambda: all(q.closed is not None for q in prom.snapshot()), timeout=SLACK_S, what="queries to end")
        queries = prom.snapshot()

        # the threads end with their reads: none is counted as running a moment later
        def idle() -> str | None:
            text = hook.metrics()
            return text if counter(text, "kvpilot_alert_hook_diagnoses_in_flight") == 0 else None

        metrics = wait_for(idle, timeout=SLACK_S, what="no diagnosis in flight")

    for pod, (started, ended, status, answer) in answers.items():
        assert status == 200
        [result] = answer["results"]
        assert result["diagnosis"] is None, result
        assert result["error"].startswith("diagnosis: "), result
        assert ended - started < TIMEOUT_S + SLACK_S, (pod, ended - started)
    by_pod: dict[str, list] = {}
    for q in queries:
        pod = next(p for p in answers if f'pod="{p}"' in q.params["query"])
        by_pod.setdefault(pod, []).append(q)
    assert by_pod, "the first diagnosis queried"
    spans = sorted((min(q.opened for q in qs), max(q.closed for q in qs), pod) for pod, qs in by_pod.items())
    for _, last, pod in spans:
        # a diagnosis' reads end at its deadline: within TIMEOUT_S of the alert's arrival
        assert last - answers[pod][0] < TIMEOUT_S + SLACK_S / 2, (pod, last - answers[pod][0])
    for (_, end_a, a), (start_b, _, b) in zip(spans, spans[1:], strict=False):
        assert end_a <= start_b, f"{a}'s queries were still open when {b}'s started"
    assert (
        counter(metrics, "kvpilot_alert_hook_errors_total", reason="timeout")
        + counter(metrics, "kvpilot_alert_hook_errors_total", reason="source")
        == 3
    )
