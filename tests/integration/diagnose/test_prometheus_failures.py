"""Prometheus down, slow, erroring, partial; NaN/+Inf and duplicate rows -> no traceback, a sound verdict.

A scripted Prometheus on loopback answers kvpilot's own queries (built with the same
``signal_query``), so each test controls exactly what each signal query returns.
"""

from __future__ import annotations

import json

from click.testing import CliRunner

from kvpilot.cli import cli
from kvpilot.diagnose.signals import SIGNAL_DEFS, SUBWINDOW_DEFS, spellings
from kvpilot.diagnose.sources.prometheus import (
    bucket_query,
    cache_config_query,
    coverage_query,
    lora_query,
    operator_limit_query,
    plan,
    signal_query,
    subwindow_query,
)
from tests.integration.diagnose.fakes import LoopbackServer, prom_matrix, prom_vector
from tests.support.prom import free_port

END = 1_764_600_000.0
WINDOW = 300.0
TARGET = {"namespace": "llm", "pod": "qwen-0", "model_name": "m", "engine": "0"}
#: a max_num_seqs-capped server: running pinned at 4, 10 waiting and growing, KV 5 %
VALUES = {
    "running_avg": "4",
    "running_max": "4",
    "running_min": "4",
    "running_last": "4",
    "samples_in_window": "30",
    "last_sample_time": str(END - 5),
    "waiting_avg": "10",
    "waiting_max": "16",
    "waiting_last": "16",
    "waiting_trend_per_s": "0.05",
    "kv_usage_avg": "0.05",
    "kv_usage_max": "0.06",
    "kv_usage_last": "0.05",
    "preemptions_increase": "0",
    "preemptions_per_s": "0",
    "preemptions_last": "0",
}
BY_QUERY = {signal_query(sd, WINDOW): sd for sd in SIGNAL_DEFS}
SUB_QUERIES = [subwindow_query(sd, WINDOW) for sd in SUBWINDOW_DEFS]  # range queries
BUCKET_QUERIES = [
    bucket_query(sd, spelling, WINDOW) for sd in SIGNAL_DEFS if sd.fn == "buckets" for spelling in spellings(sd.family)
]


def scripted(fail=lambda _name: None, override: dict | None = None, duplicate: bool = False):
    """A handler answering each signal query from VALUES; ``fail(signal)`` may return (status, body), and
    ``fail("coverage")`` for the coverage query (no rows: nothing known of where the data starts).
    """
    values = {**VALUES, **(override or {})}

    def handle(_method, path, query, _body):
        q = query.get("query", "")
        if path == "/api/v1/query_range" and q in SUB_QUERIES:
            return 200, prom_matrix([])
        if path != "/api/v1/query":
            return 404, {"status": "error", "error": "not found"}
        if q in (cache_config_query(WINDOW), lora_query(WINDOW), operator_limit_query(WINDOW), *BUCKET_QUERIES):
            return 200, prom_vector([])
        if q == coverage_query(WINDOW):
            return fail("coverage") or (200, prom_vector([]))
        sd = BY_QUERY.get(q)
        if sd is None:
            return 400, {"status": "error", "errorType": "bad_data", "error": "unexpected query"}
        failure = fail(sd.name)
        if failure:
            return failure
        if sd.name not in values:
            return 200, prom_vector([])
        row = ({**TARGET, "kvpilot_name": sd.family}, values[sd.name])
        return 200, prom_vector([row, row] if duplicate else [row], at=END)

    return handle


def run(url, *extra):
    return CliRunner().invoke(
        cli,
        [
            "diagnose",
            "--no-what-if",
            "--prometheus",
            url,
            "--no-kube",
            "--end",
            str(END),
            "--window",
            "300s",
            "--max-num-seqs",
            "4",
            "--timeout",
            "1s",
            "-o",
            "json",
            *extra,
        ],
    )


def test_scripted_prometheus_gives_the_verdict():
    with LoopbackServer(scripted()) as prom:
        result = run(prom.url)
    doc = json.loads(result.output)
    assert doc["targets"][0]["verdict"] == "max_num_seqs_cap"
    assert result.exit_code == 2
    assert doc["targets"][0]["target"]["pod"] == "qwen-0"
    # the report lists the PromQL it used (docs/diagnose-output.schema.json: "queries")
    queries = doc["targets"][0]["queries"]
    assert len(queries) == len(plan(300.0)) + 1  # and where the data starts in the window (coverage_query)
    assert queries[0] == coverage_query(300.0)
    assert all("vllm" in q for q in queries)
    assert any(
        q.startswith(
            "label_replace(max by (namespace, pod, instance, job, model_name, engine) "
            '(avg_over_time({__name__="vllm:num_requests_running"}[300s]))'
        )
        for q in queries
    )
    # one query per signal plus cache_config_info, the operator's kvpilot_vllmserver_limit and the coverage, all
    # at the explicit time
    assert len(prom.requests) == len(plan(300.0)) + 1


def test_prometheus_down_exits_3_with_one_line():
    result = run(f"http://127.0.0.1:{free_port()}")
    assert result.exit_code == 3
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1
    assert lines[0].startswith("kvpilot: error: --prometheus")
    assert "Traceback" not in result.output
    assert lines[0].endswith("connection refused")
    # -o json: stdout still holds one JSON document, the error and the exit status
    doc = json.loads(result.stdout)
    assert doc == {"error": lines[0].removeprefix("kvpilot: error: "), "exit_code": 3}


