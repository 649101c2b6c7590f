"""One load on a real server, diagnosed through every source, and the scheduler's truth for the same window.

For each load (:class:`Load`): ``vllm bench serve`` starts; after ``warmup`` seconds two ``kvpilot diagnose
--metrics-url`` runs scrape the live server over the window (one with the server's limit flags, one without; the
second saves its scrapes with ``--save-recording``); then the load stops (the client's requests are aborted, as
vLLM does when a client goes away) and the window is diagnosed again from Prometheus (which scraped the server
every second) and from the saved recording, with and without flags. The truth is the probe's
(``scheduler_probe.py``): the limit that refused the head of vLLM's waiting queue for most of the window's queued
time (``tests/reference/refusals.py``, the rule the reference tier uses for vLLM 0.29).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realserver.server import KVPILOT, RunningServer
from tests.reference.refusals import binding_limit
from tests.reference.verdict_scenarios import expected_verdicts as _reference_expected

SCRAPE_INTERVAL = 2.0  # seconds between --metrics-url scrapes
STEP_GAP_CAP = 2.0  # a step's state lasts until the next step, at most this long (an idle engine takes no steps)


@dataclass(frozen=True)
class Load:
    """One load: ``vllm bench serve`` arguments, the warm-up before the window, the window, what it is for."""

    name: str
    bench_args: tuple[str, ...]
    window: float = 40.0
    warmup: float = 10.0
    description: str = ""
    what_if: bool = False  # the with-flags --metrics-url run also replays the window and predicts


@dataclass
class Diagnosis:
    """One ``kvpilot diagnose -o json`` run: its source, whether the limit flags were given, exit code, report."""

    source: str
    with_flags: bool
    exit_code: int
    report: dict[str, Any]
    stderr: str = ""

    @property
    def target(self) -> dict[str, Any]:
        targets = self.report.get("targets") or []
        if len(targets) != 1:
            raise AssertionError(f"{self.source}: {len(targets)} targets, expected the one server: {self.stderr}")
        return dict(targets[0])

    @property
    def verdict(self) -> str:
        return str(self.target["verdict"])


@dataclass
class LoadResult:
    """What one load produced: the truth of its window and every diagnosis of it."""

    load: Load
    t0: float
    t1: float
    truth: dict[str, Any]
    diagnoses: list[Diagnosis] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)

    def by(self, source: str, with_flags: bool) -> Diagnosis:
        return next(d for d in self.diagnoses if d.source == source and d.with_flags == with_flags)


def truth_of(steps: Sequence[Mapping[str, Any]], t0: float, t1: float) -> dict[str, Any]:
    """The scheduler's truth for ``[t0, t1)``: binding limit, queued share, steps, requests run per step."""
    timed = []
    for i, s in enumerate(steps):
        nxt = steps[i + 1]["t"] if i + 1 < len(steps) else s["t"]
        timed.append({"start": s["t"], "duration": min(STEP_GAP_CAP, max(0.0, nxt - s["t"])), "refusal": s["refusal"]})
    b = binding_limit(timed, t0, t1)
    inside = [s for s in steps if t0 <= s["t"] < t1]
    busy = [s for s in inside if s["tokens"]]
    return {
        **b.as_dict(),
        "served": bool(busy),
        "running_mean": round(sum(s["running"] for s in busy) / len(busy), 3) if busy else 0.0,
        "waiting_max": max((s["waiting"] for s in inside), default=0),
        "preemptions": sum(s.get("preempted", 0) for s in inside),
        "cap": steps[-1]["cap"] if steps else None,
        "budget": steps[-1]["budget"] if steps else None,
    }


def expected_verdicts(truth: Mapping[str, Any]) -> tuple[str, ...]:
    """The verdicts that name the truth, the one to aim for first: the reference tier's mapping
    (``tests/reference/verdict_scenarios.expected_verdicts``); a CPU server has no GPU to saturate.
    """
    window = {
        "binding": truth,
        "gpu_saturated": False,
        "served": truth["served"],
        "prefix": {"shared_prefix_hit_share": None},
    }
    return _reference_expected(window)


