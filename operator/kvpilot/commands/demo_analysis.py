"""The analysis half of ``kvpilot demo``: KV math, the engine model, and a diagnosis of each scenario.

Sections in the style of :mod:`kvpilot.commands.demo` (each takes the shared ``DemoContext``):

- :func:`section_kv` — bytes per token of the experiment's model from its packaged ``config.json``,
  the capacity the server reported (21,520 tokens) and what each flag change would buy;
- :func:`section_engine` — the founding measurement (background.md §9) reproduced by the engine
  model: prefix-cache hits 0, 0, 21,488 over three passes, and the CPU tier's 48,640;
- :func:`section_diagnose` — every engine scenario run for a few simulated minutes with vLLM's
  metrics, then diagnosed exactly as ``kvpilot diagnose --recording`` would (same signal
  computation and rules), with the limits the server runs with (as a VLLMServer spec gives them).

Everything runs in-process in simulated time: no cluster, no GPU, no network.
"""

from __future__ import annotations

import importlib.resources
import json
from typing import Any

from rich.table import Table

#: An 8 GB laptop GPU of the founding experiment (background.md §7, §9), in bytes: 8 GiB.
EXPERIMENT_GPU_MEMORY = 8 * 2**30
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


def _model_config() -> dict:
    text = importlib.resources.files("kvpilot").joinpath("data/Qwen2.5-1.5B-Instruct.config.json").read_text()
    return json.loads(text)


def section_kv(ctx: Any) -> None:
    """KV math for the experiment: bytes/token from config.json, the reported capacity, what-ifs."""
    from kvpilot.kv import capacity

    console = ctx.console
    console.rule("[bold]7. KV math: what fits in the GPU (kvpilot kv)")
    config = _model_config()
    status = (ctx.server_object().get("status") or {}) if ctx.cluster is not None else {}
    engine = ctx.server.get("spec", {}).get("engine", {})
    max_model_len = int(engine.get("maxModelLen", 8192))
    utilization = float(engine.get("gpuMemoryUtilization", 0.6))
    kv_tokens = int(status.get("kvCacheTokens") or 21_520)
    now = capacity(config, max_model_len=max_model_len, kv_memory_bytes=0, block_size=16)
    bpt = now.bytes_per_token
    kv_bytes = kv_tokens * bpt
    base = capacity(config, max_model_len=max_model_len, kv_memory_bytes=kv_bytes)
    more_util = 0.80
    extra = int((more_util - utilization) * EXPERIMENT_GPU_MEMORY)
    raised = capacity(config, max_model_len=max_model_len, kv_memory_bytes=kv_bytes + extra)
    fp8 = capacity(config, max_model_len=max_model_len, kv_memory_bytes=kv_bytes, kv_cache_dtype="fp8")
    shorter = capacity(config, max_model_len=4096, kv_memory_bytes=kv_bytes)

    console.print(
        f"Qwen2.5-1.5B-Instruct (packaged config.json): 2 (K,V) x 28 layers x 2 KV heads x 128 head_dim "
        f"x 2 bytes = [bold]{bpt:,} bytes per token[/] (28 KiB); one {max_model_len:,}-token request "
        f"needs {max_model_len * bpt / 2**30:.4f} GiB"
    )
    predicted = (status.get("preflight") or {}).get("kvTokens")
    if predicted:
        console.print(
            f"before vLLM started, the operator's pre-flight predicted {predicted:,} KV tokens from "
            f"config.json, the weights and the node's GPU memory; vLLM reported {kv_tokens:,} "
            f"({(predicted - kv_tokens) / kv_tokens:+.2%})",
            highlight=False,
            soft_wrap=True,
        )
    console.print(
        f"the server reported {kv_tokens:,} KV tokens = {kv_bytes / 2**30:.4f} GiB = {base.kv_blocks:,} "
        f"blocks of 16 ({base.usable_blocks:,} usable: block 0 is vLLM's null block); "
        f"{base.max_concurrency:.2f} requests of {max_model_len:,} tokens at once"
    )
    table = Table(title="what each flag change buys (kvpilot kv)", title_justify="left")
    for col in ("change", "KV tokens", f"requests of {max_model_len:,} at once", "how"):
        table.add_column(col)
    table.add_row("as deployed", f"{base.kv_tokens:,}", f"{base.max_concurrency:.2f}", "reported at startup")
    table.add_row(
        f"--gpu-memory-utilization {utilization:g} -> {more_util:g}",
        f"{raised.kv_tokens:,}",
        f"{raised.max_concurrency:.2f}",
        f"+{more_util - utilization:.2f} x 8 GiB = +{extra / 2**30:.2f} GiB of KV (weights unchanged)",
    )
    table.add_row(
        "--kv-cache-dtype fp8",
        f"{fp8.kv_tokens:,}",
        f"{fp8.max_concurrency:.2f}",
        "1 byte per element instead of 2: twice the tokens",
    )
    table.add_row(
        "--max-model-len 4096",
        f"{shorter.kv_tokens:,}",
        f"{shorter.max_concurrency:.2f}",
        "same KV, shorter requests: more of them fit",
    )
    console.print(table)


