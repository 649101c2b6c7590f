"""The ``VLLMServer`` resource: spec and status models (pydantic v2, camelCase aliases).

The models are the single source of truth: the CRD (``kvpilot.api.crd``) is generated from
them, and every field's ``description`` becomes what ``kubectl explain vllmservers.spec…``
prints. Reference: docs/crd-reference.md.

The models hold the fields and their single-field constraints (pydantic), turned into
:class:`~kvpilot.api.errors.SpecError` by :func:`kvpilot.api.validation.parse_spec`. Rules that
need several fields (vLLM's own cross-field rules, the env, labels and mounts kvpilot manages)
live in :mod:`kvpilot.api.rules`; ``VLLMServerSpec``'s model validator calls them.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from kvpilot.api.constants import KVCacheDtype
from kvpilot.api.quantity import QUANTITY_PATTERN, parse_quantity

#: The pinned default image. vLLM v0.33.0 is the release docs/background.md's defaults
#: (§7, "defaults per vLLM v0.30–v0.33 source") and log formats were checked against; a tag,
#: never ``latest``, so a pod is reproducible. Override per server with ``spec.image``.
DEFAULT_IMAGE = "vllm/vllm-openai:v0.33.0"

#: vLLM's serving port (its default ``--port``); the Service, probes and scrape annotations use it.
VLLM_PORT = 8000


# Kubernetes name/label grammar (apimachinery validation: IsQualifiedName, IsValidLabelValue).
_DNS_SUBDOMAIN_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_ENV_NAME_RE = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")

#: Upper bounds that catch typos (an extra zero) long before they reach a GPU.
MAX_TTL_SECONDS = 31 * 24 * 3600  # 31 days
MAX_TOKENS = 10_000_000  # the longest context windows published are 10M tokens (Llama 4 Scout)
MAX_NUM_SEQS = 65_536
MAX_GPUS = 64


def _to_str(value: Any) -> Any:
    return str(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _check_quantity(value: str) -> str:
    if parse_quantity(value) <= 0:  # ValueError for a non-quantity, naming the examples
        raise ValueError(f"{value!r} must be a positive quantity")
    return value


#: A Kubernetes quantity (``6Gi``, ``1536Mi``, ``16G``, ``2``; ``500m`` for cpu); ints become strings.
Quantity = Annotated[
    str,
    BeforeValidator(_to_str),
    AfterValidator(_check_quantity),
    WithJsonSchema(
        {
            "x-kubernetes-int-or-string": True,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
            "pattern": QUANTITY_PATTERN,
        }
    ),
]


def _check_dns_subdomain(value: str) -> str:
    if len(value) > 253 or not _DNS_SUBDOMAIN_RE.match(value):
        raise ValueError(f"{value!r} is not a valid Kubernetes object name (lowercase RFC 1123 subdomain)")
    return value


#: The name of another Kubernetes object (Secret, ConfigMap, PVC, ServiceAccount, class names).
ObjectName = Annotated[str, Field(min_length=1, max_length=253), AfterValidator(_check_dns_subdomain)]


class _Model(BaseModel):
    """camelCase on the wire, snake_case in Python; unknown fields are refused."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        validate_default=True,
        strict=True,
        # Each model's validator is built on its first use, not at import (pydantic's "defer_build"):
        # ``kvpilot render`` validates a spec and never builds the status models (docs/performance.md).
        defer_build=True,
    )


