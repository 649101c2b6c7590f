"""In-process Kubernetes API for ``kvpilot demo`` and the operator tests (a real API server's semantics).

The sandbox is its own code on aiohttp; kmock (an optional dependency, extras ``demo`` and ``test``)
supplies only the table of built-in resources, through its public API. Importing this package
without kmock raises ImportError naming the extra.

- :class:`~kvpilot.sandbox.emulator.FaithfulKubernetes` — the objects and a real API server's
  semantics (the table is in that module's docstring);
- :class:`~kvpilot.sandbox.server.ApiServer` — it on HTTP (aiohttp's low-level server);
- :class:`~kvpilot.sandbox.cluster.SandboxCluster` — runs that on 127.0.0.1 in a thread (a context
  manager), with fault injection (:mod:`kvpilot.sandbox.faults`) and the requests it served;
- :class:`~kvpilot.sandbox.cluster.Kubelet` — plays the scheduler and kubelet, openly.
"""

from __future__ import annotations

try:
    import kmock  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ImportError("kvpilot.sandbox needs kmock: pip install 'kvpilot[demo]'") from exc

from kvpilot.sandbox.cluster import Kubelet, SandboxCluster
from kvpilot.sandbox.emulator import FaithfulKubernetes, SandboxSurpriseError

__all__ = ["FaithfulKubernetes", "Kubelet", "SandboxCluster", "SandboxSurpriseError"]
