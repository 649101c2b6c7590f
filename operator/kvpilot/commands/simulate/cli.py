"""The ``kvpilot simulate`` click command and :func:`run`, the body it shares with the ``vllm`` shim."""

from __future__ import annotations

import json
import shlex
import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, Unpack, cast

import click

from kvpilot.commands._common import DURATION, SIZE, fail, fail_input
from kvpilot.commands.simulate.options import (
    DEFAULT_INTERVAL,
    DEFAULT_RECORD_DURATION,
    DEFAULT_SERVE_HOST,
    MAX_ARRIVAL_RATE,
    MAX_REQUESTS,
    MAX_SIMULATED_SECONDS,
    MAX_SNAPSHOTS,
    MAX_SPEED,
    TRACE_TAIL_SECONDS,
    WORKLOAD_FLAGS,
    block_size_option,
    check_bounds,
    load_scenario_file,
    load_trace_file,
    parse_end,
    parse_listen,
    vllm_overrides,
    workload_of,
)
from kvpilot.commands.simulate.session import Simulation, engine_call, record
from kvpilot.text.errors import InvalidValueError
from kvpilot.text.numbers import fig, number, plain

if TYPE_CHECKING:
    from kvpilot.commands.simulate.options import SimulateOverrides
    from kvpilot.engine.config import EngineFlags
    from kvpilot.engine.scenarios import Scenario, ScenarioReport
    from kvpilot.engine.workloads import TraceRequest, WorkloadSpec

# The text report (rich) and --serve (http.server, prometheus_client) are imported where they run:
# ``simulate --help`` and report mode need neither of the other's (start-up: docs/performance.md).

EXAMPLES = """
\b
Examples:
  kvpilot simulate seed-lru -o json     # the measured run's hits: 0, 0, 21488
  kvpilot simulate seed-lru --kv-offload-cpu 1.5GiB   # with a CPU KV tier
  kvpilot simulate max-num-seqs-cap --serve 127.0.0.1:8123 --speed 10 \\
      --duration 30m
  kvpilot simulate kv-exhaustion --record kv.om --duration 10m --interval 5s
  promtool tsdb create-blocks-from openmetrics kv.om ./data
      # then: prometheus --storage.tsdb.path=./data
  kvpilot simulate healthy --vllm-version 0.10.1 --serve 8123
      # old and new metric names side by side
  kvpilot simulate --serve 8123 \\
      --vllm-args "serve Qwen/Qwen2.5-1.5B-Instruct --max-num-seqs 4"
  kvpilot simulate --trace requests.jsonl -o json
      # replay a JSON Lines trace on healthy's engine
"""


class SimulateOptions(TypedDict, total=False):
    """The command's engine and workload options (None: not given): engine fields, and the workload's
    (:data:`~kvpilot.commands.simulate.options.WORKLOAD_FLAGS`).
    """

    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    max_model_len: int | None
    gpu_memory_utilization: float | None
    kv_cache_tokens: int | None
    block_size: int | None
    enable_prefix_caching: bool | None
    arrival_rate: float | None
    prompt_tokens: int | None
    output_tokens: int | None
    num_requests: int | None
    kv_offload_cpu_bytes: int | None
    gpu: str | None
    seed: int | None


