"""Engine-model speed: prints figures (not a test).

Run: .venv/bin/python benchmarks/engine_bench.py

1. ``seed-lru`` (docs/background.md §9) wall time; target < 0.2 s.
2. A 10-minute Poisson trace at 50 req/s (prompts ~1,000 tokens, outputs ~200, max_num_seqs 256,
   Qwen2.5-1.5B on an H100, budget 8,192) on one core: simulated/wall speed-up (target >= 60x), steps/s,
   requests/s, and the cProfile of the run's hottest functions.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

from kvpilot.engine import Engine, EngineConfig
from kvpilot.engine.scenarios import run_scenario
from kvpilot.engine.workloads import poisson


def bench_seed_lru(repeat: int = 5) -> None:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        rep = run_scenario("seed-lru")
        best = min(best, time.perf_counter() - t0)
    hits = [p["prefix_cache_hit_tokens"] for p in rep["passes"]]
    print(
        f"seed-lru: best of {repeat}: {best * 1000:.1f} ms wall; hits {hits}; "
        f"TTFT p50 ms {[p['ttft_p50_ms'] for p in rep['passes']]}"
    )


def trace_engine(duration: float, rate: float) -> tuple[Engine, object]:
    cfg = EngineConfig(
        gpu="h100-sxm", model="qwen2.5-1.5b", max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=8192
    )
    wl = poisson(
        rate,
        duration=duration,
        seed=42,
        prompt_len={"dist": "normal", "mean": 1000, "std": 200, "min": 100},
        output_len={"dist": "normal", "mean": 200, "std": 50, "min": 10},
    )
    return Engine(cfg, keep_finished=False), wl


def bench_trace(duration: float, rate: float, profile: bool) -> None:
    engine, wl = trace_engine(duration, rate)
    n = len(wl)
    t0 = time.perf_counter()
    engine.run(wl)
    wall = time.perf_counter() - t0
    print(
        f"trace: {n} requests over {duration:.0f} s at {rate:g} req/s -> simulated "
        f"{engine.now:.1f} s in {wall:.2f} s wall = {engine.now / wall:.0f}x real time; "
        f"{engine.num_steps} steps = {engine.num_steps / wall:,.0f} steps/s, "
        f"{engine.num_finished / wall:,.0f} requests/s; preemptions {engine.num_preemptions}, "
        f"generation tokens {engine.generation_tokens:,}"
    )
    if profile:
        engine, wl = trace_engine(duration, rate)
        prof = cProfile.Profile()
        prof.enable()
        engine.run(wl)
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(8)
        print("cProfile (sorted by own time, profiler overhead included):")
        print("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[:3000])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--no-profile", action="store_true")
    args = ap.parse_args()
    bench_seed_lru()
    bench_trace(args.duration, args.rate, not args.no_profile)


if __name__ == "__main__":
    main()
