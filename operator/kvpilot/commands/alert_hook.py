"""`kvpilot alert-hook`: the webhook receiver that answers firing alerts with a diagnosis (thin)."""

from __future__ import annotations

import os
from pathlib import Path

import click

from kvpilot.commands._common import DURATION, SIZE, fail

_EPILOG = """\b
Examples:
  kvpilot alert-hook --prometheus http://prometheus:9090 --bearer-token-file /etc/kvpilot/hook-token
  kvpilot alert-hook --prometheus http://127.0.0.1:9090 --listen 127.0.0.1:8080 --insecure-no-auth
  kvpilot alert-hook --prometheus http://prometheus:9090 --basic-auth-file /etc/kvpilot/hook-basic \\
      --sink log --sink kube-event --sink grafana --grafana-url http://grafana:3000 \\
      --grafana-token-file /etc/kvpilot/grafana-token

\b
Alertmanager:  receivers: [{name: kvpilot, webhook_configs: [{url: http://HOOK:8080/alerts,
               http_config: {authorization: {credentials_file: /etc/alertmanager/hook-token}}}]}]
Grafana:       a webhook contact point to http://HOOK:8080/alerts (manifests/monitoring/grafana-alerting.yaml)
The answer is the `kvpilot diagnose -o json` document of each firing alert's target (docs/alerting.md).
The bearer token may also come from $KVPILOT_ALERT_HOOK_TOKEN, Grafana's from $GRAFANA_TOKEN.
"""


def _read_secret(path: str | None, env: str, option: str) -> str | None:
    if path:
        try:
            value = Path(path).read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            fail(f"{option}: cannot read {path}: {getattr(exc, 'strerror', None) or exc}")
        if not value:
            fail(f"{option}: {path} is empty")
        return value
    return os.environ.get(env) or None


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        fail(f"--listen: {text!r} is not [HOST:]PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


@click.command(name="alert-hook", epilog=_EPILOG)
@click.option("--prometheus", required=True, metavar="URL", help="Prometheus the diagnoses query.")
@click.option("--listen", default="127.0.0.1:8080", show_default=True, metavar="[HOST:]PORT", help="Where to listen.")
@click.option("--bearer-token-file", metavar="FILE", help="Require 'Authorization: Bearer <token in FILE>'.")
@click.option("--basic-auth-file", metavar="FILE", help="Require basic auth; FILE holds USER:PASSWORD.")
@click.option("--insecure-no-auth", is_flag=True, help="Accept requests without credentials (tests, loopback).")
@click.option("--window", default="5m", type=DURATION, show_default=True, help="Diagnosis window.")
@click.option(
    "--cache",
    "cache_seconds",
    default="5m",
    type=DURATION,
    show_default=True,
    help="Diagnose a repeating alert once per.",
)
@click.option("--max-concurrency", default=4, type=click.IntRange(1, 256), show_default=True, help="Diagnoses at once.")
@click.option("--timeout", default="30s", type=DURATION, show_default=True, help="Deadline of one diagnosis.")
@click.option("--max-body", default="1MiB", type=SIZE, show_default=True, help="Largest request body accepted.")
@click.option(
    "--sink",
    "sinks",
    multiple=True,
    type=click.Choice(["log", "grafana", "kube-event", "forward"]),
    help="Where results go besides the answer (repeatable; default: log).",
)
@click.option("--grafana-url", metavar="URL", help="Grafana for --sink grafana (annotations API).")
@click.option("--grafana-token-file", metavar="FILE", help="Grafana service-account token (else $GRAFANA_TOKEN).")
@click.option("--forward-url", metavar="URL", help="Where --sink forward POSTs each result.")
@click.option(
    "--limits-from-cluster", is_flag=True, help="Read limits from the VLLMServer spec (GET; needs a kubeconfig)."
)
@click.option("--kubeconfig", metavar="FILE", help="Cluster for --sink kube-event and --limits-from-cluster.")
def command(
    prometheus: str,
    listen: str,
    bearer_token_file: str | None,
    basic_auth_file: str | None,
    insecure_no_auth: bool,
    window: float,
    cache_seconds: float,
    max_concurrency: int,
    timeout: float,
    max_body: int,
    sinks: tuple[str, ...],
    grafana_url: str | None,
    grafana_token_file: str | None,
    forward_url: str | None,
    limits_from_cluster: bool,
    kubeconfig: str | None,
) -> None:
    """Webhook receiver: answers firing alerts with a diagnosis."""
    if not prometheus.startswith(("http://", "https://")):
        fail(f"--prometheus: {prometheus!r} is not an http(s) URL")
    host, port = _listen(listen)
    token = _read_secret(bearer_token_file, "KVPILOT_ALERT_HOOK_TOKEN", "--bearer-token-file")
    basic = None
    if basic_auth_file:
        user, sep, password = (_read_secret(basic_auth_file, "", "--basic-auth-file") or "").partition(":")
        if not sep or not user or not password:
            fail(f"--basic-auth-file: {basic_auth_file} must hold USER:PASSWORD")
        basic = (user, password)
    if not (token or basic or insecure_no_auth):
        fail("--bearer-token-file: give a token (or --basic-auth-file), or --insecure-no-auth")

    import asyncio

    from kvpilot.alerts.hook import AlertHook, HookConfig, Sink, serve
    from kvpilot.alerts.sinks import ForwardSink, GrafanaAnnotationSink, KubeEventSink, LogSink

    chosen: list[Sink] = []
    for name in sinks or ("log",):
        if name == "log":
            chosen.append(LogSink())
        elif name == "grafana":
            grafana_token = _read_secret(grafana_token_file, "GRAFANA_TOKEN", "--grafana-token-file")
            if not grafana_url or not grafana_token:
                fail("--sink grafana: needs --grafana-url and a token (--grafana-token-file or $GRAFANA_TOKEN)")
            chosen.append(GrafanaAnnotationSink(grafana_url, grafana_token))
        elif name == "forward":
            if not forward_url or not forward_url.startswith(("http://", "https://")):
                fail("--sink forward: needs --forward-url http(s)://...")
            chosen.append(ForwardSink(forward_url))
        elif name == "kube-event":
            from kvpilot.controller.runner import ClusterConfigError, load_configuration

            try:
                import kubernetes.client

                chosen.append(KubeEventSink(kubernetes.client.ApiClient(load_configuration(kubeconfig))))
            except ClusterConfigError as exc:
                fail(f"--kubeconfig: {exc}")
    config = HookConfig(
        prometheus=prometheus.rstrip("/"),
        bearer_token=token,
        basic_auth=basic,
        insecure_no_auth=insecure_no_auth,
        window_seconds=window,
        cache_seconds=cache_seconds,
        max_concurrency=max_concurrency,
        timeout_seconds=timeout,
        max_body_bytes=max_body,
        use_kube=limits_from_cluster,
        kubeconfig=kubeconfig,
        sinks=chosen,
    )

    async def main() -> None:
        try:
            runner = await serve(AlertHook(config), host, port)
        except OSError as exc:
            fail(f"--listen: cannot listen on {host}:{port}: {exc.strerror or exc}")
        click.echo(f"kvpilot alert-hook: listening on http://{host}:{port}/alerts", err=True)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
