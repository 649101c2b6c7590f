"""Named situations: the flags and workload that make a simulated vLLM server show one bottleneck.

``SCENARIOS[name]`` is a :class:`Scenario`; :func:`build` makes the engine and workload,
:func:`run_scenario` runs it and returns a JSON-able report. Each scenario's *signature* (what its
metrics show, checked by tests/unit/engine/test_scenarios.py from the engine's own counters):

- ``seed-lru``: docs/background.md §9 — prefix hits 0, 0, 21,488 over three passes.
- ``kv-exhaustion``: waiting grows, KV usage near 1, preemptions grow.
- ``max-num-seqs-cap``: running == max_num_seqs while waiting grows; KV usage low.
- ``token-budget-cap``: steps full at max_num_batched_tokens, running below the cap, KV with room,
  waiting grows.
- ``compute-bound``: waiting grows while no configured limit binds (large budget and cap, long
  prompts, offered prompt tokens above prefill throughput); mirrors fixture case C12.
- ``prefix-thrash``: prefix caching on, repeated prefixes whose working set exceeds the KV cache:
  low hit rate.
- ``healthy``: load well below capacity, nothing waits.
- ``idle``: no requests.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NotRequired, TypedDict, cast

from kvpilot.engine.config import EngineConfig, EngineFlags, parse_engine_flags
from kvpilot.engine.core import Engine, MetricsSink, StepOutput
from kvpilot.engine.report_stats import Peaks, ReportStats
from kvpilot.engine.workloads import WorkloadSpec
from kvpilot.engine.workloads import from_dict as workload_from_dict
from kvpilot.text.documents import JsonObject, JsonValue
from kvpilot.text.errors import InvalidValueError
from kvpilot.text.numbers import GIB
from kvpilot.vllm.args import from_vllm_args

__all__ = [
    "SCENARIOS",
    "Scenario",
    "ScenarioOverrides",
    "ScenarioReport",
    "ScenarioSpec",
    "build",
    "from_vllm_args",
    "get_scenario",
    "report",
    "resolve",
    "run_scenario",
    "scenario_from_dict",
]


@dataclass(frozen=True)
class Scenario:
    """One named situation.

    Attributes:
        name: scenario name (``seed-lru`` ...).
        description: one line.
        flags: :class:`EngineConfig` field overrides.
        workload: a :func:`kvpilot.engine.workloads.from_dict` spec, built with the engine.
        duration: simulated seconds to run (``None``: until the workload is done, for closed
            finite workloads such as ``seed-lru``).
    """

    name: str
    description: str
    flags: EngineFlags = field(default_factory=EngineFlags)
    workload: WorkloadSpec = field(default_factory=lambda: WorkloadSpec(type="idle"))
    duration: float | None = 300.0


class ScenarioSpec(TypedDict, total=False):
    """A scenario as a document gives it (:func:`scenario_from_dict`), each value as given (JSON), checked there."""

    name: JsonValue
    description: JsonValue
    flags: JsonValue
    workload: JsonValue | WorkloadSpec
    duration: JsonValue


class ScenarioOverrides(TypedDict, total=False):
    """What :func:`resolve` changes in a scenario: a scenario file's mapping, a command line's options, or a
    caller's, each value as given (JSON; a typed value is one) and checked where it is applied.

    ``flags`` (a mapping of engine fields), ``workload`` (merged over the scenario's), ``duration``, ``description``;
    the command line's workload knobs ``arrival_rate``, ``prompt_tokens``, ``output_tokens``, ``num_requests``,
    ``seed``; ``kv_offload_cpu`` for ``kv_offload_cpu_bytes``; and every :class:`EngineConfig` field but ``profile``,
    as in ``flags`` (a key of neither kind is refused as an unknown engine field).
    """

    flags: JsonValue
    workload: JsonValue | WorkloadSpec
    duration: JsonValue
    description: JsonValue
    arrival_rate: JsonValue
    prompt_tokens: JsonValue
    output_tokens: JsonValue
    num_requests: JsonValue
    seed: JsonValue
    kv_offload_cpu: JsonValue
    block_size: JsonValue
    num_gpu_blocks: JsonValue
    kv_cache_tokens: JsonValue
    max_num_seqs: JsonValue
    max_num_batched_tokens: JsonValue
    max_model_len: JsonValue
    enable_prefix_caching: JsonValue
    enable_chunked_prefill: JsonValue
    scheduler_reserve_full_isl: JsonValue
    kv_offload_cpu_bytes: JsonValue
    offload_chunk_tokens: JsonValue
    offload_load_bandwidth: JsonValue
    offload_store_bandwidth: JsonValue
    gpu: JsonValue
    model: JsonValue
    bytes_per_token: JsonValue
    kv_cache_dtype: JsonValue
    tensor_parallel_size: JsonValue
    gpu_memory_utilization: JsonValue
    non_kv_reserve_bytes: JsonValue
    weight_bytes: JsonValue
    bandwidth_efficiency: JsonValue
    compute_efficiency: JsonValue
    step_overhead: JsonValue
    served_model_name: JsonValue


class RequestCounts(TypedDict):
    """The report's ``requests``."""

    arrived: int
    finished: int


class Counters(TypedDict):
    """The report's ``counters``: vLLM's counters at the end of the run (``prefix_cache_hit_rate`` 0-1)."""

    preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    prefix_cache_hit_rate: float | None
    external_prefix_cache_queries: int
    external_prefix_cache_hits: int
    prompt_tokens: int
    generation_tokens: int


class FinalState(TypedDict):
    """The report's ``final``: the gauges at the end of the run."""

    running: int
    waiting: int
    kv_cache_usage: float


class Throughput(TypedDict):
    """The report's ``throughput`` (per simulated second)."""

    requests_per_s: float
    prompt_tokens_per_s: float
    generation_tokens_per_s: float


class PassReport(TypedDict):
    """One element of the report's ``passes``: the requests tagged with one name."""

    name: str
    requests: int
    prefix_cache_hit_tokens: int
    external_prefix_cache_hit_tokens: NotRequired[int]
    ttft_p50_ms: float | None


class ScenarioReport(TypedDict):
    """:func:`run_scenario`'s report, JSON-able (``kvpilot simulate -o json``); its keys in this order."""

    scenario: str
    description: str
    config: JsonObject
    kv_cache_tokens: int
    usable_blocks: int
    simulated_seconds: float
    steps: int
    requests: RequestCounts
    counters: Counters
    final: FinalState
    peaks: Peaks
    steps_at_budget: float
    latency_s: dict[str, float | None]
    throughput: Throughput
    passes: NotRequired[list[PassReport]]
    kv_offload_cpu_bytes: NotRequired[int]
    kv_offload_cpu_gib: NotRequired[float]
    offload_capacity_chunks: NotRequired[int]


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
        Scenario(
            "seed-lru",
            "10 documents of 5,033 tokens sent one at a time, in order, again, then "
            "reversed, into a 21,520-token KV cache: prefix hits 0, 0, 21,488 (LRU collapse).",
            {
                "gpu": "laptop-8gb",
                "model": "qwen2.5-1.5b",
                "kv_cache_tokens": 21520,
                "gpu_memory_utilization": 0.60,
                "max_model_len": 8192,
                "max_num_seqs": 4,
                "enable_prefix_caching": True,
            },
            {"type": "document_scan", "num_docs": 10, "doc_tokens": 5033, "output_len": 1},
            None,
        ),
        Scenario(
            "kv-exhaustion",
            "A 32,768-token KV cache under long outputs: usage pinned near 1, preemptions and the waiting queue grow.",
            {
                "gpu": "l4",
                "model": "qwen2.5-1.5b",
                "kv_cache_tokens": 32768,
                "max_model_len": 8192,
                "max_num_seqs": 256,
                "max_num_batched_tokens": 2048,
            },
            {
                "type": "poisson",
                "rate": 4.0,
                "duration": 300.0,
                "seed": 1,
                "prompt_len": {"dist": "uniform", "min": 1000, "max": 2000},
                "output_len": {"dist": "uniform", "min": 400, "max": 800},
            },
        ),
        Scenario(
            "max-num-seqs-cap",
            "--max-num-seqs 4 on an H100: four requests run, the rest wait, the KV cache stays almost empty.",
            {"gpu": "h100-sxm", "model": "qwen2.5-1.5b", "max_num_seqs": 4, "max_model_len": 8192},
            {
                "type": "poisson",
                "rate": 5.0,
                "duration": 300.0,
                "seed": 2,
                "prompt_len": {"dist": "uniform", "min": 300, "max": 700},
                "output_len": 500,
            },
        ),
        Scenario(
            "token-budget-cap",
            "--max-num-batched-tokens 256 with 2,000-token prompts: every step is full at the budget, "
            "few requests run, KV has room, the queue grows.",
            {
                "gpu": "h100-sxm",
                "model": "qwen2.5-7b",
                "max_num_seqs": 128,
                "max_num_batched_tokens": 256,
                "max_model_len": 8192,
            },
            {
                "type": "poisson",
                "rate": 20.0,
                "duration": 300.0,
                "seed": 3,
                "prompt_len": {"dist": "uniform", "min": 1800, "max": 2200},
                "output_len": 32,
            },
        ),
        Scenario(
            "compute-bound",
            "Prefill-heavy traffic (6,000-token prompts, 2 output tokens, 9 req/s) on an H100 with a "
            "65,000-token budget: prefill compute saturates, no flag binds (like fixture case C12).",
            {
                "gpu": "h100-sxm",
                "model": "llama-3.1-8b",
                "max_num_seqs": 256,
                "max_num_batched_tokens": 65000,
                "max_model_len": 16384,
            },
            {"type": "poisson", "rate": 9.0, "duration": 300.0, "seed": 4, "prompt_len": 6000, "output_len": 2},
        ),
        Scenario(
            "prefix-thrash",
            "Prefix caching on, 100 shared 3,000-token prefixes reused at random: a 300,000-token "
            "working set in a 49,152-token cache, so few hits.",
            {
                "gpu": "h100-sxm",
                "model": "qwen2.5-1.5b",
                "kv_cache_tokens": 49152,
                "max_model_len": 8192,
                "enable_prefix_caching": True,
            },
            {
                "type": "poisson",
                "rate": 4.0,
                "duration": 300.0,
                "seed": 5,
                "prefix_groups": 100,
                "prefix_len": 3000,
                "prompt_len": 3200,
                "output_len": 100,
            },
        ),
        Scenario(
            "healthy",
            "2 req/s of chat traffic sharing a 500-token system prompt on an H100 with default "
            "flags: nothing waits, KV usage low, good prefix hits.",
            {"gpu": "h100-sxm", "model": "qwen2.5-7b", "max_model_len": 8192},
            {
                "type": "poisson",
                "rate": 2.0,
                "duration": 300.0,
                "seed": 6,
                "prefix_groups": 1,
                "prefix_len": 500,
                "prompt_len": {"dist": "uniform", "min": 700, "max": 1300},
                "output_len": {"dist": "uniform", "min": 100, "max": 300},
            },
        ),
        Scenario(
            "idle",
            "A server with no traffic: every gauge at zero, counters flat.",
            {"gpu": "h100-sxm", "model": "qwen2.5-7b", "max_model_len": 8192},
            {"type": "idle"},
        ),
    )
}

