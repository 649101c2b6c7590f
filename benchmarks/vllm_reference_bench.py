"""The engine model against vLLM 0.29.0's own Python scheduler on the same workloads: prints figures (not a test).

Run (needs the vLLM reference venv, ``make vllm-ref``):

    PYTHONPATH=. .venv/bin/python benchmarks/vllm_reference_bench.py [--random 200]

For each workload of the reference tier (``tests/reference/workloads.py``: the named ones, then
seeded random ones) it prints steps, preemptions, prefix hits and scheduled tokens as vLLM's
``Scheduler`` and kvpilot's ``Engine`` produce them, then the wall time of the scheduling work on
each side: vLLM's ``schedule()`` + ``update_from_output()`` with the fake model runner (the
driver's ``scheduler_wall_seconds``, stat logging excluded), kvpilot's ``Engine.run`` without
metrics. The ratio is the engine's speed-up over vLLM's own scheduling logic.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from tests.reference.compare import kvpilot_steps, make_engine, totals, vllm_steps
from tests.reference.harness import driver_spec, run_vllm
from tests.reference.workloads import NAMED, random_workload


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--random", type=int, default=200, help="random workloads after the named ones")
    parser.add_argument(
        "--python",
        default=os.environ.get("KVPILOT_VLLM_PYTHON")
        or str(Path(os.environ.get("KVPILOT_VLLM_VENV") or Path.home() / ".cache/kvpilot/vllm-0.29.0") / "bin/python"),
    )
    args = parser.parse_args()
    workloads = dict(NAMED)
    workloads.update({f"random-{s}": (lambda s=s: random_workload(s)) for s in range(args.random)})

    specs, kvp_totals, kvp_wall = [], {}, {}
    for name, make in workloads.items():
        flags, requests = make()
        kvp_totals[name] = totals(kvpilot_steps(make_engine(**flags), requests))
        flags, requests = make()
        engine = make_engine(**flags)
        t0 = time.perf_counter()
        engine.run(sorted(requests, key=lambda r: r.arrival_time))
        kvp_wall[name] = time.perf_counter() - t0
        flags, requests = make()
        specs.append(driver_spec(name, make_engine(**flags), requests, record_steps=True))
    t0 = time.perf_counter()
    answer = run_vllm(args.python, specs, timeout=3600)
    driver_wall = time.perf_counter() - t0

    keys = ("steps", "preemptions", "hits", "scheduled_tokens")
    print(f"vLLM {answer['vllm_version']} vs kvpilot engine; each cell: vLLM / kvpilot")
    print(f"{'workload':24} " + " ".join(f"{k:>21}" for k in keys) + "   same")
    sums = {"vllm": dict.fromkeys(keys, 0), "kvpilot": dict.fromkeys(keys, 0)}
    differing = 0
    for result in answer["results"]:
        name = result["name"]
        v, k = totals(vllm_steps(result)), kvp_totals[name]
        for key in keys:
            sums["vllm"][key] += v[key]
            sums["kvpilot"][key] += k[key]
        differing += v != k
        if name in NAMED:
            cells = " ".join(f"{v[key]:>10,}/{k[key]:<10,}" for key in keys)
            print(f"{name:24} {cells}   {'yes' if v == k else 'NO'}")
    if args.random:
        cells = " ".join(f"{sums['vllm'][key]:>10,}/{sums['kvpilot'][key]:<10,}" for key in keys)
        print(f"{'all ' + str(len(workloads)) + ' (sum)':24} {cells}   {len(workloads) - differing} same")
    vllm_sched = sum(r["scheduler_wall_seconds"] for r in answer["results"])
    kvp = sum(kvp_wall.values())
    ratio = vllm_sched / kvp
    print(f"\nscheduling wall time: vLLM {vllm_sched:.2f} s, kvpilot {kvp:.2f} s -> kvpilot {ratio:.1f}x faster")
    named_v = sum(r["scheduler_wall_seconds"] for r in answer["results"] if r["name"] in NAMED)
    named_k = sum(kvp_wall[n] for n in NAMED)
    print(f"  named workloads only: vLLM {named_v:.3f} s, kvpilot {named_k:.3f} s -> {named_v / named_k:.1f}x")
    print(f"vLLM driver process (import + build + stat logging + JSON): {driver_wall:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
