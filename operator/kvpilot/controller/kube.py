"""The operator's Kubernetes I/O: reads, creates (with adoption), deletes and log reads, as JSON.

One client for the operator's own requests (:class:`kvpilot.controller.rest.JsonApi` on a
``kubernetes`` :class:`~kubernetes.client.ApiClient`: the client's connection pool, authentication
and TLS, without its model layer); kopf has its own for watches, its patches and Events. Every
request is bounded in time (:data:`kvpilot.controller.rest.REQUEST_TIMEOUT`); log reads in size.
Decisions about what an answer means live in :mod:`kvpilot.controller.logic`
(:func:`~kvpilot.controller.logic.after_create_conflict`).

Errors are the client's :class:`~kubernetes.client.ApiException` (``status``, ``reason``, ``body``,
``headers``), classified by :func:`kvpilot.controller.failures.classify`.
"""

from __future__ import annotations

import json
from typing import Any, TypeVar, cast

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from kvpilot.api import GROUP, PLURAL, VERSION
from kvpilot.api.constants import LABEL_SERVER
from kvpilot.api.objects import ConfigMap, JsonObject, Node, Pod, PodList, Service, VLLMServerObject
from kvpilot.controller import logic
from kvpilot.controller.rest import JsonApi, core_path, custom_path, custom_status_path
from kvpilot.controller.settings import HANDLER_THREADS

#: Upper bound of log bytes read to find the KV line (vLLM prints it within its first few
#: hundred lines; 8 MiB is far beyond that and bounds the read).
LOG_LIMIT_BYTES = 8 * 2**20
#: Lines and bytes of a failed pod's log read for the root cause (vLLM V1 prints it above the API
#: server's traceback, beyond the kubelet's 2,048-byte termination message; 200 lines hold both
#: tracebacks of an engine start-up failure).
FAILURE_LOG_LINES = 200
FAILURE_LOG_BYTES = 256 * 2**10
#: The container of a server's pod that runs vLLM (:mod:`kvpilot.render`'s templates).
CONTAINER = "vllm"

#: A core object the operator creates for a server, and reads back as the same kind.
Owned = TypeVar("Owned", Pod, Service)


class NameConflict(ApiException):
    """The API server's 409 on create, when another owner (or nobody) holds the name: ``conflict_owner`` says who."""

    def __init__(self, conflict_owner: str, kind: str, name: str) -> None:
        super().__init__(status=409, reason="Conflict")
        self.conflict_owner = conflict_owner
        self.body = json.dumps({"message": f'{kind} "{name}" already exists and is not this server\'s'})


class CreateRaced(ApiException):
    """A 409 on create, then no object of that name: transient (a 409 the policy retries)."""

    def __init__(self, kind: str, name: str) -> None:
        super().__init__(status=409, reason="Conflict")
        self.body = json.dumps(
            {"message": f'{kind} "{name}": the create was refused as a conflict, yet no such {kind} exists'}
        )


