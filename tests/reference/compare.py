"""Run kvpilot's engine on a workload in the driver's terms, and list where it differs from vLLM's run.

A *step record* on both sides: ``start``/``duration`` (simulated s), ``scheduled`` (request id ->
tokens scheduled, vLLM's ``SchedulerOutput.num_scheduled_tokens``), ``preempted`` (ids),
``prefix_queries``/``prefix_hits`` (tokens, vLLM's ``PrefixCacheStats`` of requests never preempted),
``running``/``waiting`` after the step. vLLM's steps that scheduled nothing (it runs one to report
finished requests) are left out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from kvpilot.engine.config import EngineConfig
from kvpilot.engine.core import Engine, StepOutput
from kvpilot.engine.request import Request

STEP_FIELDS = ("scheduled", "preempted", "prefix_queries", "prefix_hits", "running", "waiting")


def kvpilot_steps(engine: Engine, requests: Sequence[Request]) -> list[dict[str, Any]]:
    """Run ``requests`` through ``engine`` (``Engine.run``) and return its step records."""
    steps: list[dict[str, Any]] = []
    prev: dict[int, int] = {}  # id(request) -> num_computed after the previous step, for running requests

    def on_step(eng: Engine, out: StepOutput | None) -> None:
        nonlocal prev
        if out is None:
            return
        scheduled: dict[str, int] = {}
        now_running: dict[int, int] = {}
        for req in list(eng.running) + list(out.finished):
            before = prev.get(id(req))
            # admitted this step: the tokens it computes exclude its prefix-cache (and CPU tier) hit
            n = req.num_computed - (req.num_hit if before is None else before)
            if n > 0:
                scheduled[req.request_id] = n
        for req in eng.running:
            now_running[id(req)] = req.num_computed
        running_ids = {id(r) for r in eng.running} | {id(r) for r in out.finished}
        preempted = sorted(r.request_id for r in eng.waiting if id(r) in prev and id(r) not in running_ids)
        prev = now_running
        if not scheduled and not preempted:
            return
        steps.append(
            {
                "start": out.start,
                "duration": out.duration,
                "scheduled": scheduled,
                "preempted": preempted,
                "prefix_queries": out.prefix_queries,
                "prefix_hits": out.prefix_hits,
                "running": out.running,
                "waiting": out.waiting,
            }
        )

    engine.run(sorted(requests, key=lambda r: r.arrival_time), on_step=on_step)
    return steps


def vllm_steps(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The driver's step records that scheduled something or preempted."""
    return [s for s in result["steps"] if s["scheduled"] or s["preempted"]]


def step_differences(vllm: list[dict], kvp: list[dict], limit: int = 3) -> list[str]:
    """Human-readable differences (at most ``limit``), empty when the runs are identical step by step."""
    out: list[str] = []
    if len(vllm) != len(kvp):
        out.append(f"steps: vLLM {len(vllm)}, kvpilot {len(kvp)}")
    for i, (a, b) in enumerate(zip(vllm, kvp, strict=False)):
        for key in STEP_FIELDS:
            if a[key] != b[key]:
                out.append(f"step {i} {key}: vLLM {a[key]!r} kvpilot {b[key]!r}")
        if not math.isclose(a["start"], b["start"], rel_tol=1e-9, abs_tol=1e-12):
            out.append(f"step {i} start: vLLM {a['start']!r} kvpilot {b['start']!r}")
        if len(out) >= limit:
            break
    return out[:limit]


def totals(steps: list[dict]) -> dict[str, int]:
    """Steps, preemptions, prefix hits and scheduled tokens of a run."""
    return {
        "steps": len([s for s in steps if s["scheduled"]]),
        "preemptions": sum(len(s["preempted"]) for s in steps),
        "hits": sum(s["prefix_hits"] for s in steps),
        "scheduled_tokens": sum(sum(s["scheduled"].values()) for s in steps),
    }


def make_engine(**flags: Any) -> Engine:
    """An engine with the reference tier's defaults (H100 roofline, Qwen2.5-1.5B) and ``flags``."""
    base = {"gpu": "h100", "model": "qwen2.5-1.5b", "max_model_len": 8192}
    return Engine(EngineConfig.from_dict({**base, **flags}), keep_finished=False)
