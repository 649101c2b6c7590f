"""`kvpilot alert-hook`: the webhook receiver that answers firing alerts with a diagnosis (thin)."""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import click

from kvpilot.alerts.payload import MAX_ALERTS
from kvpilot.commands._common import DURATION, SIZE, fail, fail_input, listen_address, read_secret_file
from kvpilot.text.errors import InputError, InvalidValueError

if TYPE_CHECKING:
    from kvpilot.alerts.hook import HookConfig, Sink

_EPILOG = f"""\b
Examples:
  kvpilot alert-hook --prometheus http://prometheus:9090 \\
      --bearer-token-file /etc/kvpilot/hook-token
  kvpilot alert-hook --prometheus http://127.0.0.1:9090 \\
      --listen 127.0.0.1:8080 --insecure-no-auth
  kvpilot alert-hook --prometheus http://prometheus:9090 \\
      --basic-auth-file /etc/kvpilot/hook-basic \\
      --sink log --sink kube-event --sink grafana \\
      --grafana-url http://grafana:3000 \\
      --grafana-token-file /etc/kvpilot/grafana-token

\b
Alertmanager (its configuration file):
  receivers:
  - name: kvpilot
    webhook_configs:
    - url: http://HOOK:8080/alerts
      max_alerts: {MAX_ALERTS}
      http_config:
        authorization:
          credentials_file: /etc/alertmanager/hook-token

Grafana: a webhook contact point to http://HOOK:8080/alerts
(manifests/monitoring/grafana-alerting.yaml).

The answer is the `kvpilot diagnose -o json` document of each firing alert's target (docs/alerting.md).
The bearer token may also come from $KVPILOT_ALERT_HOOK_TOKEN, Grafana's from $GRAFANA_TOKEN.
Bounds (docs/security.md): --max-connections, --header-timeout, --body-timeout, --max-body, --max-alerts
(413 past it), --max-diagnoses-per-minute (429 when none can start), --max-concurrency, --timeout.
"""


def _read_secret(path: str | None, env: str, option: str) -> str | None:
    if path:
        try:
            return read_secret_file(path, option)
        except InputError as exc:
            fail_input(exc)
    return (os.environ.get(env) or None) if env else None


def _user_password(path: str, option: str) -> tuple[str, str]:
    user, sep, password = (_read_secret(path, "", option) or "").partition(":")
    if not sep or not user or not password:
        fail(f"{option}: {path} must hold USER:PASSWORD")
    return user, password


def _listen(text: str, option: str = "--listen") -> tuple[str, int]:
    """``[HOST:]PORT``: ``PORT`` alone listens on loopback, ``:PORT`` on every interface."""
    try:
        return listen_address(text, option, "127.0.0.1", "0.0.0.0")
    except InvalidValueError as exc:
        fail_input(exc)


@click.command(name="alert-hook", epilog=_EPILOG)
@click.option("--prometheus", required=True, metavar="URL", help="Prometheus the diagnoses query.")
@click.option(
    "--prometheus-bearer-token-file", metavar="FILE", help="Send 'Authorization: Bearer <token in FILE>' to Prometheus."
)
@click.option(
    "--prometheus-basic-auth-file", metavar="FILE", help="Send basic auth to Prometheus; FILE holds USER:PASSWORD."
)
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
    help="How long one diagnosis of a target is reused: alerts about that target within it get the same answer.",
)
@click.option("--max-concurrency", default=4, type=click.IntRange(1, 256), show_default=True, help="Diagnoses at once.")
@click.option(
    "--timeout",
    default="30s",
    type=DURATION,
    show_default=True,
    help="Deadline of one diagnosis (its reads end with it).",
)
@click.option("--max-body", default="1MiB", type=SIZE, show_default=True, help="Largest request body accepted.")
@click.option(
    "--max-alerts",
    default=MAX_ALERTS,
    type=click.IntRange(1, 100_000),
    show_default=True,
    help="Most alerts in one body (413 past it; Alertmanager: webhook_config max_alerts).",
)
@click.option(
    "--max-diagnoses-per-minute",
    default=60,
    type=click.IntRange(1, 100_000),
    show_default=True,
    help="New diagnoses a minute (a token bucket; alerts for a cached or running target cost none).",
)
@click.option(
    "--max-connections",
    default=256,
    type=click.IntRange(1, 100_000),
    show_default=True,
    help="Connections open at once; more are answered 503 and closed.",
)
@click.option(
    "--header-timeout",
    default="10s",
    type=DURATION,
    show_default=True,
    help="A request's headers must arrive within this of the connection or the previous answer (else closed).",
)
@click.option(
    "--body-timeout",
    default="10s",
    type=DURATION,
    show_default=True,
    help="A request's body must arrive within this time once it is being read (else the answer is 408).",
)
@click.option(
    "--allowed-namespace",
    "allowed_namespaces",
    multiple=True,
    metavar="PATTERN",
    help="Diagnose alerts of these namespaces only (repeatable; kopf patterns: llm-*, '*,!kube-*'; default: any).",
)
@click.option(
    "--metrics-listen",
    metavar="[HOST:]PORT",
    help="Serve /metrics on this address instead of the webhook's (a separate port for a NetworkPolicy).",
)
@click.option("--metrics-auth", is_flag=True, help="Require the webhook's credentials on /metrics too.")
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
    prometheus_bearer_token_file: str | None,
    prometheus_basic_auth_file: str | None,
    listen: str,
    bearer_token_file: str | None,
    basic_auth_file: str | None,
    insecure_no_auth: bool,
    window: float,
    cache_seconds: float,
    max_concurrency: int,
    timeout: float,
    max_body: int,
    max_alerts: int,
    max_diagnoses_per_minute: int,
    max_connections: int,
    header_timeout: float,
    body_timeout: float,
    allowed_namespaces: tuple[str, ...],
    metrics_listen: str | None,
    metrics_auth: bool,
    sinks: tuple[str, ...],
    grafana_url: str | None,
    grafana_token_file: str | None,
    forward_url: str | None,
    limits_from_cluster: bool,
    kubeconfig: str | None,
) -> None:
    """Webhook receiver: answers firing alerts with a diagnosis."""
    from kvpilot.diagnose.sources.http import split_credentials

    shown, userinfo = split_credentials(prometheus)
    if not prometheus.startswith(("http://", "https://")):
        fail(f"--prometheus: {shown!r} is not an http(s) URL")
    host, port = _listen(listen)
    metrics_address = _listen(metrics_listen, "--metrics-listen") if metrics_listen else None
    token = _read_secret(bearer_token_file, "KVPILOT_ALERT_HOOK_TOKEN", "--bearer-token-file")
    basic = _user_password(basic_auth_file, "--basic-auth-file") if basic_auth_file else None
    if not (token or basic or insecure_no_auth):
        fail("--bearer-token-file: give a token (or --basic-auth-file), or --insecure-no-auth")
    authorization = _prometheus_authorization(userinfo, prometheus_bearer_token_file, prometheus_basic_auth_file)
    for pattern in allowed_namespaces:
        if not pattern.strip(" ,") or not pattern.isprintable():
            fail(f"--allowed-namespace: {pattern!r} is not a namespace pattern (llm-serving, llm-*, '*,!kube-*')")

    import logging
    import sys

    from kvpilot.alerts.hook import HookConfig

    # one line per refused request and per failing sink on stderr; the log sink's JSON lines go to stdout
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    config = HookConfig(
        prometheus=shown.rstrip("/"),
        prometheus_authorization=authorization,
        bearer_token=token,
        basic_auth=basic,
        insecure_no_auth=insecure_no_auth,
        window_seconds=window,
        cache_seconds=cache_seconds,
        max_concurrency=max_concurrency,
        timeout_seconds=timeout,
        max_body_bytes=max_body,
        max_alerts=max_alerts,
        max_diagnoses_per_minute=max_diagnoses_per_minute,
        max_connections=max_connections,
        header_timeout_seconds=header_timeout,
        body_timeout_seconds=body_timeout,
        allowed_namespaces=allowed_namespaces,
        metrics_auth=metrics_auth,
        use_kube=limits_from_cluster,
        kubeconfig=kubeconfig,
        sinks=_sinks(sinks, grafana_url, grafana_token_file, forward_url, kubeconfig),
    )
    _serve_forever(config, (host, port), metrics_address, listen, metrics_listen)


