"""The vLLM reference venv holds exactly the pinned vLLM and torch (CPU) the tier is proven with."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import require_vllm_python

pytestmark = pytest.mark.vllm_ref


def test_reference_venv_has_the_pinned_vllm_and_a_cpu_torch():
    python = require_vllm_python()
    out = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm'), m.version('torch'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    # tests/reference/requirements-vllm-0.29.0-cpu.txt pins vllm==0.29.0 and torch==2.13.0 (the +cpu build).
    assert out == ["0.29.0", "2.13.0+cpu"]
