"""VLLMServer spec -> the Pod and Service it becomes. Pure: no I/O beyond reading the templates.

Templates (``kvpilot/render/templates/*.j2``, package data) are rendered with Jinja2's
``StrictUndefined`` (a missing variable is an error, never an empty string) and parsed back with
PyYAML's safe loader (libyaml's ``CSafeLoader`` when PyYAML was built with it: the same YAML 1.1
safe schema). Templates are package data and never change while the process runs: compiled once
(``auto_reload=False``), not re-checked on disk per render.

The operator renders once per reconcile, so the YAML parse is done once per document *shape*:
every value goes in through ``tojson`` (:func:`_tojson`), which emits a numbered placeholder
instead of the value's JSON; the resulting skeleton text depends only on the template's branches
and its few literal integers (probe periods, the port), so its parse is cached
(:func:`_parse_skeleton`) and each placeholder is replaced by its value as JSON decodes it
(:func:`_fill`). JSON is YAML, so this is what parsing the JSON inside the YAML gave, at a
fraction of the cost (docs/performance.md, "What the code's choices bought").
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from typing import Any, TypedDict, cast

import yaml
from jinja2 import Environment, PackageLoader, StrictUndefined, Undefined, pass_context
from jinja2.runtime import Context

from kvpilot.api import (
    API_VERSION,
    KIND,
    VLLM_PORT,
    SpecError,
    VLLMServerSpec,
    check_server_name,
    parse_spec,
    spec_hash,
)
from kvpilot.api.constants import (  # labels and annotations on the Pod and the Service (docs/crd-reference.md)
    ANNOTATION_MODEL,
    ANNOTATION_SPEC_HASH,
    LABEL_INSTANCE,
    LABEL_MANAGED_BY,
    LABEL_NAME,
    LABEL_SERVER,
)
from kvpilot.api.k8s_validation import namespace_errors
from kvpilot.api.objects import JsonObject, OwnerReference, Pod, Service, VLLMServerObject
from kvpilot.api.quantity import format_bytes_quantity, format_gib, parse_quantity

#: LMCache's documented default chunk size (tokens), "Configuring LMCache".
LMCACHE_CHUNK_SIZE = 256
#: ``--kv-transfer-config`` value for LMCache's vLLM v1 connector, storing and loading KV.
LMCACHE_KV_TRANSFER_CONFIG = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


#: PyYAML's safe loader, in C when PyYAML has libyaml (``yaml.__with_libyaml__``).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


#: Prefix of a value placeholder in a rendered skeleton (``"\u0000<n>"`` in the YAML text: a NUL
#: never occurs in template text, and a value never reaches the YAML at all).
_PLACEHOLDER = "\0"


@pass_context
def _tojson(context: Context, value: Any) -> str:
    """The placeholder of a template value: ``"\\u0000<n>"``, ``n`` its index in the render's value list.

    Replaces Jinja2's HTML-escaping ``tojson``; an undefined variable raises ``UndefinedError``
    (``StrictUndefined``). The value itself is kept as its JSON decoded again (:func:`_as_json`):
    JSON's types (tuples become lists, keys strings), every string exactly as given, and a copy
    of the caller's objects. No value text ever goes through the YAML parser, so none can change the document's
    shape, and control or non-printable characters stay as given.
    """
    if isinstance(value, Undefined):
        value._fail_with_undefined_error()
    values: list[Any] = context["_values"]
    values.append(_as_json(value))
    return f'"\\u0000{len(values) - 1}"'


def _as_json(value: Any) -> Any:
    """``value`` as JSON carries it: tuples become lists, keys strings; a fresh copy."""
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return json.loads(json.dumps(value, ensure_ascii=False))


@lru_cache(maxsize=1)
def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("kvpilot.render", "templates"),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
        auto_reload=False,
    )
    env.filters["tojson"] = _tojson
    return env


def _number(value: float) -> str:
    """A float flag value in its shortest exact form: 0.6 -> ``0.6``, 0.93 -> ``0.93``, 1.0 -> ``1.0``."""
    return repr(float(value))


def vllm_command(spec: VLLMServerSpec) -> list[str]:
    """The container command: ``vllm serve <model>`` plus the managed flags the spec sets.

    Order: ``--served-model-name``, ``--gpu-memory-utilization``, ``--max-model-len``,
    ``--max-num-seqs``, ``--max-num-batched-tokens``, ``--tensor-parallel-size``,
    ``--enable-prefix-caching``/``--no-enable-prefix-caching``,
    ``--enable-chunked-prefill``/``--no-enable-chunked-prefill``, ``--kv-cache-dtype``, the
    KV-offload flags, ``--port 8000``, then ``extraArgs`` verbatim. An unset field renders
    nothing, so vLLM's own default applies. Each flag and its value are separate argv elements.

    KV offload (``spec.kvOffload``):

    - ``lmcache``: ``--kv-transfer-config {"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}``
      (vLLM's ``KVTransferConfig``, ``vllm/config/kv_transfer.py``; LMCache's vLLM quickstart);
      the size goes into LMCache's environment (see the pod template);
    - ``native``: ``--kv-offloading-backend native --kv-offloading-size <GiB>`` (vLLM's
      ``CacheConfig.kv_offloading_size``, "in GiB", total over all TP ranks; vLLM >= 0.11.1).
    """
    e = spec.engine
    argv = ["vllm", "serve", spec.model]
    if spec.served_model_name is not None:
        argv += ["--served-model-name", spec.served_model_name]
    if e.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", _number(e.gpu_memory_utilization)]
    for flag, value in (
        ("--max-model-len", e.max_model_len),
        ("--max-num-seqs", e.max_num_seqs),
        ("--max-num-batched-tokens", e.max_num_batched_tokens),
        ("--tensor-parallel-size", e.tensor_parallel_size),
    ):
        if value is not None:
            argv += [flag, str(value)]
    if e.enable_prefix_caching is not None:
        argv.append("--enable-prefix-caching" if e.enable_prefix_caching else "--no-enable-prefix-caching")
    if e.enable_chunked_prefill is not None:
        argv.append("--enable-chunked-prefill" if e.enable_chunked_prefill else "--no-enable-chunked-prefill")
    if e.kv_cache_dtype is not None:
        argv += ["--kv-cache-dtype", e.kv_cache_dtype]
    if spec.kv_offload is not None:
        if spec.kv_offload.backend == "lmcache":
            argv += ["--kv-transfer-config", json.dumps(LMCACHE_KV_TRANSFER_CONFIG, separators=(",", ":"))]
        else:
            size = format_gib(parse_quantity(spec.kv_offload.cpu_memory))
            argv += ["--kv-offloading-backend", "native", "--kv-offloading-size", size]
    argv += ["--port", str(VLLM_PORT)]
    argv += list(e.extra_args)
    return argv


def managed_labels(name: str) -> dict[str, str]:
    """The labels kvpilot puts on a server's Pod and Service (and selects the pod by)."""
    return {
        LABEL_NAME: "vllm",
        LABEL_INSTANCE: name,
        LABEL_MANAGED_BY: "kvpilot",
        LABEL_SERVER: name,
    }


def owner_references(owner: VLLMServerObject | None) -> list[OwnerReference]:
    """``ownerReferences`` pointing at the VLLMServer, as the controller (deleting it deletes both).

    Args:
        owner: the VLLMServer object (``apiVersion``, ``kind``, ``metadata.name``, ``metadata.uid``)
            as kopf's ``body`` or the API returns it; None for no owner (offline rendering).

    Raises:
        SpecError: on ``metadata.uid`` / ``metadata.name`` when the owner lacks them.
    """
    if owner is None:
        return []
    meta = owner.get("metadata") or {}
    if not meta.get("uid"):
        raise SpecError("metadata.uid", "the owner has no uid (is it an object read from the API?)")
    if not meta.get("name"):
        raise SpecError("metadata.name", "the owner has no name")
    return [
        {
            "apiVersion": owner.get("apiVersion", API_VERSION),
            "kind": owner.get("kind", KIND),
            "name": meta["name"],
            "uid": meta["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]


def container_resources(spec: VLLMServerSpec) -> dict[str, dict[str, str]]:
    """The vLLM container's ``resources``; quantities as strings (kubernetes 37 requires it).

    - ``limits[gpuResourceName] = gpus`` (extended resources: the request defaults to the limit);
    - memory: request = limit = ``resources.memory`` + ``kvOffload.cpuMemory``; without
      ``resources.memory`` only the offload size is requested and no limit is set;
    - cpu: a request only (no cpu limit).
    """
    requests: dict[str, str] = {}
    limits: dict[str, str] = {spec.resources.gpu_resource_name: str(spec.gpu_count)}
    offload = parse_quantity(spec.kv_offload.cpu_memory) if spec.kv_offload is not None else 0
    if spec.resources.memory is not None:
        memory = (
            spec.resources.memory
            if not offload
            else format_bytes_quantity(parse_quantity(spec.resources.memory) + offload)
        )
        requests["memory"] = limits["memory"] = memory
    elif offload:
        requests["memory"] = format_bytes_quantity(offload)
    if spec.resources.cpu is not None:
        requests["cpu"] = spec.resources.cpu
    out: dict[str, dict[str, str]] = {"limits": limits}
    if requests:
        out["requests"] = requests
    return out


#: The non-root user and group the vLLM container runs as (any UID works: the image's files are
#: world-readable, and every path vLLM writes is a volume owned through ``fsGroup``).
RUN_AS_UID = 1000
#: HOME of the vLLM container: an emptyDir, so caches vLLM and its libraries write under ``~`` work
#: for a non-root user.
HOME = "/home/vllm"


class SeccompProfile(TypedDict):
    """``SeccompProfile``."""

    type: str


class PodSecurityContext(TypedDict, total=False):
    """``PodSecurityContext``: the fields the renderer sets."""

    seccompProfile: SeccompProfile
    fsGroup: int
    runAsNonRoot: bool
    runAsUser: int
    runAsGroup: int


class Capabilities(TypedDict):
    """``Capabilities``: those dropped."""

    drop: list[str]


class ContainerSecurityContext(TypedDict):
    """``SecurityContext`` of a container: the fields the renderer sets."""

    allowPrivilegeEscalation: bool
    capabilities: Capabilities


class LMCacheSettings(TypedDict):
    """The LMCache settings the Pod's template writes (its config file): sizes as LMCache reads them."""

    max_local_cpu_size: str
    chunk_size: str | None


def pod_security_context(spec: VLLMServerSpec) -> PodSecurityContext:
    """The pod's ``securityContext``: what Pod Security "restricted" requires of a pod.

    Source: Kubernetes "Pod Security Standards", restricted profile
    (https://kubernetes.io/docs/concepts/security/pod-security-standards/): ``runAsNonRoot: true``,
    ``seccompProfile.type`` RuntimeDefault or Localhost. ``runAsUser``/``runAsGroup``/``fsGroup``
    :data:`RUN_AS_UID` (``fsGroup`` makes the emptyDir and PVC volumes writable by that group). With
    ``spec.runAsRoot`` only the seccomp profile and ``fsGroup`` remain (the "baseline" profile).
    """
    context: PodSecurityContext = {"seccompProfile": {"type": "RuntimeDefault"}, "fsGroup": RUN_AS_UID}
    if not spec.run_as_root:
        context.update({"runAsNonRoot": True, "runAsUser": RUN_AS_UID, "runAsGroup": RUN_AS_UID})
    return context


def container_security_context() -> ContainerSecurityContext:
    """The vLLM container's ``securityContext`` (restricted profile, same source as
    :func:`pod_security_context`): ``allowPrivilegeEscalation: false``, ``capabilities.drop: [ALL]``.
    vLLM needs no Linux capability: it serves HTTP on port 8000 (> 1024) and talks to the GPU
    through device files the NVIDIA device plugin mounts.
    """
    return {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}


def _env(spec: VLLMServerSpec) -> list[JsonObject]:
    return [v.model_dump(by_alias=True, exclude_none=True) for v in spec.env]


def _lmcache(spec: VLLMServerSpec) -> LMCacheSettings | None:
    if spec.kv_offload is None or spec.kv_offload.backend != "lmcache":
        return None
    user_set_chunk = any(v.name == "LMCACHE_CHUNK_SIZE" for v in spec.env)
    # LMCache's CPU size is per worker (each tensor-parallel rank runs its own LMCache engine);
    # vLLM's own lmcache offloading parser divides kv_offloading_size by the KV ranks the same way
    # (vllm/config/kv_offloading.py, LMCacheOffloadingParser: kv_gb_per_rank = size / num_kv_ranks).
    ranks = spec.engine.tensor_parallel_size or 1
    return {
        "max_local_cpu_size": format_gib(parse_quantity(spec.kv_offload.cpu_memory) / ranks),
        "chunk_size": None if user_set_chunk else str(LMCACHE_CHUNK_SIZE),
    }


def _render(template: str, **context: Any) -> JsonObject:
    """``template`` rendered with ``context`` and parsed: the cached skeleton filled with the values."""
    values: list[Any] = []
    skeleton = _environment().get_template(template).render(**context, _values=values)
    filled: JsonObject = _fill(_parse_skeleton(skeleton), values)
    return filled


@lru_cache(maxsize=256)
def _parse_skeleton(text: str) -> Any:
    """The YAML ``text`` of a rendered skeleton, parsed (cached: never mutate the result)."""
    return yaml.load(text, Loader=_SAFE_LOADER)  # a safe loader (C or Python)


def _fill(node: Any, values: list[Any]) -> Any:
    """A new tree like ``node`` with every placeholder string replaced by its value."""
    if isinstance(node, dict):
        return {key: _fill(item, values) for key, item in node.items()}
    if isinstance(node, list):
        return [_fill(item, values) for item in node]
    if isinstance(node, str) and node.startswith(_PLACEHOLDER):
        return values[int(node[1:])]  # each placeholder occurs once: the value is this tree's own
    return node


def pod_name(server_name: str, digest: str) -> str:
    """The pod's name: ``<server>-<first 5 hex of the spec hash>`` (:func:`kvpilot.api.spec_hash`).

    A new spec gets a new name, so the operator's replacement pod never waits for the old one
    to finish terminating (a real API server refuses a second object of the same name until
    then). ``kvpilot render`` and the operator both name the pod here, so they agree.
    """
    return f"{server_name}-{digest[:5]}"


def render_pod(name: str, namespace: str, spec: VLLMServerSpec, owner: VLLMServerObject | None = None) -> Pod:
    """The vLLM Pod (a dict ready for the API) named :func:`pod_name`, see :func:`render_objects`.

    ``name`` is the VLLMServer's name (labels, ``app.kubernetes.io/instance``).
    """
    labels = dict(spec.pod_labels)
    labels.update(managed_labels(name))
    annotations = {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(VLLM_PORT),
        "prometheus.io/path": "/metrics",
    }
    annotations.update(spec.pod_annotations)
    digest = spec_hash(spec)
    annotations.update({ANNOTATION_MODEL: spec.model, ANNOTATION_SPEC_HASH: digest})
    probes = spec.probes
    rendered = _render(
        "pod.yaml.j2",
        name=name,
        pod_name=pod_name(name, digest),
        object_namespace=namespace,  # not "namespace": that is a Jinja2 global
        spec=spec,
        pod_labels=labels,
        pod_annotations=annotations,
        owner_references=owner_references(owner),
        command=vllm_command(spec),
        port=VLLM_PORT,
        env=_env(spec),
        lmcache=_lmcache(spec),
        native_offload=spec.kv_offload is not None and spec.kv_offload.backend == "native",
        resources=container_resources(spec),
        pod_security_context=pod_security_context(spec),
        container_security_context=container_security_context(),
        home=HOME,
        tolerations=[t.model_dump(by_alias=True, exclude_none=True) for t in spec.tolerations or []],
        startup_failure_threshold=math.ceil(probes.startup_timeout_seconds / probes.period_seconds),
    )
    return cast(Pod, rendered)


def render_service(name: str, namespace: str, owner: VLLMServerObject | None = None) -> Service:
    """The Service on port 8000 (named ``http``) selecting the server's pod."""
    rendered = _render(
        "service.yaml.j2",
        name=name,
        object_namespace=namespace,
        labels=managed_labels(name),
        selector={LABEL_SERVER: name, LABEL_MANAGED_BY: "kvpilot"},
        owner_references=owner_references(owner),
        port=VLLM_PORT,
    )
    return cast(Service, rendered)


def render_objects(
    name: str,
    namespace: str,
    spec: VLLMServerSpec | JsonObject,
    owner: VLLMServerObject | None = None,
) -> tuple[Pod, Service]:
    """The objects a VLLMServer becomes: ``(Pod, Service)``: the Service named ``name``, the Pod
    ``<name>-<first 5 hex of spec_hash(spec)>`` (:func:`pod_name`), exactly what the operator creates.

    Args:
        name: the VLLMServer's ``metadata.name`` (an RFC 1035 label: it names the Service).
        namespace: where the objects go.
        spec: a validated :class:`VLLMServerSpec`, or the raw ``spec`` dict (validated here).
        owner: the VLLMServer object, for controller owner references; None offline.

    Raises:
        SpecError: for an invalid spec or name, naming the field.
    """
    check_server_name(name)
    for problem in namespace_errors(namespace):  # the objects' metadata.namespace (ValidateNamespaceName)
        raise SpecError("metadata.namespace", f"{namespace!r}: {problem}")
    if not isinstance(spec, VLLMServerSpec):
        spec = parse_spec(spec)
    return render_pod(name, namespace, spec, owner), render_service(name, namespace, owner)
