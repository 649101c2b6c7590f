"""Peak memory of ``kvpilot simulate``'s report mode against the number of requests: prints figures (not a test).

Run: .venv/bin/python benchmarks/engine_report_memory.py [--requests 10000 30000 100000] [--traced] [--against DIR]

Each figure is one fresh process (``ru_maxrss``, MiB) running the engine benchmark's trace (Poisson at 50 req/s,
prompts ~1,000 tokens, outputs ~200, Qwen2.5-1.5B on an H100, max_num_seqs 256, budget 8,192) until every
request has finished:

- ``report``: :func:`kvpilot.engine.scenarios.run_scenario`, what report mode runs (statistics streamed, Poisson
  requests drawn as they arrive);
- ``kept``: the same engine keeping every finished request and its inter-token latencies, over the whole
  request list built up front (what report mode did before it streamed its statistics);
- ``floor``: the interpreter with kvpilot's engine imported and nothing run.

``--traced`` adds, for ``report``, the peak of the Python heap in another child (``tracemalloc``: live objects,
without the allocator's free lists and fragmentation that RSS also counts; about 3x slower). ``--against DIR``
also runs ``report`` from another checkout (its ``operator/`` first on ``PYTHONPATH``), for a before/after at
the same moment.

Target: ``report`` flat in the number of requests.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, resource, sys, time, tracemalloc
mode, n, traced = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
if traced:
    tracemalloc.start()
from kvpilot.engine import Engine, EngineConfig
from kvpilot.engine.scenarios import Scenario, run_scenario
from kvpilot.engine.workloads import poisson
flags = dict(gpu="h100-sxm", model="qwen2.5-1.5b", max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=8192)
wl = dict(rate=50.0, num_requests=n, seed=42,
          prompt_len={"dist": "normal", "mean": 1000, "std": 200, "min": 100},
          output_len={"dist": "normal", "mean": 200, "std": 50, "min": 10})
t0 = time.process_time()
finished = 0
if mode == "report":
    rep = run_scenario(Scenario("trace", "benchmark trace", flags, {"type": "poisson", **wl}, None))
    finished = rep["requests"]["finished"]
elif mode == "kept":
    eng = Engine(EngineConfig(**flags), keep_finished=True)
    eng.run(poisson(**wl))
    finished = len(eng.finished)
cpu = time.process_time() - t0
heap_peak = tracemalloc.get_traced_memory()[1] if traced else 0
print(json.dumps({"rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "finished": finished,
                  "cpu_s": cpu, "heap_peak_mib": heap_peak / 2**20}))
"""


def measure(mode: str, n: int, traced: bool = False, source: Path | None = None) -> dict[str, float]:
    """One fresh child's figures: ``rss_mib`` (peak), ``cpu_s``, ``finished``, ``heap_peak_mib`` (``traced``)."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(source / "operator"), *filter(None, [env.get("PYTHONPATH")])])
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(n), "1" if traced else "0"],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--requests", type=int, nargs="+", default=[10_000, 30_000, 100_000])
    ap.add_argument("--kept-max", type=int, default=30_000, help="run 'kept' only up to this many requests")
    ap.add_argument("--traced", action="store_true", help="also the Python heap of 'report' (tracemalloc)")
    ap.add_argument("--against", type=Path, metavar="DIR", help="also 'report' from another kvpilot checkout")
    args = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    floor = measure("floor", 0)
    print(f"floor (engine imported, nothing run): {floor['rss_mib']:.0f} MiB")
    for n in args.requests:
        rep = measure("report", n)
        line = f"{n:>7,} requests: report {rep['rss_mib']:6.0f} MiB ({rep['cpu_s']:.1f} s CPU)"
        if args.traced:
            line += f", Python heap peak {measure('report', n, traced=True)['heap_peak_mib']:.1f} MiB"
        if args.against is not None:
            other = measure("report", n, source=args.against.resolve())
            line += f", {args.against.name} {other['rss_mib']:6.0f} MiB ({other['cpu_s']:.1f} s CPU)"
        if n <= args.kept_max:
            kept = measure("kept", n)
            line += f", kept {kept['rss_mib']:6.0f} MiB ({kept['cpu_s']:.1f} s CPU)"
        print(line + f"; {int(rep['finished']):,} finished", flush=True)
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
