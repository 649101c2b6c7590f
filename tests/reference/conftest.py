"""One vLLM driver run per vLLM release for the whole reference tier (vLLM's import alone costs seconds)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable

import pytest

from tests.conftest import VLLM_VERSIONS, require_vllm_python
from tests.reference.compare import SERVED_MODEL_NAME, kvpilot_steps, make_engine
from tests.reference.harness import driver_spec, run_vllm
from tests.reference.workloads import NAMED, RANDOM_SEEDS, Workload, random_workload

SNAPSHOTS_PER_RUN = 8


def all_workloads() -> dict[str, Callable[[], Workload]]:
    """The named workloads, then ``random-<seed>`` for every seed of ``RANDOM_SEEDS``."""
    out = dict(NAMED)
    out.update({f"random-{s}": (lambda s=s: random_workload(s)) for s in RANDOM_SEEDS})
    return out


WORKLOADS = all_workloads()


@functools.cache
def kvpilot_side() -> tuple[dict[str, dict], list[dict], float]:
    """The engine's step records on every workload (the same for every vLLM release): ``(runs, driver specs, seconds)``.

    Both sides snapshot the same instants: every ``(last arrival + 1 s) / 8`` simulated seconds.
    """
    runs: dict[str, dict] = {}
    specs = []
    kvpilot_seconds = 0.0
    for name, make in WORKLOADS.items():
        flags, requests = make()
        interval = (max(r.arrival_time for r in requests) + 1.0) / SNAPSHOTS_PER_RUN
        engine = make_engine(with_metrics=True, **flags)
        t0 = time.perf_counter()
        recorded = kvpilot_steps(engine, requests, snapshot_interval=interval)
        kvpilot_seconds += time.perf_counter() - t0
        flags, requests = make()
        specs.append(
            driver_spec(
                name, make_engine(**flags), requests, served_model_name=SERVED_MODEL_NAME, snapshot_interval=interval
            )
        )
        runs[name] = {"kvpilot": recorded.steps, "snapshots": recorded.snapshots, "final": recorded.final_snapshot}
    return runs, specs, kvpilot_seconds


@functools.cache
def run_reference(version: str) -> dict[str, dict]:
    """``{workload: {"vllm": driver result, "kvpilot": step records, "snapshots", "final"}}`` on vLLM ``version``.

    kvpilot's side is computed once (:func:`kvpilot_side`), vLLM's once per version and session.
    """
    python = require_vllm_python(version)
    side, specs, kvpilot_seconds = kvpilot_side()
    runs = {name: dict(run) for name, run in side.items()}
    t0 = time.perf_counter()
    answer = run_vllm(python, specs)
    vllm_seconds = time.perf_counter() - t0
    assert answer["vllm_version"] == version
    for result in answer["results"]:
        runs[result["name"]]["vllm"] = result
    runs["_timing"] = {"kvpilot_seconds": kvpilot_seconds, "vllm_seconds": vllm_seconds}
    return runs


@pytest.fixture(scope="session")
def reference_runs() -> dict[str, dict]:
    """:func:`run_reference` on vLLM 0.29.0."""
    return run_reference("0.29.0")


@pytest.fixture(scope="session", params=VLLM_VERSIONS, ids=[f"vllm-{v}" for v in VLLM_VERSIONS])
def versioned_runs(request: pytest.FixtureRequest) -> dict[str, dict]:
    """:func:`run_reference` on each vLLM release the tier runs (``tests.conftest.VLLM_VERSIONS``)."""
    return run_reference(request.param)
