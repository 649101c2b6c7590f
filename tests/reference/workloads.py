"""The reference tier's workloads: the named situations and seeded random ones.

Each is ``(flags, requests)``: :class:`~kvpilot.engine.config.EngineConfig` overrides (on top of
``compare.make_engine``'s H100 / Qwen2.5-1.5B defaults) and a fresh list of
:class:`~kvpilot.engine.request.Request` (every call builds new objects: the engine mutates them).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from kvpilot.engine.request import Request

Workload = tuple[dict[str, Any], list[Request]]


def founding_scan() -> Workload:
    """The founding measurement: 10 documents of 5,033 tokens, passes forward, forward, reversed.

    1,345 blocks of 16 (21,520 tokens), ``--max-num-seqs 4``; one request at a time (each arrives
    100 s after the previous, long after it finished). Prefix hits per pass: 0, 0, 21,488.
    """
    reqs = []
    for p, order in enumerate((range(10), range(10), reversed(range(10)))):
        for d in order:
            reqs.append(Request(f"p{p}-d{d}", 5033, 1, len(reqs) * 100.0, segments=[(f"doc{d}", 5033)]))
    return {"num_gpu_blocks": 1345, "max_num_seqs": 4, "max_num_batched_tokens": 8192}, reqs


def shared_prefix_together() -> Workload:
    """50 requests sharing a 1,024-token prefix (+200 own tokens), all arriving at t=0."""
    reqs = [Request(f"r{i}", 1224, 16, 0.0, segments=[("system", 1024), (f"user{i}", 200)]) for i in range(50)]
    return {"num_gpu_blocks": 20000, "max_num_seqs": 256, "max_num_batched_tokens": 8192}, reqs


def kv_pressure() -> Workload:
    """60 requests (prompts 200-1,500, outputs 50-400) into 399 usable blocks: preemption."""
    rng = random.Random(1)
    reqs = [Request(f"r{i}", rng.randint(200, 1500), rng.randint(50, 400), i * 0.05) for i in range(60)]
    return {"num_gpu_blocks": 400, "max_model_len": 4096, "max_num_seqs": 64, "max_num_batched_tokens": 2048}, reqs


def chunked_long_prompts() -> Workload:
    """30 prompts of 1,000-6,000 tokens through a 512-token budget: chunked prefill."""
    rng = random.Random(2)
    reqs = [Request(f"r{i}", rng.randint(1000, 6000), rng.randint(5, 50), i * 0.2) for i in range(30)]
    return {"num_gpu_blocks": 1500, "max_num_seqs": 32, "max_num_batched_tokens": 512}, reqs


def prefix_caching_off() -> Workload:
    """The shared-prefix workload with ``--no-enable-prefix-caching``: no queries, no hits."""
    flags, reqs = shared_prefix_together()
    return {**flags, "enable_prefix_caching": False}, reqs


NAMED: dict[str, Callable[[], Workload]] = {
    "founding-scan": founding_scan,
    "shared-prefix-together": shared_prefix_together,
    "kv-pressure-preemption": kv_pressure,
    "chunked-long-prompts": chunked_long_prompts,
    "prefix-caching-off": prefix_caching_off,
}


def random_workload(seed: int) -> Workload:
    """A seeded random workload: lengths, shared-prefix groups, cache size, arrivals, flags."""
    rng = random.Random(seed)
    bs = 16
    max_model_len = rng.choice([1024, 2048, 4096])
    caching = rng.random() < 0.75
    chunked = rng.random() < 0.75
    budget = rng.choice([256, 512, 1024, 2048]) if chunked else rng.choice([max_model_len, 2 * max_model_len])
    min_blocks = -(-max_model_len // bs) + 1
    num_blocks = rng.randint(min_blocks, min_blocks * rng.choice([1, 2, 4, 8]))
    flags = {
        "block_size": bs,
        "num_gpu_blocks": num_blocks,
        "max_model_len": max_model_len,
        "max_num_seqs": rng.choice([2, 4, 8, 16, 64, 256]),
        "max_num_batched_tokens": budget,
        "enable_prefix_caching": caching,
        "enable_chunked_prefill": chunked,
    }
    groups = [(f"s{seed}-g{g}", rng.randint(1, max_model_len // 3)) for g in range(rng.randint(0, 4))]
    n = rng.randint(5, 40)
    gap = rng.choice([0.0, 0.005, 0.05, 0.5])
    t = 0.0
    reqs = []
    for i in range(n):
        own = rng.randint(1, max_model_len // 2)
        segments: list[tuple[object, int]] = []
        if groups and rng.random() < 0.7:
            segments.append(rng.choice(groups))
        segments.append((f"s{seed}-r{i}", own))
        prompt = sum(k for _, k in segments)
        if prompt >= max_model_len:
            segments = [(f"s{seed}-r{i}", max_model_len // 2)]
            prompt = max_model_len // 2
        t += rng.expovariate(1 / gap) if gap else 0.0
        reqs.append(
            Request(
                f"r{i}",
                prompt,
                rng.randint(1, 200),
                round(t, 6),
                segments=segments,
                finish_reason=rng.choice(["length", "stop"]),
            )
        )
    return flags, reqs


RANDOM_SEEDS = range(200)
