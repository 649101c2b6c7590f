"""Recordings vLLM 0.29.0 produced with the ground truth of each window: which limit refused its queue.

Each scenario of :data:`SCENARIOS` is a server's flags and traffic (Poisson streams built as
``kvpilot.engine.workloads.poisson`` builds them, shared prefixes as prompt segments) run through vLLM's own
``Scheduler``, ``KVCacheManager``, ``OutputProcessor`` and ``PrometheusStatLogger`` by the reference driver
(``vllm_driver.py``, in the vLLM venv) for a few hundred simulated seconds (60 s after a warm-up for the
1,024-slot pair, whose every step costs vLLM's Python ~80 ms); the step time is the roofline of the
scenario's GPU and model (``kvpilot/engine/hardware.py``), and nothing else of kvpilot's engine is used. For
every scenario two files go to ``tests/fixtures/recordings/vllm/verdicts/``:

- ``NAME.om``: the stat logger's registry every 10 s, in the project's recording format
  (``kvpilot.metrics.recording``), timestamps ending at 1,764,600,000 (2025-12-01T14:40:00Z) at the end of the
  run;
- ``NAME.truth.json``: the flags the server ran with, and for every 60 s sub-window and every evaluated window
  (``--end`` times with their ``--window``) the binding limit and the share of each refusal reason
  (``tests/reference/refusals.py::binding_limit`` over the driver's per-step ``refusal``, read from vLLM's
  scheduler as it ran), whether the GPU was saturated (the roofline's compute term set the step time for at least
  70 % of the window's step time: the ``E >= 0.7`` of docs/diagnosis.md) and what the prefix cache did per
  request (of the requests re-using a shared prefix, the share that found it in the cache at admission: vLLM's
  ``num_computed_tokens``).

:func:`expected_verdicts` maps a window's truth onto the verdicts of ``kvpilot diagnose`` that name it.

Regenerate (the vLLM venv from ``make vllm-ref``):

    .venv/bin/python -m tests.reference.verdict_scenarios [--out DIR] [--only NAME ...]

``tests/reference/test_verdict_scenarios.py`` checks the committed files equal what this writes.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvpilot.diagnose.rules import REUSED_BY_MOST
from kvpilot.engine.config import EngineConfig
from kvpilot.engine.core import Engine
from kvpilot.engine.request import Request
from kvpilot.engine.workloads import poisson
from kvpilot.gpus import gpu_profile
from kvpilot.metrics.recording import recording_text
from tests.reference.harness import driver_spec, run_vllm
from tests.reference.refusals import REASONS, binding_limit
from tests.reference.vllm_recordings import END, INTERVAL, snapshot_families

OUT = Path(__file__).resolve().parent.parent / "fixtures" / "recordings" / "vllm" / "verdicts"
SUBWINDOW = 60.0
#: a window's GPU is saturated when the compute term sets this share of its step time (docs/diagnosis.md E >= 0.7)
SATURATED = 0.7
#: below this share of step time set by the compute term, a larger budget adds tokens per second nearly in
#: proportion: the budget is the cap (docs/diagnosis.md E <= 0.3); between the two the step time grows with the
#: tokens in part, and both readings of a spent budget (``token_budget_cap``, ``compute_bound``) are right, the
#: nearer one first: no cliff between two causes at one share
UNSATURATED = 0.3
#: the shared prefix of a window's requests counts as evicted when fewer than this share of them found it cached:
#: the threshold kvpilot diagnose's prefix rule applies (one definition)
PREFIX_HIT = REUSED_BY_MOST
#: a second reason that refused the queue's head for at least this share of the queued time binds as well
ALSO_BINDS = 0.4
#: Half the width of the grey zone around the truth's line between "a limit binds" and "none"
#: (``refusals.binding_limit``: a request left waiting over half the window). Any reader of the metrics sees the
#: queue through the waiting gauge sampled every :data:`INTERVAL` s, 6 to 9 samples in a 60-90 s window, so the
#: share of the window with a queue is known to about sqrt(0.5 x 0.5 / 9) = 0.17 (one standard deviation of a
#: share of 0.5 from 9 independent samples; a queue's samples are correlated, so more): a queued share within
#: 1.5 of those, 0.25, of the line is between two readings, and the verdict of either side names it.
QUEUE_GREY = 0.25


@dataclass(frozen=True)
class VerdictScenario:
    """One server and its traffic.

    Attributes:
        name: file stem.
        cause: what it tests: an issue cause (``"1"`` ... ``"6"``) or ``"shift"``, ``"churn"``, ``"speculative"``,
            ``"priority"``.
        control_of: the scenario whose traffic this one repeats with the limit raised (it must not fire), or "".
        description: one line.
        flags: :class:`~kvpilot.engine.config.EngineConfig` fields (GPU, model, KV, limits).
        streams: ``kvpilot.engine.workloads.poisson`` keyword arguments, one Poisson stream each (``start``,
            ``duration``, ``rate``, lengths, ``prefix_groups``/``prefix_len``, ``seed``, ``id_prefix``).
        features: the driver's vLLM features (``policy``, ``lora``, ``speculative``, ``remote_kv``).
        lora_adapters: each request names one of this many adapters (seeded), 0: no LoRA.
        priorities: each request gets one of these priorities (seeded), empty: all 0.
        remote_prefill: every request's prompt was prefilled elsewhere (``remote_kv``).
        duration: simulated seconds recorded.
        warmup: simulated seconds run before the recording starts (traffic from t = 0; the recording and every
            window start after it, so a large server is seen in its steady state).
        evaluations: ``(end, window)`` pairs (simulated seconds from the start): the ``--end`` and ``--window``
            the accuracy harness diagnoses at.
    """

    name: str
    cause: str
    control_of: str
    description: str
    flags: Mapping[str, Any]
    streams: tuple[Mapping[str, Any], ...]
    features: Mapping[str, Any] = field(default_factory=dict)
    lora_adapters: int = 0
    priorities: tuple[int, ...] = ()
    remote_prefill: bool = False
    duration: float = 300.0
    warmup: float = 0.0
    evaluations: tuple[tuple[float, float], ...] = ((120.0, 300.0), (210.0, 300.0), (300.0, 300.0))


def _s(**kw: Any) -> dict[str, Any]:
    return kw


SCENARIOS: dict[str, VerdictScenario] = {}


def _add(*scenarios: VerdictScenario) -> None:
    for sc in scenarios:
        SCENARIOS[sc.name] = sc


# ---- cause 1: max_num_seqs reached with KV near full and no preemption (vLLM checks the cap first) ----
_CAP_KV = {
    "gpu": "l4",
    "model": "qwen2.5-7b",
    "max_num_seqs": 48,
    "max_num_batched_tokens": 2048,
    "max_model_len": 4096,
    # 48 requests of at most 1,450 + 200 tokens = 104 blocks each: 4,992 usable blocks + vLLM's null block
    "kv_cache_tokens": 4993 * 16,
}
_CAP_KV_TRAFFIC = (
    _s(rate=2.0, duration=300.0, seed=11, prompt_len={"dist": "uniform", "min": 1350, "max": 1450}, output_len=200),
)
_add(
    VerdictScenario(
        "cap-with-kv-full",
        "1",
        "",
        "--max-num-seqs 48 on an L4, ~1,500-token requests: 48 running fill ~90 % of a KV cache sized so that no "
        "request is ever preempted; the queue waits on the running cap, which vLLM checks before the KV cache.",
        _CAP_KV,
        _CAP_KV_TRAFFIC,
    ),
    VerdictScenario(
        "cap-with-kv-full-control",
        "1",
        "cap-with-kv-full",
        "The same traffic and KV cache with --max-num-seqs 96: the KV cache now refuses the queue.",
        {**_CAP_KV, "max_num_seqs": 96},
        _CAP_KV_TRAFFIC,
    ),
)

# ---- cause 2: a queue is more than one waiting sample ----
_NEAR = {"gpu": "l4", "model": "qwen2.5-7b", "max_model_len": 8192}
_NEAR_TRAFFIC = (
    _s(
        rate=0.4,
        duration=300.0,
        seed=21,
        prompt_len={"dist": "uniform", "min": 3000, "max": 5000},
        output_len={"dist": "uniform", "min": 100, "max": 300},
    ),
)
_THRASH = {"gpu": "l4", "model": "qwen2.5-1.5b", "max_model_len": 8192, "gpu_memory_utilization": 0.3}
_THRASH_TRAFFIC = (
    _s(rate=3.5, duration=300.0, seed=22, prefix_groups=100, prefix_len=3000, prompt_len=3200, output_len=100),
)
_add(
    VerdictScenario(
        "near-limits-healthy",
        "2",
        "",
        "vLLM's L4 defaults (budget 2,048), 3,000-5,000-token prompts at 0.4 req/s: a request waits now and then "
        "behind another's prefill chunks, but not most of the time.",
        _NEAR,
        _NEAR_TRAFFIC,
    ),
    VerdictScenario(
        "near-limits-healthy-control",
        "2",
        "near-limits-healthy",
        "The same traffic with --max-num-batched-tokens 8192: a prompt prefills in one step.",
        {**_NEAR, "max_num_batched_tokens": 8192},
        _NEAR_TRAFFIC,
    ),
    VerdictScenario(
        "thrash-short-waits",
        "2",
        "",
        "100 shared 3,000-token prefixes reused at random through a small KV cache (--gpu-memory-utilization 0.3): "
        "the prefixes are evicted before their reuse; prefill chunks make a request wait now and then.",
        _THRASH,
        _THRASH_TRAFFIC,
    ),
    VerdictScenario(
        "thrash-short-waits-control",
        "2",
        "thrash-short-waits",
        "The same traffic with --gpu-memory-utilization 0.9: the KV cache holds every prefix.",
        {**_THRASH, "gpu_memory_utilization": 0.9},
        _THRASH_TRAFFIC,
    ),
)

# ---- cause 3: prefix-cache findings per prefix, not per token ----
_DOCS = {"gpu": "l4", "model": "qwen2.5-1.5b", "max_model_len": 16384, "gpu_memory_utilization": 0.25}
_add(
    VerdictScenario(
        "system-prompt-hot",
        "3",
        "",
        "One 256-token system prompt before unique 8,000-12,000-token documents: the prompt hits on nearly every "
        "request while the documents make most tokens (a token-level hit rate of ~2 %).",
        _DOCS,
        (
            _s(
                rate=0.3,
                duration=300.0,
                seed=31,
                prefix_groups=1,
                prefix_len=256,
                prompt_len={"dist": "uniform", "min": 8000, "max": 12000},
                output_len={"dist": "uniform", "min": 100, "max": 200},
            ),
        ),
    ),
    VerdictScenario(
        "system-prompts-evicted",
        "3",
        "system-prompt-hot",
        "The same server and documents with 20 tenants' system prompts: each is reused ~1 minute apart, after "
        "more than the KV cache was written, and is evicted by then.",
        _DOCS,
        (
            _s(
                rate=0.3,
                duration=300.0,
                seed=31,
                prefix_groups=20,
                prefix_len=256,
                prompt_len={"dist": "uniform", "min": 8000, "max": 12000},
                output_len={"dist": "uniform", "min": 100, "max": 200},
            ),
        ),
    ),
)

# ---- cause 4: LoRA adapters that cannot join the batch (vLLM's deferred waiting reason) ----
_LORA = {"gpu": "l4", "model": "qwen2.5-7b", "max_model_len": 8192}
_LORA_TRAFFIC = (
    _s(
        rate=1.0,
        duration=300.0,
        seed=41,
        prompt_len={"dist": "uniform", "min": 500, "max": 1500},
        output_len={"dist": "uniform", "min": 100, "max": 300},
    ),
)
_add(
    VerdictScenario(
        "lora-deferred",
        "4",
        "",
        "--max-loras 2 with requests for 8 adapters: a request whose adapter is not in the batch is deferred; "
        "KV stays low.",
        _LORA,
        _LORA_TRAFFIC,
        features={"lora": {"max_loras": 2, "max_lora_rank": 16}},
        lora_adapters=8,
    ),
    VerdictScenario(
        "lora-deferred-control",
        "4",
        "lora-deferred",
        "The same traffic with --max-loras 8: every adapter fits the batch.",
        _LORA,
        _LORA_TRAFFIC,
        features={"lora": {"max_loras": 8, "max_lora_rank": 16}},
        lora_adapters=8,
    ),
)

# ---- cause 5: no limit binds: a decode server waiting on KV transfers from its prefill servers ----
_PD = {"gpu": "l4", "model": "qwen2.5-7b", "max_model_len": 8192}
_PD_TRAFFIC = (
    _s(
        rate=1.0,
        duration=300.0,
        seed=51,
        prompt_len={"dist": "uniform", "min": 1500, "max": 2500},
        output_len={"dist": "uniform", "min": 100, "max": 300},
    ),
)
_add(
    VerdictScenario(
        "remote-kv-wait",
        "5",
        "",
        "The decode side of prefill/decode disaggregation: every prompt's KV comes from a prefill server, 0.5 s + "
        "1 ms per token (57 MB/s) per transfer; a few requests always wait on their transfer while steps, slots "
        "and KV have room.",
        _PD,
        _PD_TRAFFIC,
        features={"remote_kv": {"seconds_per_token": 0.001, "latency": 0.5}},
        remote_prefill=True,
    ),
    VerdictScenario(
        "remote-kv-wait-control",
        "5",
        "remote-kv-wait",
        "The same traffic with transfers 20x faster (25 ms + 50 us per token).",
        _PD,
        _PD_TRAFFIC,
        features={"remote_kv": {"seconds_per_token": 0.00005, "latency": 0.025}},
        remote_prefill=True,
    ),
)

# ---- cause 6: vLLM's default max_num_seqs of a large GPU (1,024), pinned ----
_BIG = {"gpu": "h100-sxm", "model": "qwen2.5-7b", "max_model_len": 8192}
_BIG_TRAFFIC = (
    _s(
        rate=72.0,
        duration=80.0,
        seed=61,
        prompt_len={"dist": "uniform", "min": 500, "max": 700},
        output_len={"dist": "uniform", "min": 50, "max": 350},
    ),
)
# ~1,000 running requests cost vLLM's scheduler ~80 ms of CPU per step: 60 s recorded after a 20 s warm-up
_BIG_EVALS = ((30.0, 300.0), (45.0, 300.0), (60.0, 300.0))
_add(
    VerdictScenario(
        "default-cap-1024",
        "6",
        "",
        "vLLM's defaults on an H100 (max_num_seqs 1,024, budget 8,192), ~800-token requests at 72 req/s: 1,024 "
        "run and the rest wait; the gauge dips below 1,024 as requests finish and are replaced.",
        _BIG,
        _BIG_TRAFFIC,
        duration=60.0,
        warmup=20.0,
        evaluations=_BIG_EVALS,
    ),
    VerdictScenario(
        "default-cap-1024-control",
        "6",
        "default-cap-1024",
        "The same traffic with --max-num-seqs 2048: about 1,500 run, until the KV cache refuses the rest.",
        {**_BIG, "max_num_seqs": 2048},
        _BIG_TRAFFIC,
        duration=60.0,
        warmup=20.0,
        evaluations=_BIG_EVALS,
    ),
)

# ---- a bottleneck that shifts: short chat, then long documents, on the same server ----
_add(
    VerdictScenario(
        "shift-cap-to-budget",
        "shift",
        "",
        "--max-num-seqs 32, --max-num-batched-tokens 256 on an L4: 0-180 s short prompts with long answers fill "
        "the 32 slots; 180-360 s 6,000-token documents with short answers keep every step's budget busy with prefill.",
        {"gpu": "l4", "model": "qwen2.5-7b", "max_num_seqs": 32, "max_num_batched_tokens": 256, "max_model_len": 8192},
        (
            _s(
                rate=1.0,
                start=0.0,
                duration=180.0,
                seed=71,
                prompt_len={"dist": "uniform", "min": 100, "max": 250},
                output_len={"dist": "uniform", "min": 400, "max": 600},
            ),
            _s(
                rate=0.6,
                start=180.0,
                duration=180.0,
                seed=72,
                prompt_len={"dist": "uniform", "min": 5000, "max": 7000},
                output_len={"dist": "uniform", "min": 10, "max": 30},
            ),
        ),
        duration=360.0,
        evaluations=((180.0, 120.0), (270.0, 60.0), (360.0, 120.0)),
    ),
)

# ---- preemption churn at a high max_num_seqs ----
_add(
    VerdictScenario(
        "preemption-churn-1024",
        "churn",
        "",
        "--max-num-seqs 1024 on an L4 (Qwen2.5-7B, 122,544 KV tokens): far fewer of the ~1,000-token requests fit "
        "the KV cache than the slots allow; running requests need blocks as they grow and are preempted over and "
        "over.",
        {"gpu": "l4", "model": "qwen2.5-7b", "max_model_len": 8192, "max_num_seqs": 1024},
        (
            _s(
                rate=3.0,
                duration=360.0,
                seed=81,
                prompt_len={"dist": "uniform", "min": 200, "max": 600},
                output_len={"dist": "uniform", "min": 400, "max": 800},
            ),
        ),
        warmup=60.0,
    ),
)

# ---- speculative decoding: drafts take budget and slots ----
_add(
    VerdictScenario(
        "speculative-cap",
        "speculative",
        "",
        "n-gram speculative decoding, 4 draft tokens at 60 % acceptance, --max-num-seqs 16 on an L4: every decode "
        "step carries 5 tokens per running request; the queue waits on the 16 slots.",
        {"gpu": "l4", "model": "qwen2.5-7b", "max_num_seqs": 16, "max_num_batched_tokens": 2048, "max_model_len": 8192},
        (
            _s(
                rate=1.6,
                duration=300.0,
                seed=91,
                prompt_len={"dist": "uniform", "min": 300, "max": 700},
                output_len={"dist": "uniform", "min": 200, "max": 400},
            ),
        ),
        features={"speculative": {"num_speculative_tokens": 4, "acceptance_rate": 0.6, "seed": 91}},
    ),
)

# ---- priority scheduling: high-priority traffic preempts the rest out of a full KV cache ----
_add(
    VerdictScenario(
        "priority-kv",
        "priority",
        "",
        "--scheduling-policy priority, 20 % of requests at priority 0 and the rest at 1, into a KV cache too small "
        "for the load: vLLM preempts the lowest-priority running request when a block is needed.",
        {"gpu": "l4", "model": "qwen2.5-7b", "max_model_len": 8192, "kv_cache_tokens": 40000},
        (
            _s(
                rate=1.0,
                duration=300.0,
                seed=101,
                prompt_len={"dist": "uniform", "min": 1000, "max": 2000},
                output_len={"dist": "uniform", "min": 300, "max": 600},
            ),
        ),
        features={"policy": "priority"},
        priorities=(0, 1, 1, 1, 1),
    ),
)


def engine_for(sc: VerdictScenario) -> Engine:
    """The kvpilot engine built with the scenario's flags: its resolved limits, KV blocks and step-time coefficients."""
    return Engine(EngineConfig.from_dict(dict(sc.flags)))


