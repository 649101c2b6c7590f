"""The operator's requests as JSON, without the ``kubernetes`` client's model layer.

The generated API methods (``CoreV1Api.create_namespaced_pod`` …) validate their arguments with
pydantic's ``validate_call`` and build or walk model objects; for the three writes every new
VLLMServer costs (its Service, its Pod, its status) that is about half of the client-side CPU
of each request (docs/performance.md, "What the code's choices bought").
:class:`JsonApi` sends the same requests through the same :class:`kubernetes.client.ApiClient`
(its public ``param_serialize`` and ``call_api``: the same connection pool, authentication,
headers and TLS settings) and returns the JSON the API served, as a dict (a pod's log as text).
It is the operator's one client for its own requests (:mod:`kvpilot.controller.kube`); kopf has its own.

Errors are the client's own: a non-2xx answer raises :class:`kubernetes.client.ApiException`
(``ApiException.from_response``: ``NotFoundException`` for 404, ``ConflictException`` for 409 …,
with ``status``, ``reason``, ``body`` and ``headers``), exactly as the generated methods raise it.

Paths: Kubernetes API conventions, "API resource paths"
(https://kubernetes.io/docs/reference/using-api/api-concepts/#resource-uris).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import kubernetes.client
from kubernetes.client.exceptions import ApiException

from kvpilot.api.objects import JsonObject, Pod, Service

#: What a request sends: a JSON object (a merge patch), or an object the operator made.
Body = JsonObject | Pod | Service

#: ``Content-Type`` of a JSON merge patch (RFC 7386), what ``patch_namespaced_custom_object_status`` sends.
MERGE_PATCH = "application/merge-patch+json"
#: ``(connect, read)`` seconds of every request (urllib3's timeout; the client's own default is none, so
#: an API server that accepts and never answers would hold a handler for good). A timeout is a transport
#: error: the reconcile retries it with its backoff (:mod:`kvpilot.controller.failures`).
REQUEST_TIMEOUT = (10.0, 60.0)


class JsonApi:
    """POST and merge-PATCH of JSON objects through ``api_client`` (see the module's docstring)."""

    def __init__(self, api_client: kubernetes.client.ApiClient, timeout: tuple[float, float] = REQUEST_TIMEOUT) -> None:
        self.api_client = api_client
        self.timeout = timeout

    def raw(
        self,
        method: str,
        path: str,
        body: Body | None = None,
        *,
        content_type: str = "application/json",
        accept: str = "application/json",
        query: list[tuple[str, Any]] | None = None,
    ) -> bytes:
        """``method`` on ``path`` (below the configuration's host) with ``body`` as JSON and ``query``
        parameters; the body served, as bytes.

        Raises:
            ApiException: the API's non-2xx answer (the client's subclass for its status).
        """
        headers = {"Accept": accept, "Content-Type": content_type}
        serialized = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=query or None,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        response = self.api_client.call_api(*serialized, _request_timeout=self.timeout)
        read: Callable[[], bytes] = response.read  # the client's RESTResponse.read (unannotated): the body
        data = read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return data

    def request(
        self, method: str, path: str, body: Body | None = None, content_type: str = "application/json"
    ) -> JsonObject:
        """``method`` on ``path`` with ``body`` as JSON; the JSON served, decoded.

        Raises:
            ApiException: the API's non-2xx answer (the client's subclass for its status).
        """
        served: JsonObject = json.loads(self.raw(method, path, body, content_type=content_type))
        return served

    def get(self, path: str, query: list[tuple[str, Any]] | None = None) -> JsonObject:
        """GET the object (or list) at ``path``, as JSON."""
        served: JsonObject = json.loads(self.raw("GET", path, query=query))
        return served

    def text(self, path: str, query: list[tuple[str, Any]] | None = None) -> str:
        """GET ``path`` as text (a pod's log: ``text/plain``), undecodable bytes replaced."""
        return self.raw("GET", path, accept="text/plain, */*", query=query).decode("utf-8", errors="replace")

    def delete(self, path: str) -> JsonObject:
        """DELETE the object at ``path``; the API's answer (the object or a ``Status``)."""
        return self.request("DELETE", path)

    def create(self, path: str, body: Pod | Service) -> JsonObject:
        """POST ``body`` to the collection at ``path`` (e.g. ``/api/v1/namespaces/NS/pods``); the object created."""
        return self.request("POST", path, body)

    def merge_patch(self, path: str, patch: JsonObject) -> JsonObject:
        """JSON-merge-patch the object at ``path`` with ``patch``; the object as patched."""
        return self.request("PATCH", path, patch, MERGE_PATCH)


def core_path(namespace: str | None, plural: str, name: str | None = None, subresource: str | None = None) -> str:
    """The path of a core (``v1``) collection or object: ``/api/v1/namespaces/NS/PLURAL[/NAME[/SUB]]``
    (``/api/v1/PLURAL/NAME`` for a cluster-scoped one, ``namespace`` None).
    """
    path = f"/api/v1/namespaces/{_segment(namespace)}/{plural}" if namespace is not None else f"/api/v1/{plural}"
    if name is not None:
        path += f"/{_segment(name)}"
    return path + (f"/{subresource}" if subresource else "")


def custom_path(group: str, version: str, namespace: str, plural: str, name: str) -> str:
    """A namespaced custom object: ``/apis/G/V/namespaces/NS/PLURAL/NAME``."""
    return f"/apis/{group}/{version}/namespaces/{_segment(namespace)}/{plural}/{_segment(name)}"


def custom_status_path(group: str, version: str, namespace: str, plural: str, name: str) -> str:
    """The ``status`` subresource of a namespaced custom object: ``/apis/G/V/namespaces/NS/PLURAL/NAME/status``."""
    return custom_path(group, version, namespace, plural, name) + "/status"


def _segment(value: str) -> str:
    """``value`` as one path segment (percent-encoded like the generated client encodes path parameters)."""
    return quote(str(value), safe="")
