"""Each vLLM reference venv holds exactly the pinned vLLM and torch (CPU) the tier is proven with."""

from __future__ import annotations

import subprocess

import pytest

from tests.conftest import VLLM_VERSIONS, require_vllm_python

pytestmark = pytest.mark.vllm_ref


@pytest.mark.parametrize("version", VLLM_VERSIONS)
def test_reference_venv_has_the_pinned_vllm_and_a_cpu_torch(version):
    python = require_vllm_python(version)
    out = subprocess.run(
        [python, "-c", "import importlib.metadata as m; print(m.version('vllm'), m.version('torch'))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    # tests/reference/requirements-vllm-VERSION-cpu.txt pins vllm==VERSION and torch==2.13.0 (the +cpu build).
    assert out == [version, "2.13.0+cpu"]
