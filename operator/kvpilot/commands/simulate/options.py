"""What ``kvpilot simulate`` and the ``vllm`` shim read: addresses, times, a scenario file, a trace,
vLLM's own argv, and the bounds of one run. Every bad value exits 2 with one line naming the option.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import TYPE_CHECKING, cast

import click

from kvpilot.commands._common import fail, fail_input, listen_address, read_input
from kvpilot.commands.simulate.session import engine_call, json_number
from kvpilot.text.errors import InvalidValueError
from kvpilot.text.numbers import fig, number

if TYPE_CHECKING:
    from kvpilot.engine.scenarios import Scenario, ScenarioOverrides
    from kvpilot.engine.workloads import TraceRequest, WorkloadSpec
    from kvpilot.text.documents import JsonValue
    from kvpilot.vllm.args import VLLMFlags

    class SimulateOverrides(ScenarioOverrides, total=False):
        """What a scenario file (:func:`load_scenario_file`), vLLM's flags and the command line change in a scenario:
        :class:`~kvpilot.engine.scenarios.ScenarioOverrides` and the file's ``scenario`` and ``vllm_version``.
        """

        scenario: JsonValue
        vllm_version: JsonValue


#: vLLM's own defaults for the shim's listen address (``vllm serve --host`` default None = all
#: interfaces, ``--port`` 8000; vllm/entrypoints/openai/cli_args.py, v0.33.0).
VLLM_DEFAULT_HOST = "0.0.0.0"
VLLM_DEFAULT_PORT = 8000
DEFAULT_SERVE_HOST = "127.0.0.1"
#: seconds of simulated time between recording snapshots: 5 s keeps ``rate(...[1m])`` usable
#: (12 points per minute) at 1/3 of the size of a 1 s scrape.
DEFAULT_INTERVAL = 5.0
DEFAULT_RECORD_DURATION = 600.0  # 10 minutes: ten 1-minute rate() windows

#: Bounds of one run, so every run ends in bounded time and memory (a mistyped ``--arrival-rate 1e9``
#: would otherwise generate 3e11 requests): requests/s (far above what one vLLM server serves), requests
#: per run (arrival rate x duration, --num-requests, or trace lines), simulated seconds (one day), and
#: simulated seconds per wall second for --serve.
MAX_ARRIVAL_RATE = 1000.0
MAX_REQUESTS = 1_000_000
MAX_SIMULATED_SECONDS = 86_400.0
MAX_SPEED = 1000.0
#: Snapshots of one recording: a day at the default 5 s interval (each snapshot is every series once, about 150
#: sample lines: a 1 ms interval over 10 minutes would write 90 million).
MAX_SNAPSHOTS = 17_280

#: Simulated seconds a replayed trace keeps running after its last arrival (when --duration is not given).
TRACE_TAIL_SECONDS = 60.0

#: workload flags -> keys of the scenario's workload spec (kvpilot.engine.workloads.from_dict)
WORKLOAD_FLAGS = {
    "arrival_rate": "rate",
    "prompt_tokens": "prompt_len",
    "output_tokens": "output_len",
    "num_requests": "num_requests",
    "seed": "seed",
}


def parse_end(text: str | None, now: float) -> float:
    """``--end``: Unix seconds, ISO 8601 (``2026-11-30T12:00:00Z``) or ``now`` -> Unix seconds.

    Raises:
        InvalidValueError: naming ``--end``.
    """
    if text is None or text == "now":
        return now
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds):  # float() reads nan, inf and 400 digits; no instant is any of them
            shown = text if len(text) <= 40 else text[:37] + "..."
            raise InvalidValueError("--end", f"{shown!r} is not a finite time (Unix seconds or RFC 3339)")
        return seconds
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidValueError("--end", f"{text!r} is neither Unix seconds nor ISO 8601") from None
    if parsed.tzinfo is None:
        raise InvalidValueError("--end", f"{text!r} has no time zone (add Z or +00:00)")
    return parsed.timestamp()


def parse_listen(text: str, default_host: str, field: str = "--serve") -> tuple[str, int]:
    """``HOST:PORT`` or ``PORT`` -> ``(host, port)`` (:func:`kvpilot.commands._common.listen_address`).

    Raises:
        InvalidValueError: naming ``field``.
    """
    return listen_address(text, field, default_host, default_host)


def block_size_option(value: object) -> int | None:
    """``--block-size``: one of vLLM's block sizes (kvpilot.kv.capacity.VLLM_BLOCK_SIZES), else a usage error."""
    from kvpilot.kv.capacity import check_block_size
    from kvpilot.kv.spec import KVConfigError

    try:
        return None if value is None else check_block_size(value)
    except KVConfigError as exc:
        raise click.BadParameter(exc.message) from None