def requests_for(sc: VerdictScenario) -> list[Request]:
    """The scenario's requests, every stream merged in arrival order (ties: stream order)."""
    out: list[Request] = []
    for i, stream in enumerate(sc.streams):
        kw = {"id_prefix": f"s{i}", **stream}
        out.extend(r for r in poisson(**kw).requests if r.arrival_time < sc.warmup + sc.duration)  # type: ignore[union-attr]
    out.sort(key=lambda r: r.arrival_time)
    return out


def request_fields(sc: VerdictScenario, requests: Sequence[Request]) -> dict[str, dict[str, Any]]:
    """Per-request driver fields: adapter, priority, remote prefill (seeded by the scenario's name)."""
    rng = random.Random(sc.name)
    out: dict[str, dict[str, Any]] = {}
    for r in requests:
        f: dict[str, Any] = {}
        if sc.lora_adapters:
            f["lora"] = f"adapter-{rng.randrange(sc.lora_adapters)}"
        if sc.priorities:
            f["priority"] = rng.choice(sc.priorities)
        if sc.remote_prefill:
            f["remote_prefill"] = True
        if f:
            out[r.request_id] = f
    return out


def server_flags(sc: VerdictScenario, engine: Engine) -> dict[str, Any]:
    """The flags the server ran with, by vLLM's names, as an operator (or a VLLMServer spec) knows them."""
    cfg = engine.config
    gpu = gpu_profile(cfg.gpu)
    flags: dict[str, Any] = {
        "model": cfg.model,
        "gpu": cfg.gpu,
        "gpu_memory_bytes": gpu.memory_bytes,
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_model_len": cfg.max_model_len,
        "block_size": cfg.block_size,
        "num_gpu_blocks": engine.num_gpu_blocks,
        "kv_cache_tokens": engine.num_gpu_blocks * cfg.block_size,
        "enable_prefix_caching": cfg.enable_prefix_caching,
        "enable_chunked_prefill": cfg.enable_chunked_prefill,
        "policy": sc.features.get("policy", "fcfs"),
    }
    if "lora" in sc.features:
        flags["max_loras"] = sc.features["lora"]["max_loras"]
    if "speculative" in sc.features:
        flags["num_speculative_tokens"] = sc.features["speculative"]["num_speculative_tokens"]
    return flags


