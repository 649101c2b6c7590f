"""kvpilot's exporter exposes exactly what vLLM 0.29.0's PrometheusStatLogger exposes, snapshot by snapshot.

Both sides run the same workload (identical schedules, tests/reference/test_schedules.py); the
registry is read at t = 0, every eighth of the run and at the end. Compared: family names, types,
HELP texts, every series' label set (bucket edges included) and every value (floats to 1e-9).
"""

from __future__ import annotations

import pytest

from tests.reference.compare import metric_differences
from tests.reference.conftest import WORKLOADS

pytestmark = pytest.mark.vllm_ref


@pytest.mark.parametrize("name", list(WORKLOADS))
def test_exporter_metrics_equal_vllm_stat_logger(reference_runs, name):
    run = reference_runs[name]
    vllm_snaps = run["vllm"]["snapshots"] + [[-1.0, run["vllm"]["final"]]]
    kvpilot_snaps = run["snapshots"] + [[-1.0, run["final"]]]
    differences = metric_differences(vllm_snaps, kvpilot_snaps)
    assert not differences, f"{name}: " + "; ".join(differences)


def test_every_family_vllm_exposes_is_compared(reference_runs):
    # 36 families in vLLM 0.29.0's registry for a text model without speculative decoding or LoRA
    final = reference_runs["kv-pressure-preemption"]["vllm"]["final"]
    names = {family[0] for family in final}
    assert len(names) == 36
    assert {
        "vllm:prompt_tokens_by_source",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:cache_config_info",
    } <= names