class EngineSpec(_Model):
    """vLLM engine settings. Unset fields are left off the command line, so vLLM's own defaults apply."""

    gpu_memory_utilization: float | None = Field(
        None,
        gt=0,
        le=1,
        description="Fraction of each GPU's memory this vLLM instance may use (0 < x <= 1); what weights and "
        "activations leave is the KV cache. Renders --gpu-memory-utilization. Unset: vLLM's default "
        "(0.92 from v0.20, 0.9 before).",
    )
    max_model_len: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="Maximum tokens of one request (prompt + output). Renders --max-model-len. Unset: the "
        "model config's context length. Lower values let more requests share the KV cache.",
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        le=MAX_NUM_SEQS,
        description="Maximum number of requests running at once. Renders --max-num-seqs. Unset: vLLM's "
        "default (256; 1024 on >=70 GiB non-A100 GPUs).",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        le=MAX_TOKENS,
        description="Token budget of one engine step. Renders --max-num-batched-tokens. Must be >= maxNumSeqs, "
        "and >= maxModelLen when chunked prefill is off. Unset: vLLM's default (2048; 8192 on >=70 GiB "
        "non-A100 GPUs).",
    )
    tensor_parallel_size: int | None = Field(
        None,
        ge=1,
        le=MAX_GPUS,
        description="Number of GPUs each layer is sharded over. Renders --tensor-parallel-size. Unset: 1. "
        "resources.gpus defaults to this value.",
    )
    enable_prefix_caching: bool | None = Field(
        None,
        description="true renders --enable-prefix-caching, false renders --no-enable-prefix-caching, unset "
        "renders nothing (vLLM's default: on when the model supports it).",
    )
    enable_chunked_prefill: bool | None = Field(
        None,
        description="true renders --enable-chunked-prefill, false --no-enable-chunked-prefill, unset nothing "
        "(vLLM V1 default: on). With chunked prefill off, maxNumBatchedTokens must be >= maxModelLen.",
    )
    kv_cache_dtype: KVCacheDtype | None = Field(
        None,
        description="Data type of the KV cache: auto (the model's dtype), bfloat16, fp8, fp8_e4m3, fp8_e5m2, "
        "fp8_inc, fp8_ds_mla. Renders --kv-cache-dtype. fp8 halves bytes per token.",
    )
    extra_args: list[str] = Field(
        default_factory=list,
        max_length=256,
        description="Further vLLM arguments, appended verbatim after the managed flags. Refuses the managed "
        "flags in any spelling (--max-num-seqs, --max_num_seqs, --max-num-seqs=8, argparse prefixes such as "
        "--max-num-s, -tp) and --port, --host, --model, --served-model-name, --kv-offloading-*: set the "
        "field instead.",
    )


class ResourcesSpec(_Model):
    """GPUs, memory and cpu of the vLLM container."""

    gpus: int | None = Field(
        None,
        ge=1,
        le=MAX_GPUS,
        description="GPUs for the container (limit under gpuResourceName). Defaults to "
        "engine.tensorParallelSize (1 when unset); must be >= engine.tensorParallelSize.",
    )
    gpu_resource_name: str = Field(
        "nvidia.com/gpu",
        min_length=1,
        max_length=253,
        pattern=r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$",
        description="Extended resource name of a GPU (nvidia.com/gpu, amd.com/gpu, a MIG profile such as "
        "nvidia.com/mig-3g.20gb).",
    )
    memory: Quantity | None = Field(
        None,
        description="Container memory request and limit (e.g. 6Gi); kvOffload.cpuMemory is added to it. "
        "/dev/shm (shmSize) is memory-backed and counts against it. Unset: no memory request or limit "
        "(except the offload size as a request).",
    )
    cpu: Quantity | None = Field(
        None,
        description="Container cpu request (e.g. 4 or 3500m). No cpu limit is set: throttling a serving "
        "process only adds latency.",
    )
    gpu_memory: Quantity | None = Field(
        None,
        description="Memory of one GPU (e.g. 80Gi), for the KV-capacity pre-flight check. Unset: read from the "
        "node label nvidia.com/gpu.memory when GPU feature discovery sets it. Not rendered into the pod.",
    )


class ModelCacheSpec(_Model):
    """Where Hugging Face downloads are kept (HF_HOME)."""

    claim_name: ObjectName | None = Field(
        None,
        description="Name of a PersistentVolumeClaim in the same namespace to hold the cache, so restarts do "
        "not download the model again. Unset: an emptyDir (downloaded once per pod).",
    )
    size_limit: Quantity | None = Field(
        None,
        description="sizeLimit of the emptyDir cache (ignored with claimName). Unset: no limit.",
    )
    mount_path: str = Field(
        "/home/vllm/.cache/huggingface",
        min_length=2,
        pattern=r"^/[^:]*$",
        description="Where the cache is mounted; HF_HOME is set to this path.",
    )


