"""`kvpilot demo`: every part of kvpilot on this machine — the operator end to end, no cluster, no GPU.

The demo is a sequence of named sections (:data:`SECTIONS`); each is a function taking the
shared :class:`DemoContext`. Later parts of kvpilot (KV math, engine scenarios, diagnosis)
append their own sections to the list without touching these.

What runs is real: a Kubernetes API on 127.0.0.1 (:mod:`kvpilot.sandbox`, with a real API
server's semantics), the VLLMServer CRD, the example ``experiment.yaml`` shipped inside the
package, and the kopf operator. Only the node is played — and the demo says so — because
there is no GPU: it marks the pod scheduled, running, then ready, and serves a vLLM startup
log with the KV-capacity line of the founding measurement (21,520 tokens; docs/engine.md,
"The founding measurement").

The click command (options, ``--help``) is :mod:`kvpilot.commands.demo_command`, which imports this
module only when the demo runs.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import importlib.resources
import logging
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar, cast

import yaml
from rich.table import Table
from rich.text import Text

from kvpilot.commands import demo_alerts, demo_analysis
from kvpilot.text.layout import paragraph, print_command, records, yaml_text
from kvpilot.text.numbers import number

if TYPE_CHECKING:
    from kvpilot.api.models import VLLMServerStatus
    from kvpilot.api.objects import VLLMServerObject

T = TypeVar("T")

NAMESPACE = "kvpilot-demo"
GROUP, VERSION, PLURAL = "kvpilot.dev", "v1alpha1", "vllmservers"
#: Bound of every wait in the demo (seconds); one wait takes well under a second.
WAIT_SECONDS = 15.0

#: The startup log the played kubelet serves: vLLM v0.29's lines for the founding experiment
#: (docs/engine.md, "The founding measurement": Qwen2.5-1.5B-Instruct, 0.60, max-model-len 8192
#: → 21,520 tokens; 21,520 / 8,192 = 2.63 requests).
STARTUP_LOG = """\
INFO 11-30 12:00:02 [__init__.py:216] Automatically detected platform cuda.
(APIServer pid=1) INFO 11-30 12:00:05 [api_server.py:1839] vLLM API server version 0.29.0
(EngineCore_DP0 pid=212) INFO 11-30 12:00:21 [gpu_model_runner.py:2602] Model loading took 2.8876 GiB and 11.2 seconds
(EngineCore_DP0 pid=212) INFO 11-30 12:00:34 [gpu_worker.py:298] Available KV cache memory: 0.58 GiB
(EngineCore_DP0 pid=212) INFO 11-30 12:00:34 [kv_cache_utils.py:1087] GPU KV cache size: 21,520 tokens, \
Maximum concurrency for 8,192 tokens per request: 2.63x
(EngineCore_DP0 pid=212) INFO 11-30 12:00:51 [core.py:210] init engine (profile, create kv cache, \
warmup model) took 28.4 seconds
(APIServer pid=1) INFO 11-30 12:00:52 [api_server.py:1634] Starting vLLM API server 0 on http://0.0.0.0:8000
(APIServer pid=1) INFO:     Application startup complete.
"""


def _no_server() -> VLLMServerObject:
    return {}


@dataclass
class DemoContext:
    """State shared by the demo's sections.

    Attributes:
        console: the rich console everything is printed to.
        stack: context managers to close at the end (sandbox API, operator thread).
        cluster: the :class:`kvpilot.sandbox.SandboxCluster` (set by :func:`section_cluster`).
        api: a ``kubernetes.client.ApiClient`` bound to it.
        server: the VLLMServer as applied (from the packaged experiment example).
        pod_name: the pod the operator made for it.
        diagnoses: the verdict of each scenario the analysis section diagnosed (scenario -> verdict).
        verbose: ``kvpilot demo --verbose``: every section prints its detail (full status YAML,
            the diagnoses' evidence and recommendations) instead of its summary.
        sections_shown: how many headings :meth:`heading` has printed (sections are numbered in order).
        more: per-section commands to go further, printed at the end (``(what, command)``).
    """

    console: Any
    stack: contextlib.ExitStack
    cluster: Any = None
    api: Any = None
    server: VLLMServerObject = field(default_factory=_no_server)
    pod_name: str = ""
    diagnoses: dict[str, str] = field(default_factory=dict)
    verbose: bool = False
    sections_shown: int = 0
    more: list[tuple[str, str]] = field(default_factory=list)

    def heading(self, title: str) -> None:
        """Print the next section's numbered rule: ``title`` without a number (the demo numbers them)."""
        self.sections_shown += 1
        self.console.rule(Text(f"{self.sections_shown}. {title}", style="bold"))

    def say(self, text: str, indent: int = 0) -> None:
        """Print ``text`` (no markup parsed) wrapped on spaces at the console's width."""
        self.console.print(paragraph(Text(text), indent))

    def server_object(self) -> VLLMServerObject:
        """The VLLMServer as the API has it now."""
        found: VLLMServerObject | None = self.cluster.get(
            f"{GROUP}/{VERSION}/{PLURAL}", NAMESPACE, self.server["metadata"]["name"]
        )
        return found or {}

    def server_status(self) -> VLLMServerStatus:
        """The VLLMServer's status as the API has it now, read as the operator reads it (empty when none)."""
        from kvpilot.controller.logic import Server

        return Server.of(self.server_object()).status


def wait_for(probe: Callable[[], T], what: str, timeout: float = WAIT_SECONDS) -> T:
    """Poll ``probe`` until truthy (every 20 ms, at most ``timeout`` s); RuntimeError naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}")


def experiment_example() -> VLLMServerObject:
    """The packaged copy of ``manifests/examples/experiment.yaml`` (works from an installed wheel)."""
    text = importlib.resources.files("kvpilot").joinpath("data/experiment.yaml").read_text(encoding="utf-8")
    example: VLLMServerObject = yaml.safe_load(text)  # one VLLMServer object
    return example


def _heading(ctx: DemoContext, title: str) -> None:
    ctx.heading(title)


# ----------------------------------------------------------------------------- sections
def section_cluster(ctx: DemoContext) -> None:
    """Start the sandbox Kubernetes API on loopback and install the VLLMServer CRD."""
    import kubernetes.client

    from kvpilot.api.crd import crd_manifest
    from kvpilot.sandbox import SandboxCluster

    _heading(ctx, "A Kubernetes API on loopback (no cluster needed)")
    ctx.cluster = ctx.stack.enter_context(SandboxCluster())
    ctx.api = ctx.cluster.api_client()
    manifest = crd_manifest()
    # The client serialises a dict body as is (ApiClient.sanitize_for_serialization); its annotations
    # name only the model classes, hence the narrow ignores on the dict bodies in this module.
    kubernetes.client.ApiextensionsV1Api(ctx.api).create_custom_resource_definition(manifest)  # type: ignore[arg-type]
    kubernetes.client.CoreV1Api(ctx.api).create_namespace({"metadata": {"name": NAMESPACE}})  # type: ignore[arg-type]
    ctx.console.print(
        f"a stand-in Kubernetes API server (kvpilot's sandbox) at [cyan]{ctx.cluster.url}[/]; "
        f"CRD [cyan]{manifest['metadata']['name']}[/] installed; namespace [cyan]{NAMESPACE}[/]"
    )


def section_operator(ctx: DemoContext) -> None:
    """Run the real kopf operator against the sandbox (quiet: kopf's own log stays off stdout)."""
    from kvpilot.controller.runner import OperatorThread

    _heading(ctx, "The kvpilot operator (kopf) watches VLLMServers")
    for noisy in ("kopf", "aiohttp"):
        logging.getLogger(noisy).setLevel(logging.CRITICAL)
    ctx.stack.enter_context(OperatorThread(ctx.cluster.configuration(), namespaces=[NAMESPACE]))
    ctx.console.print(f"operator running (standalone, namespace {NAMESPACE})")


#: What the KV pre-flight needs besides the spec, as a cluster would provide it: the model's
#: config.json in a ConfigMap (``spec.modelConfigRef``; the packaged real config) with its weight size
#: (Qwen2.5-1.5B-Instruct: 1,543,714,304 bf16 parameters x 2 bytes = 3,087,428,608 B, its
#: model.safetensors), and the GPU node's ``nvidia.com/gpu.memory`` label (MiB) that NVIDIA GPU feature
#: discovery sets: an 8 GB laptop GPU, as in the founding measurement (docs/engine.md).
MODEL_CONFIG_MAP = "qwen2.5-1.5b-instruct-config"
MODEL_WEIGHTS_BYTES = 3_087_428_608
GPU_NODE, GPU_MEMORY_MIB = "gpu-node-1", "8192"


def _preflight_inputs(ctx: DemoContext) -> None:
    """Create the model-config ConfigMap and the labelled GPU node; point the server at the ConfigMap."""
    import json

    import kubernetes.client

    core = kubernetes.client.CoreV1Api(ctx.api)
    config = importlib.resources.files("kvpilot").joinpath("data/Qwen2.5-1.5B-Instruct.config.json").read_text()
    index = json.dumps({"metadata": {"total_size": MODEL_WEIGHTS_BYTES}, "weight_map": {}})
    config_map = {
        "metadata": {"name": MODEL_CONFIG_MAP},
        "data": {"config.json": config, "model.safetensors.index.json": index},
    }
    core.create_namespaced_config_map(NAMESPACE, config_map)  # type: ignore[arg-type]  # a dict body, as above
    if ctx.cluster.get("v1/nodes", None, GPU_NODE) is None:
        node = {"metadata": {"name": GPU_NODE, "labels": {"nvidia.com/gpu.memory": GPU_MEMORY_MIB}}}
        core.create_node(node)  # type: ignore[arg-type]  # a dict body, as above
    spec = ctx.server.get("spec")
    if isinstance(spec, dict):  # the packaged example's spec
        spec["modelConfigRef"] = {"name": MODEL_CONFIG_MAP}
    ctx.say(
        f"(the demo adds ConfigMap {MODEL_CONFIG_MAP}, the model's config.json, as spec.modelConfigRef, "
        f"and node {GPU_NODE} labelled nvidia.com/gpu.memory={GPU_MEMORY_MIB} (MiB): the operator's KV "
        "pre-flight reads both)"
    )


def section_apply(ctx: DemoContext) -> None:
    """Apply the experiment example and wait for the Pod and Service the operator makes."""
    import kubernetes.client

    _heading(ctx, "kubectl apply -f experiment.yaml")
    ctx.server = experiment_example()
    name = ctx.server["metadata"]["name"]
    _preflight_inputs(ctx)
    kubernetes.client.CustomObjectsApi(ctx.api).create_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, cast(dict[str, Any], copy.deepcopy(ctx.server))
    )  # the client's body is a dict
    started = time.monotonic()
    pod = wait_for(lambda: (ctx.cluster.list("v1/pods", NAMESPACE) or [None])[0], "the operator's pod")
    service = wait_for(lambda: ctx.cluster.get("v1/services", NAMESPACE, name), "the operator's service")
    ctx.pod_name = pod["metadata"]["name"]
    elapsed = time.monotonic() - started
    owner = pod["metadata"]["ownerReferences"][0]
    ctx.say(
        f"vllmserver.kvpilot.dev/{name} created; in {number(elapsed, 2, 's')} the operator made "
        f"pod/{ctx.pod_name} and service/{service['metadata']['name']} "
        f"(owned by {owner['kind']}/{owner['name']}):"
    )
    print_command(ctx.console, pod["spec"]["containers"][0]["command"])
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    limits = ", ".join(f"{k}={v}" for k, v in limits.items())
    ctx.say(
        f"limits {limits}; activeDeadlineSeconds {pod['spec']['activeDeadlineSeconds']} "
        f"(= ttlSeconds: the pod ends itself); restartPolicy {pod['spec']['restartPolicy']}",
        indent=2,
    )


def _phase_is(ctx: DemoContext, phase: str) -> Callable[[], bool]:
    """A probe: the server's ``status.phase`` is ``phase``."""
    return lambda: ctx.server_status().phase == phase


def section_kubelet(ctx: DemoContext) -> None:
    """Play the scheduler and kubelet, openly: there is no node and no GPU here."""
    from kvpilot.sandbox import Kubelet

    _heading(ctx, "Playing the node (no GPU here: the demo acts as scheduler and kubelet)")
    kubelet = Kubelet(ctx.cluster)
    name, pod = ctx.server["metadata"]["name"], ctx.pod_name
    steps: list[tuple[str, Callable[[], object], str]] = [
        (f"pod scheduled on {GPU_NODE}", lambda: kubelet.schedule(NAMESPACE, pod), "Pending"),
        ("container started, vLLM logs", lambda: kubelet.start(NAMESPACE, pod, log=STARTUP_LOG), "Loading"),
        ("readiness GET /v1/models passes", lambda: kubelet.ready(NAMESPACE, pod), "Ready"),
    ]
    for text, act, phase in steps:
        act()
        wait_for(_phase_is(ctx, phase), f"phase {phase}")
        ctx.console.print(Text.assemble(("kubelet (played): ", "dim"), f"{text} -> {name} is ", (phase, "bold")))
    wait_for(lambda: ctx.server_status().kv_cache_tokens, "kvCacheTokens from the log")
    wait_for(
        lambda: any(c.type == "KVCapacity" and c.status != "Unknown" for c in ctx.server_status().conditions or []),
        "the KV pre-flight with the node's GPU memory",
    )
    ctx.console.print(Text("the startup log line the operator read:", style="dim"))
    kv_line = next(line for line in STARTUP_LOG.splitlines() if "KV cache size" in line)
    ctx.say(kv_line, indent=2)


def _age(timestamp: str | None) -> str:
    """Kubectl's short duration from ``timestamp`` to now (``0s``, ``4m2s``, ``1h0m``); ``in …`` if ahead."""
    if not timestamp:
        return ""
    then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    seconds = int((datetime.datetime.now(datetime.UTC) - then).total_seconds())
    ahead, seconds = seconds < 0, abs(seconds)
    text = (
        f"{seconds // 3600}h{seconds % 3600 // 60}m"
        if seconds >= 3600
        else (f"{seconds // 60}m{seconds % 60}s" if seconds >= 60 else f"{seconds}s")
    )
    return f"in {text}" if ahead else text


def _json_path(obj: VLLMServerObject, path: str) -> Any:
    cur: Any = obj
    for key in path.strip(".").split("."):
        cur = cur.get(key) if isinstance(cur, dict) else None
    return cur


#: The status fields the summary shows (``--verbose`` prints the whole status as YAML).
STATUS_SUMMARY = ("phase", "message", "endpoint", "kvCacheTokens", "maxConcurrency", "expiresAt", "observedGeneration")


def section_status(ctx: DemoContext) -> None:
    """Show ``kubectl get vllmservers`` (the CRD's printer columns), then the status: a summary and its
    conditions, or with ``--verbose`` the whole ``status`` as ``kubectl get -o yaml`` prints it.
    """
    from kvpilot.api.crd import crd_manifest

    _heading(ctx, "kubectl get vllmservers")
    server = ctx.server_object()
    name = server["metadata"]["name"]
    columns = crd_manifest()["spec"]["versions"][0]["additionalPrinterColumns"]
    cells = [name]
    for column in columns:
        value = _json_path(server, column["jsonPath"])
        if column["type"] == "date":
            value = _age(value)
        cells.append("" if value is None else str(value))
    headers = ["NAME", *(column["name"].upper() for column in columns)]
    listing = records(ctx.console, headers, [cells])
    if not isinstance(listing, Table):
        ctx.console.print(Text("(one column per line: kubectl's table is wider than this terminal)", style="dim"))
    ctx.console.print(listing)

    served = server.get("status")  # as kubectl prints it
    status: dict[str, Any] = served if isinstance(served, dict) else {}
    if ctx.verbose:
        _heading(ctx, f"kubectl get vllmserver {name} -o yaml (its status)")
        # kubectl sorts keys; a string too long for a line (kopf's digest) is folded as YAML, never cut
        text = yaml_text({"status": status}, ctx.console.width)
        ctx.console.print(Text(text.rstrip()), no_wrap=True, crop=False)
        return
    _heading(ctx, f"The status of vllmserver/{name} (in full: demo --verbose)")
    ctx.say(", ".join(f"{key} {status[key]}" for key in STATUS_SUMMARY if key in status))
    for c in status.get("conditions") or []:
        ctx.say(f"condition {c['type']} {c['status']} ({c.get('reason')}): {c.get('message')}")


def section_cleanup(ctx: DemoContext) -> None:
    """Delete the VLLMServer (owner references remove its Pod and Service), then stop everything."""
    import kubernetes.client

    _heading(ctx, "Clean up")
    name = ctx.server["metadata"]["name"]
    kubernetes.client.CustomObjectsApi(ctx.api).delete_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    wait_for(
        lambda: not ctx.cluster.list("v1/pods", NAMESPACE) and not ctx.cluster.list("v1/services", NAMESPACE),
        "the pod and service to go",
    )
    ctx.console.print(f"deleted vllmserver/{name}; its pod and service went with it (owner references)")


#: The demo, in order. Later issues append sections (KV math, engine scenarios, diagnosis)
#: before :func:`section_cleanup` with ``SECTIONS.insert(-1, (title, fn))``.
SECTIONS: list[tuple[str, Callable[[DemoContext], None]]] = [
    ("cluster", section_cluster),
    ("operator", section_operator),
    ("apply", section_apply),
    ("kubelet", section_kubelet),
    ("status", section_status),
    ("kv", demo_analysis.section_kv),
    ("engine", demo_analysis.section_engine),
    ("diagnose", demo_analysis.section_diagnose),
    ("alerts", demo_alerts.section_alerts),
    ("cleanup", section_cleanup),
]


def run(
    console: Any, sections: list[tuple[str, Callable[[DemoContext], None]]] | None = None, verbose: bool = False
) -> DemoContext:
    """Run ``sections`` (default :data:`SECTIONS`) in order; closes the sandbox and operator at the end.

    Then prints the commands the sections registered in ``ctx.more`` (how to go further).
    """
    with contextlib.ExitStack() as stack:
        ctx = DemoContext(console=console, stack=stack, verbose=verbose)
        for _, section in sections or SECTIONS:
            section(ctx)
    if ctx.more:
        hint = "" if verbose else "every section in detail: kvpilot demo --verbose; "
        ctx.say(f"{hint}each part on its own:")
        for what, command_line in ctx.more:
            ctx.console.print(Text(f"  {what}:", style="dim"))
            print_command(ctx.console, shlex.split(command_line), indent=4, style="cyan")
    return ctx
