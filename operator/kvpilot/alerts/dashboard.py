"""The Grafana dashboard "kvpilot / vLLM limits", as code with Grafana's Foundation SDK
(``grafana-foundation-sdk`` on PyPI: typed builders of Grafana's own dashboard schema).

Every panel puts a signal of the diagnoser next to the limit it is judged against, with the same
PromQL as the alert rules (:class:`kvpilot.alerts.rules.Signals`, both metric generations and
spellings): running and waiting against ``max_num_seqs``, KV usage against the admission ceiling,
preemptions, prefix hit rate, tokens per step against ``max_num_batched_tokens``, TTFT / inter-token /
end-to-end latency p50, p95, p99; kvpilot's firing alerts as annotations; variables ``namespace``,
``server`` (VLLMServer) and ``model``.

``python -m kvpilot.alerts.dashboard [FILE]`` writes the JSON (default
``manifests/monitoring/grafana-dashboard.json``); a test fails when the committed file drifts. The SDK
is needed only to generate (extra ``test``); the JSON is what Grafana provisions.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from kvpilot.alerts.rules import BY, Signals, limit, vllm
from kvpilot.text.documents import JsonObject

UID = "kvpilot-vllm-limits"
OUTPUT = "manifests/monitoring/grafana-dashboard.json"
#: the vLLM series the variables select ("$server" is a VLLMServer: its pods are "<server>-<5 hex>")
MATCHERS = 'namespace=~"$namespace", pod=~"$server.*", model_name=~"$model"'
LIMIT_MATCHERS = 'namespace=~"$namespace", server=~"$server"'
#: the dashboard's range for rates (Grafana's $__rate_interval: at least four scrape intervals)
RATE = "$__rate_interval"
#: histograms read for latency quantiles (name, legacy name)
LATENCIES = (
    ("TTFT", ("time_to_first_token_seconds",)),
    ("Inter-token latency", ("inter_token_latency_seconds", "time_per_output_token_seconds")),
    ("End-to-end request latency", ("e2e_request_latency_seconds",)),
)


def _quantiles(names: tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for q in (0.5, 0.95, 0.99):
        parts = [
            f"histogram_quantile({q}, sum by ({BY}, le) (rate({vllm(n + '_bucket', MATCHERS)}[{RATE}])))" for n in names
        ]
        out.append((f"p{int(q * 100)} {{{{pod}}}}", " or ".join(parts)))
    return out


def panel_queries() -> list[tuple[str, str, list[tuple[str, str]]]]:
    """``[(title, unit, [(legend, PromQL)])]`` of every panel (the test runs each query)."""
    s = Signals(window=RATE, matchers=MATCHERS)
    gauge = Signals(window="1m", matchers=MATCHERS)  # instantaneous gauges read over one minute
    panels = [
        (
            "Running and waiting requests vs max_num_seqs",
            "short",
            [
                ("running {{pod}}", gauge.running_max),
                ("waiting {{pod}}", gauge.waiting_max),
                ("max_num_seqs {{pod}}", limit("max_num_seqs", LIMIT_MATCHERS)),
            ],
        ),
        (
            "KV cache usage vs admission ceiling",
            "percentunit",
            [("KV usage {{pod}}", gauge.kv_max), ("admission ceiling {{pod}}", gauge.kv_ceiling)],
        ),
        ("Preemptions per second", "short", [("preemptions/s {{pod}}", _rate(s, "num_preemptions_total"))]),
        ("Prefix cache hit rate", "percentunit", [("hit rate {{pod}}", s.hit_rate)]),
        (
            "Tokens per engine step vs max_num_batched_tokens",
            "short",
            [
                ("tokens/step {{pod}}", s.tokens_per_step),
                ("max_num_batched_tokens {{pod}}", limit("max_num_batched_tokens", LIMIT_MATCHERS)),
            ],
        ),
    ]
    panels += [(f"{title} p50 / p95 / p99", "s", _quantiles(names)) for title, names in LATENCIES]
    return panels


def _rate(s: Signals, name: str) -> str:
    return f"max by ({BY}) (rate({vllm(name, s.matchers)}[{s.window}]))"


def build() -> JsonObject:
    """The dashboard as Grafana's JSON model (built with the Foundation SDK's typed builders)."""
    from grafana_foundation_sdk.builders import dashboard as db
    from grafana_foundation_sdk.builders import prometheus, timeseries
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.models.dashboard import DataSourceRef, VariableRefresh

    ds = DataSourceRef(type_val="prometheus", uid="${datasource}")
    builder = (
        db.Dashboard("kvpilot / vLLM limits")
        .uid(UID)
        .tags(["kvpilot", "vllm"])
        .description("Which limit binds a vLLM server: each signal beside its limit (docs/alerting.md).")
        .refresh("30s")
        .time("now-1h", "now")
        .with_variable(db.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            db.QueryVariable("namespace")
            .label("namespace")
            .datasource(ds)
            .query('label_values({__name__=~"vllm[:_]num_requests_running"}, namespace)')
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .all_value(".*")
        )
        .with_variable(
            db.QueryVariable("server")
            .label("server (VLLMServer)")
            .datasource(ds)
            .query('label_values(kvpilot_vllmserver_info{namespace=~"$namespace"}, server)')
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .all_value(".*")
        )
        .with_variable(
            db.QueryVariable("model")
            .label("model")
            .datasource(ds)
            .query('label_values({__name__=~"vllm[:_]num_requests_running", namespace=~"$namespace"}, model_name)')
            .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
            .include_all(True)
            .all_value(".*")
        )
        .annotation(
            db.AnnotationQuery()
            .name("kvpilot alerts")
            .datasource(ds)
            .enable(True)
            .icon_color("red")
            .expr('ALERTS{alertstate="firing", alertname=~"VLLM.*", namespace=~"$namespace"}')
        )
    )
    for title, unit, queries in panel_queries():
        panel = timeseries.Panel().title(title).unit(unit).datasource(ds).span(12).height(8)
        for i, (legend, expr) in enumerate(queries):
            panel = panel.with_target(prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(chr(65 + i)))
        builder = builder.with_panel(panel)
    doc: dict[str, Any] = json.loads(json.dumps(builder.build(), cls=JSONEncoder))  # a dashboard object
    return doc


def render() -> str:
    """The committed JSON text."""
    return json.dumps(build(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Write the dashboard JSON."""
    args = sys.argv[1:] if argv is None else argv
    out = Path(args[0] if args else OUTPUT)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render())
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