class SecretKeyRef(_Model):
    """A key of a Secret in the same namespace."""

    name: ObjectName = Field(..., description="Secret name.")
    key: str = Field(
        "token",
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key in the Secret holding the Hugging Face token.",
    )


class ConfigMapKeyRef(_Model):
    """A key of a ConfigMap in the same namespace."""

    name: ObjectName = Field(..., description="ConfigMap name.")
    key: str = Field(
        "config.json",
        min_length=1,
        max_length=253,
        pattern=r"^[-._a-zA-Z0-9]+$",
        description="Key in the ConfigMap holding the model's config.json.",
    )


class KVOffloadSpec(_Model):
    """Offload KV cache blocks to CPU memory, so evicted prefixes are loaded instead of recomputed."""

    backend: Literal["lmcache", "native"] = Field(
        ...,
        description="lmcache: LMCache's vLLM connector (--kv-transfer-config LMCacheConnectorV1 kv_both, "
        "LMCACHE_LOCAL_CPU/LMCACHE_MAX_LOCAL_CPU_SIZE/LMCACHE_CHUNK_SIZE env; the image must contain the "
        "lmcache package). native: vLLM's own CPU offload (--kv-offloading-backend native "
        "--kv-offloading-size, vLLM >= 0.11.1).",
    )
    cpu_memory: Quantity = Field(
        ...,
        description="CPU memory for offloaded KV (e.g. 1536Mi), in total over all GPUs of the pod "
        "(LMCache gets cpuMemory / tensorParallelSize per worker). Added to the pod's memory request and limit.",
    )


class EnvVar(_Model):
    """An environment variable of the vLLM container (the Kubernetes EnvVar shape)."""

    name: str = Field(..., min_length=1, max_length=253, pattern=_ENV_NAME_RE.pattern, description="Variable name.")
    value: str | None = Field(
        None, description="Literal value. Never put a token here: use hfTokenSecretRef or valueFrom."
    )
    value_from: dict[str, Any] | None = Field(
        None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="Kubernetes EnvVarSource: exactly one of secretKeyRef, configMapKeyRef, fieldRef, "
        "resourceFieldRef, checked as the API server checks a Pod's (its OpenAPI shape, the supported fieldPath "
        "and resource values, divisors, names and keys). fileKeyRef is refused: a kvpilot pod has no init "
        "container to write its file.",
    )


class Toleration(_Model):
    """A Kubernetes toleration (e.g. of nvidia.com/gpu:NoSchedule taints on GPU nodes)."""

    key: str | None = Field(None, description="Taint key; empty with operator Exists matches every taint.")
    operator: Literal["Exists", "Equal"] | None = Field(None, description="Exists or Equal (default Equal).")
    value: str | None = Field(None, description="Taint value for operator Equal.")
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] | None = Field(
        None, description="Taint effect to match; empty matches all effects."
    )
    toleration_seconds: int | None = Field(
        None, description="For NoExecute: how long the pod stays bound after the taint appears."
    )


class ProbesSpec(_Model):
    """Probe budgets. Loading a model refuses connections for minutes, so startup gets a long budget."""

    startup_timeout_seconds: int = Field(
        1800,
        ge=60,
        le=MAX_TTL_SECONDS,
        description="How long the startup probe (GET /health) may fail before the container is killed: "
        "download + load + compile + CUDA graph capture. failureThreshold = ceil(this / periodSeconds).",
    )
    period_seconds: int = Field(10, ge=1, le=300, description="periodSeconds of all three probes.")
    timeout_seconds: int = Field(5, ge=1, le=300, description="timeoutSeconds of all three probes.")
    readiness_failure_threshold: int = Field(
        3, ge=1, le=100, description="failureThreshold of the readiness probe (GET /v1/models)."
    )
    liveness_failure_threshold: int = Field(
        3,
        ge=3,
        le=100,
        description="failureThreshold of the liveness probe (GET /health); at least 3 so a "
        "long engine step is not mistaken for a dead server.",
    )