def driver_doc(sc: VerdictScenario) -> dict[str, Any]:
    """The driver's workload document for ``sc`` (light step records, snapshots every 10 s)."""
    engine = engine_for(sc)
    reqs = requests_for(sc)
    return driver_spec(
        sc.name,
        engine,
        reqs,
        served_model_name=engine.config.model,
        snapshot_interval=INTERVAL,
        until=sc.warmup + sc.duration,
        record_steps="light",
        features=dict(sc.features),
        request_fields=request_fields(sc, reqs),
    )


def _saturation(steps: Sequence[Mapping[str, Any]], t0: float, t1: float) -> float:
    """Share of the window's step time (0-1) that the roofline's compute term set (``compute_share``)."""
    busy = compute = 0.0
    for s in steps:
        a, b = max(t0, s["start"]), min(t1, s["start"] + s["duration"])
        if b > a:
            busy += b - a
            compute += (b - a) * s["compute_share"]
    return compute / busy if busy else 0.0


def _prefix(
    admissions: Sequence[Sequence[Any]],
    shared: Mapping[str, tuple[object, int]],
    prompts: Mapping[str, int],
    t0: float,
    t1: float,
) -> dict[str, Any]:
    """Prefix-cache truth of the requests first admitted in ``[t0, t1)``.

    ``shared``: request id -> (its shared prefix, the prefix's tokens in whole blocks: the only part vLLM can
    cache); ``prompts``: request id -> prompt tokens. A request found its prefix when vLLM admitted it with at
    least that many tokens already computed; only requests whose prefix an earlier admission brought in count
    (the first use of a prefix cannot hit).
    """
    n = hits = 0
    computed = total = 0
    seen: set[object] = set()
    for rid, t, cached in admissions:
        key, tokens = shared.get(rid, (None, 0))
        reused = key is not None and key in seen
        if key is not None:
            seen.add(key)
        if not t0 <= t < t1:
            continue
        total += prompts[rid]
        computed += cached
        if reused:
            n += 1
            hits += cached >= tokens
    return {
        "shared_prefix_requests": n,
        "shared_prefix_hit_share": round(hits / n, 4) if n else None,
        "token_hit_rate": round(computed / total, 4) if total else None,
    }


