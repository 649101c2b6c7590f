"""kvpilot against a real vLLM 0.32 server on CPU: the Pod the operator writes, served, loaded and diagnosed.

Each server of :data:`tests.realserver.scenarios.PLAN` is a VLLMServer rendered by ``kvpilot render`` and run from
its Pod's command line (``server.py``); each load is diagnosed from ``--metrics-url``, ``--prometheus`` and a
recording saved from the live server, with and without the limit flags (``harness.py``), and every answer is held
to the scheduler's own truth for the same window (``scheduler_probe.py``), never to kvpilot's engine.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kvpilot.diagnose.rules import INCIDENTAL_BLOCKS
from tests.realserver.harness import LoadResult, Pass, document_scan, expected_verdicts, run_load, summary
from tests.realserver.scenarios import PLAN
from tests.realserver.server import KVPILOT, RunningServer, serve

pytestmark = [pytest.mark.vllm_server, pytest.mark.prometheus]

SOURCES = [(s, f) for s in ("metrics-url", "prometheus", "recording") for f in (True, False)]
LOADS = [(server, load.name) for server, (_, loads) in PLAN.items() for load in loads]
_RESULTS: dict[str, dict[str, Any]] = {}


class ServerRun:
    """A server of the plan, started once, its loads run in order; kept until the session ends."""

    def __init__(self, name: str, server: RunningServer, results: dict[str, LoadResult], scan: list[Pass]):
        self.name, self.server, self.results, self.scan = name, server, results, scan


#: The founding experiment, scaled to the small-KV server: 8 documents of 640 tokens (5 blocks of 128 each, 40 in
#: all) against 23 usable blocks (3,072 tokens, one block reserved), prefix caching on, one client.
SCAN_SERVER = "kv-small"
#: vLLM's CPU block size (tokens), which the scan's documents are whole blocks of
SCAN_BLOCK = 128
SCAN_DOCS = [random.Random(s).choices(range(3, 2000), k=640) for s in range(8)]
#: each pass a window of at least 30 s: the same order again and again (a cyclic scan), then back and forth (each
#: turn re-reads the documents read last first: the reversed pass of the experiment, repeated)
SCAN_PASSES = [
    ("first", list(range(8)), 0.0),
    ("same-order", list(range(8)), 30.0),
    ("reversed", [*reversed(range(8)), *range(8)], 30.0),
]


@pytest.fixture(scope="session")
def server_runs(vllm_bin: Path, tiny_model: Path, server_port: int, prometheus, tmp_path_factory) -> Iterator[dict]:
    """``{server name: ServerRun}``, each made when a test first asks for it (one server up at a time)."""
    runs: dict[str, ServerRun | Exception] = {}
    root = tmp_path_factory.mktemp("realserver")

    def get(name: str) -> ServerRun:
        if name not in runs:
            spec, loads = PLAN[name]
            work = root / name
            try:
                with serve(spec, tiny_model, str(vllm_bin / "vllm"), server_port, work) as server:
                    results = {
                        load.name: run_load(server, load, tiny_model, str(vllm_bin / "vllm"), prometheus.url, work)
                        for load in loads
                    }
                    scan = document_scan(server, SCAN_DOCS, SCAN_PASSES) if name == SCAN_SERVER else []
                    runs[name] = ServerRun(name, server, results, scan)
                    for load_name, result in results.items():
                        _RESULTS[f"{name}/{load_name}"] = summary(result)
            except Exception as exc:  # noqa: BLE001 (every test of this server reports it)
                runs[name] = exc
        got = runs[name]
        if isinstance(got, Exception):
            raise got
        return got

    yield get
    report = Path(tmp_path_factory.getbasetemp()) / "realserver-table.json"
    report.write_text(json.dumps(_RESULTS, indent=1))
    print(f"\nreal-server tier: {report}")


def _result(server_runs, server: str, load: str) -> LoadResult:
    return server_runs(server).results[load]


@pytest.mark.parametrize(("server", "load"), LOADS)
def test_truth_is_what_the_load_was_built_for(server_runs, server: str, load: str) -> None:
    """Each load produces the limit it is for, as vLLM's scheduler says (a load that misses proves nothing)."""
    truth = _result(server_runs, server, load).truth
    wanted = {
        ("seqs2", "seqs-cap"): "max_num_seqs",
        ("seqs8", "seqs-cap-8"): "max_num_seqs",
        ("seqs8", "near-limits"): "none",
        ("kv-small", "kv-exhaustion"): "kv_cache",
        ("budget", "token-budget"): "token_budget",
    }.get((server, load), "none")
    assert truth["limit"] == wanted, truth


