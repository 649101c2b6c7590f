"""Counterfactual runs: vLLM 0.29.0's own scheduler re-run with one change, against kvpilot's prediction of it.

For each :class:`Scenario` the reference driver (``vllm_driver.py``: vLLM's ``Scheduler``, ``OutputProcessor`` and
``PrometheusStatLogger``, the roofline step time of ``kvpilot/engine/hardware.py``) runs the base flags on
seeded Poisson arrivals and writes its stat logger's registry every 10 s; that recording is what kvpilot sees
(``kvpilot diagnose --recording``: :func:`kvpilot.advice.run.diagnose_and_predict`). Then vLLM runs the same
arrivals again once per change. The ground truth of each run is vLLM's own: its counters and histograms over the
window, read off the snapshots with plain arithmetic (:func:`truth`), and the binding limit from the driver's
per-step refusals (``refusals.binding_limit``). A change of ``replicas=N`` runs vLLM on one replica's share of
the arrivals (every N-th, as a round-robin load balancer sends them) and multiplies its rates by N.

How a change is made on vLLM's side (:func:`changed_flags`) is written here from vLLM's flags, not taken from
kvpilot's what-if code: ``kv_cache_dtype=fp8`` is twice the KV tokens and half the KV bytes a step reads (the
engine's cost model for fp8, ``EngineConfig.kv_cache_dtype``), ``max_num_seqs`` above the budget raises the
budget to it (vLLM's own check: ``max_num_batched_tokens >= max_num_seqs``).

Regenerate the table of docs/diagnosis.md ("Predictions checked against vLLM")::

    .venv/bin/python -m tests.reference.counterfactual
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvpilot.engine.request import Request
from kvpilot.engine.workloads import OpenLoop, poisson
from kvpilot.metrics.recording import recording_text
from tests.reference.compare import make_engine
from tests.reference.harness import driver_spec, run_vllm
from tests.reference.refusals import binding_limit
from tests.reference.vllm_recordings import snapshot_families

#: the recording's last timestamp (2025-12-01T14:40:00Z, as tests/reference/vllm_recordings.py)
END = 1_764_600_000.0
INTERVAL = 10.0

#: the tolerances of docs/diagnosis.md ("Predictions checked against vLLM")
THROUGHPUT_REL = 0.10
QUEUE_REL, QUEUE_ABS = 0.30, 1.0


def _poisson(rate: float, duration: float, seed: int, prompt: Any, output: Any, **kw: Any) -> Callable[[], list]:
    def make() -> list[Request]:
        wl = poisson(rate, duration=duration, prompt_len=prompt, output_len=output, seed=seed, **kw)
        assert isinstance(wl, OpenLoop)
        return wl.requests

    return make


def _mixed(rate: float, duration: float, seed: int) -> Callable[[], list]:
    """Chat (80 %: 150-250-token prompts, 150-250 outputs) and documents (20 %: 7,000-9,000 tokens, 30 outputs)."""

    def make() -> list[Request]:
        rng = random.Random(seed)
        out, t, i = [], 0.0, 0
        while True:
            t += rng.expovariate(rate)
            if t >= duration:
                return out
            if rng.random() < 0.2:
                out.append(Request(f"doc-{i}", rng.randint(7000, 9000), 30, arrival_time=t))
            else:
                out.append(Request(f"chat-{i}", rng.randint(150, 250), rng.randint(150, 250), arrival_time=t))
            i += 1

    return make


@dataclass(frozen=True)
class Scenario:
    """One counterfactual scenario.

    Attributes:
        name / kind: its name and what it shows.
        flags: the base server (``compare.make_engine`` flags: GPU, model, KV, limits).
        requests: builds the arrivals (fresh objects each call).
        duration: the vLLM run (simulated s); ``start``: where the diagnosed window starts in it.
        changes: changes (``--what-if`` keys), each re-run in vLLM: single ones, and the combination kvpilot
            recommends where one change alone does not keep up.
        cli: what the operator tells ``kvpilot diagnose`` (the flags the server runs with).
        defaults: also check kvpilot's own candidates and recommendation (the issue's two cases).
    """

    name: str
    kind: str
    flags: dict[str, Any]
    requests: Callable[[], list[Request]]
    duration: float
    changes: tuple[dict[str, Any], ...]
    cli: dict[str, Any]
    start: float = 0.0
    defaults: bool = False
    gpu_name: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def window(self) -> float:
        """The diagnosed window (s): from ``start`` to the run's end."""
        return self.duration - self.start


