"""kvpilot: run vLLM servers on Kubernetes and explain, with numbers, why they are slow.

Packages (one job each; pure logic has no I/O):

- ``kvpilot.api``        VLLMServer spec/status models, defaults, validation, CRD schema
- ``kvpilot.render``     spec -> Pod and Service (pure, Jinja2 templates)
- ``kvpilot.kv``         KV bytes/token, capacity, feasibility (pure)
- ``kvpilot.engine``     block pool, prefix cache, V1 scheduler model, workloads, metrics exporter
- ``kvpilot.metrics``    vLLM metric catalog, exposition parsing, recordings
- ``kvpilot.diagnose``   signals -> rules -> verdicts -> report (read-only)
- ``kvpilot.controller`` kopf handlers (thin)
- ``kvpilot.alerts``     Alertmanager/Grafana webhook receiver
- ``kvpilot.sandbox``    in-process Kubernetes API (aiohttp) for the demo and the tests
- ``kvpilot.commands``   one module per CLI subcommand; ``kvpilot.cli`` wires them
"""

__version__ = "0.1.0"
