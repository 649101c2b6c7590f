"""The KV pre-flight's I/O: the model's files and the GPU memory, then :func:`kvpilot.kv.preflight.kv_preflight`.

Inputs (docs/operator.md, "KV pre-flight"): the model's ``config.json`` from ``spec.modelConfigRef``
(a ConfigMap key; an optional ``model.safetensors.index.json`` key gives the weight size) or from the
Hugging Face Hub (:class:`kvpilot.kv.hub.HubModelCache`: one bounded metadata request, failures
remembered for 10 minutes); the GPU memory from ``spec.resources.gpuMemory`` or the node label
``nvidia.com/gpu.memory`` (MiB, NVIDIA GPU feature discovery) of the node a pod runs on. When and
with what verdict the reconcile runs it is decided in :mod:`kvpilot.controller.logic`
(:func:`~kvpilot.controller.logic.preflight_order`, :func:`~kvpilot.controller.logic.preflight_refusal`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from kubernetes.client.exceptions import ApiException

from kvpilot.api import VLLMServerSpec
from kvpilot.api.models import Condition, PreflightStatus
from kvpilot.api.objects import JsonObject, Pod
from kvpilot.api.quantity import parse_quantity
from kvpilot.controller.kube import Kube
from kvpilot.kv.hub import HubModelCache
from kvpilot.kv.preflight import gpu_memory_from_node_label, kv_preflight
from kvpilot.kv.spec import KVConfigError
from kvpilot.kv.weights import weights_from_index

#: The node label NVIDIA GPU feature discovery sets (MiB), for the KV pre-flight.
GPU_MEMORY_LABEL = "nvidia.com/gpu.memory"
#: The ConfigMap key whose safetensors index gives the weight size (``metadata.total_size``, bytes).
INDEX_KEY = "model.safetensors.index.json"


@dataclass(frozen=True)
class PreflightResult:
    """The pre-flight's outcome: the ``KVCapacity`` ``condition`` (type, status, reason, message), a
    ``warning`` when one request of ``maxModelLen`` cannot fit, and ``numbers`` for ``status.preflight``
    (None when not computed).
    """

    condition: Condition
    warning: str | None = None
    numbers: PreflightStatus | None = None


class Preflight:
    """Runs the KV pre-flight of a spec against what the cluster (and the Hub, when allowed) says."""

    def __init__(self, kube: Kube, *, hub: bool = True) -> None:
        self.kube = kube
        self.hub = hub
        self._hub_models = HubModelCache()

    def model_files(self, namespace: str, spec: VLLMServerSpec) -> tuple[JsonObject | None, int | None, str]:
        """``(config.json, weight bytes or None, where from)`` of the spec's model, or ``(None, None, why)``.

        Sources: the ``modelConfigRef`` ConfigMap (its key, plus an optional :data:`INDEX_KEY` key whose
        ``metadata.total_size`` is the weight size), else the Hugging Face Hub when this operator may use
        it (``hub``; HF_HUB_OFFLINE honoured).
        """
        ref = spec.model_config_ref
        if ref is not None:
            try:
                data = self.kube.config_map_data(namespace, ref.name)
            except ApiException as exc:
                return None, None, f"ConfigMap {ref.name}: {exc.status} {exc.reason}"
            if ref.key not in data:
                return None, None, f"ConfigMap {ref.name} has no key {ref.key}"
            try:
                config = json.loads(data[ref.key])
                index = json.loads(data[INDEX_KEY]) if INDEX_KEY in data else None
            except ValueError as exc:
                return None, None, f"ConfigMap {ref.name}: not JSON: {exc}"
            return config, weights_from_index(index), f"ConfigMap {ref.name}"
        if not self.hub:
            return None, None, "no modelConfigRef, and this operator does not use the Hub"
        found = self._hub_models.get(spec.model)
        return found.config, found.weights_bytes, found.source

    def gpu_memory(self, spec: VLLMServerSpec, pods: Sequence[Pod]) -> tuple[int | None, str | None]:
        """``(bytes of one GPU, where from)``: ``spec.resources.gpuMemory``, else the label
        :data:`GPU_MEMORY_LABEL` of the node the first scheduled pod runs on; ``(None, None)`` when
        neither is known (no pod scheduled yet, no label, an unreadable node or label).
        """
        if spec.resources.gpu_memory is not None:
            quantity = spec.resources.gpu_memory
            return int(parse_quantity(quantity)), f"{quantity} (spec.resources.gpuMemory)"
        node = next((n for p in pods if (n := (p.get("spec") or {}).get("nodeName"))), None)
        if not node:
            return None, None
        try:
            label = self.kube.node_labels(node).get(GPU_MEMORY_LABEL)
            if label:
                return gpu_memory_from_node_label(label), f"{label} MiB (node {node} label {GPU_MEMORY_LABEL})"
        except (ApiException, KVConfigError):
            pass
        return None, None

    def run(self, namespace: str, spec: VLLMServerSpec, pods: Sequence[Pod]) -> PreflightResult:
        """The pre-flight of ``spec`` (:func:`kvpilot.kv.preflight.kv_preflight`); ``KVCapacity`` Unknown
        (``NoModelConfig``) when the model config is not available, and (``InsufficientInputs``, from
        kv_preflight) when the GPU memory is not known.
        """
        config, weights, source = self.model_files(namespace, spec)
        if config is None:
            return PreflightResult(
                Condition(
                    type="KVCapacity",
                    status="Unknown",
                    reason="NoModelConfig",
                    message=f"KV capacity not computed: model config.json not available ({source})",
                )
            )
        gpu_memory, gpu_source = self.gpu_memory(spec, pods)
        result = kv_preflight(config, spec.engine, gpu_memory_bytes=gpu_memory, weights_bytes=weights)
        numbers = None
        if result.numbers:
            numbers = PreflightStatus(**result.numbers, config_source=source, gpu_memory=gpu_source)
        return PreflightResult(Condition.model_validate(result.condition), result.warning, numbers)
