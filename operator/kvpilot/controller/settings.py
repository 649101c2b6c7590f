"""How kopf runs kvpilot's operator: its settings and its connection to the cluster the caller chose.

Used by :mod:`kvpilot.controller.runner` (``kopf.run``/``kopf.operator``) and by the login handler
of :func:`kvpilot.controller.handlers.build_registry`.
"""

from __future__ import annotations

import logging

import kopf
import kubernetes.client

from kvpilot.api.constants import LABEL_MANAGED_BY

#: kopf keeps its progress and last-handled spec in annotations under this prefix (never in
#: ``status``: a real API server prunes status fields the CRD does not declare).
ANNOTATION_PREFIX = "kvpilot.dev"
MANAGED_BY_SELECTOR = {LABEL_MANAGED_BY: "kvpilot"}


def make_settings(settings: kopf.OperatorSettings | None = None) -> kopf.OperatorSettings:
    """Kopf settings for kvpilot: progress and diff-base in ``kvpilot.dev/…`` annotations (status
    keeps only CRD-declared fields), kopf's own log lines not posted as Events (only warnings),
    watches of pods filtered server-side by ``app.kubernetes.io/managed-by=kvpilot``; no
    finalizers (no delete handler: owner references delete the pod and service).
    """
    settings = settings or kopf.OperatorSettings()
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=ANNOTATION_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix=ANNOTATION_PREFIX, key="last-handled-configuration"
    )
    settings.posting.level = logging.WARNING
    settings.watching.server_timeout = 300
    # Only kvpilot's pods, filtered by the API server (not every pod of the cluster in memory).
    settings.watching.label_selectors["v1", "pods"] = ",".join(f"{k}={v}" for k, v in MANAGED_BY_SELECTOR.items())
    return settings


def connection_info(configuration: kubernetes.client.Configuration) -> kopf.ConnectionInfo:
    """Kopf's connection from a kubernetes-client ``Configuration`` (so both talk to one cluster)."""
    token = None
    auth = (configuration.api_key or {}).get("authorization") or (configuration.api_key or {}).get("BearerToken")
    if auth:
        token = auth.split(" ", 1)[1] if auth.lower().startswith("bearer ") else auth
    return kopf.ConnectionInfo(
        server=configuration.host,
        ca_path=configuration.ssl_ca_cert,
        insecure=not configuration.verify_ssl,
        username=configuration.username or None,
        password=configuration.password or None,
        scheme="Bearer" if token else None,
        token=token,
        certificate_path=configuration.cert_file,
        private_key_path=configuration.key_file,
    )
