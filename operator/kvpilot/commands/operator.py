"""`kvpilot operator`: run the VLLMServer operator (kopf) against a cluster."""

from __future__ import annotations

import click

from kvpilot.commands._common import fail

DEFAULT_PORT = 8081  # kvpilot.controller.metrics.DEFAULT_PORT (not imported: kopf loads only when run)
DEFAULT_PATH = "/metrics"
DEFAULT_PEERING_LIFETIME = 60  # kvpilot.controller.settings.DEFAULT_PEERING_LIFETIME (kopf's default)

_EPILOG = """\b
Examples:
  kvpilot operator --namespace llm                       # watch one namespace
  kvpilot operator --all-namespaces --peering kvpilot    # cluster-wide, HA
  kvpilot operator -n llm --peering kvpilot --peering-lifetime 20
      # a replica killed without a goodbye blocks the others 20 s at most
  kvpilot operator -n llm --standalone --liveness http://0.0.0.0:8080/healthz
  kvpilot operator -n llm --metrics-port 9100 --metrics-path /metrics
      # the servers' limits and the reconcile counters on :9100/metrics
  kvpilot operator -n llm --metrics-port 0               # no /metrics
  kvpilot operator -n llm --allowed-image 'vllm/vllm-openai:*' \\
      --allowed-service-account vllm

The cluster comes from --kubeconfig, else $KUBECONFIG, else the in-cluster service account,
else ~/.kube/config. The options are kopf's run options (kopf run --help), and --metrics-*:
the operator serves each VLLMServer's limits, phase and expiry and its reconcile counters
(docs/alerting.md); scrape it with honor_labels: true. Several operators on one host
(network) each need their own --metrics-port and --liveness port, or --metrics-port 0.
"""


@click.command(name="operator", epilog=_EPILOG)
@click.option(
    "-n",
    "--namespace",
    "namespaces",
    multiple=True,
    metavar="NS",
    help="Namespace to watch (repeatable; kopf globs such as 'llm-*' allowed).",
)
@click.option("-A", "--all-namespaces", "clusterwide", is_flag=True, help="Watch every namespace.")
@click.option("--standalone", is_flag=True, help="No peering: assume this is the only operator.")
@click.option("-P", "--peering", "peering_name", metavar="NAME", help="kopf peering object name (for HA).")
@click.option(
    "-p",
    "--priority",
    type=int,
    default=None,
    help="Priority among peers (kopf's --priority; the highest live one acts). Default with --peering: "
    "by start time, the longest-running replica acts (replicas sharing one priority would all pause).",
)
@click.option(
    "--peering-lifetime",
    type=click.IntRange(1, 3600),
    default=DEFAULT_PEERING_LIFETIME,
    show_default=True,
    metavar="SECONDS",
    help="With --peering: how long a replica stays alive for its peers without a heartbeat "
    "(a replica killed without a goodbye blocks the others this long).",
)
@click.option(
    "--liveness", "liveness_endpoint", metavar="URL", help="Serve a liveness probe, e.g. http://0.0.0.0:8080/healthz."
)
@click.option(
    "--metrics-port",
    type=click.IntRange(0, 65535),
    default=DEFAULT_PORT,
    show_default=True,
    help="Port of the operator's /metrics (0: do not serve).",
)
@click.option("--metrics-host", default="0.0.0.0", show_default=True, help="Address /metrics listens on.")
@click.option("--metrics-path", default=DEFAULT_PATH, show_default=True, help="Path of the metrics endpoint.")
@click.option(
    "--allowed-image",
    "allowed_images",
    multiple=True,
    metavar="GLOB",
    envvar="KVPILOT_ALLOWED_IMAGES",
    help="Only run VLLMServers whose image matches (repeatable, or comma-separated; e.g. "
    "'vllm/vllm-openai:*'; an image matches as written or as the runtime resolves it, so "
    "'docker.io/vllm/vllm-openai:*' allows the same). Others are Invalid (reason NotAllowed). Default: any image.",
)
@click.option(
    "--allowed-service-account",
    "allowed_service_accounts",
    multiple=True,
    metavar="GLOB",
    envvar="KVPILOT_ALLOWED_SERVICE_ACCOUNTS",
    help="Only run VLLMServers whose spec.serviceAccountName matches (repeatable, or comma-separated); "
    "a server naming none is allowed (no token). Default: any.",
)
@click.option("--kubeconfig", metavar="FILE", help="Kubeconfig file (default: $KUBECONFIG).")
@click.option("--context", metavar="NAME", help="Kubeconfig context.")
@click.option("-v", "--verbose", is_flag=True, help="Log more.")
@click.option("-q", "--quiet", is_flag=True, help="Log warnings and errors only.")
def command(
    namespaces: tuple[str, ...],
    clusterwide: bool,
    standalone: bool,
    peering_name: str | None,
    priority: int | None,
    peering_lifetime: int,
    liveness_endpoint: str | None,
    metrics_port: int,
    metrics_host: str,
    metrics_path: str,
    allowed_images: tuple[str, ...],
    allowed_service_accounts: tuple[str, ...],
    kubeconfig: str | None,
    context: str | None,
    verbose: bool,
    quiet: bool,
) -> None:
    """Run the VLLMServer operator (kopf run options pass through)."""
    if not namespaces and not clusterwide:
        fail("--namespace: say which namespace(s) to watch, or --all-namespaces")
    if namespaces and clusterwide:
        fail("--all-namespaces: cannot be combined with --namespace")
    if standalone and peering_name:
        fail("--peering: cannot be combined with --standalone")
    if not metrics_path.startswith("/"):
        fail(f"--metrics-path: must start with '/', got {metrics_path!r}")
    import kopf

    from kvpilot.controller.metrics import OperatorMetrics
    from kvpilot.controller.policy import SpecPolicy
    from kvpilot.controller.runner import (
        ClusterConfigError,
        OutdatedCRDError,
        load_configuration,
        run_operator,
        tune_gc,
    )

    kopf.configure(verbose=verbose, quiet=quiet)
    tune_gc()
    try:
        configuration = load_configuration(kubeconfig, context)
    except ClusterConfigError as exc:  # names the file or $KUBECONFIG; the option only when it was given
        fail(f"--kubeconfig {exc}" if kubeconfig else str(exc))
    metrics = OperatorMetrics()
    if metrics_port:
        try:
            metrics.serve(metrics_host, metrics_port, metrics_path)
        except OSError as exc:
            fail(f"--metrics-port: cannot listen on {metrics_host}:{metrics_port}: {exc.strerror or exc}")
    try:
        run_operator(
            configuration,
            namespaces=namespaces,
            clusterwide=clusterwide,
            standalone=standalone,
            peering_name=peering_name,
            liveness_endpoint=liveness_endpoint,
            priority=priority,
            peering_lifetime=peering_lifetime,
            reload=lambda: load_configuration(kubeconfig, context),
            metrics=metrics,
            spec_policy=SpecPolicy.from_options(allowed_images, allowed_service_accounts),
        )
    except OutdatedCRDError as exc:
        fail(str(exc))
