"""The operator tests' sandbox fixtures (cluster, api, namespace, kubelet) for the end-to-end alert test."""

from tests.integration.operator.conftest import (  # noqa: F401 - pytest fixtures
    _no_real_cluster,
    api,
    cluster,
    kubelet,
    namespace,
)