def _diagnose_argv(*args: str) -> list[str]:
    return [*KVPILOT, "diagnose", "--no-kube", "-o", "json", *args]


def _finish(proc: subprocess.Popen[str], source: str, with_flags: bool, timeout: float) -> Diagnosis:
    out, err = proc.communicate(timeout=timeout)
    try:
        report = json.loads(out) if out.strip() else {}
    except json.JSONDecodeError as exc:
        raise AssertionError(f"diagnose {source}: not JSON ({exc}): {out[:500]} {err[-1000:]}") from None
    return Diagnosis(source, with_flags, proc.returncode, report, err)


def _spawn(argv: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _counter(metrics_text: str, name: str) -> float:
    total = 0.0
    for line in metrics_text.splitlines():
        if line.startswith(name) and not line.startswith("#"):
            rest = line[len(name) :]
            if rest[:1] in ("{", " "):
                total += float(line.rsplit(" ", 1)[1])
    return total


def scrape_counters(server: RunningServer) -> dict[str, float]:
    """A few of the server's own counters now (vLLM's count, for facts the probe does not record)."""
    import urllib.request

    with urllib.request.urlopen(server.url + "/metrics", timeout=10) as r:
        text = r.read(8 << 20).decode()
    names = (
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:request_success_total",
        "vllm:num_preemptions_total",
        "vllm:prompt_tokens_total",
    )
    return {n: _counter(text, n) for n in names}


def run_load(
    server: RunningServer,
    load: Load,
    model: Path,
    vllm: str,
    prometheus_url: str,
    workdir: Path,
) -> LoadResult:
    """Run ``load`` on ``server`` and diagnose its window through every source (module docstring)."""
    workdir.mkdir(parents=True, exist_ok=True)
    url = server.url + "/metrics"
    flags = server.spec.flags()
    recording = workdir / f"{load.name}.om"
    before = scrape_counters(server)
    bench = subprocess.Popen(
        [
            vllm, "bench", "serve", "--backend", "vllm", "--model", str(model), "--host", "127.0.0.1",
            "--port", str(server.port), "--seed", "1", "--disable-tqdm", *load.bench_args,
        ],  # fmt: skip
        stdout=open(workdir / f"{load.name}.bench.log", "w"),  # noqa: SIM115
        stderr=subprocess.STDOUT,
        start_new_session=True,
        cwd=workdir,
        env={**{k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")},
             "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1"},
    )  # fmt: skip
    try:
        wait_busy(server, bench)
        time.sleep(load.warmup)
        if bench.poll() is not None and bench.returncode != 0:
            log = (workdir / f"{load.name}.bench.log").read_text()[-2000:]
            raise RuntimeError(f"vllm bench serve exited {bench.returncode}: {log}")
        window = ["--window", f"{load.window:g}s", "--scrape-interval", f"{SCRAPE_INTERVAL:g}s"]
        predict = [] if load.what_if else ["--no-what-if"]
        live_flags = _spawn(_diagnose_argv("--metrics-url", url, *window, *flags, *predict))
        live_bare = _spawn(
            _diagnose_argv("--metrics-url", url, *window, "--no-what-if", "--save-recording", str(recording))
        )
        d_flags = _finish(live_flags, "metrics-url", True, load.window + 120)
        d_bare = _finish(live_bare, "metrics-url", False, load.window + 60)
    finally:
        if bench.poll() is None:
            os.killpg(bench.pid, signal.SIGINT)
            try:
                bench.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(bench.pid, signal.SIGKILL)
                bench.wait(timeout=10)
    after = scrape_counters(server)
    stamps = [
        float(line.rsplit(" ", 1)[1])
        for line in recording.read_text().splitlines()
        if line.startswith("vllm:num_requests_running")
    ]
    t0, t1 = min(stamps), max(stamps)
    span = ["--window", f"{t1 - t0:.3f}s", "--no-what-if"]
    prom = ["--prometheus", prometheus_url, "--end", f"{t1:.3f}", *span]
    saved = ["--recording", str(recording), *span]
    procs = [
        ("prometheus", True, _spawn(_diagnose_argv(*prom, *flags))),
        ("prometheus", False, _spawn(_diagnose_argv(*prom))),
        ("recording", True, _spawn(_diagnose_argv(*saved, *flags))),
        ("recording", False, _spawn(_diagnose_argv(*saved))),
    ]
    diagnoses = [d_flags, d_bare] + [_finish(p, s, f, 120) for s, f, p in procs]
    wait_idle(server)
    steps = server.steps()
    result = LoadResult(load, t0, t1, truth_of(steps, t0, t1), diagnoses)
    result.metrics = {k: after[k] - before[k] for k in after}
    (workdir / f"{load.name}.result.json").write_text(json.dumps(summary(result), indent=1))
    return result


def wait_busy(server: RunningServer, bench: subprocess.Popen[bytes], timeout: float = 180.0) -> None:
    """Until the scheduler ran the load's first tokens (the client's start-up: imports, tokenizing prompts), bounded."""
    deadline = time.monotonic() + timeout
    seen = len(server.steps())
    while time.monotonic() < deadline:
        if any(s["tokens"] for s in server.steps()[seen:]):
            return
        if bench.poll() is not None:
            return
        time.sleep(0.5)
    raise TimeoutError(f"no request reached the server within {timeout:.0f} s of starting vllm bench serve")


def wait_idle(server: RunningServer, timeout: float = 60.0) -> None:
    """Until the probe's last step left nothing running or waiting (the aborted load drained), bounded."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = server.steps()
        if steps and steps[-1]["running"] == 0 and steps[-1]["waiting"] == 0:
            return
        time.sleep(1.0)


def summary(result: LoadResult) -> dict[str, Any]:
    """The load's truth and each source's verdict (for the tier's table)."""
    return {
        "load": result.load.name,
        "window": [result.t0, result.t1],
        "truth": result.truth,
        "expected": expected_verdicts(result.truth),
        "counters": result.metrics,
        "verdicts": {
            f"{d.source}{' +flags' if d.with_flags else ''}": {
                "verdict": d.target.get("verdict") if d.report.get("targets") else None,
                "exit": d.exit_code,
                "confidence": d.target.get("confidence") if d.report.get("targets") else None,
            }
            for d in result.diagnoses
        },
    }


@dataclass
class Pass:
    """One pass of the document scan: its time span and vLLM's own prefix-cache counters over it."""

    name: str
    t0: float
    t1: float
    queries: float
    hits: float


def document_scan(
    server: RunningServer,
    docs: Sequence[Sequence[int]],
    passes: Sequence[tuple[str, Sequence[int], float]],
    timeout: float = 600.0,
) -> list[Pass]:
    """The founding experiment: one client reading ``docs`` one at a time, pass by pass. Each pass is a name, an
    order of document indices, and the seconds it lasts at least (the order repeated whole until then, so that the
    pass is a window a scraper can read); each request a prompt of token ids and one output token. Bounded by
    ``timeout``.
    """
    import urllib.request

    deadline = time.monotonic() + timeout
    out = []
    queries, hits = "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total"
    for name, order, seconds in passes:
        before = scrape_counters(server)
        t0 = time.time()
        while True:
            for i in order:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"the document scan took over {timeout:.0f} s")
                body = json.dumps({"model": server.spec_model, "prompt": list(docs[i]), "max_tokens": 1}).encode()
                req = urllib.request.Request(server.url + "/v1/completions", body, {"Content-Type": "application/json"})
                with urllib.request.urlopen(req, timeout=120) as r:
                    r.read(1 << 20)
            if time.time() - t0 >= seconds:
                break
        t1 = time.time()
        after = scrape_counters(server)
        out.append(Pass(name, t0, t1, after[queries] - before[queries], after[hits] - before[hits]))
    return out
