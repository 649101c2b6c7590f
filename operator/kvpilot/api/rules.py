"""Rules over several fields of a VLLMServer, checked before any pod exists (pure).

vLLM's own cross-field rules (``SchedulerConfig``, ``vllm/config/scheduler.py``), and kvpilot's: the
env variables, labels, annotations and mount paths the operator sets itself, the API server's own
label/annotation/toleration rules (:mod:`kvpilot.api.k8s_validation`), and secrets that must never be
inlined. Each raises :class:`~kvpilot.api.errors.SpecError` naming the first offending field (camelCase
path under ``spec``). :class:`~kvpilot.api.models.VLLMServerSpec`'s model validator calls
:func:`check_cross_field_rules`; :func:`check_server_name` checks ``metadata.name``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kvpilot.api import k8s_validation
from kvpilot.api.constants import LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_NAME, LABEL_SERVER
from kvpilot.api.errors import SpecError
from kvpilot.api.flags import managed_flag_matches, refusal
from kvpilot.text.safe import contains_secret, is_secret_name

if TYPE_CHECKING:
    from kvpilot.api.models import VLLMServerSpec

#: The pod's one container (``render/templates/pod.yaml.j2``): ``resourceFieldRef.containerName`` may name only it.
CONTAINER_NAME = "vllm"

#: Labels the renderer sets itself; ``podLabels`` may not override them.
MANAGED_LABEL_KEYS = (LABEL_NAME, LABEL_INSTANCE, LABEL_MANAGED_BY, LABEL_SERVER)

# Kubernetes name/label grammar (apimachinery validation: IsQualifiedName, IsValidLabelValue).
_LABEL_VALUE_RE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME_RE = re.compile(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)


def check_cross_field_rules(spec: VLLMServerSpec) -> None:
    """VLLM's cross-field rules and kvpilot's own, checked before any pod exists.

    Rules (sources: vLLM ``SchedulerConfig._verify_args``, ``vllm/config/scheduler.py`` v0.11–v0.33;
    docs/background.md §7):

    - ``maxNumBatchedTokens >= maxNumSeqs`` (both set);
    - ``maxNumBatchedTokens >= maxModelLen`` when ``enableChunkedPrefill`` is false (both set; V1
      turns chunked prefill on by default, so only an explicit false enforces it);
    - ``resources.gpus >= engine.tensorParallelSize``;
    - ``extraArgs`` holds no managed flag (see :mod:`kvpilot.api.flags`);
    - ``env`` does not set ``HF_HOME``, a literal Hugging Face token, a literal value for a
      secret-named variable (``*_TOKEN``, ``*_KEY``, ``*SECRET``, ``*PASSWORD``) or a token-shaped
      value (:mod:`kvpilot.text.safe`), a variable the offload backend sets, or one name twice;
      ``extraArgs`` holds no token-shaped value; ``podLabels`` are valid and do not override kvpilot's labels;
    - each ``env[].valueFrom`` has the Kubernetes OpenAPI shape of an ``EnvVarSource`` and passes the API
      server's ``validateEnvVarValueFrom`` (:func:`kvpilot.api.k8s_validation.env_var_source_errors`);
    - ``affinity`` has the Kubernetes OpenAPI shape and passes the API server's ``validateAffinity``
      (:func:`kvpilot.api.k8s_validation.affinity_errors`).

    Raises:
        SpecError: naming the first offending field (camelCase path under ``spec``).
    """
    e = spec.engine
    if (
        e.max_num_batched_tokens is not None
        and e.max_num_seqs is not None
        and e.max_num_batched_tokens < e.max_num_seqs
    ):
        raise SpecError(
            "spec.engine.maxNumBatchedTokens",
            f"{e.max_num_batched_tokens} is smaller than maxNumSeqs ({e.max_num_seqs}); vLLM requires "
            "max_num_batched_tokens >= max_num_seqs",
        )
    if (
        e.enable_chunked_prefill is False
        and e.max_num_batched_tokens is not None
        and e.max_model_len is not None
        and e.max_num_batched_tokens < e.max_model_len
    ):
        raise SpecError(
            "spec.engine.maxNumBatchedTokens",
            f"{e.max_num_batched_tokens} is smaller than maxModelLen ({e.max_model_len}) with chunked prefill "
            "off; vLLM requires max_num_batched_tokens >= max_model_len unless chunked prefill is on",
        )
    tp = e.tensor_parallel_size or 1
    if spec.resources.gpus is not None and spec.resources.gpus < tp:
        raise SpecError(
            "spec.resources.gpus",
            f"{spec.resources.gpus} GPUs cannot hold tensorParallelSize {tp} (one GPU per shard); "
            f"set gpus >= {tp} or leave it unset",
        )
    for i, arg in enumerate(e.extra_args):
        matches = managed_flag_matches(arg, kv_offload=spec.kv_offload is not None)
        if matches:
            raise SpecError(f"spec.engine.extraArgs[{i}]", refusal(arg, matches))
        if contains_secret(arg):
            raise SpecError(
                f"spec.engine.extraArgs[{i}]",
                "looks like a secret (a token); pass secrets through env valueFrom.secretKeyRef, never as arguments",
            )
    _check_env(spec)
    _check_labels(spec)
    _check_affinity(spec)


_TOKEN_ENV = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")
_LMCACHE_ENV = ("LMCACHE_LOCAL_CPU", "LMCACHE_MAX_LOCAL_CPU_SIZE")


#: Paths the pod mounts itself (HOME's emptyDir and /dev/shm): a second volume there is refused
#: by the API server ("must be unique", pkg/apis/core/validation ValidateVolumeMounts).
_RESERVED_MOUNTS = ("/home/vllm", "/dev/shm")


def _check_env(spec: VLLMServerSpec) -> None:  # noqa: C901
    mount = spec.model_cache.mount_path.rstrip("/")
    if mount in _RESERVED_MOUNTS or mount == "":
        raise SpecError("spec.modelCache.mountPath", f"{mount or '/'} is mounted by kvpilot itself; pick another path")
    seen: set[str] = set()
    for i, var in enumerate(spec.env):
        where = f"spec.env[{i}].name"
        if var.name in seen:
            raise SpecError(where, f"{var.name} is set twice")
        seen.add(var.name)
        if var.name == "HF_HOME":
            raise SpecError(where, "HF_HOME is set from spec.modelCache.mountPath")
        if var.name == "HOME":
            raise SpecError(
                where, "HOME is set by kvpilot: a writable emptyDir, so a non-root vLLM can write its caches"
            )
        if var.name in _TOKEN_ENV and var.value is not None:
            raise SpecError(f"spec.env[{i}].value", f"{var.name} must not be inlined; use spec.hfTokenSecretRef")
        if var.value and (is_secret_name(var.name) or contains_secret(var.value)):
            # a literal secret would be printed by kvpilot render and readable by anyone who can read the pod
            raise SpecError(
                f"spec.env[{i}].value",
                f"{var.name} holds a secret (its name or its value looks like one): "
                "use valueFrom.secretKeyRef instead of a literal value",
            )
        if var.name in _TOKEN_ENV and spec.hf_token_secret_ref is not None:
            raise SpecError(where, f"{var.name} is set from spec.hfTokenSecretRef")
        if var.name in _LMCACHE_ENV and spec.kv_offload is not None and spec.kv_offload.backend == "lmcache":
            raise SpecError(where, f"{var.name} is set from spec.kvOffload")
        if var.value is not None and var.value_from is not None:
            raise SpecError(f"spec.env[{i}]", "set value or valueFrom, not both")
        if var.value_from is not None:
            for path, problem in k8s_validation.env_var_source_errors(var.value_from, var.value, (CONTAINER_NAME,)):
                raise SpecError(f"spec.env[{i}].valueFrom{'.' + path if path else ''}", problem)


def _check_labels(spec: VLLMServerSpec) -> None:  # noqa: C901
    for key, value in spec.pod_labels.items():
        where = f"spec.podLabels.{key}"
        if key in MANAGED_LABEL_KEYS:
            raise SpecError(where, "this label is set by kvpilot")
        if not _QUALIFIED_NAME_RE.match(key) or len(key.split("/")[-1]) > 63:
            raise SpecError(where, f"{key!r} is not a valid label key")
        if len(value) > 63 or not _LABEL_VALUE_RE.match(value):
            raise SpecError(
                where,
                f"{value!r} is not a valid label value (at most 63 of A-Z a-z 0-9 - _ . , "
                "starting and ending alphanumeric)",
            )
    for key, problem in k8s_validation.labels_errors(spec.pod_labels):  # the API server's rules, word for word
        raise SpecError(f"spec.podLabels.{key}", f"{key!r}: {problem}")
    for key in spec.pod_annotations:
        if not _QUALIFIED_NAME_RE.match(key):
            raise SpecError(f"spec.podAnnotations.{key}", f"{key!r} is not a valid annotation key")
        if key.startswith("kvpilot.dev/"):
            raise SpecError(f"spec.podAnnotations.{key}", "kvpilot.dev/ annotations are set by kvpilot")
    for key, problem in k8s_validation.annotations_errors(spec.pod_annotations):
        raise SpecError(f"spec.podAnnotations{'.' + key if key else ''}", problem)
    for key, problem in k8s_validation.labels_errors(spec.node_selector or {}):
        raise SpecError(f"spec.nodeSelector.{key}", f"{key!r}: {problem}")
    for i, t in enumerate(spec.tolerations or []):
        for field, problem in k8s_validation.toleration_errors(
            t.key, t.operator, t.value, t.effect, t.toleration_seconds
        ):
            raise SpecError(f"spec.tolerations[{i}].{field}", problem)


def _check_affinity(spec: VLLMServerSpec) -> None:
    if spec.affinity is None:
        return
    pod_label_keys = {*spec.pod_labels, *MANAGED_LABEL_KEYS}  # the labels the rendered pod carries
    for path, problem in k8s_validation.affinity_errors(spec.affinity, pod_label_keys):
        raise SpecError(f"spec.affinity{'' if not path or path.startswith('[') else '.'}{path}", problem)


def check_server_name(name: str) -> str:
    """Check a VLLMServer's ``metadata.name``: it names the Pod, the Service and two labels.

    A Service name is an RFC 1035 label (≤ 63 chars, starts with a letter; Kubernetes
    ``ValidateServiceName``), and a label value is at most 63 characters.

    Raises:
        SpecError: on ``metadata.name``.
    """
    if not name or len(name) > 63 or not re.match(r"^[a-z]([-a-z0-9]*[a-z0-9])?$", name):
        raise SpecError(
            "metadata.name",
            f"{name!r} must be at most 63 characters of a-z, 0-9 and '-', starting with a letter "
            "(it names the Service)",
        )
    return name
