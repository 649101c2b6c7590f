"""The analysis half of ``kvpilot demo``: KV math, the engine model, and a diagnosis of each scenario.

Sections in the style of :mod:`kvpilot.commands.demo` (each takes the shared ``DemoContext``):

- :func:`section_kv` — bytes per token of the experiment's model from its packaged ``config.json``,
  the capacity the server reported (21,520 tokens) and what each flag change would buy;
- :func:`section_engine` — the founding measurement (docs/engine.md) against the engine model:
  prefix-cache hits 0, 0, 21,488 over three passes and the CPU tier's 48,640 exactly, TTFT within
  the percentage it prints;
- :func:`section_diagnose` — every engine scenario run for a few simulated minutes with vLLM's
  metrics, then diagnosed exactly as ``kvpilot diagnose --recording`` would (same signal
  computation and rules), with the limits the server runs with (as a VLLMServer spec gives them).

Everything runs in-process in simulated time: no cluster, no GPU, no network.
"""

from __future__ import annotations

import importlib.resources
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.text import Text

from kvpilot.kv.capacity import REFERENCE_GPU_MEMORY_BYTES, REFERENCE_GPU_MEMORY_UTILIZATION, REFERENCE_KV_TOKENS
from kvpilot.kv.spec import KVSpec, kv_spec_from_config
from kvpilot.text.layout import Cell, records
from kvpilot.text.numbers import GIB, count, fig, gib, number, percent, plain

if TYPE_CHECKING:
    from kvpilot.diagnose.limits import GivenLimits
    from kvpilot.kv.capacity import KVCapacity
    from kvpilot.metrics.exposition import Sample

#: The 8 GB laptop GPU of the founding measurement (docs/engine.md), in bytes: 8 GiB.
EXPERIMENT_GPU_MEMORY = REFERENCE_GPU_MEMORY_BYTES
#: The packaged config.json of the experiment's model (Qwen2.5-1.5B-Instruct), inside the kvpilot package.
MODEL_CONFIG = "data/Qwen2.5-1.5B-Instruct.config.json"
#: The scenarios diagnosed by the demo, in the order they are shown, with the verdict each is built
#: to produce (kvpilot.engine.scenarios docstrings).
DIAGNOSED = (
    "kv-exhaustion",
    "max-num-seqs-cap",
    "token-budget-cap",
    "compute-bound",
    "prefix-thrash",
    "healthy",
    "idle",
)
#: Simulated seconds each scenario runs and the snapshot interval: a 5-minute diagnose window
#: (``--window 5m``, the default) over 20 snapshots.
SIM_SECONDS, SNAPSHOT_SECONDS = 300.0, 15.0


def _model_spec() -> KVSpec:
    """The KV spec of the packaged config.json, read once here."""
    text = importlib.resources.files("kvpilot").joinpath(MODEL_CONFIG).read_text()
    return kv_spec_from_config(json.loads(text))  # the packaged config.json is an object


def kv_memory_option(kv_bytes: int, block_bytes: int) -> str:
    """``--kv-memory`` text that ``kvpilot kv`` reads back as a pool of the same blocks as ``kv_bytes``: GiB
    rounded *up* to the fewest decimals (4 to 9) that keep the block count (rounding down loses the last block:
    0.5746GiB is 1,344 blocks of 458,752 bytes where 617,021,440 bytes are 1,345), else the bytes.
    """
    from kvpilot.commands._common import parse_size

    blocks = kv_bytes // block_bytes
    for decimals in range(4, 10):
        text = f"{math.ceil(kv_bytes / GIB * 10**decimals) / 10**decimals:.{decimals}f}GiB"
        if parse_size(text) // block_bytes == blocks:
            return text
    return f"{kv_bytes}B"


