"""The ``vllm`` console script: ``vllm serve MODEL [vLLM flags]`` answered by the engine model."""

from __future__ import annotations

import os
import sys

import click

from kvpilot.commands._common import fail, fail_input, parse_duration
from kvpilot.commands.simulate.cli import run
from kvpilot.commands.simulate.options import VLLM_DEFAULT_HOST, VLLM_DEFAULT_PORT
from kvpilot.text.errors import InvalidValueError

SHIM_USAGE = """\
usage: vllm serve MODEL [vLLM flags] [--host HOST] [--port PORT]

kvpilot's engine-model shim: serves vLLM's /metrics, /health, /v1/models and /version for MODEL on
0.0.0.0:8000 (vLLM's defaults) from kvpilot's simulation, so it can stand in for a vLLM server where
there is no GPU. vLLM flags it models: --max-num-seqs, --max-num-batched-tokens, --max-model-len,
--gpu-memory-utilization, --block-size, --num-gpu-blocks-override, --[no-]enable-prefix-caching,
--[no-]enable-chunked-prefill, --kv-cache-dtype, --tensor-parallel-size, --served-model-name,
--kv-offloading-size; others are ignored. Without --max-model-len it serves the model's own context
(as vLLM derives it from the config), on the scenario's GPU (healthy: h100-sxm, 80 GiB).

environment:
  KVPILOT_SCENARIO      workload scenario (default healthy; see kvpilot simulate --help)
  KVPILOT_SPEED         simulated seconds per wall-clock second (default 1)
  KVPILOT_DURATION      stop after this much simulated time (e.g. 10m; default: until stopped)
  KVPILOT_VLLM_VERSION  vLLM release whose metric names to expose (default 0.33.0)"""


def vllm_shim(argv: list[str] | None = None) -> None:
    """Entry point ``vllm``: ``vllm serve MODEL [vLLM flags] [--host H] [--port P]``.

    Serves the engine model behind vLLM's endpoints on ``0.0.0.0:8000`` unless ``--host``/``--port``
    say otherwise (vLLM's defaults). Knobs a container can set without changing vLLM's command line:
    ``KVPILOT_SCENARIO`` (default ``healthy``), ``KVPILOT_SPEED`` (default 1), ``KVPILOT_DURATION``
    (simulated seconds; default unbounded), ``KVPILOT_VLLM_VERSION`` (default 0.33.0).
    ``--help``/``-h`` (alone or after ``serve``) prints :data:`SHIM_USAGE` and exits 0; anything
    but ``serve`` exits 2 with one line.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] in (["--help"], ["-h"]) or (argv[:1] == ["serve"] and any(a in ("--help", "-h") for a in argv[1:])):
        click.echo(SHIM_USAGE)
        return
    if argv in (["--version"], ["-v"]):
        from kvpilot.metrics.catalog import DEFAULT_VLLM_VERSION

        click.echo(os.environ.get("KVPILOT_VLLM_VERSION", DEFAULT_VLLM_VERSION))
        return
    if not argv or argv[0] != "serve" or len(argv) < 2 or argv[1].startswith("-"):
        fail("usage: vllm serve MODEL [vLLM flags] [--host HOST] [--port PORT] (kvpilot engine-model shim)")
    speed_text = os.environ.get("KVPILOT_SPEED", "1")
    try:
        speed = float(speed_text)
    except ValueError:
        fail(f"KVPILOT_SPEED: {speed_text!r} is not a number")
    duration = os.environ.get("KVPILOT_DURATION")
    try:
        duration_s = parse_duration(duration, "KVPILOT_DURATION") if duration else None
    except InvalidValueError as exc:
        fail_input(exc)
    run(
        os.environ.get("KVPILOT_SCENARIO", "healthy"),
        serve_at=f"{VLLM_DEFAULT_HOST}:{VLLM_DEFAULT_PORT}",
        speed=speed,
        duration=duration_s,
        vllm_version=os.environ.get("KVPILOT_VLLM_VERSION"),
        vllm_argv=argv,
        default_host=VLLM_DEFAULT_HOST,
        strict_vllm_args=False,
    )