class Kube:
    """The operator's requests to the cluster ``configuration`` names (see the module's docstring)."""

    def __init__(self, configuration: kubernetes.client.Configuration) -> None:
        # One pooled connection per handler thread (the client's default pool is 5 per CPU: with
        # more threads than that, connections are dropped after each request and opened anew).
        configuration.connection_pool_maxsize = max(configuration.connection_pool_maxsize or 0, HANDLER_THREADS)
        self.configuration = configuration
        self.json = JsonApi(kubernetes.client.ApiClient(configuration))

    # ------------------------------------------------------------------ VLLMServers
    def read_server(self, namespace: str, name: str) -> VLLMServerObject | None:
        """The VLLMServer as stored now, or None when it is gone."""
        return cast(VLLMServerObject | None, self._read(custom_path(GROUP, VERSION, namespace, PLURAL, name)))

    def patch_server_status(self, namespace: str, name: str, patch: JsonObject) -> VLLMServerObject:
        """JSON-merge-patch the server's ``/status`` with ``{"status": patch}``; the server as patched."""
        path = custom_status_path(GROUP, VERSION, namespace, PLURAL, name)
        return cast(VLLMServerObject, self.json.merge_patch(path, {"status": patch}))

    # ------------------------------------------------------------------ pods and services
    def list_pods(self, namespace: str, server: str) -> list[Pod]:
        """The pods labelled ``kvpilot.dev/server=<server>`` (one list request)."""
        query = [("labelSelector", f"{LABEL_SERVER}={server}")]
        found = cast(PodList, self.json.get(core_path(namespace, "pods"), query))
        return list(found.get("items") or [])

    def create_or_adopt(self, wanted: Owned, plural: str, owner_uid: str | None) -> tuple[Owned, bool]:
        """Create ``wanted`` (a Pod or Service of the server of uid ``owner_uid``); ``(the object, True)`` when this
        call made it, ``(the existing object, False)`` when a 409 found this server's own (an earlier attempt made it).

        Raises:
            NameConflict: another owner (or nobody) holds the name (permanent).
            CreateRaced: a 409, then no such object (transient: :func:`logic.after_create_conflict`).
            ApiException: any other refusal.
        """
        meta = wanted["metadata"]
        try:
            return cast(Owned, self.json.create(core_path(meta["namespace"], plural), wanted)), True
        except ApiException as exc:
            if exc.status != 409:
                raise
        return self.adopt(self.read(wanted, plural), wanted, plural, owner_uid), False

    @staticmethod
    def adopt(existing: Owned | None, wanted: Owned, plural: str, owner_uid: str | None) -> Owned:
        """``existing`` (the stored object named like ``wanted``) when the server of uid ``owner_uid`` owns it
        (:func:`logic.after_create_conflict`).

        Raises:
            NameConflict: another owner (or nobody) holds the name.
            CreateRaced: there is no such object (``existing`` None).
        """
        kind, name = plural.rstrip("s"), wanted["metadata"]["name"]
        outcome = logic.after_create_conflict(existing, owner_uid)
        if outcome.outcome == "held":
            raise NameConflict(outcome.holder or "no controller", kind, name)
        if existing is None or outcome.outcome != "adopt":
            raise CreateRaced(kind, name)
        return existing

    def read(self, like: Owned, plural: str) -> Owned | None:
        """The stored core object named like ``like`` (its namespace and name), or None (404)."""
        meta = like["metadata"]
        return cast(Owned | None, self._read(core_path(meta["namespace"], plural, meta["name"])))

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete a pod (gone already: nothing to do)."""
        try:
            self.json.delete(core_path(namespace, "pods", name))
        except ApiException as exc:
            if exc.status != 404:
                raise

    def pod_log(self, pod: Pod, *, limit_bytes: int, tail_lines: int | None = None) -> str:
        """The vLLM container's log: at most ``limit_bytes`` bytes, the last ``tail_lines`` lines when given."""
        meta = pod["metadata"]
        query: list[tuple[str, Any]] = [("container", CONTAINER), ("limitBytes", limit_bytes)]
        if tail_lines is not None:
            query.append(("tailLines", tail_lines))
        return self.json.text(core_path(meta["namespace"], "pods", meta["name"], "log"), query)

    # ------------------------------------------------------------------ pre-flight inputs
    def config_map_data(self, namespace: str, name: str) -> dict[str, str]:
        """A ConfigMap's ``data`` (404 and other refusals raise ApiException)."""
        found = cast(ConfigMap, self.json.get(core_path(namespace, "configmaps", name)))
        return dict(found.get("data") or {})

    def node_labels(self, name: str) -> dict[str, str]:
        """A node's labels (ApiException when it cannot be read)."""
        found = cast(Node, self.json.get(core_path(None, "nodes", name)))
        return dict((found.get("metadata") or {}).get("labels") or {})

    def _read(self, path: str) -> JsonObject | None:
        try:
            return self.json.get(path)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise
