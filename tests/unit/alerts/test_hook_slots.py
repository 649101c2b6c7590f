"""The alert hook's diagnosis slots: released on every exit of a diagnosis (an answer, an exception, a thread
ended by a BaseException), and no second diagnosis of a target whose first still runs past its answer.
"""

from __future__ import annotations

import threading

import pytest

from kvpilot.alerts.hook import AlertHook, HookConfig
from kvpilot.alerts.payload import parse_notification

pytestmark = pytest.mark.asyncio


def _notification(pod: str):
    return parse_notification(
        {
            "version": "4",
            "alerts": [{"status": "firing", "labels": {"alertname": "VLLM", "namespace": "llm", "pod": pod}}],
        }
    )


def _hook(diagnose, timeout: float = 0.5) -> AlertHook:
    config = HookConfig(
        prometheus="http://127.0.0.1:9", bearer_token="t", max_concurrency=1, timeout_seconds=timeout, use_kube=False
    )
    return AlertHook(config, diagnose=diagnose)


def _errors(answer) -> list[str | None]:
    import json

    return [r["error"] for r in json.loads(answer.text)["results"]]


@pytest.mark.parametrize("death", [MemoryError, SystemExit, KeyboardInterrupt])
async def test_a_diagnosis_thread_ended_by_any_exception_frees_its_slot(death):
    calls = []

    def diagnose(opts):
        calls.append(opts.pod)
        raise death()

    hook = _hook(diagnose)
    for pod in ("a", "b", "c"):  # with one slot, each later alert is started only if the previous slot came back
        (error,) = _errors(await hook._answer(_notification(pod)))
        assert error is not None
        assert "not started within" not in error, error
    assert calls == ["a", "b", "c"]
    assert hook.metrics.in_flight._value.get() == 0
    assert hook._slots._value == 1


async def test_a_target_whose_diagnosis_still_runs_is_not_diagnosed_twice():
    gate = threading.Event()
    calls = []

    def diagnose(opts):
        calls.append(opts.pod)
        gate.wait(10)  # runs past the answer's 0.5 s deadline
        raise RuntimeError("done")

    hook = _hook(diagnose)
    try:
        (first,) = _errors(await hook._answer(_notification("slow")))
        assert "no answer within" in first
        (second,) = _errors(await hook._answer(_notification("slow")))
        assert "still running" in second
        assert calls == ["slow"]  # the second alert started nothing
    finally:
        gate.set()
    import asyncio

    for _ in range(100):  # the thread ends: its slot and the target come back
        if not hook._running:
            break
        await asyncio.sleep(0.05)
    assert not hook._running
    assert hook._slots._value == 1
    assert hook.metrics.in_flight._value.get() == 0
