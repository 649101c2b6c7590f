"""``kvpilot simulate``: run the vLLM engine model; report, serve a live ``/metrics``, or record a timeline.

Thin I/O around :mod:`kvpilot.engine` (scenarios, engine, exporter) and :mod:`kvpilot.metrics.recording`:

- report: ``run_scenario`` and print its result (``-o text|json``);
- ``--serve HOST:PORT``: an HTTP server with ``/metrics`` (``prometheus_client`` exposition chosen by
  the ``Accept`` header, as a vLLM server answers), ``/health`` (200, empty body), ``/v1/models``
  (OpenAI list) and ``/version``, while a thread advances simulated time at ``--speed`` × wall time;
- ``--record FILE --duration D``: the same engine driven in accelerated time, one snapshot of the
  registry every ``--interval`` simulated seconds, written as a recording (design.md "Recordings")
  whose timestamps end at ``--end`` (default: now).

``vllm_shim`` is the ``vllm`` console script: ``vllm serve MODEL [vLLM flags] [--host H] [--port P]``
serves that model's endpoints on ``0.0.0.0:8000`` by default (as ``vllm serve`` does), so the engine
model can stand in for a vLLM server in clusters without GPUs.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import click
import yaml

from kvpilot.commands._common import DURATION, SIZE, fail, parse_duration

#: vLLM's own defaults for the shim's listen address (``vllm serve --host`` default None = all
#: interfaces, ``--port`` 8000; vllm/entrypoints/openai/cli_args.py, v0.33.0).
VLLM_DEFAULT_HOST = "0.0.0.0"
VLLM_DEFAULT_PORT = 8000
DEFAULT_SERVE_HOST = "127.0.0.1"
#: seconds of simulated time between recording snapshots: 5 s keeps ``rate(...[1m])`` usable
#: (12 points per minute) at 1/3 of the size of a 1 s scrape.
DEFAULT_INTERVAL = 5.0
DEFAULT_RECORD_DURATION = 600.0  # 10 minutes: testing-notes.md's backfill check used this length
TICK_SECONDS = 0.05  # wall-clock granularity of the --serve simulation thread

#: Bounds of one run, so every run ends in bounded time and memory (a mistyped ``--arrival-rate 1e9``
#: would otherwise generate 3e11 requests): requests/s (far above what one vLLM server serves), requests
#: per run (arrival rate x duration, --num-requests, or trace lines), simulated seconds (one day), and
#: simulated seconds per wall second for --serve.
MAX_ARRIVAL_RATE = 1000.0
MAX_REQUESTS = 1_000_000
MAX_SIMULATED_SECONDS = 86_400.0
MAX_SPEED = 1000.0


EXAMPLES = """
\b
Examples:
  kvpilot simulate seed-lru -o json                      the founding experiment (0, 0, 21488)
  kvpilot simulate seed-lru --kv-offload-cpu 1.5GiB      with an LMCache-like CPU tier
  kvpilot simulate max-num-seqs-cap --serve 127.0.0.1:8123 --speed 10 --duration 30m
  kvpilot simulate kv-exhaustion --record kv.om --duration 10m --interval 5s
  promtool tsdb create-blocks-from openmetrics kv.om ./data   # then: prometheus --storage.tsdb.path=./data
  kvpilot simulate healthy --vllm-version 0.10.1 --serve 8123  # old and new metric names side by side
  kvpilot simulate --vllm-args "serve Qwen/Qwen2.5-1.5B-Instruct --max-num-seqs 4" --serve 8123
  kvpilot simulate --trace requests.jsonl -o json          replay a JSON Lines trace (healthy's engine)
"""


# ---------------------------------------------------------------------------------------------- parsing
def parse_end(text: str | None, now: float) -> float:
    """``--end``: Unix seconds, ISO 8601 (``2026-11-30T12:00:00Z``) or ``now`` -> Unix seconds.

    Raises:
        ValueError: naming ``--end``.
    """
    if text is None or text == "now":
        return now
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--end: {text!r} is neither Unix seconds nor ISO 8601") from None
    if parsed.tzinfo is None:
        raise ValueError(f"--end: {text!r} has no time zone (add Z or +00:00)")
    return parsed.timestamp()


def parse_listen(text: str, default_host: str, field: str = "--serve") -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` -> ``(host, port)``; port 0 lets the OS choose.

    Raises:
        ValueError: naming ``field``.
    """
    host, sep, port = str(text).rpartition(":")
    if not sep:
        host = default_host
    host = host.strip("[]") or default_host
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{field}: {text!r} is not HOST:PORT or PORT (example: 127.0.0.1:8123)")
    return host, int(port)


def _block_size(value: int | None) -> int | None:
    """``--block-size``: one of vLLM's block sizes (kvpilot.kv.capacity.VLLM_BLOCK_SIZES), else a usage error."""
    from kvpilot.kv.capacity import check_block_size
    from kvpilot.kv.spec import KVConfigError

    try:
        return None if value is None else check_block_size(value)
    except KVConfigError as exc:
        raise click.BadParameter(exc.message) from None


# ---------------------------------------------------------------------------------------------- engine glue
def _call(what: str, fn: Callable[..., Any], *args, **kwargs) -> Any:
    """Run an engine-side call; its ValueError/KeyError (bad flag, unknown scenario) becomes exit 2."""
    try:
        return fn(*args, **kwargs)
    except (ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        fail(f"{what}: {message}")


def _engine_value(engine: Any, *names: str) -> Any:
    """First attribute found among ``names`` on the engine or its ``config`` (None if none)."""
    for holder in (engine, getattr(engine, "config", None)):
        for name in names:
            value = getattr(holder, name, None) if holder is not None else None
            if value is not None:
                return value
    return None


def cache_config_labels(engine: Any, overrides: Mapping[str, Any]) -> dict[str, str]:
    """The ``vllm:cache_config_info`` labels for a built engine, as vLLM ``str()``s CacheConfig fields.

    Keys: ``block_size``, ``num_gpu_blocks`` (usable + the null block), ``gpu_memory_utilization``,
    ``enable_prefix_caching``, ``cache_dtype``, ``kv_cache_size_tokens``, ``kv_cache_max_concurrency``
    (tokens ÷ ``max_model_len``, background.md §2). Values the engine does not expose are left out.
    """
    block_size = int(_engine_value(engine, "block_size") or overrides.get("block_size") or 16)
    config = getattr(engine, "config", None)
    blocks = None
    if config is not None and hasattr(config, "resolved_num_gpu_blocks"):
        blocks = int(config.resolved_num_gpu_blocks())
    tokens = (
        blocks * block_size
        if blocks
        else (_engine_value(engine, "kv_cache_tokens") or overrides.get("kv_cache_tokens"))
    )
    labels: dict[str, str] = {"block_size": str(block_size)}
    if tokens:
        # vLLM: kv_cache_size_tokens = num_gpu_blocks * block_size (v1/core/kv_cache_utils.py)
        labels["num_gpu_blocks"] = str(blocks or int(tokens) // block_size)
        labels["kv_cache_size_tokens"] = str(int(tokens))
        max_model_len = _engine_value(engine, "max_model_len") or overrides.get("max_model_len")
        if max_model_len:
            labels["kv_cache_max_concurrency"] = f"{int(tokens) / int(max_model_len):.2f}"
    gmu = _engine_value(engine, "gpu_memory_utilization") or overrides.get("gpu_memory_utilization")
    if gmu is not None:
        labels["gpu_memory_utilization"] = str(gmu)
    caching = _engine_value(engine, "enable_prefix_caching")
    if caching is None:
        caching = overrides.get("enable_prefix_caching", True)
    labels["enable_prefix_caching"] = str(bool(caching))
    labels["cache_dtype"] = str(
        _engine_value(engine, "kv_cache_dtype", "cache_dtype") or overrides.get("kv_cache_dtype") or "auto"
    )
    return labels


class Simulation:
    """A built engine + workload + exporter, advanced in simulated seconds (thread-safe ``advance_to``).

    Args:
        scenario: scenario name; ``overrides`` as :func:`kvpilot.engine.scenarios.resolve` takes them.
        horizon: simulated seconds the run must cover. A Poisson workload bounded by ``duration``
            is stretched to it (scenarios arrive for 300 s by default, a recording may be longer).
        endless: keep arrivals coming forever (``--serve`` without ``--duration``): when a Poisson
            workload runs out, the next chunk of the same length starts where it ended (seed + 1).
    """

    def __init__(
        self,
        scenario: str,
        overrides: dict[str, Any],
        vllm_version: str,
        model_name: str | None,
        horizon: float | None = None,
        endless: bool = False,
    ):
        from kvpilot.engine import scenarios
        from kvpilot.engine.exporter import VLLMMetrics

        spec = _call(f"scenario {scenario}", scenarios.resolve, scenario, overrides or None)
        self._wl_spec = dict(spec.workload)
        stretch = self._wl_spec.get("type") == "poisson" and "duration" in self._wl_spec
        if stretch and horizon and horizon > float(self._wl_spec["duration"]):
            spec = _call(f"scenario {scenario}", scenarios.resolve, spec, {"workload": {"duration": float(horizon)}})
            self._wl_spec = dict(spec.workload)
        self._endless = endless and stretch
        self._chunk = 0
        # Built once without metrics to learn the resolved flags (max_model_len, KV blocks) that
        # the exporter's buckets and cache_config_info need, then for real with the exporter.
        probe, _ = _call(f"scenario {scenario}", scenarios.build, spec)
        self.max_model_len = int(_engine_value(probe, "max_model_len") or 8192)
        self.model_name = str(model_name or _engine_value(probe, "served_model_name", "model") or "kvpilot/simulated")
        self.metrics = _call(
            "--vllm-version",
            VLLMMetrics,
            vllm_version=vllm_version,
            model_name=self.model_name,
            cache_config=cache_config_labels(probe, overrides),
            max_model_len=self.max_model_len,
        )
        self.engine, self.workload = _call(
            f"scenario {scenario}", scenarios.build, spec, metrics=self.metrics, keep_finished=False
        )
        self._lock = threading.Lock()

    @property
    def now(self) -> float:
        """Simulated seconds since the start."""
        return float(self.engine.now)

    def _refill(self) -> None:
        from kvpilot.engine.workloads import from_dict

        self._chunk += 1
        spec = {
            **self._wl_spec,
            "start": self.engine.now,
            "seed": int(self._wl_spec.get("seed", 0)) + self._chunk,
            "id_prefix": f"req{self._chunk}",
        }
        self.workload = from_dict(spec)

    def advance_to(self, t: float) -> None:
        """Run the engine until simulated time ``t`` (s); idle time passes when nothing is left to do."""
        with self._lock:
            if t <= self.engine.now:
                return
            if self._endless and self.workload.next_arrival_time() is None:
                self._refill()
            self.engine.run(self.workload, until=t)


# ---------------------------------------------------------------------------------------------- modes
def _print_report(result: Mapping[str, Any], output: str) -> None:
    if output == "json":
        click.echo(json.dumps(result, indent=2, sort_keys=False, default=str))
        return
    for key, value in result.items():
        if isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            click.echo(f"{key}:")
            for row in value:
                click.echo("  - " + ", ".join(f"{k}={v}" for k, v in row.items()))
        elif isinstance(value, Mapping) and len(value) > 4:
            click.echo(f"{key}:")
            for k, v in value.items():
                click.echo(f"  {k}: {v}")
        elif isinstance(value, Mapping):
            click.echo(f"{key}: " + ", ".join(f"{k}={v}" for k, v in value.items()))
        else:
            click.echo(f"{key}: {value}")


def record(sim: Simulation, path: Path, duration: float, interval: float, end: float) -> tuple[int, float, float]:
    """Drive ``sim`` for ``duration`` simulated seconds and write a recording to ``path``.

    One snapshot at simulated 0, interval, 2·interval, … ≤ duration; timestamps are shifted so the
    last snapshot lands on ``end`` (Unix seconds). Returns ``(sample lines, first ts, last ts)``.
    """
    from kvpilot.metrics.recording import write_recording

    steps = int(duration // interval)
    offset = end - steps * interval

    def snapshots():
        for k in range(steps + 1):
            sim.advance_to(k * interval)
            yield offset + k * interval, sim.metrics.collect()

    lines = write_recording(snapshots(), path)
    return lines, offset, offset + steps * interval


def _handler(sim: Simulation, version: str) -> type[BaseHTTPRequestHandler]:
    models_body = json.dumps(
        {
            "object": "list",
            "data": [
                {
                    "id": sim.model_name,
                    "object": "model",
                    "created": int(time.time()),
                    "owned_by": "vllm",
                    "root": sim.model_name,
                    "parent": None,
                    "max_model_len": sim.max_model_len,
                }
            ],
        }
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        server_version = "kvpilot-simulate"

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body, content_type = sim.metrics.exposition(self.headers.get("Accept"))
                self._send(200, body, content_type)
            elif path == "/health":
                self._send(200, b"", "text/plain")  # vLLM: 200 with an empty body
            elif path == "/v1/models":
                self._send(200, models_body, "application/json")
            elif path == "/version":
                self._send(200, json.dumps({"version": version}).encode(), "application/json")
            else:
                self._send(404, json.dumps({"detail": "Not Found"}).encode(), "application/json")

        do_HEAD = do_GET

        def log_message(self, *args: Any) -> None:  # quiet access log
            return

    return Handler


def serve(sim: Simulation, host: str, port: int, speed: float, duration: float | None, version: str) -> None:
    """Serve ``sim`` on ``host:port`` while advancing it at ``speed`` × wall time.

    Stops after ``duration`` simulated seconds (``duration / speed`` wall seconds), or on SIGTERM/SIGINT.
    Prints one line ``serving http://HOST:PORT`` once the socket listens.
    """
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before listening: a stop request is never lost
        signal.signal(sig, lambda *_: stop.set())
    try:
        httpd = ThreadingHTTPServer((host, port), _handler(sim, version))
    except OSError as exc:
        fail(f"--serve: cannot listen on {host}:{port} ({exc.strerror or exc})")
    httpd.daemon_threads = True
    server_thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    server_thread.start()
    bound_host, bound_port = httpd.server_address[:2]
    click.echo(
        f"serving http://{bound_host}:{bound_port} (model {sim.model_name}, vLLM {version}, speed {speed:g}x)",
        err=False,
    )
    sys.stdout.flush()
    wall0 = time.monotonic()
    try:
        while not stop.is_set():
            target = speed * (time.monotonic() - wall0)
            if duration is not None and target >= duration:
                sim.advance_to(duration)
                break
            sim.advance_to(target)
            stop.wait(TICK_SECONDS)
    finally:
        httpd.shutdown()
        httpd.server_close()


# ---------------------------------------------------------------------------------------------- overrides
#: workload flags -> keys of the scenario's workload spec (kvpilot.engine.workloads.from_dict)
_WORKLOAD_FLAGS = {
    "arrival_rate": "rate",
    "prompt_tokens": "prompt_len",
    "output_tokens": "output_len",
    "num_requests": "num_requests",
    "seed": "seed",
}


def _load_scenario_file(path: str) -> dict[str, Any]:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        fail(f"--scenario-file: cannot read {path}: {exc.strerror or exc}")
    except yaml.YAMLError as exc:
        fail(f"--scenario-file: {path} is not valid YAML ({str(exc).splitlines()[0]})")
    if data is None:
        return {}
    if not isinstance(data, dict):
        fail(f"--scenario-file: {path} must hold a mapping of settings, not a {type(data).__name__}")
    return {str(k).replace("-", "_"): v for k, v in data.items()}


def _vllm_overrides(argv: list[str]) -> tuple[dict[str, Any], str | None, int | None]:
    """Split vLLM's argv: returns (engine overrides, host, port). ``--host``/``--port`` are the server's."""
    host = port = None
    rest: list[str] = []
    i = 0
    while i < len(argv):
        key, eq, value = argv[i].partition("=")
        if key in ("--host", "--port"):
            if not eq:
                if i + 1 >= len(argv):
                    fail(f"{key}: missing value")
                value = argv[i + 1]
                i += 1
            if key == "--host":
                host = value
            elif not value.isdigit() or int(value) > 65535:
                fail(f"--port: {value!r} is not a port number")
            else:
                port = int(value)
        else:
            rest.append(argv[i])
        i += 1
    from kvpilot.engine import scenarios

    parse = getattr(scenarios, "from_vllm_args", None)
    if parse is None:
        from kvpilot.engine.vllm_args import from_vllm_args as parse
    overrides = _call("--vllm-args", parse, rest)
    return dict(overrides or {}), host, port


# ---------------------------------------------------------------------------------------------- command
@click.command(name="simulate", epilog=EXAMPLES, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("scenario", required=False)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="Report format (report mode).",
)
@click.option(
    "--serve",
    "serve_at",
    metavar="[HOST:]PORT",
    help=f"Serve /metrics, /health, /v1/models live (host defaults to {DEFAULT_SERVE_HOST}).",
)
@click.option(
    "--speed",
    type=float,
    default=1.0,
    show_default=True,
    help=f"Simulated seconds per wall-clock second for --serve (at most {MAX_SPEED:g}).",
)
@click.option(
    "--record",
    "record_to",
    type=click.Path(dir_okay=False, writable=True),
    help="Write a recording (OpenMetrics with timestamps) to FILE.",
)
@click.option(
    "--duration",
    type=DURATION,
    help="Simulated time: --record length (default 10m); --serve stops after it (default: until stopped); at most 24h.",
)
@click.option(
    "--interval",
    type=DURATION,
    default=DEFAULT_INTERVAL,
    show_default=True,
    help="Simulated seconds between recording snapshots.",
)
@click.option("--end", help="Timestamp of the recording's last snapshot: Unix seconds or ISO 8601 (default now).")
@click.option("--vllm-version", default=None, help="vLLM release whose metric names to expose (default 0.33.0).")
@click.option("--model-name", "--served-model-name", "model_name", help="model_name label and /v1/models id.")
@click.option("--scenario-file", type=click.Path(dir_okay=False), help="YAML mapping of scenario settings.")
@click.option(
    "--trace",
    "trace_file",
    metavar="FILE.jsonl",
    help="Replay a JSON Lines trace (one request per line: arrival_time, prompt_tokens, output_len, "
    "prefix_group, prefix_len, request_id, cache_salt, lora_id, tag) on SCENARIO's engine "
    "(default healthy).",
)
@click.option("--vllm-args", help='vLLM\'s own command line, e.g. "serve MODEL --max-num-seqs 4".')
@click.option("--max-num-seqs", type=click.IntRange(min=1))
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1))
@click.option("--max-model-len", type=click.IntRange(min=1))
@click.option("--gpu-memory-utilization", type=click.FloatRange(min=0, max=1, min_open=True))
@click.option("--kv-cache-tokens", type=click.IntRange(min=1), help="KV capacity in tokens (overrides the GPU maths).")
@click.option(
    "--block-size",
    type=int,
    callback=lambda ctx, param, value: _block_size(value),
    help="Tokens per KV block: one of vLLM's 1, 8, 16, 32, 64, 128, 256.",
)
@click.option("--enable-prefix-caching/--no-enable-prefix-caching", default=None)
@click.option(
    "--arrival-rate",
    type=click.FloatRange(min=0, max=MAX_ARRIVAL_RATE),
    help=f"Poisson arrivals, requests/s (at most {MAX_ARRIVAL_RATE:g}).",
)
@click.option("--prompt-tokens", type=click.IntRange(min=1), help="Mean prompt length, tokens.")
@click.option("--output-tokens", type=click.IntRange(min=1), help="Mean output length, tokens.")
@click.option(
    "--num-requests",
    type=click.IntRange(min=0, max=MAX_REQUESTS),
    help=f"Requests of the workload (at most {MAX_REQUESTS:,}).",
)
@click.option(
    "--kv-offload-cpu", "kv_offload_cpu_bytes", type=SIZE, help="LMCache-like CPU KV tier size (e.g. 1.5GiB)."
)
@click.option("--gpu", help="GPU profile (e.g. H100, A100, L4, laptop-8gb).")
@click.option("--seed", type=int)
def command(
    scenario: str | None,
    output: str,
    serve_at: str | None,
    speed: float,
    record_to: str | None,
    duration: float | None,
    interval: float,
    end: str | None,
    vllm_version: str | None,
    model_name: str | None,
    scenario_file: str | None,
    vllm_args: str | None,
    trace_file: str | None,
    **flags: Any,
) -> None:
    """Run the vLLM engine model: print results, --serve a live /metrics, or --record a timeline.

    SCENARIO is one of seed-lru, kv-exhaustion, max-num-seqs-cap, token-budget-cap, compute-bound,
    prefix-thrash, healthy, idle (default healthy with --vllm-args or --trace, else required).
    --trace FILE.jsonl replaces the scenario's workload with the file's requests; without --duration the
    run lasts the scenario's time or until 60 s after the last arrival, whichever is longer.
    """
    try:
        vllm_argv = shlex.split(vllm_args) if vllm_args else None
    except ValueError as exc:  # e.g. an unbalanced quote
        fail(f"--vllm-args: cannot split {vllm_args!r} like a shell would ({exc})")
    run(
        scenario,
        output=output,
        serve_at=serve_at,
        speed=speed,
        record_to=record_to,
        duration=duration,
        interval=interval,
        end=end,
        vllm_version=vllm_version,
        model_name=model_name,
        scenario_file=scenario_file,
        vllm_argv=vllm_argv,
        flags=flags,
        trace_file=trace_file,
    )


#: Simulated seconds a replayed trace keeps running after its last arrival (when --duration is not given).
TRACE_TAIL_SECONDS = 60.0


def _load_trace_file(path: str) -> list[dict[str, Any]]:
    """``--trace FILE.jsonl`` as a trace workload's request list; exits 2 naming the line and field."""
    from kvpilot.engine.workloads import trace_requests

    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.readlines()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--trace: cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
    try:
        items = trace_requests(lines)
    except ValueError as exc:  # "trace line N: <field>: <reason>"
        fail(f"--trace: {path}: {exc}")
    if not items:
        fail(f"--trace: {path} holds no request (one JSON object per line)")
    return items


def _check_bounds(
    overrides: Mapping[str, Any], scenario: Any, duration: float | None, trace: list | None, from_cli: Mapping[str, Any]
) -> None:
    """Refuse a run above :data:`MAX_ARRIVAL_RATE`, :data:`MAX_REQUESTS` or :data:`MAX_SIMULATED_SECONDS`
    (exit 2 naming the option, or the ``--scenario-file`` key, that set it).
    """
    if trace is not None and len(trace) > MAX_REQUESTS:
        fail(f"--trace: {len(trace):,} requests is above the maximum {MAX_REQUESTS:,} of one run")
    wl = {**(scenario.workload or {}), **(overrides.get("workload") or {})}
    rate, count = wl.get("rate"), wl.get("num_requests")
    rate_opt = "--arrival-rate" if "rate" in from_cli else "--scenario-file workload.rate"
    seconds = duration or overrides.get("duration") or scenario.duration or DEFAULT_RECORD_DURATION
    try:
        rate = None if rate is None else float(rate)
        count = None if count is None else int(count)
        seconds = float(seconds)
    except (TypeError, ValueError):
        return  # not numbers: the engine names the field
    if not duration and seconds > MAX_SIMULATED_SECONDS:
        fail(f"--scenario-file duration: {seconds:g} s is above the maximum {MAX_SIMULATED_SECONDS:g} s (24h)")
    if rate is not None and rate > MAX_ARRIVAL_RATE:
        fail(f"{rate_opt}: {rate:g} requests/s is above the maximum {MAX_ARRIVAL_RATE:g}")
    if count is not None and count > MAX_REQUESTS:
        opt = "--num-requests" if "num_requests" in from_cli else "--scenario-file workload.num_requests"
        fail(f"{opt}: {count:,} requests is above the maximum {MAX_REQUESTS:,} of one run")
    if rate is not None and count is None and rate * seconds > MAX_REQUESTS:
        fail(
            f"{rate_opt}: {rate:g} requests/s for {seconds:g} s is {rate * seconds:,.0f} requests, above the "
            f"maximum {MAX_REQUESTS:,} of one run (lower the rate or --duration)"
        )


def run(
    scenario: str | None,
    *,
    output: str = "text",
    serve_at: str | None = None,
    speed: float = 1.0,
    record_to: str | None = None,
    duration: float | None = None,
    interval: float = DEFAULT_INTERVAL,
    end: str | None = None,
    vllm_version: str | None = None,
    model_name: str | None = None,
    scenario_file: str | None = None,
    vllm_argv: list[str] | None = None,
    flags: Mapping[str, Any] | None = None,
    default_host: str = DEFAULT_SERVE_HOST,
    trace_file: str | None = None,
) -> None:
    """The command's body (shared with :func:`vllm_shim`); exits 2 with one line on bad input."""
    from kvpilot.engine.exporter import DEFAULT_VLLM_VERSION
    from kvpilot.metrics.catalog import version_tuple

    if serve_at and record_to:
        fail("--serve and --record: choose one")
    if speed <= 0 or speed > MAX_SPEED:
        fail(f"--speed: must be in (0, {MAX_SPEED:g}], got {speed:g}")
    if duration is not None and duration > MAX_SIMULATED_SECONDS:
        fail(f"--duration: {duration:g} s is above the maximum {MAX_SIMULATED_SECONDS:g} s (24h) of one run")
    try:  # validate the mode's own options before any engine work
        listen = parse_listen(serve_at, default_host) if serve_at else None
        end_ts = parse_end(end, float(int(time.time())))  # whole seconds: readable timestamps
    except ValueError as exc:
        fail(str(exc))
    total = duration or DEFAULT_RECORD_DURATION
    if record_to and not Path(record_to).expanduser().resolve().parent.is_dir():
        fail(f"--record: cannot write {record_to}: its folder does not exist")
    if record_to and interval > total:
        fail(f"--interval: {interval:g} s is longer than --duration {total:g} s")
    overrides: dict[str, Any] = {}
    if scenario_file:
        overrides.update(_load_scenario_file(scenario_file))
        if "block_size" in overrides:
            try:
                _block_size(overrides["block_size"])
            except click.BadParameter as exc:
                fail(f"--scenario-file: block_size: {exc.message}")
    host = port = None
    if vllm_argv:
        vllm_over, host, port = _vllm_overrides(vllm_argv)
        overrides.update(vllm_over)
    flags = {k: v for k, v in (flags or {}).items() if v is not None}
    workload = {key: flags.pop(flag) for flag, key in _WORKLOAD_FLAGS.items() if flag in flags}
    trace = None
    if trace_file:
        clash = [f"--{flag.replace('_', '-')}" for flag, key in _WORKLOAD_FLAGS.items() if key in workload]
        if clash:
            fail(f"--trace: the trace gives the workload; drop {', '.join(clash)}")
        trace = _load_trace_file(trace_file)
    overrides.update(flags)
    scenario = scenario or overrides.pop("scenario", None) or ("healthy" if vllm_argv or trace else None)
    overrides.pop("scenario", None)
    from kvpilot.engine.scenarios import SCENARIOS

    known = SCENARIOS

    if not scenario:
        fail("SCENARIO: missing (one of: " + ", ".join(known) + ")")
    if scenario not in known:
        fail(f"SCENARIO: unknown scenario {scenario!r} (one of: {', '.join(known)})")
    if workload:
        base = dict(known[scenario].workload)
        if "rate" in workload and base.get("type") != "poisson":
            # e.g. --arrival-rate on idle or seed-lru: switch to Poisson arrivals for the scenario's time
            workload = {"type": "poisson", "duration": known[scenario].duration or DEFAULT_RECORD_DURATION, **workload}
        overrides["workload"] = {**overrides.get("workload", {}), **workload}
    if trace is not None:
        overrides["workload"] = {"type": "trace", "requests": trace}
        if duration is None:  # every request arrives, plus a tail to finish
            last = max(float(r.get("arrival_time", r.get("timestamp", 0))) for r in trace)
            duration = max(float(known[scenario].duration or DEFAULT_RECORD_DURATION), last + TRACE_TAIL_SECONDS)
            total = duration
    _check_bounds(overrides, known[scenario], duration or (total if record_to else None), trace, from_cli=workload)
    version = vllm_version or str(overrides.pop("vllm_version", "") or DEFAULT_VLLM_VERSION)
    if len(version_tuple(version)) < 2:
        fail(f"--vllm-version: {version!r} is not a vLLM release such as 0.10.1")
    name = model_name or overrides.get("served_model_name")

    if not serve_at and not record_to:
        from kvpilot.engine import scenarios

        if duration is not None:
            # run for --duration simulated seconds; a Poisson workload keeps arriving that long
            overrides["duration"] = duration
            if trace is None and (known[scenario].workload.get("type") == "poisson" or "rate" in workload):
                overrides["workload"] = {**overrides.get("workload", {}), "duration": duration}
        result = _call(f"scenario {scenario}", scenarios.run_scenario, scenario, overrides=overrides or None)
        _print_report(result, output)
        return

    horizon = total if record_to else duration
    sim = Simulation(scenario, overrides, version, name, horizon=horizon, endless=bool(serve_at) and not duration)
    if record_to:
        try:
            lines, first, last = record(sim, Path(record_to), total, interval, end_ts)
        except OSError as exc:
            fail(f"--record: cannot write {record_to}: {exc.strerror or exc}")
        click.echo(
            f"wrote {lines} samples to {record_to}: {scenario}, {total:g} simulated s every {interval:g} s, "
            f"timestamps {first:.0f}..{last:.0f}"
        )
        return
    listen_host, listen_port = listen
    serve(sim, host or listen_host, port if port is not None else listen_port, speed, duration, version)


SHIM_USAGE = """\
usage: vllm serve MODEL [vLLM flags] [--host HOST] [--port PORT]

kvpilot's engine-model shim: serves vLLM's /metrics, /health, /v1/models and /version for MODEL on
0.0.0.0:8000 (vLLM's defaults) from kvpilot's simulation, so it can stand in for a vLLM server where
there is no GPU. vLLM flags it models: --max-num-seqs, --max-num-batched-tokens, --max-model-len,
--gpu-memory-utilization, --block-size, --num-gpu-blocks-override, --[no-]enable-prefix-caching,
--[no-]enable-chunked-prefill, --kv-cache-dtype, --tensor-parallel-size, --served-model-name,
--kv-offloading-size; others are ignored.

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
        from kvpilot.engine.exporter import DEFAULT_VLLM_VERSION

        click.echo(os.environ.get("KVPILOT_VLLM_VERSION", DEFAULT_VLLM_VERSION))
        return
    if not argv or argv[0] != "serve" or len(argv) < 2 or argv[1].startswith("-"):
        fail("usage: vllm serve MODEL [vLLM flags] [--host HOST] [--port PORT] (kvpilot engine-model shim)")
    try:
        speed = float(os.environ.get("KVPILOT_SPEED", "1"))
        duration = os.environ.get("KVPILOT_DURATION")
        duration_s = parse_duration(duration, "KVPILOT_DURATION") if duration else None
    except ValueError as exc:
        fail(f"KVPILOT_SPEED/KVPILOT_DURATION: {exc}")
    run(
        os.environ.get("KVPILOT_SCENARIO", "healthy"),
        serve_at=f"{VLLM_DEFAULT_HOST}:{VLLM_DEFAULT_PORT}",
        speed=speed,
        duration=duration_s,
        vllm_version=os.environ.get("KVPILOT_VLLM_VERSION"),
        vllm_argv=argv,
        default_host=VLLM_DEFAULT_HOST,
    )