def load_scenario_file(path: str) -> SimulateOverrides:
    """``--scenario-file``: a YAML mapping of settings (dashes read as underscores), read within the bounds of
    :mod:`kvpilot.text.documents`; exits 2 naming the file. Its values are as the file gives them: each is checked
    where it is applied.
    """
    from kvpilot.text.documents import MAX_YAML_BYTES, DocumentError, load_yaml

    text = read_input(path, MAX_YAML_BYTES, "--scenario-file")
    try:
        data = load_yaml(text)
    except DocumentError as exc:
        fail_input(exc, f"--scenario-file: {path}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        fail(f"--scenario-file: {path} must hold a mapping of settings, not a {type(data).__name__}")
    # a view of the file's mapping: each value is JSON, and a key that names no setting is refused where applied
    return cast("SimulateOverrides", {str(k).replace("-", "_"): v for k, v in data.items()})


def workload_of(overrides: ScenarioOverrides) -> WorkloadSpec:
    """The workload mapping of ``overrides``, empty when it has none; exits 2 when a scenario file's ``workload`` is
    no mapping.
    """
    given = overrides.get("workload")
    if isinstance(given, dict):
        return cast("WorkloadSpec", given)  # a mapping: workloads.from_dict checks its keys and values
    if given:
        fail(f"--scenario-file workload: must be a mapping, not a {type(given).__name__}")
    return {}


def load_trace_file(path: str) -> list[TraceRequest]:
    """``--trace FILE.jsonl`` as a trace workload's request list; exits 2 naming the line and field."""
    from kvpilot.engine.workloads import trace_requests

    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.readlines()
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"--trace: cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
    try:
        items = trace_requests(lines)
    except InvalidValueError as exc:  # field "trace line N: <field>"
        fail_input(exc, f"--trace: {path}")
    if not items:
        fail(f"--trace: {path} holds no request (one JSON object per line)")
    return items


def vllm_overrides(argv: list[str], strict: bool = True) -> tuple[VLLMFlags, str | None, int | None]:
    """Split vLLM's argv: returns (engine overrides, host, port). ``--host``/``--port`` are the server's."""
    host: str | None = None
    port: int | None = None
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
    from kvpilot.vllm.args import from_vllm_args

    overrides: VLLMFlags = engine_call("--vllm-args", from_vllm_args, rest, strict)
    return overrides.copy(), host, port


def _check_scenario_duration(overrides: ScenarioOverrides) -> None:
    """A scenario file's ``duration``: seconds above 0, at most :data:`MAX_SIMULATED_SECONDS` (exit 2 naming it)."""
    if "duration" not in overrides:
        return
    given = overrides["duration"]
    if isinstance(given, bool) or not isinstance(given, (int, float)) or not 0 < given <= MAX_SIMULATED_SECONDS:
        fail(
            f"--scenario-file duration: must be a number of seconds above 0 and at most "
            f"{fig(MAX_SIMULATED_SECONDS, 3)} (24h), got {given!r}"
        )


def _check_document_scan(workload: WorkloadSpec) -> None:
    """A document scan's requests (documents x passes) at most :data:`MAX_REQUESTS` (exit 2 naming num_docs)."""
    if workload.get("type") != "document_scan":
        return
    docs, passes = workload.get("num_docs", 10), workload.get("passes", ("first", "second", "reversed"))
    if isinstance(docs, (int, float)) and isinstance(passes, (list, tuple)) and docs * len(passes) > MAX_REQUESTS:
        fail(
            f"--scenario-file workload.num_docs: {number(docs)} documents x {len(passes)} passes is above "
            f"the maximum {number(MAX_REQUESTS)} requests of one run"
        )


def check_bounds(
    overrides: ScenarioOverrides,
    scenario: Scenario,
    duration: float | None,
    trace: list[TraceRequest] | None,
    from_cli: WorkloadSpec,
) -> None:
    """Refuse a run above :data:`MAX_ARRIVAL_RATE`, :data:`MAX_REQUESTS` or :data:`MAX_SIMULATED_SECONDS`
    (exit 2 naming the option, or the ``--scenario-file`` key, that set it).
    """
    if trace is not None and len(trace) > MAX_REQUESTS:
        fail(f"--trace: {len(trace):,} requests is above the maximum {MAX_REQUESTS:,} of one run")
    from kvpilot.engine.scenarios import WORKLOAD_KNOBS

    # a scenario file's top-level knobs (arrival_rate, num_requests) set the workload's keys too (resolve)
    given = {WORKLOAD_KNOBS[k]: v for k, v in overrides.items() if k in WORKLOAD_KNOBS and v is not None}
    knobs = cast("WorkloadSpec", given)
    wl: WorkloadSpec = {**scenario.workload, **workload_of(overrides), **knobs}
    given_rate, given_count = wl.get("rate"), wl.get("num_requests")
    rate_opt = (
        "--arrival-rate"
        if "rate" in from_cli
        else "--scenario-file arrival_rate"
        if "rate" in knobs
        else "--scenario-file workload.rate"
    )
    given_seconds = duration or overrides.get("duration") or scenario.duration or DEFAULT_RECORD_DURATION
    try:
        rate = None if given_rate is None else json_number(given_rate, float)
        count = None if given_count is None else json_number(given_count, int)
        seconds = json_number(given_seconds, float)
    except (TypeError, ValueError):
        return  # not numbers: the engine names the field
    if not duration:
        _check_scenario_duration(overrides)
    _check_document_scan(wl)
    if not duration and seconds > MAX_SIMULATED_SECONDS:
        fail(
            f"--scenario-file duration: {fig(seconds, 3)} s is above the maximum "
            f"{fig(MAX_SIMULATED_SECONDS, 3)} s (24h)"
        )
    if rate is not None and rate > MAX_ARRIVAL_RATE:
        fail(f"{rate_opt}: {fig(rate, 3)} requests/s is above the maximum {fig(MAX_ARRIVAL_RATE, 3)}")
    if count is not None and count > MAX_REQUESTS:
        opt = (
            "--num-requests"
            if "num_requests" in from_cli
            else "--scenario-file num_requests"
            if "num_requests" in knobs
            else "--scenario-file workload.num_requests"
        )
        fail(f"{opt}: {count:,} requests is above the maximum {MAX_REQUESTS:,} of one run")
    if rate is not None and count is None and rate * seconds > MAX_REQUESTS:
        fail(
            f"{rate_opt}: {fig(rate, 3)} requests/s for {fig(seconds, 3)} s is {number(rate * seconds)} requests, "
            f"above the maximum {number(MAX_REQUESTS)} of one run (lower the rate or --duration)"
        )
