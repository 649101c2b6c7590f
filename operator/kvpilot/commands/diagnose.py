"""`kvpilot diagnose`: read-only bottleneck diagnosis of vLLM servers (thin; logic in kvpilot.diagnose).

Exit status (docs/user-guide.md): 0 no bottleneck, 1 warning, 2 critical, 3 could not diagnose
(no data, unreachable source, unreadable input), 64 usage error.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from typing import TYPE_CHECKING, Any

import click
from typing_extensions import override

from kvpilot.advice.keys import WHAT_IF_KEYS
from kvpilot.commands._common import DURATION, SIZE, DurationParam
from kvpilot.metrics.catalog import version_tuple
from kvpilot.text.safe import one_line

if TYPE_CHECKING:  # imported where they run: `kvpilot --help` stays fast
    from kvpilot.advice.run import AdviceOptions
    from kvpilot.diagnose.run import Options

EXIT_USAGE = 64
EXIT_NO_DIAGNOSIS = 3


def _release(value: str | None) -> str | None:
    """``--vllm-version``: a release such as 0.32.0 (at least major.minor), else a usage error."""
    if value is not None and len(version_tuple(value)) < 2:
        raise click.BadParameter(f"{value!r} is not a vLLM release such as 0.32.0")
    return value


class _DiagnoseCommand(click.Command):
    """A click command whose usage errors exit with 64 (EX_USAGE) instead of click's 2."""

    @override
    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            exc.exit_code = EXIT_USAGE  # type: ignore[misc]  # click types it ClassVar; per instance works
            raise

    @override
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            exc.exit_code = EXIT_USAGE  # type: ignore[misc]  # click types it ClassVar; per instance works
            raise


_WINDOW_TEXT = "kvpilot.diagnose.window_text"


class _WindowParam(DurationParam):
    """A duration that remembers the text typed, so a bare number can be reported as seconds."""

    @override
    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        if ctx is not None and isinstance(value, str):
            ctx.meta[_WINDOW_TEXT] = value
        return super().convert(value, param, ctx)


class _Progress:
    """One line on ``stream`` rewritten in place while diagnose waits (scrapes left, replays); only on a terminal,
    so a pipe or a log file gets none of it. ``clear`` erases the line before the report is printed.
    """

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        isatty = getattr(stream, "isatty", None)
        self.enabled = bool(isatty and isatty())
        self.shown = False

    def say(self, text: str) -> None:
        """Show ``text`` in place of the last line (cut to the terminal's width)."""
        width = shutil.get_terminal_size().columns
        self.stream.write("\r\x1b[K" + one_line(text, max(width - 1, 10)))
        self.stream.flush()
        self.shown = True

    def clear(self) -> None:
        """Erase the line, if one was shown."""
        if self.shown:
            self.stream.write("\r\x1b[K")
            self.stream.flush()
            self.shown = False


def _prometheus_authorization(prometheus: str | None, bearer_file: str | None, basic_file: str | None) -> str | None:
    """The ``Authorization`` header for ``--prometheus`` from its credential files (None: none given).

    Raises:
        click.UsageError: both files, a file without ``--prometheus``, or a file that is unreadable,
            empty or (basic auth) not ``USER:PASSWORD``; the message names the option, never the secret.
    """
    from kvpilot.commands._common import read_secret_file
    from kvpilot.diagnose.sources.http import basic_authorization, bearer_authorization

    if bearer_file and basic_file:
        raise click.UsageError("give --prometheus-bearer-token-file or --prometheus-basic-auth-file, not both")
    for option, path in (("--prometheus-bearer-token-file", bearer_file), ("--prometheus-basic-auth-file", basic_file)):
        if path and not prometheus:
            raise click.UsageError(f"{option} works with --prometheus only")
        if not path:
            continue
        try:
            secret = read_secret_file(path)
        except ValueError as exc:
            raise click.UsageError(f"{option}: {exc}") from None
        if bearer_file:
            return bearer_authorization(secret)
        user, sep, password = secret.partition(":")
        if not sep or not user:
            raise click.UsageError(f"{option}: {path} must hold USER:PASSWORD")
        return basic_authorization(user, password)
    return None


