"""``kvpilot simulate``: run the vLLM engine model; report, serve a live ``/metrics``, or record a timeline.

Thin I/O around :mod:`kvpilot.engine` (scenarios, engine, exporter) and :mod:`kvpilot.metrics.recording`,
one job per module:

- :mod:`.cli`: the click command and :func:`~.cli.run`, the body it shares with the shim; report mode
  prints ``run_scenario``'s result (``-o text|json``);
- :mod:`.options`: everything read from the command line, a scenario file or a trace, and the bounds
  of one run (exit 2 naming the option);
- :mod:`.session`: :class:`~.session.Simulation` (engine + workload + exporter advanced in simulated
  time), the ``vllm:cache_config_info`` labels, and ``--record FILE --duration D``: one snapshot every
  ``--interval`` simulated seconds, written as a recording (docs/metrics.md, "Recordings") whose
  timestamps end at ``--end`` (default: now);
- :mod:`.server`: ``--serve HOST:PORT``, an HTTP server with ``/metrics`` (``prometheus_client``
  exposition chosen by the ``Accept`` header, as a vLLM server answers), ``/health`` (200, empty body),
  ``/v1/models`` (OpenAI list) and ``/version``, while the simulation advances at ``--speed`` x wall time;
- :mod:`.shim`: the ``vllm`` console script, ``vllm serve MODEL [vLLM flags] [--host H] [--port P]``,
  serving that model's endpoints on ``0.0.0.0:8000`` by default (as ``vllm serve`` does), so the
  engine model can stand in for a vLLM server in clusters without GPUs.
"""

from kvpilot.commands.simulate.cli import command
from kvpilot.commands.simulate.shim import vllm_shim

__all__ = ["command", "vllm_shim"]
