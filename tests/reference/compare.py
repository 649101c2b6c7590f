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
from dataclasses import dataclass
from typing import Any

from kvpilot.engine.config import EngineConfig
from kvpilot.engine.core import Engine, StepOutput
from kvpilot.engine.exporter import VLLMMetrics
from kvpilot.engine.request import Request

STEP_FIELDS = ("scheduled", "preempted", "prefix_queries", "prefix_hits", "running", "waiting")


@dataclass
class KvpilotRun:
    """What :func:`kvpilot_steps` recorded: the step records, the registry snapshots (``[t, snapshot]``) and the
    registry at the end (None without metrics).
    """

    steps: list[dict[str, Any]]
    snapshots: list[Any]
    final_snapshot: list[Any] | None


def kvpilot_steps(engine: Engine, requests: Sequence[Request], snapshot_interval: float | None = None) -> KvpilotRun:
    """Run ``requests`` through ``engine`` (``Engine.run``) and return its step records.

    With ``snapshot_interval`` (and ``engine.metrics`` a :class:`VLLMMetrics`), also take snapshots the way the
    driver does: at t=0, then after each step or idle stretch for every multiple of the interval passed; and the
    registry at the end.
    """
    steps: list[dict[str, Any]] = []
    prev: dict[int, int] = {}  # id(request) -> num_computed after the previous step, for running requests
    snapshots: list = []
    next_snap = [0.0]

    def snap(eng: Engine) -> None:
        if snapshot_interval is None:
            return
        while next_snap[0] <= eng.now + 1e-12:
            snapshots.append([next_snap[0], registry_snapshot(eng.metrics)])
            next_snap[0] += snapshot_interval

    snap(engine)

    def on_step(eng: Engine, out: StepOutput | None) -> None:
        nonlocal prev
        snap(eng)
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
    final = registry_snapshot(engine.metrics) if isinstance(engine.metrics, VLLMMetrics) else None
    return KvpilotRun(steps, snapshots, final)


def registry_snapshot(metrics: VLLMMetrics) -> list:
    """The exporter's families in the driver's shape: ``[[name, type, help, [[sample, labels, value]]]]``."""
    out = []
    for fam in metrics.collect():
        samples = [
            [s.name, dict(sorted(s.labels.items())), s.value] for s in fam.samples if not s.name.endswith("_created")
        ]
        out.append([fam.name, fam.type, fam.documentation, samples])
    return out


def snapshot_differences(vllm: list, kvp: list, limit: int = 3) -> list[str]:
    """Differences between two registry snapshots: families, types, HELP, label sets, bucket edges, values."""
    a = {
        name: (typ, doc, {(s[0], tuple(sorted(s[1].items()))): s[2] for s in samples})
        for name, typ, doc, samples in vllm
    }
    b = {
        name: (typ, doc, {(s[0], tuple(sorted(s[1].items()))): s[2] for s in samples})
        for name, typ, doc, samples in kvp
    }
    out = []
    if set(a) != set(b):
        out.append(f"families only in vLLM {sorted(set(a) - set(b))}, only in kvpilot {sorted(set(b) - set(a))}")
    for name in sorted(set(a) & set(b)):
        (ta, da, sa), (tb, db, sb) = a[name], b[name]
        if ta != tb or da != db:
            out.append(f"{name}: type/help vLLM {ta} {da!r}, kvpilot {tb} {db!r}")
        if set(sa) != set(sb):
            only_a, only_b = sorted(set(sa) - set(sb))[:2], sorted(set(sb) - set(sa))[:2]
            out.append(f"{name}: series only in vLLM {only_a}, only in kvpilot {only_b}")
        for key in sorted(set(sa) & set(sb)):
            if not math.isclose(sa[key], sb[key], rel_tol=1e-9, abs_tol=1e-9):
                out.append(f"{key[0]}{dict(key[1])}: vLLM {sa[key]!r}, kvpilot {sb[key]!r}")
                break
        if len(out) >= limit:
            break
    return out[:limit]


def metric_differences(vllm_snaps: list, kvp_snaps: list, limit: int = 3) -> list[str]:
    """Differences snapshot by snapshot (same instants on both sides)."""
    if len(vllm_snaps) != len(kvp_snaps):
        return [f"snapshots: vLLM {len(vllm_snaps)}, kvpilot {len(kvp_snaps)}"]
    for (ta, a), (tb, b) in zip(vllm_snaps, kvp_snaps, strict=True):
        if not math.isclose(ta, tb, rel_tol=1e-9, abs_tol=1e-9):
            return [f"snapshot at vLLM t={ta}, kvpilot t={tb}"]
        diffs = snapshot_differences(a, b, limit)
        if diffs:
            return [f"t={ta:.6g}: {d}" for d in diffs]
    return []


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


SERVED_MODEL_NAME = "kvpilot/reference"


def make_engine(*, with_metrics: bool = False, **flags: Any) -> Engine:
    """An engine with the reference tier's defaults (H100 roofline, Qwen2.5-1.5B) and ``flags``.

    ``with_metrics``: attach a vLLM 0.29.0 :class:`VLLMMetrics` whose ``cache_config_info`` carries
    what the engine knows (block size, blocks, memory utilisation, caching, dtype).
    """
    base = {"gpu": "h100", "model": "qwen2.5-1.5b", "max_model_len": 8192}
    config = EngineConfig.from_dict({**base, **flags})
    metrics = None
    if with_metrics:
        probe = Engine(config)
        metrics = VLLMMetrics(
            vllm_version="0.29.0",
            model_name=SERVED_MODEL_NAME,
            cache_config={
                "block_size": str(config.block_size),
                "num_gpu_blocks": str(probe.num_gpu_blocks),
                "gpu_memory_utilization": str(config.gpu_memory_utilization),
                "enable_prefix_caching": str(config.enable_prefix_caching),
                "cache_dtype": config.kv_cache_dtype,
            },
            max_model_len=config.max_model_len,
        )
    # one step at a time: the step records and snapshots here are taken after every step (the fast-forward's
    # equality with stepping is tests/unit/engine/test_fast_forward.py's)
    return Engine(config, metrics=metrics, keep_finished=False, fast_forward=False)
