"""The CLI imports only what a command uses (start-up time is measured by benchmarks/cli_startup.py).

Each case runs the command in a fresh interpreter and lists the modules it loaded; the heavy
packages named here cost tens of milliseconds each to import and are needed by none of these.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys

import pytest

from kvpilot.cli import COMMANDS

HEAVY = ("kopf", "kubernetes", "aiohttp", "pydantic", "jinja2", "yaml", "rich", "prometheus_client", "huggingface_hub")
PROBE = """
import json, sys
from kvpilot.cli import cli
try:
    cli(sys.argv[1:], prog_name="kvpilot")
except SystemExit:
    pass
sys.stderr.write("\\nMODULES " + json.dumps(sorted(sys.modules)))
"""


def loaded(*args: str) -> tuple[str, set[str]]:
    """``(stdout, top-level packages imported)`` of ``kvpilot ARGS`` in a fresh interpreter."""
    proc = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=60)
    modules = json.loads(proc.stderr.rsplit("MODULES ", 1)[1])
    return proc.stdout, {m.split(".")[0] for m in modules} | set(modules)


@pytest.mark.parametrize("args", [["--help"], ["--version"], *([name, "--help"] for name in COMMANDS)], ids=" ".join)
def test_help_and_version_import_no_heavy_package(args):
    out, modules = loaded(*args)
    assert out.startswith(("Usage: kvpilot", "kvpilot, version")), out[:200]  # printed, not an error
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_every_subcommand_is_checked():
    """The parametrisation above reads the CLI's own registry: a new subcommand is checked without an edit here."""
    assert set(COMMANDS) == {"operator", "render", "kv", "simulate", "diagnose", "alert-hook", "demo"}


def test_version_without_package_metadata_matches_the_installed_distribution():
    out, modules = loaded("--version")
    assert out.strip() == f"kvpilot, version {importlib.metadata.version('kvpilot')}"
    assert "importlib.metadata" not in modules
