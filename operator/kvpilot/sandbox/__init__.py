"""In-process Kubernetes API for ``kvpilot demo`` and the operator tests (kmock 0.8, gaps closed).

kmock is an optional dependency (extras ``demo`` and ``test``); importing this package without
it raises ImportError naming the extra.

- :class:`~kvpilot.sandbox.emulator.FaithfulKubernetes` — kmock's ``KubernetesEmulator`` with
  a real API server's object semantics (the gap table is in that module's docstring);
- :class:`~kvpilot.sandbox.cluster.SandboxCluster` — runs it on 127.0.0.1 in a thread (a context
  manager);
- :class:`~kvpilot.sandbox.cluster.Kubelet` — plays the scheduler and kubelet, openly.
"""

from __future__ import annotations

try:
    import kmock  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("kvpilot.sandbox needs kmock: pip install 'kvpilot[demo]'") from exc

from kvpilot.sandbox.cluster import Kubelet, SandboxCluster
from kvpilot.sandbox.emulator import FaithfulKubernetes

__all__ = ["FaithfulKubernetes", "Kubelet", "SandboxCluster"]