class VLLMServerSpec(_Model):
    """Desired state: one vLLM OpenAI-compatible server in one bare Pod, ending itself after ttlSeconds."""

    model: str = Field(
        ...,
        min_length=1,
        max_length=1024,
        pattern=r"^\S+$",
        description="Hugging Face model id (Qwen/Qwen2.5-1.5B-Instruct) or a path inside the container. "
        "Renders `vllm serve <model>` and the annotation kvpilot.dev/model.",
    )
    served_model_name: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        pattern=r"^\S+$",
        description="Name clients use in the OpenAI API (the model_name label of vLLM's metrics). Renders "
        "--served-model-name. Unset: the model id.",
    )
    image: str = Field(
        DEFAULT_IMAGE,
        min_length=1,
        max_length=1024,
        pattern=r"^\S+$",
        description=f"Container image with vLLM's `vllm` command. Default: {DEFAULT_IMAGE} (pinned).",
    )
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = Field(
        None, description="imagePullPolicy of the container. Unset: Kubernetes' default (IfNotPresent for a tag)."
    )
    engine: EngineSpec = Field(default_factory=EngineSpec, description="vLLM engine flags.")
    ttl_seconds: int = Field(
        3600,
        ge=60,
        le=MAX_TTL_SECONDS,
        description="Lifetime of the pod in seconds: becomes its activeDeadlineSeconds, so the kubelet ends it "
        "even when the operator is down. An expired server is never recreated automatically.",
    )
    resources: ResourcesSpec = Field(default_factory=ResourcesSpec, description="GPUs, memory and cpu.")
    kv_offload: KVOffloadSpec | None = Field(
        None, description="KV cache offload to CPU memory (LMCache or vLLM native). Unset: no offload."
    )
    node_selector: dict[str, str] | None = Field(None, description="nodeSelector of the pod.")
    tolerations: list[Toleration] | None = Field(None, description="Tolerations of the pod.")
    affinity: dict[str, Any] | None = Field(
        None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="Kubernetes Affinity of the pod (nodeAffinity, podAffinity, podAntiAffinity), copied as is "
        "once checked as the API server checks a Pod's: its shape against the Kubernetes OpenAPI and the rules "
        "of validateAffinity (operators and values, weights 1-100, topologyKey, label selectors).",
    )
    runtime_class_name: ObjectName | None = Field(None, description="runtimeClassName of the pod (e.g. nvidia).")
    run_as_root: bool = Field(
        False,
        description="Run vLLM as the image's own user (root in vllm/vllm-openai) instead of UID 1000. The "
        "default pod passes Pod Security 'restricted' (non-root, seccomp RuntimeDefault, no privilege "
        "escalation, all capabilities dropped); true drops only runAsNonRoot/runAsUser, so the pod passes "
        "'baseline', not 'restricted'. For images that must write outside HOME, HF_HOME and /dev/shm.",
    )
    priority_class_name: ObjectName | None = Field(None, description="priorityClassName of the pod.")
    service_account_name: ObjectName | None = Field(
        None, description="serviceAccountName of the pod. Unset: the namespace's default account."
    )
    shm_size: Quantity = Field(
        "1Gi",
        description="sizeLimit of the memory-backed /dev/shm emptyDir (NCCL and PyTorch workers use it; "
        "tensor parallelism needs more).",
    )
    model_cache: ModelCacheSpec = Field(
        default_factory=ModelCacheSpec, description="Hugging Face cache volume (HF_HOME)."
    )
    hf_token_secret_ref: SecretKeyRef | None = Field(
        None,
        description="Secret key holding a Hugging Face token, exposed as HF_TOKEN through secretKeyRef "
        "(never inlined into args or env values).",
    )
    model_config_ref: ConfigMapKeyRef | None = Field(
        None,
        description="ConfigMap key holding the model's config.json, for the KV-capacity pre-flight check "
        "when the Hugging Face Hub is not reachable.",
    )
    preflight: Literal["warn", "enforce", "off"] = Field(
        "warn",
        description="KV-capacity pre-flight check: warn (condition and Event when one maxModelLen request cannot "
        "fit), enforce (also refuse to create the pod), off.",
    )
    env: list[EnvVar] = Field(
        default_factory=list, max_length=256, description="Extra environment variables of the vLLM container."
    )
    pod_labels: dict[str, str] = Field(
        default_factory=dict,
        description="Extra labels of the pod (the app.kubernetes.io/* and kvpilot.dev/server labels are kvpilot's).",
    )
    pod_annotations: dict[str, str] = Field(
        default_factory=dict,
        description="Extra annotations of the pod (may override the prometheus.io/* "
        "scrape annotations; kvpilot.dev/* annotations are kvpilot's).",
    )
    probes: ProbesSpec = Field(default_factory=ProbesSpec, description="Probe budget overrides.")

    # ----------------------------------------------------------------------------- defaults

    @property
    def gpu_count(self) -> int:
        """GPUs the pod asks for: ``resources.gpus``, else ``engine.tensorParallelSize``, else 1."""
        return self.resources.gpus or self.engine.tensor_parallel_size or 1

    # ----------------------------------------------------------------------------- cross-field rules

    @model_validator(mode="after")
    def _cross_field_rules(self) -> VLLMServerSpec:
        from kvpilot.api.rules import check_cross_field_rules  # the rules import the models

        check_cross_field_rules(self)
        return self


