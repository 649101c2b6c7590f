"""The install path without a build: scripts/release.sh pushes the image and the packaged chart to an OCI registry,
and the chart pulled from it renders and lints with its image defaults pointing at that registry and tag.

The registry is Debian's ``docker-registry`` (the CNCF distribution registry), started on loopback with its
storage in a temporary directory and stopped by its PID; the image is the one the image tests build.
"""

from __future__ import annotations

import json
import os
import subprocess
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, require_tool
from tests.integration.image.conftest import CACHE, VERSION
from tests.support.prom import free_port
from tests.support.waiting import stop_process, wait_for

pytestmark = [pytest.mark.image, pytest.mark.helm]


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``127.0.0.1:PORT``: a plain-HTTP OCI registry serving from a fresh directory, stopped after the module."""
    binary = require_tool("docker-registry")
    root = tmp_path_factory.mktemp("registry")
    port = free_port()
    config = {
        "version": 0.1,
        "log": {"level": "warn"},
        "storage": {"filesystem": {"rootdirectory": str(root / "storage")}},
        "http": {"addr": f"127.0.0.1:{port}"},
    }
    (root / "config.yml").write_text(yaml.safe_dump(config))
    log = (root / "registry.log").open("wb")
    proc = subprocess.Popen([binary, "serve", str(root / "config.yml")], stdout=log, stderr=subprocess.STDOUT)

    def up() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2) as resp:
                return resp.status == 200
        except OSError:
            return False

    try:
        wait_for(up, timeout=30, what="the registry's /v2/")
        yield f"127.0.0.1:{port}"
    finally:
        stop_process(proc)
        log.close()


@pytest.fixture(scope="module")
def released(registry: str, image: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """scripts/release.sh run against the registry with the image the image tests built (no second build); the
    registry's tag is taken off the local image afterwards.
    """
    helm = require_tool("helm")
    podman = require_tool("podman")
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run(
        [str(REPO / "scripts" / "release.sh"), registry],
        cwd=REPO,
        env={
            **os.environ,
            "HELM": helm,
            "PODMAN": podman,
            "KVPILOT_RELEASE_IMAGE": image,
            "KVPILOT_RELEASE_PLAIN_HTTP": "1",
            "KVPILOT_RELEASE_DIR": str(out),
            "KVPILOT_IMAGE_CACHE": str(CACHE),
            "HELM_CACHE_HOME": str(out / "helm-cache"),
            "HELM_CONFIG_HOME": str(out / "helm-config"),
        },
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    try:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
        yield {"helm": helm, "out": str(out), "stdout": result.stdout}
    finally:
        subprocess.run(
            [podman, "untag", image, f"{registry}/kvpilot:{VERSION}"],
            env={**os.environ, "CONTAINERS_CONF": str(CACHE / "containers.conf")},
            capture_output=True,
            timeout=60,
            check=False,
        )


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as resp:
        return json.loads(resp.read())


def test_the_image_and_the_chart_are_in_the_registry(registry, released):
    assert _get(f"http://{registry}/v2/kvpilot/tags/list")["tags"] == [VERSION]
    assert _get(f"http://{registry}/v2/charts/kvpilot/tags/list")["tags"] == [VERSION]
    install = f"helm install kvpilot oci://{registry}/charts/kvpilot --version {VERSION}"
    assert install in released["stdout"].replace(released["helm"], "helm")


def test_the_packaged_chart_defaults_to_the_pushed_image(registry, released):
    with tarfile.open(Path(released["out"]) / f"kvpilot-{VERSION}.tgz") as tgz:
        member = tgz.extractfile("kvpilot/values.yaml")
        assert member is not None
        values = yaml.safe_load(member.read())
    assert values["image"]["repository"] == f"{registry}/kvpilot"
    assert values["image"]["tag"] == ""  # the chart's appVersion: the version pushed
    # the repository's own chart is unchanged: localhost/kvpilot for kind/k3d
    assert yaml.safe_load((REPO / "charts" / "kvpilot" / "values.yaml").read_text())["image"]["repository"] == (
        "localhost/kvpilot"
    )


def test_the_chart_pulled_from_the_registry_renders_and_lints(registry, released, tmp_path):
    helm = released["helm"]
    env = {**os.environ, "HELM_CACHE_HOME": str(tmp_path / "cache"), "HELM_CONFIG_HOME": str(tmp_path / "config")}
    ref = f"oci://{registry}/charts/kvpilot"

    def run(*args: str) -> str:
        result = subprocess.run([helm, *args], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert result.returncode == 0, f"helm {' '.join(args)}: {result.stderr[-2000:]}"
        return result.stdout

    docs = [d for d in yaml.safe_load_all(run("template", "kvpilot", ref, "--version", VERSION, "--plain-http")) if d]
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"{registry}/kvpilot:{VERSION}"
    run("pull", ref, "--version", VERSION, "--plain-http", "--untar", "--destination", str(tmp_path))
    lint = run("lint", "--strict", str(tmp_path / "kvpilot"))
    assert "1 chart(s) linted, 0 chart(s) failed" in lint