def kv_command(kv_bytes: int, block_bytes: int, max_model_len: int, cwd: Path | None = None) -> str:
    """The ``kvpilot kv`` command line that reproduces the demo's KV numbers offline: the packaged config.json
    (no Hub), the pool as :func:`kv_memory_option` writes it, the experiment's ``--max-model-len``.

    The config's path is relative to ``cwd`` (default: the current directory) when it lies under it, as in a
    clone after ``make demo`` (``operator/kvpilot/data/...``, pasted where the demo ran), absolute otherwise: a
    clone's absolute path makes the line longer than a terminal, and a path is never split.
    """
    import shlex

    path = Path(str(importlib.resources.files("kvpilot").joinpath(MODEL_CONFIG)))
    here = Path.cwd() if cwd is None else cwd
    if path.is_relative_to(here):
        path = path.relative_to(here)
    memory = kv_memory_option(kv_bytes, block_bytes)
    return f"kvpilot kv {shlex.quote(str(path))} --kv-memory {memory} --max-model-len {max_model_len}"


def section_kv(ctx: Any) -> None:
    """KV math for the experiment: bytes/token from config.json, the reported capacity, what-ifs."""
    from kvpilot.kv import capacity

    console = ctx.console
    ctx.heading("KV math: what fits in the GPU (kvpilot kv)")
    config = _model_spec()
    status = (ctx.server_object().get("status") or {}) if ctx.cluster is not None else {}
    engine = ctx.server.get("spec", {}).get("engine", {})
    max_model_len = int(engine.get("maxModelLen", 8192))
    utilization = float(engine.get("gpuMemoryUtilization", REFERENCE_GPU_MEMORY_UTILIZATION))
    kv_tokens = int(status.get("kvCacheTokens") or REFERENCE_KV_TOKENS)
    now = capacity(config, max_model_len=max_model_len, kv_memory_bytes=0)
    bpt = now.bytes_per_token
    kv_bytes = kv_tokens * bpt
    base = capacity(config, max_model_len=max_model_len, kv_memory_bytes=kv_bytes)
    more_util = 0.80
    extra = int((more_util - utilization) * EXPERIMENT_GPU_MEMORY)
    raised = capacity(config, max_model_len=max_model_len, kv_memory_bytes=kv_bytes + extra)
    fp8 = capacity(config, max_model_len=max_model_len, kv_memory_bytes=kv_bytes, kv_cache_dtype="fp8")
    shorter_len = max_model_len // 2
    shorter = capacity(config, max_model_len=shorter_len, kv_memory_bytes=kv_bytes)

    ctx.say(
        f"Qwen2.5-1.5B-Instruct (its config.json): 2 (K,V) x 28 layers x 2 KV heads x 128 head_dim "
        f"x 2 bytes = {count(bpt)} bytes per token; one {count(max_model_len)}-token request "
        f"needs {gib(max_model_len * bpt, 4)}"
    )
    predicted = (status.get("preflight") or {}).get("kvTokens")
    if predicted:
        ctx.say(
            f"before vLLM started, the operator's pre-flight predicted {count(predicted)} KV tokens from "
            f"config.json, the weights and the node's GPU memory; vLLM reported {count(kv_tokens)} "
            f"({number((predicted - kv_tokens) / kv_tokens * 100, 2, '%')})"
        )
    ctx.say(
        f"{count(kv_tokens)} KV tokens = {gib(kv_bytes, 4)} = {count(base.kv_blocks)} blocks of {base.block_size} "
        f"({count(base.usable_blocks)} usable: block 0 is vLLM's null block)"
    )
    headers = ["change", "KV tokens", "max-model-len", "concurrency"]
    rows: list[tuple[str, KVCapacity, int, str]] = [
        ("as deployed", base, max_model_len, "reported at startup"),
        (
            f"--gpu-memory-utilization {plain(utilization)} -> {plain(more_util)}",
            raised,
            max_model_len,
            f"+{number(more_util - utilization, 2)} x 8 GiB = +{gib(extra)} of KV (weights unchanged)",
        ),
        ("--kv-cache-dtype fp8", fp8, max_model_len, "1 byte per element instead of 2: twice the tokens"),
        (f"--max-model-len {shorter_len}", shorter, shorter_len, "same KV, shorter requests: more of them fit"),
    ]
    cells = [
        [change, count(cap.kv_tokens), count(length), number(cap.max_concurrency, 2)] + ([how] if ctx.verbose else [])
        for change, cap, length, how in rows
    ]
    console.print(
        records(console, headers + (["how"] if ctx.verbose else []), cells, title="what each flag change buys")
    )
    ctx.more.append(("KV math", kv_command(kv_bytes, base.block_size * bpt, max_model_len)))