def _read_model_config(opts: Options, path: str) -> None:
    """``--model-config``: the model's config.json into ``opts`` (a JSON object, read within the bound for this
    file); exits 64 with one line naming the option when it cannot be used.
    """
    from kvpilot.kv.spec import ModelConfig
    from kvpilot.text.documents import MAX_JSON_BYTES, load_json

    try:
        with open(path, "rb") as fp:
            raw = fp.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise ValueError(f"larger than {MAX_JSON_BYTES:,} bytes (the bound for this file)")
        doc = load_json(raw.decode("utf-8"))  # bounded: nesting, integer digits, numbers
        if not isinstance(doc, dict):
            raise ValueError("a config.json is a JSON object")
        opts.model_config = ModelConfig.read(doc)
    except (OSError, ValueError) as exc:  # UnicodeDecodeError and DocumentError are ValueErrors
        click.echo(f"kvpilot: error: --model-config {path}: {exc}", err=True)
        sys.exit(EXIT_USAGE)


def _run(
    opts: Options,
    advice: AdviceOptions,
    progress: _Progress,
    output: str,
    verbose: bool,
    watch: float | None,
    watch_count: int | None,
) -> int:
    """Diagnose and print the report (every ``watch`` seconds with ``--watch``); the exit status of the last run
    (module docstring).
    """
    from kvpilot.advice.run import diagnose_and_predict
    from kvpilot.diagnose.report import render_chunks
    from kvpilot.diagnose.sources import SourceError

    runs = 0
    code = EXIT_NO_DIAGNOSIS
    while True:
        try:
            try:
                try:
                    report = diagnose_and_predict(opts, advice)
                finally:
                    progress.clear()
                for chunk in render_chunks(report, output, width=shutil.get_terminal_size().columns, verbose=verbose):
                    click.echo(chunk, nl=False)
                click.echo()
                code = report.exit_code()
            except SourceError as exc:
                click.echo(f"kvpilot: error: {one_line(exc)}", err=True)
                if output == "json":  # a reader of stdout gets a document, not nothing: {"error": ..., "exit_code": 3}
                    click.echo(json.dumps({"error": one_line(exc), "exit_code": EXIT_NO_DIAGNOSIS}))
                code = EXIT_NO_DIAGNOSIS
            runs += 1
            if not watch or (watch_count and runs >= watch_count):
                break
            time.sleep(watch)
        except KeyboardInterrupt:
            # Ctrl-C ends --watch (or a long --metrics-url window): the status of the last finished run,
            # 3 when none finished - never click's "Aborted!" exit 1, which would read as a warning
            if not watch:
                code = EXIT_NO_DIAGNOSIS
            break
    return code