def truth(sc: VerdictScenario, engine: Engine, requests: Sequence[Request], result: Mapping[str, Any]) -> dict:
    """The ground-truth document of one scenario's run (module docstring)."""
    steps = result["steps"]
    bs = engine.config.block_size
    counts: dict[object, int] = {}
    for r in requests:
        key = r.segments[0][0]
        counts[key] = counts.get(key, 0) + 1
    shared = {
        r.request_id: (r.segments[0][0], (r.segments[0][1] // bs) * bs)
        for r in requests
        if len(r.segments) > 2 and counts[r.segments[0][0]] > 1 and r.segments[0][1] >= bs
    }
    prompts = {r.request_id: r.prompt_len for r in requests}

    def window(t0: float, t1: float) -> dict[str, Any]:
        # t0, t1: seconds from the recording's start; the driver's clock runs warmup seconds ahead
        a, b = t0 + sc.warmup, t1 + sc.warmup
        ran = any(s["tokens"] and a <= s["start"] < b for s in steps)
        return {
            "t0": t0,
            "t1": t1,
            "binding": binding_limit(steps, a, b).as_dict(),
            "gpu_saturated": _saturation(steps, a, b) >= SATURATED,
            "compute_share": round(_saturation(steps, a, b), 4),
            "served": ran,
            "prefix": _prefix(result["admissions"], shared, prompts, a, b),
        }

    start = END - sc.duration
    subs = []
    t = 0.0
    while t < sc.duration - 1e-9:
        subs.append(window(t, min(sc.duration, t + SUBWINDOW)))
        t += SUBWINDOW
    evaluations = []
    for end, win in sc.evaluations:
        w = window(max(0.0, end - win), end)
        evaluations.append({"end": end, "end_unix": start + end, "window": win, **w})
    return {
        "scenario": sc.name,
        "cause": sc.cause,
        "control_of": sc.control_of,
        "description": sc.description,
        "vllm_version": "0.29.0",
        "recording": f"{sc.name}.om",
        "start_unix": start,
        "end_unix": END,
        "duration": sc.duration,
        "warmup": sc.warmup,
        "interval": INTERVAL,
        "requests": len(requests),
        "flags": server_flags(sc, engine),
        "subwindows": subs,
        "evaluations": evaluations,
    }


def expected_verdicts(window: Mapping[str, Any]) -> tuple[str, ...]:
    """The ``kvpilot diagnose`` verdicts that name a window's ground truth (first: the one to aim for).

    ``max_num_seqs`` -> ``max_num_seqs_cap``; ``kv_cache`` -> ``kv_cache_exhaustion``; ``token_budget`` ->
    ``token_budget_cap``, or ``compute_bound`` when the GPU was saturated, either between
    :data:`UNSATURATED` and :data:`SATURATED`; ``lora`` -> ``lora_slot_cap``;
    ``other`` -> ``unexplained_queue``; ``none`` -> ``prefix_cache_ineffective`` when the shared prefix was
    evicted (found by fewer than half of the requests re-using one), else ``healthy``, or ``idle`` when nothing
    ran. A second reason that refused the head for at least :data:`ALSO_BINDS` of the queued time binds as well:
    its verdict is right too (after the binding one). A queued share within :data:`QUEUE_GREY` of the line between
    the two (half the window) is between two readings: the verdicts of the other side are right too (after those
    of its own side): the limit that refused the head most when the queue was short of the line, the verdict of no
    queue when it was past it.
    """
    binding = window["binding"]
    limit = binding["limit"]
    shares = binding.get("shares") or ({limit: 1.0} if limit != "none" else {})
    queued = binding.get("queued_share", 0.0 if limit == "none" else 1.0)
    quiet = _quiet_verdict(window)
    if limit != "none":
        also = sorted((r for r, v in shares.items() if r != limit and v >= ALSO_BINDS), key=lambda r: -shares[r])
        out = tuple(dict.fromkeys(v for r in (limit, *also) for v in _queue_verdicts(r, window)))
        return out + ((quiet,) if queued < 0.5 + QUEUE_GREY and quiet not in out else ())
    top = max(REASONS[:-1], key=lambda r: (shares.get(r, 0.0), -REASONS.index(r)))
    if queued >= 0.5 - QUEUE_GREY and shares.get(top, 0.0) > 0:
        return quiet, *_queue_verdicts(top, window)
    return (quiet,)


def _quiet_verdict(window: Mapping[str, Any]) -> str:
    """The verdict of a window without a queue: the prefix cache decides, else served or not."""
    share = window["prefix"]["shared_prefix_hit_share"]
    if share is not None and share < PREFIX_HIT:
        return "prefix_cache_ineffective"
    return "healthy" if window["served"] else "idle"


def _queue_verdicts(reason: str, window: Mapping[str, Any]) -> tuple[str, ...]:
    """The verdicts naming ``reason``; a spent budget by the window's compute share (:data:`UNSATURATED`)."""
    if reason == "token_budget":
        share = window.get("compute_share")
        if share is None:  # a truth written before the share was kept
            return ("compute_bound",) if window["gpu_saturated"] else ("token_budget_cap",)
        if share >= SATURATED:
            return ("compute_bound",)
        if share <= UNSATURATED:
            return ("token_budget_cap",)
        both = ("token_budget_cap", "compute_bound")
        return both if share < (SATURATED + UNSATURATED) / 2 else both[::-1]
    return (
        {
            "max_num_seqs": "max_num_seqs_cap",
            "kv_cache": "kv_cache_exhaustion",
            "lora": "lora_slot_cap",
            "other": "unexplained_queue",
        }[reason],
    )


def recording(sc: VerdictScenario, result: Mapping[str, Any]) -> str:
    """The run's snapshots after the warm-up as recording text (timestamps ``END - duration + t - warmup``)."""
    snaps = [
        (END - sc.duration + t - sc.warmup, snapshot_families(snap))
        for t, snap in result["snapshots"]
        if sc.warmup - 1e-9 <= t <= sc.warmup + sc.duration + 1e-9
    ]
    return recording_text(snaps)


def generate(python: str, names: Sequence[str] | None = None) -> dict[str, str]:
    """``{file name: text}``: each scenario's recording and ground truth, from one driver run."""
    chosen = [SCENARIOS[n] for n in (names or SCENARIOS)]
    docs = [driver_doc(sc) for sc in chosen]
    answer = run_vllm(python, docs, timeout=3600)
    if answer["vllm_version"] != "0.29.0":
        raise RuntimeError(f"the reference venv runs vLLM {answer['vllm_version']}, not 0.29.0")
    out: dict[str, str] = {}
    for sc, result in zip(chosen, answer["results"], strict=True):
        engine = engine_for(sc)
        out[f"{sc.name}.om"] = recording(sc, result)
        doc = truth(sc, engine, requests_for(sc), result)
        out[f"{sc.name}.truth.json"] = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    return out


def load_truths(folder: Path = OUT) -> dict[str, dict[str, Any]]:
    """``{scenario: ground-truth document}`` of the committed files."""
    return {p.name.removesuffix(".truth.json"): json.loads(p.read_text()) for p in sorted(folder.glob("*.truth.json"))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", help="scenario names (default: all)")
    parser.add_argument(
        "--python",
        default=os.environ.get("KVPILOT_VLLM_PYTHON")
        or str(Path(os.environ.get("KVPILOT_VLLM_VENV") or Path.home() / ".cache/kvpilot/vllm-0.29.0") / "bin/python"),
    )
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, text in generate(args.python, args.only).items():
        (args.out / name).write_text(text, encoding="utf-8")
        print(f"{args.out / name}: {len(text.splitlines())} lines")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
