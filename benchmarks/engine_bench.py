"""Engine-model speed: prints figures (not a test).

Run: .venv/bin/python benchmarks/engine_bench.py

1. ``seed-lru`` (docs/background.md §9) wall time; target < 0.2 s.
2. A 10-minute Poisson trace at 50 req/s (prompts ~1,000 tokens, outputs ~200, max_num_seqs 256,
   Qwen2.5-1.5B on an H100, budget 8,192) on one core, stepping one by one (the floor: the engine before
   fast-forward) and fast-forwarding (``Engine(fast_forward=True)``, the default): simulated/wall speed-up
   (target >= 1,000x), CPU seconds, steps, the ``on_step`` calls (one per run of decode-only steps handed on at
   once, one per step with an arrival, admission or finish), the steps that went through ``Engine.step``,
   microseconds per step, and the cProfile of the fast-forwarded run's hottest functions. Each mode runs
   ``--repeat`` times (default 5), alternating with the other, each from a fresh engine: the figure is the median
   of the simulated seconds per CPU second, with the range (the first run's line gives the counts; on a shared
   machine single runs of the same code vary by a third).
3. The same on a decode-heavy trace (``--decode-rate`` 1 req/s, outputs ~2,000 tokens): few arrivals and
   finishes, so stretches are long.
4. The per-block floor: CPU nanoseconds per block of hashing a prompt's blocks (``Request.hash_runs``) and of
   ``BlockPool.grow``, ``cache`` and ``release`` on the trace's pool (162,392 blocks), 20,000 requests of 75 blocks
   each with 40 alive at a time, as the trace holds them (each of these is one operation per extent, not per block,
   so the figure is a request's cost spread over its 75 blocks).

Both modes give identical results (tests/unit/engine/test_fast_forward.py); the figures differ only in time.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import pstats
import statistics
import time

from kvpilot.engine import COMPILED, Engine, EngineConfig
from kvpilot.engine.block_pool import BlockPool, BlockTable
from kvpilot.engine.request import Request
from kvpilot.engine.scenarios import run_scenario
from kvpilot.engine.workloads import ArrivalStream, OpenLoop, poisson


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


def trace_engine(
    duration: float, rate: float, output_mean: int, fast_forward: bool
) -> tuple[Engine, OpenLoop | ArrivalStream]:
    cfg = EngineConfig(
        gpu="h100-sxm", model="qwen2.5-1.5b", max_num_seqs=256, max_num_batched_tokens=8192, max_model_len=8192
    )
    wl = poisson(
        rate,
        duration=duration,
        seed=42,
        prompt_len={"dist": "normal", "mean": 1000, "std": 200, "min": 100},
        output_len={"dist": "normal", "mean": output_mean, "std": output_mean / 4, "min": 10},
        lazy=True,
    )
    return Engine(cfg, keep_finished=False, fast_forward=fast_forward), wl


def _run_trace(duration: float, rate: float, output_mean: int, fast_forward: bool) -> tuple[Engine, int, float, float]:
    """One timed run from a fresh engine: (the engine, its ``on_step`` calls with an output, wall s, CPU s). The
    previous run's engine is collected before the clock starts (a dropped engine's pool is cyclic).
    """
    gc.collect()
    engine, wl = trace_engine(duration, rate, output_mean, fast_forward)
    calls = [0]

    def count(_eng: Engine, out: object, calls: list[int] = calls) -> None:
        if out is not None:
            calls[0] += 1

    t0, c0 = time.perf_counter(), time.process_time()
    engine.run(wl, on_step=count)
    return engine, calls[0], time.perf_counter() - t0, time.process_time() - c0


def bench_trace(name: str, duration: float, rate: float, output_mean: int, profile: bool, repeat: int) -> None:
    print(f"{name}: Poisson {rate:g} req/s for {duration:.0f} s, outputs ~{output_mean} tokens; {repeat} run(s) a mode")
    speeds: dict[bool, list[float]] = {False: [], True: []}
    for i in range(repeat):
        for fast_forward in (False, True):  # alternating: both modes see the same machine
            engine, calls, wall, cpu = _run_trace(duration, rate, output_mean, fast_forward)
            speeds[fast_forward].append(engine.now / cpu)
            if i:
                continue
            stretches = engine.num_steps - calls  # steps taken inside stretches beyond their first
            print(
                f"  {'fast-forward' if fast_forward else 'step by step (floor)':<20} simulated {engine.now:.1f} s in "
                f"{wall:.2f} s wall / {cpu:.2f} s CPU = {engine.now / wall:,.0f}x wall, {engine.now / cpu:,.0f}x CPU; "
                f"{engine.num_steps:,} steps in {calls:,} calls ({stretches / max(engine.num_steps, 1):.0%} "
                f"skipped, mean {engine.num_steps / max(calls, 1):.2f} steps a call), {engine.num_stepped:,} through "
                "Engine.step, "
                f"{1e6 * cpu / max(engine.num_steps, 1):.2f} us CPU a step; {engine.num_finished:,} requests, "
                f"generation tokens {engine.generation_tokens:,}"
            )
    for fast_forward in (False, True):
        v = speeds[fast_forward]
        print(
            f"  {'fast-forward' if fast_forward else 'step by step (floor)':<20} x real time per CPU s over "
            f"{len(v)} run(s): median {statistics.median(v):,.0f}, {min(v):,.0f}-{max(v):,.0f}"
        )
    print(
        f"  fast-forward / step by step: {statistics.median(speeds[True]) / statistics.median(speeds[False]):.2f}x "
        "(medians, CPU)"
    )
    if profile:
        engine, wl = trace_engine(duration, rate, output_mean, True)
        prof = cProfile.Profile()
        prof.enable()
        engine.run(wl)
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(10)
        print("  cProfile, fast-forward (sorted by own time, profiler overhead included):")
        print("\n".join(line for line in buf.getvalue().splitlines() if line.strip())[:3500])


def bench_block_ops(num_requests: int = 20000, blocks: int = 75, alive: int = 40) -> None:
    reqs = [Request(f"r{i}", blocks * 16 - 8, 200) for i in range(num_requests)]
    c0 = time.process_time()
    runs = [r.hash_runs(0, blocks, 16) for r in reqs]
    t_hash = time.process_time() - c0
    pool = BlockPool(162392, 16)
    live: list[BlockTable] = []
    t_alloc = t_cache = t_free = 0.0
    for r in runs:
        table = BlockTable()
        c0 = time.process_time()
        pool.grow(table, blocks)
        c1 = time.process_time()
        pool.cache(table, r)
        c2 = time.process_time()
        live.append(table)
        if len(live) > alive:
            pool.release(live.pop(0))
        t_alloc, t_cache, t_free = t_alloc + c1 - c0, t_cache + c2 - c1, t_free + time.process_time() - c2
    n = num_requests * blocks
    figures = ", ".join(
        f"{name} {1e9 * t / n:.0f}"
        for name, t in (("hash", t_hash), ("allocate", t_alloc), ("cache", t_cache), ("free", t_free))
    )
    print(f"per-block floor ({num_requests:,} requests x {blocks} blocks): ns CPU per block: {figures}")


def _at_least_one(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {n}")
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=600.0)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--decode-rate", type=float, default=1.0, help="arrivals of the decode-heavy trace, req/s")
    ap.add_argument("--decode-output", type=int, default=2000, help="mean output of the decode-heavy trace")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument(
        "--repeat",
        type=_at_least_one,
        default=5,
        help="timed runs of each mode, alternating (the median is the figure)",
    )
    args = ap.parse_args()
    print(f"engine: {'compiled (mypyc)' if COMPILED else 'Python source (KVPILOT_COMPILE=0 or no C compiler)'}")
    bench_seed_lru()
    bench_trace("trace", args.duration, args.rate, 200, not args.no_profile, args.repeat)
    bench_trace("decode-heavy", args.duration, args.decode_rate, args.decode_output, not args.no_profile, args.repeat)
    bench_block_ops()


if __name__ == "__main__":
    main()
