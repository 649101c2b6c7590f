"""vLLM 0.33's ``--max-num-active-seqs`` (0.31+): an admission cap below ``max_num_seqs`` that /metrics does not show.

With ``--max-num-seqs 64 --max-num-active-seqs 16`` and traffic that keeps a queue, vLLM 0.33.0's own scheduler
runs at most 16 requests and leaves the rest waiting on that cap (its waiting loop breaks on
``len(running) >= max_num_active_reqs``); the same traffic without the flag runs more than 16. The truth comes from
the scheduler (the driver's ``RefusalProbe``: ``max_num_seqs`` refusals with detail ``running_at_active_cap``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.conftest import require_vllm_python
from tests.reference.harness import run_vllm
from tests.reference.verdict_scenarios import VerdictScenario, driver_doc, recording

pytestmark = pytest.mark.vllm_ref

FLAGS = {"gpu": "l4", "model": "qwen2.5-7b", "max_num_seqs": 64, "max_num_batched_tokens": 2048, "max_model_len": 4096}
# ~4 req/s of 300 + 300 tokens: at 16 running, one request a step-time x 300 decode steps (~60 ms x 300 = 18 s
# each, under 1 req/s served) - the queue grows; 64 slots would serve ~3.5 req/s
TRAFFIC = ({"rate": 4.0, "duration": 120.0, "seed": 7, "prompt_len": 300, "output_len": 300},)
ACTIVE_SEQS = 16


def scenario(active: int | None) -> VerdictScenario:
    features = {"max_num_active_seqs": active} if active else {}
    name = f"active-seqs-{active}" if active else "active-seqs-unset"
    return VerdictScenario(name, "active", "", "", FLAGS, TRAFFIC, features=features, duration=120.0)


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    python = require_vllm_python("0.33.0")
    scenarios = [scenario(ACTIVE_SEQS), scenario(None)]
    answer = run_vllm(python, [driver_doc(sc) for sc in scenarios])
    assert answer["vllm_version"] == "0.33.0"
    return {sc.name: (sc, result) for sc, result in zip(scenarios, answer["results"], strict=True)}


def test_running_plateaus_at_the_active_cap(runs):
    _, result = runs[f"active-seqs-{ACTIVE_SEQS}"]
    steps = result["steps"]
    assert max(s["running"] for s in steps) == ACTIVE_SEQS
    late = [s for s in steps if s["start"] >= 60.0]  # after the first minute the queue never empties
    assert late
    assert all(s["queue"] > 0 for s in late)
    assert sum(s["running"] == ACTIVE_SEQS for s in late) / len(late) >= 0.95


def test_the_queue_waits_on_the_active_cap(runs):
    _, result = runs[f"active-seqs-{ACTIVE_SEQS}"]
    queued = Counter((s["refusal"], s["refusal_detail"]) for s in result["steps"] if s["start"] >= 60.0)
    top, n = queued.most_common(1)[0]
    assert top[0] == "max_num_seqs", queued
    assert top[1].startswith("running_at_active_cap"), queued
    assert n / sum(queued.values()) >= 0.9, queued


def test_without_the_flag_more_than_the_active_cap_run(runs):
    _, result = runs["active-seqs-unset"]
    assert max(s["running"] for s in result["steps"]) > ACTIVE_SEQS
    assert not any(s["refusal_detail"].startswith("running_at_active_cap") for s in result["steps"])


def test_metrics_show_running_at_the_active_cap_and_no_scheduler_limit(runs):
    sc, result = runs[f"active-seqs-{ACTIVE_SEQS}"]
    text = recording(sc, result)
    lines = text.splitlines()
    running = [float(line.rsplit(" ", 2)[1]) for line in lines if line.startswith("vllm:num_requests_running")]
    assert running
    assert max(running) == ACTIVE_SEQS
    # /metrics exports cache_config_info only: neither max_num_seqs nor max_num_active_seqs is in the recording
    assert "max_num_seqs" not in text
    assert "active_seqs" not in text
