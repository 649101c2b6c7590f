"""A live server's scrapes kept as a recording (diagnose --save-recording): the samples read back unchanged."""

from __future__ import annotations

import pytest

from kvpilot.metrics.exposition import ExpositionError
from kvpilot.metrics.recording import read_recording, scrapes_recording_text

# Prometheus text 0.0.4 as prometheus_client serves a plain GET, and OpenMetrics as it answers Prometheus 3.x
# (escaping=allow-utf-8): the two formats a vLLM server answers with
TEXT = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} {running}
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} {preempted}
# HELP vllm:iteration_tokens_total Histogram of the number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine="0",le="1.0",model_name="m"} 1.0
vllm:iteration_tokens_total_bucket{engine="0",le="+Inf",model_name="m"} {steps}
vllm:iteration_tokens_total_count{engine="0",model_name="m"} {steps}
vllm:iteration_tokens_total_sum{engine="0",model_name="m"} 40.0
"""
OPENMETRICS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} {running}
# TYPE vllm:num_preemptions counter
vllm:num_preemptions_total{engine="0",model_name="m"} {preempted}
vllm:num_preemptions_created{engine="0",model_name="m"} 1.7e+09
# EOF
"""


def _body(template: str, **values: float) -> str:
    out = template
    for k, v in values.items():
        out = out.replace("{" + k + "}", repr(float(v)))
    return out


@pytest.mark.parametrize("template", [TEXT, OPENMETRICS], ids=["text-0.0.4", "openmetrics"])
def test_each_scrape_keeps_its_time_and_values(template: str) -> None:
    scrapes = [(1000.0, _body(template, running=2, preempted=0, steps=3)), (1002.5, _body(template, running=1,
               preempted=4, steps=9))]  # fmt: skip
    samples = read_recording(scrapes_recording_text(scrapes))
    running = [(s.timestamp, s.value) for s in samples if s.name == "vllm:num_requests_running"]
    assert running == [(1000.0, 2.0), (1002.5, 1.0)]
    preempted = [(s.timestamp, s.value) for s in samples if s.name == "vllm:num_preemptions_total"]
    assert preempted == [(1000.0, 0.0), (1002.5, 4.0)]
    assert not any(s.name.endswith("_created") for s in samples)  # left out, as every recording does
    if template is TEXT:
        counts = [s.value for s in samples if s.name == "vllm:iteration_tokens_total_count"]
        assert counts == [3.0, 9.0]


def test_a_scrape_the_parser_refuses_is_an_exposition_error() -> None:
    with pytest.raises(ExpositionError, match="a scrape the recording cannot hold"):
        scrapes_recording_text([(1.0, 'vllm:x{a="1" 2\n')])