@click.command(name="diagnose", cls=_DiagnoseCommand)
@click.option("--prometheus", metavar="URL", help="Prometheus base URL (one query per signal for all targets).")
@click.option(
    "--prometheus-bearer-token-file",
    metavar="FILE",
    help="Send 'Authorization: Bearer <token in FILE>' to --prometheus (as Prometheus' bearer_token_file).",
)
@click.option(
    "--prometheus-basic-auth-file",
    metavar="FILE",
    help="Send basic auth to --prometheus; FILE holds USER:PASSWORD (never put them in the URL).",
)
@click.option("--metrics-url", metavar="URL", help="A vLLM /metrics URL, scraped repeatedly over the window.")
@click.option(
    "--recording",
    metavar="FILE",
    help="A recording (OpenMetrics with timestamps, from simulate --record; gzip too), read as a stream.",
)
@click.option("-n", "--namespace", default="", help="Kubernetes namespace of the target(s).")
@click.option("--server", default="", help="VLLMServer name (its spec gives the limits when a cluster is reachable).")
@click.option("--pod", default="", help="Pod name of the target.")
@click.option("--model-name", default="", help="model_name label of the target.")
@click.option(
    "--window",
    default="5m",
    type=_WindowParam(),
    show_default=True,
    help="Window to evaluate (90s, 5m, 1h; a bare number is seconds, and the report says so).",
)
@click.option(
    "--end",
    default=None,
    help="Window end: Unix seconds or ISO 8601 (2026-11-30T12:00:00Z) (default: now; recordings: last sample).",
)
@click.option(
    "--max-num-seqs", type=click.IntRange(min=1), help="Configured --max-num-seqs (when no spec is readable)."
)
@click.option(
    "--max-num-active-seqs",
    type=click.IntRange(min=1),
    help="Configured --max-num-active-seqs (vLLM 0.31+: an admission cap below --max-num-seqs no metric shows).",
)
@click.option(
    "--vllm-version",
    metavar="X.Y.Z",
    callback=lambda _ctx, _param, value: _release(value),
    help="The server's vLLM release (0.31+ has --max-num-active-seqs: a plateau below --max-num-seqs is named as it).",
)
@click.option("--max-num-batched-tokens", type=click.IntRange(min=1), help="Configured --max-num-batched-tokens.")
@click.option("--max-model-len", type=click.IntRange(min=1), help="Configured --max-model-len.")
@click.option("--kv-cache-tokens", type=click.IntRange(min=1), help="KV capacity in tokens ('GPU KV cache size').")
@click.option(
    "--gpu-memory-utilization",
    type=click.FloatRange(min=0, max=1, min_open=True),
    help="Configured --gpu-memory-utilization.",
)
@click.option("--kv-cache-dtype", help="Configured --kv-cache-dtype (auto, fp8, ...).")
@click.option("--block-size", type=click.IntRange(min=1), help="KV block size in tokens.")
@click.option("--tensor-parallel-size", type=click.IntRange(min=1), help="Configured --tensor-parallel-size.")
@click.option(
    "--shared-prefix-tokens",
    type=click.IntRange(min=1, max=2**31 - 1),  # a token count: kvpilot.engine.bounds.MAX_COUNT (not imported here)
    metavar="N",
    help="Length of the prompt prefix requests share (a system prompt): the prefix cache is judged by how many "
    "requests find it (tokens reused per request / N), not by its token hit rate.",
)
@click.option(
    "--gpu-memory",
    type=SIZE,
    help="GPU memory (80GiB; unset: the --gpu-name profile's): picks vLLM's defaults and sizes utilization changes.",
)
@click.option(
    "--gpu-name",
    help="GPU model; a kvpilot GPU profile's name (H100, A100, L4, ...) gives its memory (A100 keeps the "
    "small-GPU defaults).",
)
@click.option("--model-config", type=click.Path(dir_okay=False), help="The model's config.json: KV bytes per token.")
@click.option(
    "--quick", is_flag=True, help="With --metrics-url: two scrapes a few seconds apart instead of the window."
)
@click.option(
    "--save-recording",
    metavar="FILE",
    type=click.Path(dir_okay=False),
    help="With --metrics-url: also write the window's scrapes to FILE as a recording (for a bug report; "
    "--recording FILE diagnoses it again with the same answer).",
)
@click.option(
    "--scrape-interval",
    default="5s",
    type=DURATION,
    show_default=True,
    help="Seconds between scrapes of --metrics-url.",
)
@click.option("--no-kube", is_flag=True, help="Do not read VLLMServer specs, pods or pod logs from a cluster.")
@click.option(
    "--kubeconfig", type=click.Path(dir_okay=False), help="kubeconfig file (default: in-cluster, ~/.kube/config)."
)
@click.option("--context", help="kubeconfig context.")
@click.option(
    "--timeout",
    default="10s",
    type=DURATION,
    show_default=True,
    help="Deadline of each whole HTTP request (connect + headers + body); the run's reads together get "
    "3x this with --prometheus, the scraping time + 2x this with --metrics-url.",
)
@click.option(
    "--what-if",
    "what_if",
    multiple=True,
    metavar="KEY=VALUE",
    help="Also simulate this change on the replayed window (repeatable; KEY=VALUE,KEY=VALUE changes several "
    f"together). Keys: {', '.join(WHAT_IF_KEYS)}.",
)
@click.option(
    "--what-if-budget",
    default="30s",
    type=DURATION,
    show_default=True,
    help="Wall-clock time for all predictions of a run (each replay and what-if simulates the whole window), "
    "counted from the end of the window's reads; targets beyond it are diagnosed without predictions.",
)
@click.option(
    "--no-what-if", is_flag=True, help="Diagnose only: no replay of the window, no predicted effect of any change."
)
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json", "markdown"]),
    default="text",
    show_default=True,
    help="Report format (json: docs/diagnose-output.schema.json).",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Text and markdown: also how each figure was derived (formulas, ceilings), the replay's figures and "
    "notes, the key signals (-o json always has them).",
)
@click.option(
    "--watch",
    type=click.FloatRange(min=0, min_open=True),
    metavar="N",
    help="Re-run every N seconds until interrupted.",
)
@click.option("--watch-count", type=click.IntRange(min=1), hidden=True, help="Stop --watch after this many runs.")
def command(
    prometheus: str | None,
    prometheus_bearer_token_file: str | None,
    prometheus_basic_auth_file: str | None,
    metrics_url: str | None,
    recording: str | None,
    namespace: str,
    server: str,
    pod: str,
    model_name: str,
    window: float,
    end: str | None,
    max_num_seqs: int | None,
    max_num_active_seqs: int | None,
    vllm_version: str | None,
    max_num_batched_tokens: int | None,
    max_model_len: int | None,
    kv_cache_tokens: int | None,
    gpu_memory_utilization: float | None,
    kv_cache_dtype: str | None,
    block_size: int | None,
    tensor_parallel_size: int | None,
    shared_prefix_tokens: int | None,
    gpu_memory: int | None,
    gpu_name: str | None,
    model_config: str | None,
    quick: bool,
    save_recording: str | None,
    scrape_interval: float,
    no_kube: bool,
    kubeconfig: str | None,
    context: str | None,
    timeout: float,
    what_if: tuple[str, ...],
    what_if_budget: float,
    no_what_if: bool,
    output: str,
    verbose: bool,
    watch: float | None,
    watch_count: int | None,
) -> None:
    """Tell which limit binds a vLLM server - KV cache, max_num_seqs, token budget or compute - with numbers.

    Read-only: GETs Prometheus queries, /metrics, the VLLMServer spec (with --server/--pod and a
    namespace), and each target's pod and the first MiB of its log (limits from its vllm serve command
    line and startup log); never changes anything. Limits: command-line flags override the spec, the
    pod's args, its log, vllm:cache_config_info and vLLM's defaults, in that order.

    For a target with a queue (and for every target with --what-if) the engine model replays the window
    from its metrics, checks the replay against the window, and predicts what each candidate change
    would do; recommendations carry those predictions (withheld when the replay misses the window).

    \b
    Examples:
      kvpilot diagnose --prometheus http://127.0.0.1:9090 -n llm
      kvpilot diagnose --metrics-url http://10.0.0.7:8000/metrics --quick \\
          --max-num-seqs 4
      kvpilot diagnose --metrics-url http://10.0.0.7:8000/metrics --window 2m \\
          --save-recording window.om
      kvpilot diagnose --recording run.om --max-num-batched-tokens 65000 -o json
      kvpilot diagnose --recording run.om --gpu-name H100 \\
          --what-if max_num_seqs=16 --what-if replicas=2
    """
    from kvpilot.advice.run import advice_from_flags
    from kvpilot.advice.whatif import ChangeError
    from kvpilot.commands.simulate.options import parse_end
    from kvpilot.diagnose.inputs import FlagError, source_from_flags, window_note
    from kvpilot.diagnose.run import Options
    from kvpilot.diagnose.sources.recording import check_recording_file

    try:
        source = source_from_flags(prometheus, metrics_url, recording, quick=quick, save_recording=save_recording)
        authorization = _prometheus_authorization(prometheus, prometheus_bearer_token_file, prometheus_basic_auth_file)
        if source.recording:
            check_recording_file(source.recording)
        advice = advice_from_flags(what_if, no_what_if, what_if_budget)
    except (FlagError, ChangeError) as exc:
        raise click.UsageError(str(exc)) from None
    try:
        end_seconds = None if end is None else parse_end(end, time.time())
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    note = window_note(click.get_current_context().meta.get(_WINDOW_TEXT))
    opts = Options(
        reader="cli",
        prometheus=source.prometheus,
        metrics_url=source.metrics_url,
        recording=source.recording,
        window_seconds=window,
        end=end_seconds,
        notes=[note] if note else [],
        namespace=namespace,
        server=server,
        pod=pod,
        model_name=model_name,
        cli_limits={
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "max_model_len": max_model_len,
            "kv_cache_tokens": kv_cache_tokens,
            "gpu_memory_utilization": gpu_memory_utilization,
            "kv_cache_dtype": kv_cache_dtype,
            "block_size": block_size,
            "tensor_parallel_size": tensor_parallel_size,
            "shared_prefix_tokens": shared_prefix_tokens,
            "max_num_active_seqs": max_num_active_seqs,
            "vllm_version": vllm_version,
        },
        gpu_memory_bytes=gpu_memory,
        gpu_name=gpu_name,
        quick=quick,
        save_recording=save_recording or "",
        scrape_interval=scrape_interval,
        use_kube=not no_kube,
        kubeconfig=kubeconfig,
        context=context,
        timeout=timeout,
        prometheus_authorization=authorization,
    )
    if model_config:
        _read_model_config(opts, model_config)
    progress = _Progress(sys.stderr)
    opts.progress = progress.say if progress.enabled else None
    sys.exit(_run(opts, advice, progress, output, verbose, watch, watch_count))