@pytest.mark.parametrize(("source", "with_flags"), SOURCES, ids=[f"{s}-{'flags' if f else 'bare'}" for s, f in SOURCES])
@pytest.mark.parametrize(("server", "load"), LOADS)
def test_verdict_equals_the_schedulers_truth(server_runs, server: str, load: str, source: str, with_flags: bool):
    """The same verdict from every source, with and without the limit flags: the scheduler's truth."""
    result = _result(server_runs, server, load)
    d = result.by(source, with_flags)
    assert d.verdict in expected_verdicts(result.truth), (d.target.get("evidence"), result.truth)
    if source == "metrics-url":  # the server shows its version (GET /version): the report names it
        assert d.target["target"]["vllm_version"].startswith("0.32.0"), d.target["target"]


@pytest.mark.parametrize("server", list(PLAN))
def test_kv_calculator_equals_the_logged_kv_cache(server_runs, tiny_model: Path, server: str) -> None:
    """``kvpilot kv`` gives the KV tokens and concurrency the server logged ('CPU KV cache size: ...')."""
    run = server_runs(server)
    log = run.server.log_text()
    m = re.search(r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                  r"([\d.]+)x", log)  # fmt: skip
    assert m, log[-2000:]
    spec = run.server.spec
    out = subprocess.run(
        [*KVPILOT, "kv", str(tiny_model / "config.json"), "--block-size", "128", "--max-model-len",
         str(spec.max_model_len), "--kv-memory", f"{spec.kv_cache_bytes // (1 << 20)}MiB", "-o", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    kv = json.loads(out.stdout)
    assert kv["kv_tokens"] == int(m.group(1).replace(",", ""))
    assert f"{kv['max_concurrency']:.2f}" == m.group(3)


def test_no_prefix_finding_on_random_tokens(server_runs) -> None:
    """Random-token prompts share nothing: no source reports a prefix-cache problem (chance hits are no reuse)."""
    for server, load in LOADS:
        if load == "shared-prompt":
            continue
        for d in _result(server_runs, server, load).diagnoses:
            if not d.report.get("targets"):
                continue
            kinds = [d.target["verdict"], *(f.get("verdict") for f in d.target.get("findings") or [])]
            assert "prefix_cache_ineffective" not in kinds, (server, load, d.source, d.with_flags)


def test_shared_system_prompt_hits(server_runs) -> None:
    """A shared 768-token system prompt is found by vLLM's prefix cache (its own counters): healthy, no warning."""
    result = _result(server_runs, "roomy", "shared-prompt")
    assert result.metrics["vllm:prefix_cache_hits_total"] > 0.5 * result.metrics["vllm:prefix_cache_queries_total"]


def test_document_scan_on_a_real_server(server_runs, prometheus, tiny_model: Path) -> None:
    """The founding experiment on a real vLLM: documents re-read in the same order at more than the KV capacity
    find nothing in the prefix cache (LRU evicts each block just before its reuse); reversed, they hit. kvpilot
    states the cache's horizon and the offload that would hold the working set for the first, and not for the
    second when its hits are more than incidental.
    """
    scan = {p.name: p for p in server_runs(SCAN_SERVER).scan}
    assert scan["first"].hits == 0, scan
    assert scan["same-order"].queries >= 2 * 8 * 640, scan  # at least two cycles
    assert scan["same-order"].hits == 0, scan
    # each turn finds at least the two documents read last (whole blocks), and each turn reads 8 documents
    assert scan["reversed"].hits >= 2 * 5 * 128 * scan["reversed"].queries // (8 * 640), scan

    def evidence(p: Pass) -> list[str]:
        out = subprocess.run(
            [*KVPILOT, "diagnose", "--no-kube", "-o", "json", "--prometheus", prometheus.url, "--end", f"{p.t1:.3f}",
             "--window", f"{p.t1 - p.t0:.3f}s", "--no-what-if", "--model-config", str(tiny_model / "config.json")],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        (target,) = json.loads(out.stdout)["targets"]
        assert target["verdict"] in ("healthy", "prefix_cache_ineffective"), target["evidence"]
        return list(target["evidence"])

    same = " ".join(evidence(scan["same-order"]))
    assert "beyond the cache's horizon" in same, same
    assert "A CPU offload tier (LMCache) of" in same, same
    # Reversed, each turn finds the documents read last: vLLM's own counters give the hits a request found. Above
    # the incidental blocks a request (what any traffic finds by chance) they are evidence of reuse, and kvpilot
    # states no horizon; at or below, the counters cannot tell them from chance, and it may (each turn finding
    # only the last two documents is 10 blocks for 8 requests, 1.25 a request: below the line).
    reversed_text = " ".join(evidence(scan["reversed"]))
    requests = scan["reversed"].queries / 640
    if scan["reversed"].hits / requests > INCIDENTAL_BLOCKS * SCAN_BLOCK:
        assert "beyond the cache's horizon" not in reversed_text, reversed_text