def test_prometheus_slow_times_out_to_exit_3():
    def slow(_method, _path, _query, _body):
        prom.stop.wait(5)  # longer than the 1 s timeout; returns at once when the test ends
        return 200, prom_vector([])

    with LoopbackServer(slow) as prom:
        result = run(prom.url, "--timeout", "0.5s")
    assert result.exit_code == 3
    assert "kvpilot: error: --prometheus" in result.output
    assert "no complete answer within 0.5 s (the whole-request deadline)" in result.output


def test_prometheus_errors_exit_3():
    with LoopbackServer(scripted(fail=lambda _name: (503, {"status": "error", "error": "overloaded"}))) as prom:
        result = run(prom.url)
    assert result.exit_code == 3
    assert "503" in result.output
    assert "Traceback" not in result.output
    # no retry storm: one request per query (the signals' and the coverage's)
    assert len(prom.requests) == len(plan(300.0)) + 1


def test_a_failed_coverage_query_is_said_and_the_window_read_whole():
    fail = lambda name: (422, {"status": "error", "error": "subqueries refused"}) if name == "coverage" else None  # noqa: E731
    with LoopbackServer(scripted(fail=fail)) as prom:
        result = run(prom.url)
    doc = json.loads(result.output)
    assert doc["targets"][0]["verdict"] == "max_num_seqs_cap"
    (note,) = [n for n in doc["notes"] if "data starts" in n]
    assert note.startswith("Where the data starts in the window is unknown, so it is taken to cover it:")
    assert note.endswith("HTTP 422: subqueries refused")
    assert "[300s]" in doc["targets"][0]["queries"][1]  # the signals over the whole window


def test_prometheus_200_with_an_error_body_is_unreadable_not_a_traceback():
    with LoopbackServer(lambda _m, _p, _q, _b: (200, {"status": "error", "error": "boom"})) as prom:
        result = run(prom.url)
    assert result.exit_code == 3
    assert "unreadable answer" in result.output


def test_partial_results_keep_the_verdict_and_say_what_failed():
    # every KV query fails: the verdict rests on what is known, and the report says what is missing
    fail = lambda name: (422, {"status": "error", "error": "query timed out"}) if name.startswith("kv_") else None  # noqa: E731
    with LoopbackServer(scripted(fail=fail)) as prom:
        result = run(prom.url)
    doc = json.loads(result.output)
    target = doc["targets"][0]
    assert target["verdict"] == "max_num_seqs_cap"
    assert target["signals"]["kv_usage_avg"] is None
    assert target["confidence"] < 0.9
    assert "KV usage unknown" in " ".join(target["evidence"])
    assert any("3 of" in n and "failed" in n for n in doc["notes"])


def test_nan_and_inf_values_are_unknowns():
    with LoopbackServer(
        scripted(override={"kv_usage_avg": "NaN", "kv_usage_max": "+Inf", "waiting_avg": "NaN"})
    ) as prom:
        result = run(prom.url)
    doc = json.loads(result.output)
    signals = doc["targets"][0]["signals"]
    assert signals["kv_usage_avg"] is None
    assert signals["kv_usage_max"] is None
    assert signals["waiting_avg"] is None
    assert "NaN" not in result.output
    assert "Infinity" not in result.output


def test_duplicate_rows_and_a_stopped_target():
    # every row twice, and the running series last seen 200 s before the end (30 samples in 300 s)
    with LoopbackServer(scripted(override={"last_sample_time": str(END - 200)}, duplicate=True)) as prom:
        result = run(prom.url)
    doc = json.loads(result.output)
    assert [t["verdict"] for t in doc["targets"]] == ["target_down"]


def test_empty_answers_are_no_data():
    with LoopbackServer(lambda _m, _p, _q, _b: (200, prom_vector([]))) as prom:
        result = run(prom.url, "-n", "llm")
    doc = json.loads(result.output)
    assert result.exit_code == 3
    assert doc["targets"][0]["verdict"] == "no_data"
    assert "namespace=llm" in doc["targets"][0]["evidence"][0]


def test_an_answer_that_is_not_a_vector_is_unreadable_not_a_traceback():
    # a proxy or another TSDB answering "success" with a scalar result: exit 3, one line
    scalar = {"status": "success", "data": {"resultType": "scalar", "result": [END, "1"]}}
    with LoopbackServer(lambda _m, _p, _q, _b: (200, scalar)) as prom:
        result = run(prom.url)
    assert result.exit_code == 3
    assert "Traceback" not in result.output
    errors = [ln for ln in result.output.splitlines() if ln.startswith("kvpilot: error:")]
    assert len(errors) == 1
    assert "not an instant vector" in errors[0]


def test_failed_waiting_queries_never_give_healthy():
    # running known (4 of 4), but every vllm:num_requests_waiting query fails: a queue cannot be ruled
    # out, so the server is not called healthy (exit 0); the report says what it could not read
    fail = lambda name: (500, "oops") if name.startswith("waiting") else None  # noqa: E731
    with LoopbackServer(scripted(fail=fail)) as prom:
        result = run(prom.url)
    doc = json.loads(result.output)
    target = doc["targets"][0]
    assert target["verdict"] == "no_data"
    assert target["severity"] == "unknown"
    assert result.exit_code == 3
    assert "waiting" in target["evidence"][0]
    assert "unknown" in target["evidence"][0]