def _print_report(result: ScenarioReport, output: str) -> None:
    if output == "json":
        click.echo(json.dumps(result, indent=2, sort_keys=False, default=str))
        return
    from kvpilot.commands.simulate.report_text import render_text

    click.echo(render_text(result, shutil.get_terminal_size().columns), nl=False)


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
    help=f"Simulated seconds per wall-clock second for --serve (at most {plain(MAX_SPEED)}); counters are not "
    "rescaled: rate()s read SPEED x the simulated rates, latencies stay in simulated seconds.",
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
    help="Simulated time: --record length (default 10m); --serve stops after it, saying so, exit 0 (default: "
    "until stopped); at most 24h.",
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
@click.option(
    "--vllm-args",
    help="vLLM's own command line, e.g. \"serve MODEL --max-num-seqs 4\". Without --max-model-len the model's "
    "own context is used, as vLLM derives it (Qwen2.5: 32,768; Llama-3.1: 131,072). The engine runs on "
    "SCENARIO's GPU (healthy, the default: h100-sxm, 80 GiB) unless --gpu names another.",
)
@click.option(
    "--max-num-seqs", type=click.IntRange(min=1), help="vLLM's --max-num-seqs: requests running at once at most."
)
@click.option(
    "--max-num-batched-tokens",
    type=click.IntRange(min=1),
    help="vLLM's --max-num-batched-tokens: the tokens one step schedules at most (the token budget).",
)
@click.option("--max-model-len", type=click.IntRange(min=1), help="vLLM's --max-model-len: tokens of one request.")
@click.option(
    "--gpu-memory-utilization",
    type=click.FloatRange(min=0, max=1, min_open=True),
    help="vLLM's --gpu-memory-utilization: the share of the GPU's memory vLLM may use (sizes the KV cache).",
)
@click.option("--kv-cache-tokens", type=click.IntRange(min=1), help="KV capacity in tokens (overrides the GPU maths).")
@click.option(
    "--block-size",
    type=int,
    callback=lambda _ctx, _param, value: block_size_option(value),
    help="Tokens per KV block: one of vLLM's 1, 8, 16, 32, 64, 128, 256.",
)
@click.option(
    "--enable-prefix-caching/--no-enable-prefix-caching",
    default=None,
    help="vLLM's prefix caching on or off.",
)
@click.option(
    "--arrival-rate",
    type=click.FloatRange(min=0, max=MAX_ARRIVAL_RATE),
    help=f"Poisson arrivals, requests/s (at most {plain(MAX_ARRIVAL_RATE)}).",
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
@click.option("--seed", type=int, help="Seed of the workload's random arrivals and lengths (same seed, same run).")
@click.option(
    "--fast-forward/--no-fast-forward",
    default=True,
    show_default=True,
    help=(
        "Take runs of steps at once, visiting a request only when it needs a block, fills one or finishes"
        " (results identical to stepping one by one)."
    ),
)
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
    fast_forward: bool,
    **flags: Unpack[SimulateOptions],
) -> None:
    """Run the vLLM engine model: print results, --serve a live /metrics, or --record a timeline.

    SCENARIO is one of seed-lru, kv-exhaustion, max-num-seqs-cap, token-budget-cap, compute-bound,
    prefix-thrash, healthy, idle (default healthy with --vllm-args or --trace, else required). The
    engine and workload options override the scenario's own values.
    --trace FILE.jsonl replaces the scenario's workload with the file's requests; without --duration the
    run lasts the scenario's time or until 60 s after the last arrival, whichever is longer.
    The report's percentiles (latency_s, each pass's TTFT p50) are streamed: within 0.01 % of the exact
    values (a DDSketch, before rounding), so memory does not grow with the number of requests.
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
        fast_forward=fast_forward,
    )


def kv_cache_log_line(block_size: int, num_gpu_blocks: int, max_model_len: int) -> str:
    """VLLM's startup report of its KV cache, in v0.30+'s one-line format, for the engine model's pool.

    Source: ``update_kv_cache_capacity`` (vllm/v1/core/kv_cache_utils.py, vLLM 0.29.0): ``"GPU KV cache size: %s
    tokens, Maximum concurrency for %s tokens per request: %.2fx"`` with the figures of
    :func:`kvpilot.kv.capacity.kv_cache_capacity` (tokens ``int(concurrency x max_model_len)``, concurrency
    ``num_blocks / cdiv(max_model_len, block_size)``). E.g. 1,345 blocks of 16 at 8,192 tokens: 21,520 tokens,
    1,345 / 512 = 2.63x, the line vLLM logged in the founding experiment (docs/operator.md).

    Args:
        block_size: tokens per KV block.
        num_gpu_blocks: KV blocks of the pool (vLLM's ``num_gpu_blocks``).
        max_model_len: tokens of one request at most.
    """
    from kvpilot.kv.capacity import kv_cache_capacity

    tokens, concurrency = kv_cache_capacity(num_gpu_blocks, block_size, max_model_len)
    return (
        f"INFO [kv_cache_utils.py] GPU KV cache size: {tokens:,} tokens, "
        f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x"
    )


def model_context(profile: str) -> int | None:
    """The ``max_model_len`` vLLM derives from the config of the engine's model ``profile`` (tokens), or None
    for an unknown profile (the engine names it then). ``""`` is the engine's default model.
    """
    from kvpilot.engine.config import EngineConfig
    from kvpilot.engine.hardware import model_profile

    try:
        return model_profile(profile or EngineConfig.model).max_model_len
    except ValueError:
        return None


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
    flags: SimulateOptions | None = None,
    default_host: str = DEFAULT_SERVE_HOST,
    trace_file: str | None = None,
    strict_vllm_args: bool = True,
    fast_forward: bool = True,
) -> None:
    """The command's body (shared with :func:`vllm_shim`); exits 2 with one line on bad input.

    ``strict_vllm_args``: refuse models and flags in ``vllm_argv`` the engine does not model (``--vllm-args``);
    the ``vllm`` shim passes False, since a cluster's pod command names any model and serving flags.
    ``fast_forward``: the engine's switch (``--no-fast-forward`` steps one by one; the same results).
    """
    from kvpilot.metrics.catalog import DEFAULT_VLLM_VERSION, version_tuple

    listen, end_ts, total = _check_modes(serve_at, record_to, speed, duration, interval, end, default_host)
    overrides, vllm_endpoint = _file_and_vllm_overrides(scenario_file, vllm_argv, strict_vllm_args)
    host, port = vllm_endpoint
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    # the workload options as the workload keys they set, and the engine fields left, as click typed them
    workload = cast("WorkloadSpec", {key: given.pop(flag) for flag, key in WORKLOAD_FLAGS.items() if flag in given})
    trace = _trace(trace_file, workload)
    overrides = {**overrides, **cast("EngineFlags", given)}  # in the order given: the first bad one is named
    scenario, base = _scenario(scenario, overrides, bool(vllm_argv or trace))
    duration = _apply_workload(overrides, base, workload, trace, duration, bool(vllm_argv))
    if trace is not None and duration is not None:
        total = duration
    check_bounds(overrides, base, duration or (total if record_to else None), trace, from_cli=workload)
    version = vllm_version or str(overrides.pop("vllm_version", "") or DEFAULT_VLLM_VERSION)
    if len(version_tuple(version)) < 2:
        fail(f"--vllm-version: {version!r} is not a vLLM release such as 0.10.1")
    served = overrides.get("served_model_name")
    name = model_name or (str(served) if served else None)

    if not serve_at and not record_to:
        from kvpilot.engine import scenarios

        if duration is not None:
            # run for --duration simulated seconds; a Poisson workload keeps arriving that long
            overrides["duration"] = duration
            if trace is None and (base.workload.get("type") == "poisson" or "rate" in workload):
                overrides["workload"] = {**workload_of(overrides), "duration": duration}
        result = engine_call(
            f"scenario {scenario}",
            scenarios.run_scenario,
            scenario,
            overrides=overrides or None,
            fast_forward=fast_forward,
        )
        _print_report(result, output)
        return

    horizon = total if record_to else duration
    sim = Simulation(
        scenario,
        overrides,
        version,
        name,
        horizon=horizon,
        endless=bool(serve_at) and not duration,
        fast_forward=fast_forward,
    )
    if record_to:
        try:
            lines, first, last = record(sim, Path(record_to), total, interval, end_ts)
        except OSError as exc:
            fail(f"--record: cannot write {record_to}: {exc.strerror or exc}")
        click.echo(
            f"wrote {lines} samples to {record_to}: {scenario}, {fig(total, 3)} simulated s every "
            f"{fig(interval, 3)} s, "
            f"timestamps {first:.0f}..{last:.0f}"
        )
        return
    if listen is None:  # without --serve or --record the report returned above
        raise RuntimeError("--serve: no address was parsed")
    listen_host, listen_port = listen
    if vllm_argv:  # the `vllm serve` stand-in: vLLM's startup report, which the operator reads from the pod log
        click.echo(kv_cache_log_line(sim.engine.block_size, sim.engine.num_gpu_blocks, sim.max_model_len))
    from kvpilot.commands.simulate.server import serve

    serve(sim, host or listen_host, port if port is not None else listen_port, speed, duration, version)


def _check_modes(
    serve_at: str | None,
    record_to: str | None,
    speed: float,
    duration: float | None,
    interval: float,
    end: str | None,
    default_host: str,
) -> tuple[tuple[str, int] | None, float, float]:
    """The mode's own options checked before any engine work: the ``--serve`` address, ``--end``'s timestamp and
    the simulated seconds a recording covers; exits 2 with one line naming the option.
    """
    if serve_at and record_to:
        fail("--serve and --record: choose one")
    if not 0 < speed <= MAX_SPEED:  # False for NaN
        fail(f"--speed: must be in (0, {plain(MAX_SPEED)}], got {plain(speed)}")
    if duration is not None and duration > MAX_SIMULATED_SECONDS:
        fail(
            f"--duration: {fig(duration, 3)} s is above the maximum {fig(MAX_SIMULATED_SECONDS, 3)} s (24h) of one run"
        )
    try:
        listen = parse_listen(serve_at, default_host) if serve_at else None
        end_ts = parse_end(end, float(int(time.time())))  # whole seconds: readable timestamps
    except InvalidValueError as exc:
        fail_input(exc)
    total = duration or DEFAULT_RECORD_DURATION
    if record_to and not Path(record_to).expanduser().resolve().parent.is_dir():
        fail(f"--record: cannot write {record_to}: its folder does not exist")
    if record_to and interval > total:
        fail(f"--interval: {fig(interval, 3)} s is longer than --duration {fig(total, 3)} s")
    if record_to and total / interval > MAX_SNAPSHOTS:
        fail(
            f"--interval: {fig(interval, 3)} s over {fig(total, 3)} s is {number(total / interval)} snapshots, "
            f"above the maximum {number(MAX_SNAPSHOTS)} of one recording (a longer --interval)"
        )
    return listen, end_ts, total


def _file_and_vllm_overrides(
    scenario_file: str | None, vllm_argv: list[str] | None, strict: bool
) -> tuple[SimulateOverrides, tuple[str | None, int | None]]:
    """The overrides of ``--scenario-file`` then of vLLM's own flags, and the host and port those flags give."""
    overrides: SimulateOverrides = {}
    if scenario_file:
        overrides = load_scenario_file(scenario_file)
        if "block_size" in overrides:
            try:
                block_size_option(overrides["block_size"])
            except click.BadParameter as exc:
                fail(f"--scenario-file: block_size: {exc.message}")
    if not vllm_argv:
        return overrides, (None, None)
    vllm_over, host, port = vllm_overrides(vllm_argv, strict=strict)
    return {**overrides, **vllm_over}, (host, port)


def _trace(trace_file: str | None, workload: WorkloadSpec) -> list[TraceRequest] | None:
    """``--trace``'s requests, refused beside the workload options it replaces."""
    if not trace_file:
        return None
    clash = [f"--{flag.replace('_', '-')}" for flag, key in WORKLOAD_FLAGS.items() if key in workload]
    if clash:
        fail(f"--trace: the trace gives the workload; drop {', '.join(clash)}")
    return load_trace_file(trace_file)


def _scenario(given: str | None, overrides: SimulateOverrides, default_healthy: bool) -> tuple[str, Scenario]:
    """The scenario to run: the argument, else the scenario file's, else ``healthy`` for vLLM flags or a trace;
    exits 2 when none or an unknown one is named.
    """
    from kvpilot.engine.scenarios import SCENARIOS

    name = given or overrides.pop("scenario", None) or ("healthy" if default_healthy else None)
    overrides.pop("scenario", None)
    if not name:
        fail("SCENARIO: missing (one of: " + ", ".join(SCENARIOS) + ")")
    if not isinstance(name, str) or name not in SCENARIOS:
        fail(f"SCENARIO: unknown scenario {name!r} (one of: {', '.join(SCENARIOS)})")
    return name, SCENARIOS[name]


def _apply_workload(
    overrides: SimulateOverrides,
    base: Scenario,
    workload: WorkloadSpec,
    trace: list[TraceRequest] | None,
    duration: float | None,
    from_vllm_args: bool,
) -> float | None:
    """Fold the model's context, the workload options and the trace into ``overrides``; the run's duration (a
    trace runs until its last request arrives, plus a tail to finish).
    """
    if from_vllm_args and "max_model_len" not in overrides:
        # vLLM serves the model's own context when --max-model-len is not given, not the scenario's
        default = model_context(str(overrides.get("model") or base.flags.get("model") or ""))
        if default is not None:
            overrides["max_model_len"] = default
    if workload:
        if "rate" in workload and base.workload.get("type") != "poisson":
            # e.g. --arrival-rate on idle or seed-lru: switch to Poisson arrivals for the scenario's time
            workload = {"type": "poisson", "duration": base.duration or DEFAULT_RECORD_DURATION, **workload}
        overrides["workload"] = {**workload_of(overrides), **workload}
    if trace is not None:
        overrides["workload"] = {"type": "trace", "requests": trace}
        if duration is None:  # every request arrives, plus a tail to finish
            last = max(float(r.get("arrival_time", r.get("timestamp", 0))) for r in trace)
            duration = max(float(base.duration or DEFAULT_RECORD_DURATION), last + TRACE_TAIL_SECONDS)
    return duration
