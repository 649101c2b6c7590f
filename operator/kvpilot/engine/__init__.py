"""The engine model: vLLM V1's block pool, prefix cache, scheduler and a CPU offload tier, with a
step-time cost model, workloads and named scenarios. Pure logic: simulated time, seeded RNG.

Public API (see each module's docstrings; docs/engine.md for the model and its sources):

- ``COMPILED``: whether the engine runs compiled (setup.py, docs/performance.md).
- :class:`EngineConfig`, :class:`Engine` (``add_request``, ``step``, ``run``, ``now``),
  :class:`StepOutput`, :class:`MetricsSink` (what the exporter implements), :class:`Request`.
- :mod:`kvpilot.engine.block_pool` (:class:`BlockPool`), :mod:`kvpilot.engine.offload`,
  :mod:`kvpilot.engine.hardware` (model profiles, :class:`CostModel`; GPU profiles live in
  :mod:`kvpilot.gpus`).
- :mod:`kvpilot.engine.workloads`, :mod:`kvpilot.engine.scenarios` (``SCENARIOS``, ``build``,
  ``run_scenario``); a ``vllm serve`` command line becomes engine flags with
  :func:`kvpilot.vllm.args.from_vllm_args`.
"""

from kvpilot.engine import core as _core
from kvpilot.engine.block_pool import BlockPool
from kvpilot.engine.config import EngineConfig
from kvpilot.engine.core import Engine, MetricsSink, StepOutput, Workload
from kvpilot.engine.hardware import MODEL_PROFILES, CostModel
from kvpilot.engine.request import Request

#: The engine's hot modules run compiled (mypyc, when kvpilot was built with a C compiler: setup.py), not from
#: their Python source; the same code and results either way.
COMPILED = not (_core.__file__ or "").endswith(".py")

__all__ = [
    "COMPILED",
    "MODEL_PROFILES",
    "BlockPool",
    "CostModel",
    "Engine",
    "EngineConfig",
    "MetricsSink",
    "Request",
    "StepOutput",
    "Workload",
]