# ===================================================================================== status

Phase = Literal["Pending", "Loading", "Ready", "Failed", "Expired", "Invalid"]
PHASES: tuple[str, ...] = ("Pending", "Loading", "Ready", "Failed", "Expired", "Invalid")


class Condition(_Model):
    """A status condition, following the Kubernetes API conventions (metav1.Condition)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True)

    type: str = Field(
        ...,
        min_length=1,
        max_length=316,
        description="Condition type in CamelCase: Ready, Scheduled, Valid, KVCapacity, Expired.",
    )
    status: Literal["True", "False", "Unknown"] = Field(..., description="True, False or Unknown.")
    reason: str | None = Field(
        None, max_length=1024, description="Machine-readable CamelCase reason of the last transition."
    )
    message: str | None = Field(None, max_length=32768, description="Human-readable detail.")
    last_transition_time: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="When status last changed (RFC 3339); unchanged when only reason or message change.",
    )
    observed_generation: int | None = Field(
        None, ge=0, description="metadata.generation this condition was computed from."
    )


class KopfStatus(_Model):
    """kopf's bookkeeping in ``status.kopf``: kopf's ``StatusProgressStorage`` with its default fields
    (kopf 1.45 ``kopf/_cogs/configs/progress.py``) and the operator's digest diff-base
    (``kvpilot.controller.settings.DigestDiffBaseStorage``); kopf's key style, not camelCase.
    """

    model_config = ConfigDict(populate_by_name=True, extra="ignore", strict=True)

    progress: dict[str, Any] | None = Field(
        None,
        description="Per handler id, kopf's record of a handler being retried or failed "
        "(started, retries, delayed, failure, message); empty once it succeeded.",
    )
    last_handled_digest: str | None = Field(
        None,
        alias="last-handled-digest",
        description="SHA-256 of the spec (and labels, annotations) last handled, as JSON: kopf's diff-base, "
        "which tells a spec change from a restart.",
    )
    dummy: str | None = Field(None, description="Written by kopf to wake a handler waiting out a retry delay.")


class PreflightStatus(_Model):
    """Numbers of the KV-capacity pre-flight check (kvpilot kv's JSON keys, camelCase)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True)

    bytes_per_token: int | None = Field(None, ge=0, description="KV bytes per token per GPU.")
    kv_tokens: int | None = Field(None, ge=0, description="Estimated KV cache capacity in tokens.")
    max_concurrency: float | None = Field(None, ge=0, description="Estimated requests of maxModelLen that fit.")
    fits: bool | None = Field(None, description="Whether one request of maxModelLen fits.")
    max_model_len_that_fits: int | None = Field(None, ge=0, description="Largest maxModelLen that fits.")
    min_gpu_memory_utilization: float | None = Field(
        None, ge=0, description="Smallest gpuMemoryUtilization that would fit one maxModelLen request."
    )
    estimate: bool | None = Field(
        None,
        description="True when the model's allocator is more complex than the "
        "formula (sliding window, hybrid layers): the numbers are an estimate.",
    )
    gpu_memory: str | None = Field(None, description="GPU memory used for the estimate, and where it came from.")
    config_source: str | None = Field(None, description="Where config.json came from (Hub id or ConfigMap key).")


class VLLMServerStatus(_Model):
    """Observed state, written by the operator through the /status subresource."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", strict=True)

    phase: Phase | None = Field(
        None,
        description="Pending (not scheduled or not started), Loading (container running, not ready), "
        "Ready (serving), Failed, Expired (pod ended by its deadline), Invalid (spec refused; no pod).",
    )
    message: str | None = Field(
        None,
        description="Why the server is in this phase, in one line (unschedulable, "
        "OOM, KV too small, the invalid field).",
    )
    reason: str | None = Field(
        None,
        description="Machine-readable reason of the phase (e.g. Unschedulable, "
        "DeadlineExceeded, OOMKilled, InvalidSpec).",
    )
    conditions: list[Condition] | None = Field(
        None,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
        description="Conditions following the Kubernetes API conventions.",
    )
    observed_generation: int | None = Field(None, ge=0, description="metadata.generation last acted upon.")
    spec_hash: str | None = Field(
        None, description="Hash of the spec the current pod was made from; a change replaces the pod."
    )
    pod_name: str | None = Field(None, description="Name of the vLLM pod.")
    pod_uid: str | None = Field(None, description="UID of the vLLM pod (tells a replaced pod from the old one).")
    service_name: str | None = Field(None, description="Name of the Service in front of the pod.")
    endpoint: str | None = Field(
        None,
        description="OpenAI-compatible base URL inside the cluster "
        "(http://<service>.<namespace>.svc:8000; the OpenAI API is under /v1).",
    )
    started_at: str | None = Field(
        None, json_schema_extra={"format": "date-time"}, description="When the pod started (RFC 3339)."
    )
    expires_at: str | None = Field(
        None,
        json_schema_extra={"format": "date-time"},
        description="startedAt + ttlSeconds: when the kubelet ends the pod (RFC 3339).",
    )
    ready_at: str | None = Field(
        None, json_schema_extra={"format": "date-time"}, description="When the server first became Ready (RFC 3339)."
    )
    finished_at: str | None = Field(
        None, json_schema_extra={"format": "date-time"}, description="When the pod ended (RFC 3339)."
    )
    kv_cache_tokens: int | None = Field(
        None,
        ge=0,
        description="KV cache capacity in tokens, from vLLM's startup "
        "log (GPU KV cache size) or vllm:cache_config_info.",
    )
    max_concurrency: float | None = Field(
        None,
        ge=0,
        description="Requests of maxModelLen tokens that fit at "
        "once, from vLLM's startup log (Maximum concurrency …x).",
    )
    command: list[str] | None = Field(None, description="The vllm serve command line of the current pod.")
    preflight: PreflightStatus | None = Field(None, description="KV-capacity pre-flight estimate.")
    kopf: KopfStatus | None = Field(
        None, description="The operator's bookkeeping, kept by kopf (its handlers' progress, the spec last handled)."
    )


class StatusError(ValueError):
    """A status the operator was about to write does not fit :class:`VLLMServerStatus` (a bug; names the field)."""


def checked_status(status: VLLMServerStatus) -> VLLMServerStatus:
    """``status`` validated again (fields assigned after construction are not), the fields it set kept set.

    The model is the status's one definition: the CRD's status schema is generated from it
    (:mod:`kvpilot.api.crd`), and every status write goes through this function, so what the operator
    writes is what the CRD declares.

    Raises:
        StatusError: naming the field whose value does not fit.
    """
    try:
        # the serializer would warn of a wrongly typed field first: the validation below refuses it, naming it
        dumped = status.model_dump(by_alias=True, exclude_unset=True, warnings=False)
        return VLLMServerStatus.model_validate(dumped)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        raise StatusError(f"status.{where}: {error['msg']}") from None
