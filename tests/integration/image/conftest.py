"""The kvpilot container image, built once per session with scripts/build-image.sh and run with podman.

Everything runs as on the CI machine: Debian's podman/buildah with runc, a debootstrap base (cached),
``--pull=never`` (no registry), ``--network host``. Each container a test starts carries the label
``kvpilot-test`` and is removed by name; the session also removes iptables chains and empty
``libpod_parent`` cgroup folders that podman left and that were not there before.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO, require_tool

LABEL = "kvpilot-test"
CACHE = Path(os.environ.get("KVPILOT_IMAGE_CACHE") or Path.home() / ".cache" / "kvpilot" / "image")
VERSION = next(
    line.split('"')[1] for line in (REPO / "pyproject.toml").read_text().splitlines() if line.startswith("version = ")
)
TAG = f"localhost/kvpilot:{VERSION}"


class Podman:
    """``podman`` with the build script's containers.conf (runc, cgroupfs, ulimits within the hard limits)."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.env = {**os.environ, "CONTAINERS_CONF": str(CACHE / "containers.conf")}
        self.started: list[str] = []

    def __call__(self, *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
        result = subprocess.run(
            [self.binary, *args], env=self.env, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and result.returncode != 0:
            pytest.fail(f"podman {' '.join(args[:3])} ... exited {result.returncode}: {result.stderr[-2000:]}")
        return result

    def run_detached(self, *args: str) -> str:
        """``podman run -d`` with a fresh name and the test label; returns the name (removed at teardown)."""
        name = f"kvpilot-test-{uuid.uuid4().hex[:8]}"
        self.started.append(name)
        self("run", "-d", "--name", name, "--label", f"{LABEL}=1", "--network", "host", *args)
        return name

    def logs(self, name: str) -> str:
        result = self("logs", name, check=False)
        return result.stdout + result.stderr

    def remove_started(self) -> None:
        for name in self.started:
            self("rm", "-f", "-t", "2", name, check=False)
        self.started.clear()


def _iptables_chains() -> set[tuple[str, str]]:
    iptables = shutil.which("iptables")
    if not iptables:
        return set()
    chains = set()
    for table in ("filter", "nat"):
        out = subprocess.run([iptables, "-t", table, "-S"], capture_output=True, text=True, check=False).stdout
        chains |= {(table, line.split()[1]) for line in out.splitlines() if line.startswith("-N ")}
    return chains


def _libpod_cgroups() -> set[Path]:
    return {p for p in Path("/sys/fs/cgroup").glob("*/libpod_parent/*") if p.is_dir()}


@pytest.fixture(scope="session")
def podman() -> Iterator[Podman]:
    """podman, and afterwards the session's leftovers removed (containers, new iptables chains, cgroups)."""
    for tool in ("buildah", "runc", "debootstrap"):
        require_tool(tool)
    runner = Podman(require_tool("podman"))
    chains, cgroups = _iptables_chains(), _libpod_cgroups()
    yield runner
    runner.remove_started()
    for table, chain in sorted(_iptables_chains() - chains):
        subprocess.run(["iptables", "-t", table, "-F", chain], check=False)
        subprocess.run(["iptables", "-t", table, "-X", chain], check=False)
    for path in sorted(_libpod_cgroups() - cgroups, reverse=True):
        with contextlib.suppress(OSError):  # only empty ones go; a running container's cgroup stays
            path.rmdir()


@pytest.fixture(scope="session")
def image(podman: Podman) -> str:  # noqa: ARG001 - podman's teardown removes what the build leaves
    """The image built from this checkout (scripts/build-image.sh: cached base, buildah --layers)."""
    result = subprocess.run(
        [str(REPO / "scripts" / "build-image.sh"), TAG],
        cwd=REPO,
        env={**os.environ, "KVPILOT_IMAGE_CACHE": str(CACHE)},
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    if result.returncode != 0:
        pytest.fail(f"scripts/build-image.sh failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    print(result.stdout)  # build time and size, for the CI log
    return TAG


@pytest.fixture
def containers(podman: Podman) -> Iterator[Podman]:
    """Podman for one test; the containers it started are removed when the test ends."""
    yield podman
    podman.remove_started()