#: The founding measurement (docs/engine.md, "The founding measurement"): TTFT p50 in ms per pass,
#: without and with the 1.5 GB LMCache CPU tier (the reversed pass was not measured with it).
MEASURED_TTFT_MS = {"first": (575.5, 597.8), "second": (576.2, 48.6), "reversed": (505.4, None)}


def _off_by(model: float | None, measured: float | None) -> float | None:
    return None if model is None or measured is None else (model - measured) / measured


def section_engine(ctx: Any) -> None:
    """The founding measurement (docs/engine.md) through the engine model: hits exact, latency within N %."""
    from kvpilot.engine.scenarios import run_scenario

    console = ctx.console
    ctx.heading("The engine model vs a measured vLLM run (kvpilot simulate seed-lru)")
    base = run_scenario("seed-lru")
    offload = run_scenario("seed-lru", {"kv_offload_cpu_bytes": int(1.5 * GIB)})
    ctx.say(
        "The measured run: the kvpilot authors ran vLLM 0.29.0 with this server's flags on one 8 GB GPU, "
        "10 documents of ~5,000 tokens (2.3x the KV cache) one at a time, three passes, without and with a "
        '1.5 GB LMCache CPU tier (docs/engine.md, "The founding measurement").'
    )
    rows: list[list[Cell]] = []
    gpu_only: list[float | None] = []
    with_tier: list[float | None] = []
    for b, o in zip(base["passes"], offload["passes"], strict=True):
        m_base, m_off = MEASURED_TTFT_MS.get(b["name"], (None, None))
        gpu_only.append(_off_by(b["ttft_p50_ms"], m_base))
        with_tier.append(_off_by(o["ttft_p50_ms"], m_off))
        rows.append(
            [
                b["name"],
                count(b["prefix_cache_hit_tokens"]),
                f"{number(b['ttft_p50_ms'], 1)} / {number(m_base, 1) if m_base else '-'}",
                f"{count(o['prefix_cache_hit_tokens'])} + {count(o.get('external_prefix_cache_hit_tokens', 0))}",
                f"{number(o['ttft_p50_ms'], 1)} / {number(m_off, 1) if m_off else '-'}",
            ]
        )
    headers = ["pass", "hits", "TTFT model/vLLM", "CPU tier: hits GPU+CPU", "TTFT model/vLLM"]
    title = f"{count(base['kv_cache_tokens'])} KV tokens = {count(base['usable_blocks'])} usable blocks; TTFT p50 in ms"
    console.print(records(console, headers, rows, title=title))
    # every pass but the CPU tier's hit pass (pass 2), which the model cannot match (below)
    worst = max(abs(x) for x in [*gpu_only, with_tier[0]] if x is not None)
    tier_hit = with_tier[1]
    tier_low = None if tier_hit is None else abs(tier_hit)
    ctx.say(
        "It reproduces the prefix-cache hit counts exactly (0, 0, 21,488 tokens; 48,640 from the CPU tier "
        f"in pass 2) and the measured TTFT p50 within {percent(worst)} without the CPU tier and on its "
        f"first pass; the CPU-tier pass 2 is {percent(tier_low, 0)} low (the model has no per-request "
        "connector overhead)."
    )
    if ctx.verbose:
        ctx.say(
            "why: a cyclic scan larger than an LRU cache always finds the block it needs just evicted "
            "(0 hits twice); reversed, the most recent documents come first: 1,343 blocks x 16 = 21,488."
        )
    ctx.more.append(("the engine model", "kvpilot simulate seed-lru --kv-offload-cpu 1.5GiB"))