#: Step times are kept long (slow GPUs, larger models) so vLLM's scheduler runs few steps: the tier's CPU is mostly
#: vLLM's Python per step (about 4,000 steps a second here).
SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "kv-shortage",
        "KV shortage: preemptions, KV pinned near full",
        {
            "gpu": "l4",
            "model": "qwen2.5-7b",
            "kv_cache_tokens": 32768,
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
        },
        _poisson(
            1.0, 180.0, 1, {"dist": "uniform", "min": 1000, "max": 2000}, {"dist": "uniform", "min": 200, "max": 400}
        ),
        180.0,
        ({"kv_cache_dtype": "fp8"}, {"max_num_seqs": 8}, {"replicas": 3}),
        {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
        gpu_name="L4",
    ),
    Scenario(
        "max-num-seqs-cap",
        "max_num_seqs cap: 4 slots, KV almost empty",
        {
            "gpu": "l4",
            "model": "qwen2.5-7b",
            "max_num_seqs": 4,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 200_000,
        },
        _poisson(1.0, 150.0, 2, {"dist": "uniform", "min": 300, "max": 700}, 100),
        150.0,
        ({"max_num_seqs": 8}, {"max_num_seqs": 16}, {"replicas": 2}),
        {"max_num_seqs": 4, "max_num_batched_tokens": 2048},
        gpu_name="L4",
    ),
    Scenario(
        "budget-cap",
        "token budget cap: a 128-token budget below the compute knee, 1,000-token prompts",
        {
            "gpu": "l4",
            "model": "qwen2.5-1.5b",
            "max_num_seqs": 128,
            "max_num_batched_tokens": 128,
            "kv_cache_tokens": 200_000,
        },
        _poisson(10.0, 80.0, 3, {"dist": "uniform", "min": 900, "max": 1100}, 16),
        80.0,
        ({"max_num_batched_tokens": 256}, {"max_num_batched_tokens": 512}, {"replicas": 2}),
        {"max_num_seqs": 128, "max_num_batched_tokens": 128},
        gpu_name="L4",
    ),
    Scenario(
        "compute-bound",
        "the issue's budget case: 7B on an H100, budget 512, 4,000-token prompts at 16 req/s: compute-bound steps",
        {
            "gpu": "h100-sxm",
            "model": "qwen2.5-7b",
            "max_num_seqs": 256,
            "max_num_batched_tokens": 512,
            "kv_cache_tokens": 1_000_000,
        },
        _poisson(16.0, 90.0, 4, 4000, 64),
        90.0,
        ({"max_num_batched_tokens": 1024}, {"max_num_batched_tokens": 2048}, {"replicas": 2}),
        {"max_num_seqs": 256, "max_num_batched_tokens": 512},
        defaults=True,
        gpu_name="H100",
    ),
    Scenario(
        "prefix-reuse",
        "a hot 2,000-token system prompt: the prefix cache keeps prefill small",
        {
            "gpu": "l4",
            "model": "qwen2.5-1.5b",
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 200_000,
        },
        _poisson(15.0, 100.0, 5, {"dist": "uniform", "min": 2150, "max": 2250}, 32, prefix_groups=1, prefix_len=2000),
        100.0,
        ({"enable_prefix_caching": False}, {"max_num_batched_tokens": 1024}, {"max_num_seqs": 8}),
        {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
        gpu_name="L4",
    ),
    Scenario(
        "two-limits",
        "the issue's second case: max_num_seqs reached and KV near full",
        {
            "gpu": "l4",
            "model": "qwen2.5-7b",
            "max_num_seqs": 32,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 51_200,
        },
        _poisson(1.2, 200.0, 6, {"dist": "uniform", "min": 900, "max": 1100}, 500),
        200.0,
        ({"kv_cache_tokens": 102_400}, {"max_num_seqs": 64}, {"max_num_seqs": 64, "kv_cache_dtype": "fp8"}),
        {"max_num_seqs": 32, "max_num_batched_tokens": 2048},
        defaults=True,
        gpu_name="L4",
    ),
    Scenario(
        "healthy",
        "healthy: load well below capacity, a shared system prompt",
        {
            "gpu": "l4",
            "model": "qwen2.5-7b",
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 200_000,
        },
        _poisson(0.3, 150.0, 7, {"dist": "uniform", "min": 600, "max": 1000}, 100, prefix_groups=1, prefix_len=500),
        150.0,
        ({"max_num_seqs": 2}, {"max_num_batched_tokens": 512}, {"replicas": 2}),
        {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
        gpu_name="L4",
    ),
    Scenario(
        "long-prompt-mix",
        "mixed traffic: 80 % short chats, 20 % 8,000-token documents through a 256-token budget",
        {
            "gpu": "l4",
            "model": "qwen2.5-1.5b",
            "max_num_seqs": 256,
            "max_num_batched_tokens": 256,
            "kv_cache_tokens": 400_000,
        },
        _mixed(11.0, 60.0, 8),
        60.0,
        ({"max_num_batched_tokens": 512}, {"max_num_batched_tokens": 1024}, {"replicas": 2}),
        {"max_num_seqs": 256, "max_num_batched_tokens": 256},
        gpu_name="L4",
    ),
    Scenario(
        "shared-prefix-long-unique",
        "a short hot prefix (200 tokens) before long unique documents (3,000-5,000 tokens), moderate load",
        {
            "gpu": "l4",
            "model": "qwen2.5-1.5b",
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 200_000,
        },
        _poisson(3.0, 120.0, 9, {"dist": "uniform", "min": 3000, "max": 5000}, 64, prefix_groups=1, prefix_len=200),
        120.0,
        ({"max_num_batched_tokens": 4096}, {"enable_prefix_caching": False}, {"replicas": 2}),
        {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
        gpu_name="L4",
    ),
    Scenario(
        "long-prompt-budget",
        "long prompts (6,000-8,000 tokens) near capacity: the budget raised 2,048 -> 4,096 and 8,192",
        {
            "gpu": "l4",
            "model": "qwen2.5-1.5b",
            "max_num_seqs": 256,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 400_000,
        },
        _poisson(3.6, 90.0, 10, {"dist": "uniform", "min": 6000, "max": 8000}, 64),
        90.0,
        ({"max_num_batched_tokens": 4096}, {"max_num_batched_tokens": 8192}, {"replicas": 2}),
        {"max_num_seqs": 256, "max_num_batched_tokens": 2048},
        gpu_name="L4",
    ),
    Scenario(
        "kv-preemption",
        "KV-bound with preemption and recompute: 20,480 KV tokens, long outputs",
        {
            "gpu": "l4",
            "model": "qwen2.5-7b",
            "max_num_seqs": 64,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 20_480,
        },
        _poisson(
            1.5, 150.0, 11, {"dist": "uniform", "min": 500, "max": 1000}, {"dist": "uniform", "min": 300, "max": 600}
        ),
        150.0,
        ({"kv_cache_dtype": "fp8"}, {"kv_cache_tokens": 40_960}, {"replicas": 2}),
        {"max_num_seqs": 64, "max_num_batched_tokens": 2048},
        gpu_name="L4",
    ),
    Scenario(
        "two-slots",
        "max_num_seqs 2, short requests (256 -> 64 tokens) arriving faster than two slots serve",
        {
            "gpu": "l4",
            "model": "qwen2.5-1.5b",
            "max_num_seqs": 2,
            "max_num_batched_tokens": 2048,
            "kv_cache_tokens": 200_000,
        },
        _poisson(2.4, 120.0, 12, {"dist": "uniform", "min": 192, "max": 320}, 64),
        120.0,
        ({"max_num_seqs": 3}, {"max_num_seqs": 4}, {"replicas": 2}),
        {"max_num_seqs": 2, "max_num_batched_tokens": 2048},
        gpu_name="L4",
    ),
)


def changed_flags(flags: dict[str, Any], change: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """VLLM's flags with ``change`` (module docstring) and the replica count."""
    out = dict(flags)
    replicas = 1
    for key, value in change.items():
        if key == "max_num_seqs":
            out["max_num_seqs"] = value
            out["max_num_batched_tokens"] = max(out["max_num_batched_tokens"], value)
        elif key == "max_num_batched_tokens":
            out["max_num_batched_tokens"] = value
        elif key == "kv_cache_tokens":
            out["kv_cache_tokens"] = value
        elif key == "kv_cache_dtype":
            assert value == "fp8"
            assert out.get("kv_cache_dtype", "auto") == "auto"
            out["kv_cache_dtype"] = "fp8"
            out["kv_cache_tokens"] = 2 * out["kv_cache_tokens"]  # 1 byte an element instead of bf16's 2
        elif key == "enable_prefix_caching":
            out["enable_prefix_caching"] = value
        elif key == "replicas":
            replicas = value
        else:
            raise ValueError(f"no vLLM change for {key}")
    return out, replicas


def one_replica(requests: list[Request], replicas: int) -> list[Request]:
    """The requests replica 0 of ``replicas`` gets from a round-robin load balancer: every ``replicas``-th."""
    return sorted(requests, key=lambda r: r.arrival_time)[::replicas]


def run_name(scenario: Scenario, change: dict[str, Any] | None) -> str:
    """``budget-cap`` or ``budget-cap max_num_batched_tokens=512``."""
    if not change:
        return scenario.name
    return scenario.name + " " + ",".join(f"{k}={v}" for k, v in change.items())


def specs(scenarios: tuple[Scenario, ...] = SCENARIOS) -> list[dict[str, Any]]:
    """The driver's documents: each scenario's base run, then one run per change."""
    out = []
    for sc in scenarios:
        for change in (None, *sc.changes):
            flags, replicas = changed_flags(sc.flags, change or {})
            engine = make_engine(**{"max_model_len": 16384, **flags})
            requests = one_replica(sc.requests(), replicas)
            out.append(
                driver_spec(
                    run_name(sc, change),
                    engine,
                    requests,
                    served_model_name=engine.config.model,
                    snapshot_interval=INTERVAL,
                    until=sc.duration,
                    record_steps="light",
                )
            )
    return out


def recording(result: dict[str, Any], duration: float) -> str:
    """A driver result's snapshots as a recording whose last timestamp is :data:`END`."""
    snaps = [(END - duration + t, snapshot_families(snap)) for t, snap in result["snapshots"] if t <= duration + 1e-9]
    return recording_text(snaps)


def _at(snapshot: list, name: str) -> float:
    """Sum of a family's samples named ``name`` (all label sets) in one snapshot."""
    return sum(value for fam in snapshot for sample, _, value in fam[3] if sample == name)


def truth(result: dict[str, Any], start: float, end: float, replicas: int = 1) -> dict[str, Any]:
    """The run's own figures over ``[start, end]`` (vLLM's): counters' increase over the window, histogram means,
    the gauges' mean over the snapshots, and the binding limit of the driver's per-step refusals.
    """
    snaps = {round(t, 6): s for t, s in result["snapshots"]}
    a, b = snaps[round(start, 6)], snaps[round(end, 6)]
    w = end - start

    def delta(name: str) -> float:
        return _at(b, name) - _at(a, name)

    def mean(family: str) -> float | None:
        n = delta(family + "_count")
        return delta(family + "_sum") / n if n else None

    inside = [s for t, s in result["snapshots"] if start - 1e-9 <= t <= end + 1e-9]
    bound = binding_limit(result["steps"], start, end)
    running = [_at(s, "vllm:num_requests_running") for s in inside]
    waiting = [_at(s, "vllm:num_requests_waiting") for s in inside]
    return {
        "requests_finished_per_s": delta("vllm:request_success_total") * replicas / w,
        "queue_time_mean_s": mean("vllm:request_queue_time_seconds"),
        "ttft_mean_s": mean("vllm:time_to_first_token_seconds"),
        "mean_running": sum(running) / len(running),
        "waiting_start": waiting[0] * replicas,
        "waiting_end": waiting[-1] * replicas,
        "max_kv_usage": max(_at(s, "vllm:kv_cache_usage_perc") for s in inside),
        "binding_limit": bound.limit,
        "shares": dict(bound.shares),
    }


def within(predicted: float | None, actual: float | None, rel: float, abs_: float = 0.0) -> bool:
    """``|predicted - actual| <= max(rel x actual, abs_)`` (both known)."""
    if predicted is None or actual is None:
        return predicted is None and actual is None
    return abs(predicted - actual) <= max(rel * abs(actual), abs_)


@dataclass
class Row:
    """One (scenario, change): kvpilot's prediction against vLLM's run."""

    scenario: str
    change: str
    predicted: dict[str, Any] | None
    actual: dict[str, Any]
    reason: str = ""

    def misses(self) -> list[str]:
        """The tolerances the prediction misses (empty: within all)."""
        p, a = self.predicted, self.actual
        if p is None:
            return [f"no prediction ({self.reason})"]
        out = []
        if not within(p["requests_finished_per_s"], a["requests_finished_per_s"], THROUGHPUT_REL):
            out.append("throughput")
        if p["binding_limit"] != a["binding_limit"]:
            out.append("binding limit")
        if not within(p["queue_time_mean_s"], a["queue_time_mean_s"], QUEUE_REL, QUEUE_ABS):
            out.append("queue time")
        return out

    def cells(self) -> list[str]:
        """The docs table's cells."""

        def f(v: float | None, d: int = 2) -> str:
            return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.{d}f}"

        p, a = self.predicted or {}, self.actual
        return [
            self.scenario,
            self.change or "replay",
            f"{f(p.get('requests_finished_per_s'))} / {f(a['requests_finished_per_s'])}",
            f"{f(p.get('queue_time_mean_s'))} / {f(a['queue_time_mean_s'])}",
            f"{p.get('binding_limit', '-')} / {a['binding_limit']}",
            ", ".join(self.misses()) or "within",
        ]


def evaluate(python: str, scenarios: tuple[Scenario, ...] = SCENARIOS) -> tuple[list[Row], dict[str, Any]]:
    """Every scenario's base and changed runs in vLLM, kvpilot's predictions from the base recordings.

    Returns:
        ``(rows, reports)``: one row per scenario (the replay) and per change; ``reports[name]`` the diagnosis
        of each scenario (its ``targets[0]``: replay, what-ifs, recommendations).
    """
    from kvpilot.advice.run import AdviceOptions, diagnose_and_predict
    from kvpilot.advice.whatif import Change
    from kvpilot.diagnose.run import Options

    answer = run_vllm(python, specs(scenarios), timeout=3600)
    assert answer["vllm_version"] == "0.29.0"
    results = {r["name"]: r for r in answer["results"]}
    rows: list[Row] = []
    reports: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kvpilot-counterfactual-") as tmp:
        for sc in scenarios:
            base = results[sc.name]
            path = Path(tmp) / f"{sc.name}.om"
            path.write_text(recording(base, sc.duration), encoding="utf-8")
            changes = tuple(Change(tuple(c.items())) for c in sc.changes)
            opts = Options(
                recording=str(path),
                window_seconds=sc.window,
                use_kube=False,
                cli_limits=dict(sc.cli),
                gpu_name=sc.gpu_name or None,
            )
            report = diagnose_and_predict(
                opts, AdviceOptions(what_ifs=changes, defaults=sc.defaults, budget_seconds=3600.0)
            )
            (diag,) = report.targets
            reports[sc.name] = diag
            replay = diag.replay
            rows.append(
                Row(
                    sc.name,
                    "",
                    None if replay is None or replay.predicted is None else replay.predicted.to_json(),
                    truth(base, sc.start, sc.duration),
                    "; ".join(replay.misses if replay is not None else ()),
                )
            )
            by_change = {w.change: w for w in diag.what_if}
            for change in sc.changes:
                _, replicas = changed_flags(sc.flags, change)
                actual = truth(results[run_name(sc, change)], sc.start, sc.duration, replicas)
                w = by_change.get(tuple(change.items()))
                rows.append(
                    Row(
                        sc.name,
                        run_name(sc, change)[len(sc.name) + 1 :],
                        None if w is None or w.predicted is None else w.predicted.to_json(),
                        actual,
                        w.reason if w is not None and w.reason else "not in the report",
                    )
                )
    return rows, reports


def table(rows: list[Row]) -> str:
    """The docs table: scenario x change, predicted / vLLM."""
    head = "| scenario | change | requests/s (kvpilot / vLLM) | mean queue time s | binding limit | result |"
    lines = [head, "|---|---|---|---|---|---|"]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def _python() -> str:
    return os.environ.get("KVPILOT_VLLM_PYTHON") or str(
        Path(os.environ.get("KVPILOT_VLLM_VENV") or Path.home() / ".cache/kvpilot/vllm-0.29.0") / "bin/python"
    )


def main() -> int:
    import sys
    import time

    names = set(sys.argv[1:])
    chosen = tuple(sc for sc in SCENARIOS if not names or sc.name in names)
    t0 = time.perf_counter()
    rows, reports = evaluate(_python(), chosen)
    for name, diag in reports.items():
        print(f"## {name}: {diag.verdict}")
        for rec in diag.recommendations:
            print(f"  {rec.flag} {rec.current} -> {rec.suggested}: {rec.expected_effect[:400]}")
    print(table(rows))
    print(f"\n{sum(1 for r in rows if not r.misses())} of {len(rows)} within; {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["SCENARIOS", "Row", "Scenario", "dataclasses", "evaluate", "table", "truth"]