_SCENARIO_KEYS = {"flags", "workload", "duration", "description", "name"}


def scenario_from_dict(spec: ScenarioSpec, base: Scenario | None = None) -> Scenario:
    """A scenario from a dict ``{"name", "description", "flags", "workload", "duration"}``.

    With ``base``, missing keys come from it, ``flags`` are merged over its flags and a
    ``workload`` without ``type`` (or with the same type) is merged over its workload.

    Raises:
        InvalidValueError: unknown keys, flags/workload that are not mappings, a bad duration or engine field.
    """
    unknown = set(spec) - _SCENARIO_KEYS
    if unknown:
        raise InvalidValueError(
            "scenario", f"unknown key(s) {', '.join(sorted(unknown))} (known: {', '.join(sorted(_SCENARIO_KEYS))})"
        )
    base = base or Scenario("custom", "custom scenario", {}, {"type": "idle"}, 300.0)
    duration = spec.get("duration", base.duration)
    return _merged(
        base,
        spec.get("name", base.name),
        spec.get("description", base.description),
        spec.get("flags"),
        spec.get("workload"),
        duration,
    )


def _merged(base: Scenario, name: object, description: object, flags: object, wl: object, duration: object) -> Scenario:
    """``base`` with what a scenario document or :func:`resolve` gives, each value as given (see
    :func:`scenario_from_dict`): ``flags`` merged over its flags, ``wl`` over its workload.
    """
    flags = flags or {}
    if not isinstance(flags, dict):
        raise InvalidValueError("scenario.flags", "must be a mapping of engine fields")
    if wl is not None and not isinstance(wl, dict):
        raise InvalidValueError("scenario.workload", "must be a mapping")
    merged_flags = {**base.flags, **flags}
    workload = copy.deepcopy(dict(base.workload))
    if wl:
        if "type" not in wl or wl["type"] == workload.get("type"):
            workload.update(copy.deepcopy(wl))
        else:
            workload = copy.deepcopy(wl)
    seconds = None if duration is None else _duration(duration)
    return Scenario(
        str(name),
        str(description),
        parse_engine_flags(merged_flags),  # after the duration: a bad flag was named when the engine was built
        cast(WorkloadSpec, workload),  # a mapping; workloads.from_dict checks its keys and values
        seconds,
    )