def section_engine(ctx: Any) -> None:
    """The founding measurement (background.md §9) through the engine model."""
    from kvpilot.engine.scenarios import run_scenario

    console = ctx.console
    console.rule("[bold]8. The engine model reproduces the founding measurement (kvpilot simulate seed-lru)")
    base = run_scenario("seed-lru")
    offload = run_scenario("seed-lru", {"kv_offload_cpu_bytes": int(1.5 * 2**30)})
    console.print(
        f"10 documents of ~5,033 tokens (2.3x the KV cache), one at a time, three passes; "
        f"KV cache {base['kv_cache_tokens']:,} tokens = {base['usable_blocks']:,} usable blocks"
    )
    measured = {"first": ("575.5", "597.8"), "second": ("576.2", "48.6"), "reversed": ("505.4", "-")}
    table = Table(title="prefix cache under LRU: model vs the measurement (vLLM 0.29, 8 GB GPU)", title_justify="left")
    for col in (
        "pass",
        "GPU prefix hits (tokens)",
        "TTFT p50 model / measured (ms)",
        "with 1.5 GiB CPU tier: GPU / external hits",
        "TTFT p50 model / measured (ms)",
    ):
        table.add_column(col)
    for b, o in zip(base["passes"], offload["passes"]):
        m_base, m_off = measured.get(b["name"], ("-", "-"))
        table.add_row(
            b["name"],
            f"{b['prefix_cache_hit_tokens']:,}",
            f"{b['ttft_p50_ms']:.1f} / {m_base}",
            f"{o['prefix_cache_hit_tokens']:,} / {o.get('external_prefix_cache_hit_tokens', 0):,}",
            f"{o['ttft_p50_ms']:.1f} / {m_off}",
        )
    console.print(table)
    console.print(
        "why: a cyclic scan larger than an LRU cache always finds the block it needs just evicted "
        "(0 hits twice); reversed, the most recent documents come first: 1,343 blocks x 16 = 21,488."
    )


def _scenario_samples(name: str) -> tuple[list, dict[str, Any]]:
    """Run scenario ``name`` for :data:`SIM_SECONDS` with vLLM's metrics; return timestamped samples
    (snapshots every :data:`SNAPSHOT_SECONDS`, as a recording holds them) and the resolved flags.
    """
    from kvpilot.commands.simulate import Simulation
    from kvpilot.metrics.exposition import Sample

    sim = Simulation(name, {}, "0.33.0", None, horizon=SIM_SECONDS)
    samples: list[Sample] = []
    for k in range(int(SIM_SECONDS // SNAPSHOT_SECONDS) + 1):
        t = k * SNAPSHOT_SECONDS
        sim.advance_to(t)
        for family in sim.metrics.collect():
            samples.extend(Sample(s.name, s.labels, s.value, t) for s in family.samples)
    cfg = sim.engine.config
    flags = {
        "max_num_seqs": cfg.max_num_seqs,
        "max_num_batched_tokens": cfg.max_num_batched_tokens,
        "max_model_len": cfg.max_model_len,
    }
    return samples, {"flags": flags, "gpu": getattr(cfg, "gpu", None)}


def section_diagnose(ctx: Any) -> None:
    """Each engine scenario, diagnosed as ``kvpilot diagnose`` would (read-only, with the server's limits)."""
    from kvpilot.diagnose.limits import resolve_limits
    from kvpilot.diagnose.rules import diagnose_target
    from kvpilot.diagnose.signals import compute_signals
    from kvpilot.engine.hardware import gpu_profile

    console = ctx.console
    console.rule("[bold]9. Why is it slow? Each engine scenario, diagnosed (kvpilot diagnose)")
    table = Table(
        title=f"kvpilot diagnose on each engine scenario ({SIM_SECONDS / 60:g} simulated minutes, "
        f"limits from the server's flags)",
        title_justify="left",
        show_lines=True,
    )
    for col in ("scenario", "verdict", "severity", "evidence", "recommendation"):
        table.add_column(col, overflow="fold")
    results = {}
    for name in DIAGNOSED:
        samples, info = _scenario_samples(name)
        signals = compute_signals(samples, SIM_SECONDS, SIM_SECONDS)
        gpu = gpu_profile(info["gpu"]) if info["gpu"] else None
        if not signals:
            table.add_row(name, "no_data", "unknown", "no vLLM series", "")
            continue
        key, sig = next(iter(sorted(signals.items())))
        limits = resolve_limits(None, info["flags"], sig.cache_config, gpu.memory_bytes if gpu else None, info["gpu"])
        diag = diagnose_target(sig, limits)
        results[name] = diag.verdict
        rec = diag.recommendations[0] if diag.recommendations else None
        rec_text = f"{rec.flag} {rec.current} -> {rec.suggested}: {rec.expected_effect}" if rec else "-"
        table.add_row(
            name, f"[bold]{diag.verdict}[/]", diag.severity, diag.evidence[0] if diag.evidence else "", rec_text
        )
    ctx.extra["diagnoses"] = results
    console.print(table)
    console.print(
        "the same rules run on a live Prometheus: kvpilot diagnose --prometheus URL --server NAME "
        "-n NAMESPACE (read-only); on a /metrics endpoint: --metrics-url; on a recording: --recording"
    )
