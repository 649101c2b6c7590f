"""One diagnosis run: source -> signals -> limits -> rules -> :class:`Report` (sources -> pure logic).

The CLI builds :class:`Options` and calls :func:`run`; ``kvpilot alert-hook`` and ``kvpilot demo``
can do the same.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kvpilot.diagnose.limits import GivenLimits, Reader, confirm_inferred, resolve_limits
from kvpilot.diagnose.model import Diagnosis, DiagnosisBasis, Report
from kvpilot.diagnose.promql import duration
from kvpilot.diagnose.rules import diagnose_target, escaped_names_note
from kvpilot.diagnose.signals import SIGNAL_DEFS, Signals, TargetKey, compute_signals
from kvpilot.diagnose.sources import SourceError
from kvpilot.diagnose.sources.http import display_url
from kvpilot.diagnose.sources.kube import PodLimits
from kvpilot.kv.spec import ModelConfig
from kvpilot.text.numbers import fig
from kvpilot.text.safe import one_line

if TYPE_CHECKING:  # parsed by sources.kube, on the cluster path only
    from kvpilot.api.models import EngineSpec


@dataclass
class Options:
    """Everything a run needs (the CLI's options, already validated).

    Attributes:
        prometheus / metrics_url / recording: exactly one source.
        window_seconds: the window; ``end``: its end (Unix seconds; default now, or the recording's
            last sample).
        namespace / server / pod / model_name: selectors.
        cli_limits: the limits given on the command line (``max_num_seqs``, ``max_num_batched_tokens``, ...).
        gpu_memory_bytes / gpu_name: GPU tier for vLLM's defaults and utilization arithmetic.
        model_config: parsed config.json (bytes per KV token for recommendations).
        quick: ``--metrics-url`` with two scrapes a few seconds apart.
        scrape_interval: seconds between scrapes of ``--metrics-url``.
        use_kube: look up VLLMServer specs (GET only) when ``--server``/``--pod`` and a namespace
            are given; ``kubeconfig``/``context`` choose the cluster.
        notes: sentences the caller adds to the report (how an option was read).
        reader: who reads the report (kvpilot.diagnose.limits.Reader): ``cli`` for ``kvpilot diagnose``,
            ``service`` (the default) for an answer whose reader cannot pass flags (the alert hook, the demo);
            it chooses what the advice on an inferred limit tells them to do.
        timeout: seconds for each whole HTTP request (connect + headers + body).
        deadline: seconds for all of the run's reads (see :meth:`run_deadline_seconds`), the
            Kubernetes lookups included.
        prometheus_authorization: the ``Authorization`` header sent to Prometheus (``Bearer …``,
            ``Basic …``; from ``--prometheus-bearer-token-file`` / ``--prometheus-basic-auth-file``),
            never printed. Userinfo in a source URL is sent as basic auth and printed without it.
        save_recording: with ``metrics_url``, write the window's scrapes to this file as a recording
            (``--recording`` reads it back with the same answer); empty for none.
        progress: told, in a line, how a run that waits is going (the scrapes left); None: silent.
        fit_signals: also compute :data:`~kvpilot.diagnose.signals.FIT_SIGNAL_DEFS` from a recording or
            scrapes (``kvpilot.advice`` fits a workload from them; ``--prometheus`` asks for them
            afterwards, for the targets it predicts).
    """

    prometheus: str = ""
    metrics_url: str = ""
    recording: str = ""
    window_seconds: float = 300.0
    end: float | None = None
    namespace: str = ""
    server: str = ""
    pod: str = ""
    model_name: str = ""
    cli_limits: GivenLimits = field(default_factory=GivenLimits)
    gpu_memory_bytes: int | None = None
    gpu_name: str | None = None
    model_config: ModelConfig | None = None
    quick: bool = False
    scrape_interval: float = 5.0
    quick_gap: float = 3.0
    use_kube: bool = True
    kubeconfig: str | None = None
    context: str | None = None
    timeout: float = 10.0
    deadline: float | None = None
    notes: list[str] = field(default_factory=list)
    reader: Reader = "service"
    prometheus_authorization: str | None = field(default=None, repr=False)
    fit_signals: bool = False
    save_recording: str = ""
    progress: Callable[[str], None] | None = field(default=None, repr=False, compare=False)

    def run_deadline_seconds(self) -> float | None:
        """Seconds the whole run may spend reading its source (None: a recording, no network).

        ``deadline`` when given; otherwise ``--prometheus``: 3 x ``timeout`` (the
        ``len(plan(...))`` queries (kvpilot.diagnose.sources.prometheus) run 8 at a time, each bounded by ``timeout``);
        ``--metrics-url``: the scraping itself (``window``, or the ``--quick`` gap) plus
        2 x ``timeout``.
        """
        if self.deadline is not None:
            return self.deadline
        if self.prometheus:
            return 3 * self.timeout
        if self.metrics_url:
            return (self.quick_gap if self.quick else self.window_seconds) + 2 * self.timeout
        return None


#: Prometheus extrapolates a range's increase to its start only when its first sample lies within this many average
#: sample intervals of it (``extrapolatedRate``, promql/functions.go, v2.42: ``extrapolationThreshold``); farther,
#: the series is taken to start there, so the data is shorter than the window
EXTRAPOLATION_THRESHOLD = 1.1


def save_scrapes(bodies: list[tuple[float, str]], path: str) -> str:
    """Write the scrapes to ``path`` as a recording; the report's note saying where (or why not).

    Raises:
        SourceError: the file cannot be written, or a scrape cannot be held in a recording.
    """
    from kvpilot.metrics.exposition import ExpositionError
    from kvpilot.metrics.recording import scrapes_recording_text

    try:
        text = scrapes_recording_text(bodies)
        Path(path).write_text(text, encoding="utf-8")
    except (OSError, ExpositionError) as exc:
        raise SourceError(f"--save-recording {path}: {one_line(str(exc))}") from None
    return f"The {len(bodies)} scrapes saved to {path} (kvpilot diagnose --recording {path} reads them again)."


def coverage_note(stamps: list[float], end: float, window_seconds: float) -> str | None:
    """A note when the samples inside ``[end - window, end]`` start later than the window does, else None.

    Later: the first sample is farther from the window's start than :data:`EXTRAPOLATION_THRESHOLD` average
    intervals between the distinct sample times, where Prometheus' ``rate()`` stops extrapolating. The signals
    are then computed over the span the data covers (:func:`covered_seconds`): a rate over the whole window
    would divide an increase by seconds that had no sample.
    """
    start = end - window_seconds
    seen = sorted({t for t in stamps if start <= t <= end})
    if len(seen) < 2:
        return None
    return _late_start_note(seen[0], (seen[-1] - seen[0]) / (len(seen) - 1), end, window_seconds)


def _late_start_note(first: float, interval: float, end: float, window_seconds: float) -> str | None:
    """:func:`coverage_note` for data whose first sample in the window is at ``first``, ``interval`` s apart."""
    start = end - window_seconds
    if first - start < EXTRAPOLATION_THRESHOLD * interval:
        return None
    covered = end - first
    return (
        f"the data covers {fig(covered, 3)} s of the {fig(window_seconds, 3)} s window (its first sample "
        f"{fig(first - start, 3)} s after the window's start): every rate and average is read over those "
        f"{fig(covered, 3)} s, never over time without data; --window {duration(math.ceil(covered))} fits the data."
    )


def covered_seconds(stamps: list[float], end: float, window_seconds: float) -> float:
    """The part of ``[end - window, end]`` the samples cover: from the first sample in it to ``end`` when
    :func:`coverage_note` finds the data short, else the whole window.
    """
    if coverage_note(stamps, end, window_seconds) is None:
        return window_seconds
    return end - min(t for t in stamps if end - window_seconds <= t <= end)


def prometheus_coverage(
    spans: dict[TargetKey, tuple[float, float, float]], end: float, window_seconds: float
) -> tuple[str, float] | None:
    """The note and the range to read when a target's data in Prometheus starts later than the window, else None.

    ``spans``: per target, ``(first sample's time, samples in the window, last sample's time)``
    (``PrometheusSource.coverage``). The target whose data starts latest, beyond :data:`EXTRAPOLATION_THRESHOLD`
    of its own intervals, sets the span every target is read over, so no rate is read over seconds without
    data. The range returned is that span: it starts at the first sample, which Prometheus 2 holds in it,
    Prometheus 3 leaves out but extrapolates to (its second sample is within the threshold of the start), and
    VictoriaMetrics takes as the base of ``rate()``; ``offset`` by it reads the first sample (the window's start
    for the replay).
    """
    short: list[tuple[float, TargetKey, str]] = []
    for key, (first, count, last) in spans.items():
        if count < 2 or first < end - window_seconds:
            continue
        note = _late_start_note(first, (last - first) / (count - 1), end, window_seconds)
        if note is not None:
            short.append((first, key, note))
    if not short:
        return None
    first, key, note = max(short)
    if len(spans) > 1:
        name = key.pod or key.instance or key.model_name or "one"
        note += (
            f" {len(short)} of the {len(spans)} targets start later than the window; all are read over the "
            f"shortest span, {name}'s (--pod or --server reads one target over its own)."
        )
    return note, end - first


def _scrape_progress(opts: Options) -> Callable[[int, int, float], None] | None:
    """``opts.progress`` told how the scraping goes: ``scraping URL: 12 of 61 scrapes, 245 s left``."""
    say = opts.progress
    if say is None:
        return None
    url = display_url(opts.metrics_url)

    def scraped(done: int, total: int, left: float) -> None:
        say(f"scraping {url}: {done} of {total} scrapes, {fig(math.ceil(left))} s left")

    return scraped


def _target_json(key: TargetKey, server: str, instance: str = "") -> dict[str, str]:
    out = {
        "namespace": key.namespace,
        "pod": key.pod,
        "server": server,
        "model_name": key.model_name,
        "engine": key.engine,
    }
    if key.instance or instance:
        out["instance"] = key.instance or instance
    if key.job:
        out["job"] = key.job
    return out


def _select(signals: dict[TargetKey, Signals], opts: Options, pod: str) -> dict[TargetKey, Signals]:
    def keep(k: TargetKey) -> bool:
        if opts.namespace and k.namespace and k.namespace != opts.namespace:
            return False
        if pod and k.pod and k.pod != pod:
            return False
        if opts.server and not pod and k.pod and not re.fullmatch(re.escape(opts.server) + r"(-.*)?", k.pod):
            return False
        return not (opts.model_name and k.model_name != opts.model_name)

    return {k: v for k, v in signals.items() if keep(k)}


#: pods looked up per run (one GET of the pod and one of its log each); targets beyond read no pod
MAX_POD_LOOKUPS = 50


class _PodReader:
    """The limits each target's pod states (GET pod, GET pods/log), read once per pod and bounded.

    The pod is the target's Prometheus ``pod``/``namespace`` labels, or ``--pod``/``-n``. Notes
    say what was read. Without a Kubernetes configuration, pods named only by labels are skipped
    silently (a recording or scrape run off-cluster); pods the user named get a note.
    """

    def __init__(self, opts: Options, pod: str, notes: list[str], run_deadline: float | None = None) -> None:
        self.opts, self.pod, self.notes = opts, pod, notes
        self.cache: dict[tuple[str, str], PodLimits | None] = {}
        self.off = not opts.use_kube
        self.run_deadline = run_deadline

    def limits(self, key: TargetKey) -> PodLimits | None:  # noqa: C901
        namespace, name = key.namespace or self.opts.namespace, key.pod or self.pod
        if self.off or not namespace or not name:
            return None
        if (namespace, name) in self.cache:
            return self.cache[(namespace, name)]
        if len(self.cache) >= MAX_POD_LOOKUPS:
            if len(self.cache) == MAX_POD_LOOKUPS:
                self.notes.append(f"Pods beyond the first {MAX_POD_LOOKUPS} not read for limits.")
                self.cache[("", "")] = None
            return None
        timeout = _lookup_timeout(self.opts, self.run_deadline)
        if timeout <= 0:
            self.off = True
            self.notes.append("Pods not read for limits: the run's deadline passed.")
            return None
        from kvpilot.diagnose.sources.kube import lookup_pod_limits

        found = lookup_pod_limits(namespace, name, self.opts.kubeconfig, self.opts.context, timeout=timeout)
        named = bool(self.pod) and name == self.pod
        if any("no Kubernetes configuration" in n for n in found.notes):
            self.off = True  # no cluster: stop asking
            if not named:
                return None
        self.cache[(namespace, name)] = found
        self.notes.extend(found.notes)
        read = []
        if found.args:
            read.append(f"container {found.container} command line ({', '.join(sorted(found.args))})")
        if found.log:
            read.append(f"startup log ({', '.join(sorted(found.log))})")
        if read:
            self.notes.append(f"Limits read from pod {namespace}/{name}: " + "; ".join(read) + ".")
        return found


def _lookup_timeout(opts: Options, run_deadline: float | None) -> float:
    """Seconds a Kubernetes GET may take: 5 s at most, ``--timeout`` at most, and what is left of the
    run's deadline (<= 0: none is left).
    """
    timeout = min(opts.timeout, 5.0)
    return timeout if run_deadline is None else min(timeout, run_deadline - time.monotonic())


def run(opts: Options) -> Report:  # noqa: C901
    """Diagnose every selected target once.

    Returns:
        a :class:`Report`; with no matching target it holds one ``no_data`` diagnosis naming the
        selectors (exit status 3).

    Raises:
        SourceError: the source cannot be read at all (unreachable Prometheus or /metrics,
            unreadable recording): exit status 3 with one line.
    """
    notes: list[str] = list(opts.notes)
    short_data: str | None = None  # the note that the data covers less than the window
    engine_spec: EngineSpec | None = None
    pod = opts.pod
    budget = opts.run_deadline_seconds()
    run_deadline = None if budget is None else time.monotonic() + budget
    if opts.use_kube and opts.namespace and (opts.server or opts.pod):
        from kvpilot.diagnose.sources.kube import lookup_server

        info = lookup_server(
            opts.namespace,
            opts.server,
            opts.pod,
            opts.kubeconfig,
            opts.context,
            timeout=_lookup_timeout(opts, run_deadline),
        )
        engine_spec, pod = info.engine, pod or info.pod
        notes.extend(info.notes)
        if info.engine:
            notes.append(f"Limits read from VLLMServer {info.namespace}/{info.name} (spec.engine).")
    queries: list[str]
    version: str | None = None  # the server's own vLLM version, where it shows it
    if opts.prometheus:
        from kvpilot.diagnose.sources.prometheus import PrometheusSource, Selectors, coverage_query

        end = opts.end if opts.end is not None else time.time()
        selectors = Selectors(
            namespace=opts.namespace,
            pod=pod,
            pod_regex=f"{re.escape(opts.server)}(-.*)?" if opts.server and not pod else "",
            model_name=opts.model_name,
        )
        prometheus = PrometheusSource(
            opts.prometheus,
            timeout=opts.timeout,
            run_deadline=run_deadline,
            authorization=opts.prometheus_authorization,
        )
        read_seconds = opts.window_seconds
        try:
            late = prometheus_coverage(prometheus.coverage(read_seconds, end, selectors), end, read_seconds)
        except SourceError as exc:
            late = None
            notes.append(f"Where the data starts in the window is unknown, so it is taken to cover it: {exc}")
        if late:
            short_data, read_seconds = late
            notes.append(short_data)
        result = prometheus.fetch(read_seconds, end, selectors)
        signals, queries = result.signals, [coverage_query(opts.window_seconds, selectors), *result.queries]
        notes.extend(result.notes)
        source = f"prometheus {display_url(opts.prometheus)}"
        window_seconds = opts.window_seconds
    else:
        newest: float | None = None  # the source's newest timestamp, when it knows it
        samples: list[Any]  # kvpilot.metrics.exposition.Sample or sources.recording.WindowSample
        if opts.metrics_url:
            from kvpilot.diagnose.sources.scrape import scrape_series, server_version

            bodies: list[tuple[float, str]] | None = [] if opts.save_recording else None
            samples, scrapes = scrape_series(
                opts.metrics_url,
                opts.window_seconds,
                opts.scrape_interval,
                quick=opts.quick,
                quick_gap_seconds=opts.quick_gap,
                timeout=opts.timeout,
                run_deadline=run_deadline,
                bodies=bodies,
                progress=_scrape_progress(opts),
            )
            if bodies is not None:
                notes.append(save_scrapes(bodies, opts.save_recording))
            version = server_version(opts.metrics_url, min(opts.timeout, 5.0))
            if version:
                notes.append(f"vLLM {version} (the server's /version).")
            source = f"metrics-url {display_url(opts.metrics_url)}"
            if opts.quick:
                notes.append(
                    f"--quick: two scrapes {fig(opts.quick_gap, 3)} s apart; rates cover seconds, not the "
                    f"window, and trends are two-point slopes."
                )
            else:
                notes.append(f"{scrapes} scrapes every {fig(opts.scrape_interval, 3)} s.")
        elif opts.recording:
            from kvpilot.diagnose.sources.recording import read_window

            # streamed: only the window's samples of the series the signals read are kept
            recording = read_window(opts.recording, opts.window_seconds, opts.end)
            samples, newest = recording.samples, recording.last_timestamp
            source = f"recording {opts.recording}"
        else:
            raise SourceError("no source: give --prometheus URL, --metrics-url URL or --recording FILE")
        stamps = [s.timestamp for s in samples if s.timestamp is not None]
        if newest is None and stamps:
            newest = max(stamps)
        end = opts.end if opts.end is not None else (newest if newest is not None else time.time())
        window = opts.window_seconds
        if opts.metrics_url and stamps:
            window = max(1e-3, max(stamps) - min(stamps)) if opts.quick else window
        window_seconds = window
        short = None if opts.quick else coverage_note(stamps, end, window)
        if short:
            notes.append(short)
            short_data = short
            window = covered_seconds(stamps, end, window)
        signals = compute_signals(samples, window, end, fit=opts.fit_signals)
        queries = [f"{sd.fn}({sd.family}{sd.suffix}[{duration(window)}]) by target" for sd in SIGNAL_DEFS]
    signals = _select(signals, opts, pod)
    escaped = escaped_names_note(signals.values())
    if escaped:
        notes.append(escaped)
    report = Report(source=source, window_seconds=round(window_seconds, 3), notes=notes, short_data=short_data)
    instance = urlsplit(display_url(opts.metrics_url)).netloc if opts.metrics_url else ""
    pods = _PodReader(opts, pod, notes, run_deadline)
    for key in sorted(signals):
        sig = signals[key]
        from_pod = pods.limits(key)
        limits = resolve_limits(
            engine_spec,
            opts.cli_limits,
            sig.cache_config,
            opts.gpu_memory_bytes,
            opts.gpu_name,
            pod_args=from_pod.args if from_pod else None,
            pod_log=from_pod.log if from_pod else None,
            operator_metric=sig.operator_limits,
        )
        target = _target_json(key, opts.server, instance)
        if version:
            target["vllm_version"] = version
        diag = diagnose_target(sig, limits, target, queries, opts.model_config)
        diag.basis = DiagnosisBasis(key, sig, limits)
        inferred = {name: diag.signals.get(f"inferred_{name}") for name in ("max_num_seqs", "max_num_batched_tokens")}
        diag.evidence.append(limits.describe(inferred))
        advice = confirm_inferred(
            [k for k, v in inferred.items() if v is not None],
            opts.reader,
            pod_read=from_pod is not None and not from_pod.unread,
            pod_unread=from_pod.unread if from_pod else "",
        )
        if advice:
            diag.evidence.append(advice)
        # a limit the rules inferred from the gauges is not the default the notes say was assumed
        diag.evidence.extend(
            n for n in limits.notes if not any(v is not None and n.startswith(f"{k} ") for k, v in inferred.items())
        )
        report.targets.append(diag)
    if not report.targets:
        selector_text = ", ".join(
            f"{k}={v}"
            for k, v in (
                ("namespace", opts.namespace),
                ("server", opts.server),
                ("pod", pod),
                ("model_name", opts.model_name),
            )
            if v
        )
        report.targets.append(
            Diagnosis(
                verdict="no_data",
                severity="unknown",
                confidence=1.0,
                target={
                    "namespace": opts.namespace,
                    "pod": pod,
                    "server": opts.server,
                    "model_name": opts.model_name,
                    "engine": "",
                },
                evidence=[
                    f"No vLLM series (vllm[:_]..., either generation) in the last {fig(opts.window_seconds, 3)} s"
                    + (f" matching {selector_text}" if selector_text else "")
                    + " from "
                    + source
                    + "."
                ],
                queries=queries,
            )
        )
    return report