def _scenario_samples(name: str) -> tuple[list[Sample], GivenLimits, str | None]:
    """Run scenario ``name`` for :data:`SIM_SECONDS` with vLLM's metrics; return timestamped samples
    (snapshots every :data:`SNAPSHOT_SECONDS`, as a recording holds them), the resolved flags and the GPU's name.
    """
    from kvpilot.commands.simulate.session import Simulation
    from kvpilot.metrics.exposition import Sample

    sim = Simulation(name, {}, "0.33.0", None, horizon=SIM_SECONDS)
    samples: list[Sample] = []
    for k in range(int(SIM_SECONDS // SNAPSHOT_SECONDS) + 1):
        t = k * SNAPSHOT_SECONDS
        sim.advance_to(t)
        for family in sim.metrics.collect():
            samples.extend(Sample(s.name, s.labels, s.value, t) for s in family.samples)
    cfg = sim.engine.config
    flags: GivenLimits = {
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_model_len": cfg.max_model_len,
    }
    gpu: str | None = getattr(cfg, "gpu", None)
    return samples, flags, gpu


def section_diagnose(ctx: Any) -> None:
    """Each engine scenario, diagnosed as ``kvpilot diagnose`` would (read-only, with the server's limits)."""
    from kvpilot.diagnose.limits import resolve_limits
    from kvpilot.diagnose.model import evidence_text
    from kvpilot.diagnose.report import change_text
    from kvpilot.diagnose.rules import diagnose_target
    from kvpilot.diagnose.signals import compute_signals

    console = ctx.console
    ctx.heading("Why is it slow? Each engine scenario, diagnosed (kvpilot diagnose)")
    rows: list[list[Cell]] = []
    results: dict[str, str] = {}
    for name in DIAGNOSED:
        samples, flags, gpu = _scenario_samples(name)
        signals = compute_signals(samples, SIM_SECONDS, SIM_SECONDS)
        if not signals:
            rows.append([name, "no_data", "unknown", "-", "no vLLM series", "-"])
            continue
        key, sig = next(iter(sorted(signals.items())))
        limits = resolve_limits(None, flags, sig.cache_config, gpu_name=gpu)
        diag = diagnose_target(sig, limits)
        results[name] = diag.verdict
        rec = diag.recommendations[0] if diag.recommendations else None
        change = change_text(rec) if rec else "-"
        evidence = evidence_text(diag.evidence[0], ctx.verbose) if diag.evidence else ""
        rows.append(
            [
                name,
                Text(diag.verdict, style="bold"),
                diag.severity,
                change,
                evidence,
                rec.expected_effect if rec else "-",
            ]
        )
    ctx.diagnoses = results
    headers = ["scenario", "verdict", "severity", "change", "evidence", "effect"]
    keep = len(headers) if ctx.verbose else 4
    title = f"{fig(SIM_SECONDS / 60, 3)} simulated minutes each, with each scenario's flags as the limits"
    console.print(records(console, headers[:keep], [row[:keep] for row in rows], title=title, heading_columns=3))
    ctx.say(
        "the same rules read a live server: kvpilot diagnose --prometheus URL --server NAME -n NAMESPACE "
        "(read-only), --metrics-url URL, or --recording FILE"
    )
    ctx.more.append(("a recording", "kvpilot simulate max-num-seqs-cap --record cap.om --duration 5m"))
    ctx.more.append(("diagnosed, with its flag", "kvpilot diagnose --recording cap.om --max-num-seqs 4"))
