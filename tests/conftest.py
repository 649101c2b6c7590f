"""Shared test fixtures.

Real components (Prometheus, promtool, Alertmanager, Helm) are used wherever they run here.
``require_tool`` skips a test when a binary is missing, except in CI (``CI=true``), where a
missing tool is a failure: CI must install everything it needs.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
REPO = TESTS.parent


def in_ci() -> bool:
    """True when running under CI (``CI`` set to a true-ish value)."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_tool(name: str) -> str:
    """Return the path of binary ``name``; skip the test without it, or fail under CI."""
    candidates = [shutil.which(name), str(REPO / ".tools" / "bin" / name)]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    message = f"{name} is not installed (.ci/run installs it)"
    if in_ci():
        pytest.fail(message + "; CI=true, so a missing tool is a failure")
    pytest.skip(message)


VLLM_VENV_DEFAULT = Path.home() / ".cache" / "kvpilot" / "vllm-0.29.0"


def require_vllm_python() -> str:
    """Return the python of the vLLM 0.29.0 reference venv; skip without it, or fail under CI.

    Located through env ``KVPILOT_VLLM_PYTHON`` (default: ``bin/python`` of
    ``${KVPILOT_VLLM_VENV:-~/.cache/kvpilot/vllm-0.29.0}``); ``make vllm-ref`` creates it.
    """
    venv = Path(os.environ.get("KVPILOT_VLLM_VENV") or VLLM_VENV_DEFAULT)
    path = os.environ.get("KVPILOT_VLLM_PYTHON") or str(venv / "bin" / "python")
    if os.access(path, os.X_OK):
        return path
    message = f"the vLLM reference python {path} is missing (make vllm-ref creates it)"
    if in_ci():
        pytest.fail(message + "; CI=true, so a missing tool is a failure")
    pytest.skip(message)


@pytest.fixture
def fixtures_dir() -> Path:
    """tests/fixtures: the test data, each folder with a PROVENANCE.md naming its public source."""
    return FIXTURES
