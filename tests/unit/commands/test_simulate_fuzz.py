"""Fuzz: ``kvpilot simulate healthy --scenario-file FILE -o json`` on scenario files with hostile numbers.

A scenario file sets engine flags, a workload and a duration; each number is drawn from valid and hostile
values (0, negative, NaN, infinities, huge, 2^64, a bool, a string, null), so is each length distribution's
parameter and each trace line's ``arrival_time`` and token counts. Property (``tests/support/fuzz.py``): exit 0
with a JSON report that holds no NaN or infinity and no negative latency, or exit 2 with exactly one line;
never an exception, never more than 5 s of CPU or 1 GiB more memory (each run is at most 5 simulated seconds).
The hypothesis seed is fresh every run and printed (tests/conftest.py).
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.support.fuzz import EXAMPLES, invoke

_HOSTILE = st.sampled_from(
    [0, -1, -5, 1, 2, 16, 1.5, 0.5, 1e-300, 1e300, 2**31, 2**64, 10**30, True, "12", None, ".nan", ".inf", "-.inf"]
)
_FLAGS = [
    "block_size",
    "num_gpu_blocks",
    "kv_cache_tokens",
    "max_num_seqs",
    "max_num_batched_tokens",
    "max_model_len",
    "kv_offload_cpu_bytes",
    "offload_load_bandwidth",
    "bytes_per_token",
    "bandwidth_efficiency",
    "compute_efficiency",
    "step_overhead",
    "gpu_memory_utilization",
]


def _yaml(value: object) -> str:
    """A YAML scalar: the special floats as YAML spells them, the rest as JSON (a subset of YAML)."""
    if isinstance(value, str) and value.endswith(("nan", "inf")):
        return value
    return json.dumps(value)


@st.composite
def scenario_files(draw: st.DrawFn) -> str:
    lines = []
    flags = draw(st.lists(st.sampled_from(_FLAGS), unique=True, max_size=4))
    if flags:
        lines.append("flags: {" + ", ".join(f"{f}: {_yaml(draw(_HOSTILE))}" for f in flags) + "}")
    kind = draw(st.sampled_from(["poisson", "document_scan", "trace", None]))
    if kind == "poisson":
        dist = draw(st.sampled_from(["exponential", "normal", "lognormal", "uniform", "fixed"]))
        params = {"exponential": ["mean"], "normal": ["mean", "std"], "lognormal": ["mean", "sigma"]}
        names = params.get(dist, ["min", "max"] if dist == "uniform" else ["value"])
        length = "{dist: " + dist + "".join(f", {n}: {_yaml(draw(_HOSTILE))}" for n in names) + "}"
        lines.append(f"workload: {{type: poisson, rate: {_yaml(draw(_HOSTILE))}, duration: 5, prompt_len: {length}}}")
    elif kind == "document_scan":
        lines.append(f"workload: {{type: document_scan, num_docs: {_yaml(draw(_HOSTILE))}, doc_tokens: 100}}")
    elif kind == "trace":
        fields = ", ".join(f"{k}: {_yaml(draw(_HOSTILE))}" for k in ("arrival_time", "prompt_tokens", "output_len"))
        lines.append(f"workload: {{type: trace, requests: [{{{fields}}}]}}")
    if draw(st.booleans()):
        lines.append(f"duration: {_yaml(draw(_HOSTILE))}")
    return "\n".join(lines) + "\n"


def _finite(value: float) -> float:
    raise AssertionError(f"{value} in JSON")


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario_files())
def test_simulate_answers_any_scenario_file_with_a_finite_report_or_one_line(text):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "s.yaml"
        path.write_text(text)
        out = invoke(
            ["simulate", "healthy", "--scenario-file", str(path), "-o", "json", "--duration", "5s"],
            results=(0,),
            refusals=(2,),
        )
    if out.code == 0:
        doc = json.loads(out.stdout, parse_constant=_finite)
        latency = doc.get("latency_s") or {}
        assert all(v is None or (math.isfinite(v) and v >= 0) for v in latency.values()), latency
