"""Engine timelines for the alert-rule tests: ``kvpilot simulate --record`` output, turned into
``promtool test rules`` input series (and the operator's limits metric for the same server).

The recordings are made when the tests run, from the current engine model, so the rules are checked
against what the engine (and so vLLM's own metric code the engine is checked against) exposes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

from kvpilot.engine.scenarios import SCENARIOS
from kvpilot.metrics.recording import read_recording

#: recordings: simulated seconds and sample interval (900 s every 15 s: three 5 m windows, and the
#: rules' for: durations, overridden below, fit before the end)
DURATION, INTERVAL = 900, 15
#: target labels a Kubernetes scrape adds (the rules group by them and join on namespace/pod)
TARGET = {"namespace": "llm", "pod": "qwen-7f3a2", "instance": "10.0.0.7:8000", "job": "vllm"}
#: vLLM releases whose names the variants expose (kvpilot.metrics.catalog: legacy names only before
#: 0.9.2, both generations 0.9.2-0.10.x, new only from 0.11.0)
VERSIONS = {"new": "0.33.0", "old": "0.8.5", "both": "0.10.1", "underscore": "0.33.0"}
#: the families the rules read (everything else is left out of the promtool input)
USED = (
    "num_requests_running",
    "num_requests_waiting",
    "kv_cache_usage_perc",
    "gpu_cache_usage_perc",
    "num_preemptions_total",
    "iteration_tokens_total_sum",
    "iteration_tokens_total_count",
    "prefix_cache_queries_total",
    "prefix_cache_hits_total",
    "gpu_prefix_cache_queries_total",
    "gpu_prefix_cache_hits_total",
    "external_prefix_cache_hits_total",
    "request_success_total",
    "time_to_first_token_seconds_bucket",
    "prompt_tokens_total",
    "generation_tokens_total",
    "request_prefill_time_seconds_sum",
    "request_prefill_time_seconds_count",
    "inter_token_latency_seconds_sum",
    "inter_token_latency_seconds_count",
    "time_per_output_token_seconds_sum",
    "time_per_output_token_seconds_count",
)


#: the recordings' last timestamp (2025-12-01T14:40:00Z)
END = 1764600000


def record(
    scenario: str,
    version: str,
    out: Path,
    *,
    duration: int = DURATION,
    interval: int = INTERVAL,
    end: int = END,
    extra: tuple[str, ...] = (),
) -> Path:
    """``kvpilot simulate SCENARIO --record OUT`` (the CLI, as a user runs it)."""
    cmd = [sys.executable, "-m", "kvpilot.cli", "simulate", scenario, "--record", str(out)]
    cmd += ["--duration", f"{duration}s", "--interval", f"{interval}s", "--end", str(end)]
    cmd += ["--vllm-version", version, *extra]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300, env={**os.environ, "COLUMNS": "120"})
    return out


def with_target_labels(text: str, labels: dict[str, str]) -> str:
    """A recording's text with the target labels a Kubernetes scrape adds on every sample."""
    extra = "".join(f'{k}="{v}",' for k, v in labels.items())
    lines = (
        line if line.startswith("#") or "{" not in line else line.replace("{", "{" + extra, 1)
        for line in text.splitlines()
    )
    return "\n".join(lines) + "\n"


def limit_recording(values: dict[str, float], labels: dict[str, str], start: int, end: int, step: int) -> str:
    """``kvpilot_vllmserver_limit`` as a recording (OpenMetrics with timestamps) for backfilling."""
    out = ["# HELP kvpilot_vllmserver_limit Configured limit of a VLLMServer.", "# TYPE kvpilot_vllmserver_limit gauge"]
    for name, value in sorted(values.items()):
        tags = ",".join(f'{k}="{v}"' for k, v in {**labels, "limit": name}.items())
        out += [f"kvpilot_vllmserver_limit{{{tags}}} {value} {ts}" for ts in range(start, end + 1, step)]
    return "\n".join([*out, "# EOF"]) + "\n"


def _used(name: str) -> bool:
    base = name.removeprefix("vllm:")
    return name.startswith("vllm:") and base in USED


def _fmt(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def input_series(
    recording: Path, *, underscore: bool = False, duration: int = DURATION, interval: int = INTERVAL
) -> list[dict[str, str]]:
    """Promtool ``input_series`` of the families the rules use, every ``interval`` s from time 0, ``duration`` s."""
    series: dict[tuple, dict[float, float]] = defaultdict(dict)
    for s in read_recording(recording):
        if _used(s.name):
            series[(s.name, tuple(sorted(s.labels.items())))][s.timestamp] = s.value
    start = min(ts for points in series.values() for ts in points)
    out = []
    for (name, labels), points in sorted(series.items()):
        slots = [points.get(start + i * interval) for i in range(duration // interval + 1)]
        values = " ".join("_" if v is None else repr(float(v)) for v in slots)
        shown = name.replace("vllm:", "vllm_") if underscore else name
        out.append({"series": shown + _fmt({**dict(labels), **TARGET}), "values": values})
    return out


def kv_cache_tokens(recording: Path) -> int:
    """The KV capacity the engine reported (``vllm:cache_config_info``: num_gpu_blocks x block_size)."""
    for s in read_recording(recording):
        if s.name.startswith("vllm:cache_config_info"):
            return int(s.labels["num_gpu_blocks"]) * int(s.labels["block_size"])
    raise AssertionError(f"{recording}: no vllm:cache_config_info")


def limits(scenario: str, recording: Path) -> dict[str, float]:
    """What the operator would export for this server: the flags the scenario sets, and the KV capacity."""
    flags = SCENARIOS[scenario].flags
    out = {k: float(flags[k]) for k in ("max_num_seqs", "max_num_batched_tokens", "max_model_len") if k in flags}
    out["kv_cache_tokens"] = float(kv_cache_tokens(recording))
    return out


def limit_series(values: dict[str, float], samples: int = DURATION // INTERVAL + 1) -> list[dict[str, str]]:
    """``kvpilot_vllmserver_limit`` series (as the operator serves them) for :data:`TARGET`'s pod, ``samples`` long."""
    n = samples
    return [
        {
            "series": "kvpilot_vllmserver_limit"
            + _fmt(
                {
                    "namespace": TARGET["namespace"],
                    "pod": TARGET["pod"],
                    "server": "qwen",
                    "limit": k,
                    "instance": "10.0.0.2:8081",
                    "job": "kvpilot-operator",
                }
            ),
            "values": f"{v!r}x{n - 1}",
        }
        for k, v in sorted(values.items())
    ]
