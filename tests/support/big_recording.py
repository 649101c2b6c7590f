"""A large synthetic recording written on the fly: N pods x hours of samples at 1 s, OpenMetrics order.

Each pod (``namespace="bench"``, ``pod="vllm-<i>"``) exposes gauges, counters and histograms that
diagnose reads, plus families it does not read (``vllm:e2e_request_latency_seconds``,
``vllm:request_params_n``), family by family, series by series, time
by time, ending ``# EOF``: the layout ``kvpilot simulate --record`` and promtool use. The values are
simple functions of the second ``k`` (``0 <= k < seconds``) so a test can write the expected signals
out by hand:

- ``vllm:num_requests_running`` = 1 before the last ``LATE`` seconds, then ``pod + 4``;
- ``vllm:num_requests_waiting`` = 0; ``vllm:kv_cache_usage_perc`` = 0.5;
- counters ``vllm:prompt_tokens_total`` = 100 k, ``vllm:generation_tokens_total`` = 10 k,
  ``vllm:num_preemptions_total`` = 0, ``vllm:request_success_total{finished_reason}`` = k;
- histograms: every bucket of ``le >= 0.1`` (and ``_count``) counts k observations, ``_sum`` = 0.05 k.
"""

from __future__ import annotations

from pathlib import Path
from typing import TextIO

LATE = 600
T0 = 1_764_500_000
_BUCKETS = ("0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "1.0", "2.5", "+Inf")
_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc")
_COUNTERS = (
    ("vllm:prompt_tokens", 100),
    ("vllm:generation_tokens", 10),
    ("vllm:num_preemptions", 0),
)
_HISTOGRAMS = (
    "vllm:time_to_first_token_seconds",
    "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds",  # not read by diagnose
    "vllm:request_prompt_tokens",  # read by diagnose (per-request prefix reuse, with the computed tokens)
    "vllm:request_params_n",  # not read by diagnose
)


def _labels(pod: int, extra: str = "") -> str:
    return f'engine="0",{extra}model_name="Qwen/Qwen2.5-1.5B-Instruct",namespace="bench",pod="vllm-{pod}"'


def _gauge(name: str, pod: int, k: int, seconds: int) -> str:
    if name == "vllm:num_requests_running":
        return "1.0" if k < seconds - LATE else f"{pod + 4}.0"
    return "0.5" if name == "vllm:kv_cache_usage_perc" else "0.0"


def write_big_recording(fp: TextIO, pods: int, seconds: int) -> int:
    """Write the recording to ``fp``; returns the number of sample lines."""
    lines = 0
    ts = [f"{T0 + k}.0" for k in range(seconds)]
    for name in _GAUGES:
        fp.write(f"# TYPE {name} gauge\n")
        for pod in range(pods):
            head = f"{name}{{{_labels(pod)}}} "
            fp.writelines(f"{head}{_gauge(name, pod, k, seconds)} {ts[k]}\n" for k in range(seconds))
            lines += seconds
    for name, per_s in _COUNTERS:
        fp.write(f"# TYPE {name} counter\n")
        for pod in range(pods):
            head = f"{name}_total{{{_labels(pod)}}} "
            fp.writelines(f"{head}{per_s * k}.0 {ts[k]}\n" for k in range(seconds))
            lines += seconds
    fp.write("# TYPE vllm:request_success counter\n")
    for pod in range(pods):
        for reason in ("length", "stop"):
            head = f"vllm:request_success_total{{{_labels(pod, f'finished_reason={chr(34)}{reason}{chr(34)},')}}} "
            fp.writelines(f"{head}{k}.0 {ts[k]}\n" for k in range(seconds))
            lines += seconds
    for name in _HISTOGRAMS:
        fp.write(f"# TYPE {name} histogram\n")
        for pod in range(pods):
            heads = [
                (f'{name}_bucket{{{_labels(pod)[:-1]}",le="{le}"}} ', float(le) >= 0.1) for le in _BUCKETS
            ]  # le after pod: the order prometheus_client writes is not required by the reader
            count, total = f"{name}_count{{{_labels(pod)}}} ", f"{name}_sum{{{_labels(pod)}}} "
            for k in range(seconds):
                fp.writelines(f"{h}{k if full else 0}.0 {ts[k]}\n" for h, full in heads)
                fp.write(f"{count}{k}.0 {ts[k]}\n{total}{0.05 * k:.2f} {ts[k]}\n")
            lines += seconds * (len(_BUCKETS) + 2)
    fp.write("# EOF\n")
    return lines


def big_recording(path: Path, pods: int, seconds: int) -> int:
    """Write the recording to ``path`` (buffered); returns the number of sample lines."""
    with open(path, "w", encoding="utf-8", buffering=1 << 20) as fp:
        return write_big_recording(fp, pods, seconds)