def _duration(value: object) -> float:
    """A scenario's ``duration``: simulated seconds, finite and above 0 (a run of no time reports nothing)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InvalidValueError("duration", f"{value!r} is not a number of seconds")
    if not 0 < value < float("inf"):  # False for NaN
        raise InvalidValueError("duration", f"must be a finite number of seconds above 0, got {value!r}")
    return float(value)


def get_scenario(name: str) -> Scenario:
    """``SCENARIOS[name]``. Raises ValueError naming the known scenarios."""
    try:
        return SCENARIOS[name]
    except KeyError:
        raise InvalidValueError("scenario", f"unknown {name!r}; known: {', '.join(SCENARIOS)}") from None


#: CLI workload knobs -> keys of the Poisson workload spec.
WORKLOAD_KNOBS = {
    "arrival_rate": "rate",
    "prompt_tokens": "prompt_len",
    "output_tokens": "output_len",
    "num_requests": "num_requests",
    "seed": "seed",
}


def resolve(name: str | Scenario, overrides: ScenarioOverrides | None = None) -> Scenario:
    """The scenario with ``overrides`` applied.

    ``overrides`` keys (:class:`ScenarioOverrides`):

    - :class:`EngineConfig` fields (``kv_offload_cpu`` is accepted for ``kv_offload_cpu_bytes``);
    - ``flags`` (dict of the same), ``workload`` (dict, merged as in :func:`scenario_from_dict`),
      ``duration`` (s), ``description``;
    - the CLI's workload knobs ``arrival_rate`` (req/s), ``prompt_tokens`` and ``output_tokens``
      (tokens, used as fixed lengths), ``num_requests``, ``seed``: they set the Poisson workload's
      ``rate``, ``prompt_len``, ``output_len``, ``num_requests``, ``seed``; on a scenario whose
      workload is not Poisson, ``arrival_rate`` replaces it with a Poisson one over the duration.

    ``None`` values are ignored.

    Raises:
        InvalidValueError: unknown scenario or key (see :func:`scenario_from_dict`).
    """
    sc = name if isinstance(name, Scenario) else get_scenario(name)
    if not overrides:
        return sc
    ov = {k: v for k, v in overrides.items() if v is not None}
    workload = ov.pop("workload", None)
    duration = ov.pop("duration", sc.duration)
    description = ov.pop("description", sc.description)
    flags = ov.pop("flags", None) or {}
    if not isinstance(flags, dict):
        raise InvalidValueError("scenario.flags", "must be a mapping of engine fields")
    knobs = {WORKLOAD_KNOBS[k]: ov.pop(k) for k in list(ov) if k in WORKLOAD_KNOBS}
    if "kv_offload_cpu" in ov:
        ov["kv_offload_cpu_bytes"] = ov.pop("kv_offload_cpu")
    if knobs:
        given = workload or sc.workload
        if not isinstance(given, dict):
            raise InvalidValueError("scenario.workload", "must be a mapping")
        wl = dict(given)
        if wl.get("type") != "poisson":
            if "rate" not in knobs:
                raise InvalidValueError(
                    "arrival_rate",
                    f"scenario {sc.name!r} has a {wl.get('type')} "
                    "workload; give --arrival-rate to replace it with Poisson arrivals",
                )
            wl = {"type": "poisson", "duration": sc.duration or 300.0}
        wl.update(knobs)
        rate = wl.get("rate", 1)
        if (isinstance(rate, (int, float)) and rate <= 0) or wl.get("num_requests", 1) == 0:  # else from_dict's error
            wl = {"type": "idle"}
        workload = wl
    return _merged(sc, sc.name, description, {**flags, **ov}, workload, duration)


def build(
    name: str | Scenario,
    overrides: ScenarioOverrides | None = None,
    metrics: MetricsSink | None = None,
    keep_finished: bool = True,
    track_itls: bool | None = None,
    fast_forward: bool = True,
) -> tuple[Engine, Any]:
    """``(Engine, Workload)`` for scenario ``name`` (or a :class:`Scenario`) with overrides.

    ``metrics``, ``keep_finished``, ``track_itls``, ``fast_forward``: as :class:`Engine` takes them.

    Raises:
        InvalidValueError: unknown scenario, unknown/invalid flag (message starts with the field name),
            bad workload.
    """
    sc = resolve(name, overrides)
    engine = Engine(
        EngineConfig.from_dict(sc.flags),
        metrics=metrics,
        keep_finished=keep_finished,
        track_itls=track_itls,
        fast_forward=fast_forward,
    )
    return engine, workload_from_dict(sc.workload)


def run_scenario(
    name: str | Scenario,
    overrides: ScenarioOverrides | None = None,
    metrics: MetricsSink | None = None,
    on_step: Callable[[Engine, StepOutput | None], None] | None = None,
    tick: float | None = None,
    fast_forward: bool = True,
) -> ScenarioReport:
    """Run a scenario for its duration and report (JSON-able dict, :class:`ScenarioReport`).

    Keys: ``scenario``, ``description``, ``config`` (every engine field), ``kv_cache_tokens``,
    ``usable_blocks``, ``simulated_seconds``, ``steps``, ``requests`` {arrived, finished},
    ``counters`` (preemptions, prefix_cache_queries/hits tokens, prefix_cache_hit_rate 0-1,
    external_prefix_cache_queries/hits, prompt_tokens, generation_tokens), ``final`` {running,
    waiting, kv_cache_usage}, ``peaks`` {running, waiting, kv_cache_usage}, ``steps_at_budget``
    (share 0-1 of steps whose tokens equal max_num_batched_tokens), ``latency_s`` {ttft_p50,
    ttft_p95, itl_p50, e2e_p50, queue_p50} (null without finished requests), ``throughput``
    {requests_per_s, prompt_tokens_per_s, generation_tokens_per_s}. Workloads with tagged requests
    (``seed-lru``) add ``passes``: ``[{"name", "requests", "prefix_cache_hit_tokens",
    "ttft_p50_ms"}]`` plus ``external_prefix_cache_hit_tokens`` when the CPU tier is on.

    Finished requests are not kept: :class:`~kvpilot.engine.report_stats.ReportStats` streams what the
    report needs, so memory grows with the running requests, not with all requests. ``fast_forward``:
    :class:`Engine`'s switch (the same report either way).
    """
    sc = resolve(name, overrides)
    engine, workload = build(sc, metrics=metrics, keep_finished=False, track_itls=True, fast_forward=fast_forward)
    stats = ReportStats(engine.limits.max_num_batched_tokens)

    def observe(eng: Engine, out: StepOutput | None) -> None:
        stats.observe(eng, out)
        if on_step is not None:
            on_step(eng, out)

    engine.run(workload, until=sc.duration, on_step=observe, tick=tick)
    return report(engine, sc, stats)


def report(engine: Engine, sc: Scenario, stats: ReportStats) -> ScenarioReport:
    """The JSON-able report of :func:`run_scenario` for an engine that has run ``sc``, ``stats`` observing it."""
    t = engine.now or 1.0
    q, h = engine.prefix_queries, engine.prefix_hits
    out: ScenarioReport = {
        "scenario": sc.name,
        "description": sc.description,
        "config": engine.config.to_dict(),
        "kv_cache_tokens": engine.kv_cache_tokens,
        "usable_blocks": engine.usable_blocks,
        "simulated_seconds": round(engine.now, 6),
        "steps": engine.num_steps,
        "requests": {
            "arrived": engine.num_finished + engine.num_running + engine.num_waiting,
            "finished": engine.num_finished,
        },
        "counters": {
            "preemptions": engine.num_preemptions,
            "prefix_cache_queries": q,
            "prefix_cache_hits": h,
            "prefix_cache_hit_rate": round(h / q, 6) if q else None,
            "external_prefix_cache_queries": engine.external_queries,
            "external_prefix_cache_hits": engine.external_hits,
            "prompt_tokens": engine.prompt_tokens,
            "generation_tokens": engine.generation_tokens,
        },
        "final": {
            "running": engine.num_running,
            "waiting": engine.num_waiting,
            "kv_cache_usage": round(engine.kv_cache_usage, 6),
        },
        "peaks": stats.peaks,
        "steps_at_budget": round(stats.steps_at_budget / engine.num_steps, 6) if engine.num_steps else 0.0,
        "latency_s": stats.latency_s(),
        "throughput": {
            "requests_per_s": round(engine.num_finished / t, 6),
            "prompt_tokens_per_s": round(engine.prompt_tokens / t, 3),
            "generation_tokens_per_s": round(engine.generation_tokens / t, 3),
        },
    }
    if stats.tags:
        passes = []
        for name, tag in stats.tags.items():
            ttft = tag.ttfts.percentile(0.5)  # within report_stats.RELATIVE_ACCURACY of the exact p50
            ms = None if ttft is None else round(1000 * ttft, 1)
            hits = tag.prefix_cache_hit_tokens
            if engine.offload is None:
                p: PassReport = {
                    "name": name,
                    "requests": tag.requests,
                    "prefix_cache_hit_tokens": hits,
                    "ttft_p50_ms": ms,
                }
            else:
                external = tag.external_prefix_cache_hit_tokens
                p = {
                    "name": name,
                    "requests": tag.requests,
                    "prefix_cache_hit_tokens": hits,
                    "external_prefix_cache_hit_tokens": external,
                    "ttft_p50_ms": ms,
                }
            passes.append(p)
        out["passes"] = passes
    if engine.offload is not None:
        out["kv_offload_cpu_bytes"] = engine.config.kv_offload_cpu_bytes
        out["kv_offload_cpu_gib"] = round(engine.config.kv_offload_cpu_bytes / GIB, 3)
        out["offload_capacity_chunks"] = engine.offload.capacity_chunks
    return out
