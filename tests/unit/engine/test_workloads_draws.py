"""The workloads' own draws (``workloads.gauss`` / ``workloads.expovariate``) are the ones ``random.Random`` gives.

The oracle is the standard library: the same seed drawn through ``rng.gauss`` / ``rng.expovariate`` and through
kvpilot's functions gives the same floats, bit for bit, in any mix (the pair Box-Muller makes is shared through
the generator's state, so a library draw may follow one of ours and the other way round). Every workload file and
recording of the suite was drawn with the library's: equal draws keep them all.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from kvpilot.engine.workloads import LengthSampler, expovariate, gauss, poisson

#: a mix with an odd number of normals between the other draws (the kept second normal crosses them)
PATTERN = ("gauss", "gauss", "expo", "gauss", "random", "gauss", "gauss", "gauss", "expo", "expo", "gauss")


def _draw(rng: random.Random, kind: str, ours: bool) -> float:
    if kind == "gauss":
        return gauss(rng, 1000.0, 200.0) if ours else rng.gauss(1000.0, 200.0)
    if kind == "expo":
        return expovariate(rng, 50.0) if ours else rng.expovariate(50.0)
    return rng.random()


@pytest.mark.parametrize("seed", range(8))
def test_the_same_floats_as_the_library_in_any_mix(seed: int) -> None:
    lib, own = random.Random(seed), random.Random(seed)
    for i in range(2000):
        kind = PATTERN[i % len(PATTERN)]
        assert _draw(own, kind, ours=True) == _draw(lib, kind, ours=False), (seed, i, kind)


def test_a_library_draw_may_follow_one_of_ours_on_the_same_generator() -> None:
    lib, mixed = random.Random(3), random.Random(3)
    for i in range(1001):
        ours = i % 3 == 0  # ours and the library's alternate on one generator: the kept normal passes between them
        assert _draw(mixed, "gauss", ours) == lib.gauss(1000.0, 200.0), i
    assert mixed.getstate() == lib.getstate()


def test_a_poisson_trace_is_the_one_the_library_s_draws_make() -> None:
    """The arrival times and lengths of ``poisson`` recomputed here with the library's own draws, in its order:
    per request one exponential gap, then a normal for the prompt and one for the output (rounded, at least 1).
    """
    rng = random.Random(42)
    t, expected = 0.0, []
    while True:
        t += rng.expovariate(50.0)
        if t >= 20.0:
            break
        p = max(1, round(max(rng.gauss(1000, 200), 100.0)))
        o = max(1, round(max(rng.gauss(200, 50), 10.0)))
        expected.append((t, p, o))
    wl = poisson(
        50.0,
        duration=20.0,
        seed=42,
        prompt_len={"dist": "normal", "mean": 1000, "std": 200, "min": 100},
        output_len={"dist": "normal", "mean": 200, "std": 50, "min": 10},
    )
    got = [(r.arrival_time, r.prompt_len, r.output_len) for r in wl.requests]
    assert got == expected
    assert len(got) > 900  # 50 req/s for 20 s


@pytest.mark.parametrize(
    ("spec", "library"),
    [
        ({"dist": "normal", "mean": 1000, "std": 200, "min": 100}, lambda rng: rng.gauss(1000.0, 200.0)),
        (
            {"dist": "lognormal", "mean": 300, "sigma": 0.8, "max": 4000},
            lambda rng: 300 * math.exp(rng.gauss(0.0, 0.8)),
        ),
        ({"dist": "exponential", "mean": 250, "min": 5}, lambda rng: rng.expovariate(1 / 250)),
    ],
    ids=["normal", "lognormal", "exponential"],
)
def test_each_length_distribution_draws_what_the_library_gives(
    spec: dict[str, object], library: Callable[[random.Random], float]
) -> None:
    """sample_length's documented rule on the library's draw: clipped to min/max, rounded, at least 1."""
    sampler = LengthSampler(spec, "prompt_len")
    own, lib = random.Random(5), random.Random(5)
    lo, hi = float(spec.get("min", -math.inf)), float(spec.get("max", math.inf))  # type: ignore[arg-type]
    for i in range(3000):
        assert sampler.draw(own) == max(1, round(min(max(library(lib), lo), hi))), i