def _prometheus_authorization(userinfo: str | None, bearer_file: str | None, basic_file: str | None) -> str | None:
    """The ``Authorization`` the hook sends Prometheus: a bearer token's, a user and password's, or the URL's."""
    from kvpilot.diagnose.sources.http import basic_authorization, bearer_authorization

    if bearer_file and basic_file:
        fail("--prometheus-bearer-token-file: give it or --prometheus-basic-auth-file, not both")
    if bearer_file:
        return bearer_authorization(_read_secret(bearer_file, "", "--prometheus-bearer-token-file") or "")
    if basic_file:
        return basic_authorization(*_user_password(basic_file, "--prometheus-basic-auth-file"))
    return userinfo


def _sinks(
    names: tuple[str, ...],
    grafana_url: str | None,
    grafana_token_file: str | None,
    forward_url: str | None,
    kubeconfig: str | None,
) -> list[Sink]:
    """The sinks ``--sink`` names (the log by default), each checked for what it needs."""
    from kvpilot.alerts.sinks import ForwardSink, GrafanaAnnotationSink, KubeEventSink, LogSink
    from kvpilot.diagnose.sources.http import split_credentials

    chosen: list[Sink] = []
    for name in names or ("log",):
        if name == "log":
            chosen.append(LogSink())
        elif name == "grafana":
            grafana_token = _read_secret(grafana_token_file, "GRAFANA_TOKEN", "--grafana-token-file")
            if not grafana_url or not grafana_token:
                fail("--sink grafana: needs --grafana-url and a token (--grafana-token-file or $GRAFANA_TOKEN)")
            if split_credentials(grafana_url)[1]:
                fail("--grafana-url: credentials in the URL: put the token in --grafana-token-file")
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
            except ClusterConfigError as exc:  # names the file or $KUBECONFIG; the option only when it was given
                fail(f"--kubeconfig {exc}" if kubeconfig else f"--sink kube-event: {exc}")
    return chosen


def _serve_forever(
    config: HookConfig,
    address: tuple[str, int],
    metrics_address: tuple[str, int] | None,
    listen: str,
    metrics_listen: str | None,
) -> None:
    """Serve until interrupted; an address that cannot be listened on is a one-line error naming its option."""
    import asyncio

    from kvpilot.alerts.hook import AlertHook, serve

    host, port = address

    async def main() -> None:
        try:
            runner = await serve(
                AlertHook(config),
                host,
                port,
                metrics_host=metrics_address[0] if metrics_address else None,
                metrics_port=metrics_address[1] if metrics_address else None,
            )
        except OSError as exc:
            given = f"--listen {listen!r}" + (f" or --metrics-listen {metrics_listen!r}" if metrics_listen else "")
            fail(f"{given}: cannot listen ({exc.strerror or exc}); give HOST:PORT of a local address, or PORT")
        click.echo(f"kvpilot alert-hook: listening on http://{host}:{port}/alerts", err=True)
        if metrics_address:
            click.echo(
                f"kvpilot alert-hook: /metrics on http://{metrics_address[0]}:{metrics_address[1]}/metrics", err=True
            )
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(main())
