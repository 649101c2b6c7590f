"""The CLI imports only what a command uses (start-up time is measured by benchmarks/cli_startup.py).

Each case runs the command in a fresh interpreter and lists the modules it loaded; the heavy
packages named here cost tens of milliseconds each to import and are needed by none of these.
"""

from __future__ import annotations

import importlib.metadata
import json
import subprocess
import sys
from pathlib import Path

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
    """The parametrisation above reads the CLI's registry; the user guide's seven commands are all in it."""
    assert set(COMMANDS) == {"operator", "render", "kv", "simulate", "diagnose", "alert-hook", "demo"}


def test_version_without_package_metadata_matches_the_installed_distribution():
    out, modules = loaded("--version")
    assert out.strip() == f"kvpilot, version {importlib.metadata.version('kvpilot')}"
    assert "importlib.metadata" not in modules


CONFIG = Path(__file__).resolve().parents[2] / "operator" / "kvpilot" / "data" / "Qwen2.5-1.5B-Instruct.config.json"
EXAMPLE = Path(__file__).resolve().parents[2] / "manifests" / "examples" / "experiment.yaml"


def test_kv_on_a_local_config_imports_rich_for_text_and_nothing_heavy_for_json():
    """The KV math needs no pydantic (the CRD's dtype list comes from kvpilot.api.constants) and no Hub client."""
    args = ["kv", str(CONFIG), "--kv-memory", "2.5GiB", "--max-model-len", "8192"]
    out, modules = loaded(*args)
    assert "KV cache of" in out
    assert modules & set(HEAVY) == {"rich"}
    # what the text does not need: typing_extensions (@override marks methods for mypy only), pathlib (paths
    # are os.path strings), rich's emoji table (emoji codes are off), the secret patterns (only an error uses them)
    unneeded = {"typing_extensions", "pathlib", "rich._emoji_codes", "kvpilot.text.safe"}
    assert not modules & unneeded, sorted(modules & unneeded)
    out, modules = loaded(*args, "-o", "json")
    # 28 layers x 2 KV heads x 128 head dim x 2 (K and V) x 2 bytes = 28,672 B per token;
    # 2.5 GiB = 2,684,354,560 B / 28,672 = 93,622.9 tokens -> 5,851 whole blocks of 16 = 93,616 tokens
    assert json.loads(out)["kv_tokens"] == 93_616
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))
    assert "kvpilot.kv.hub" not in modules


def test_render_imports_what_it_renders_with_and_nothing_else():
    """Rendering validates (pydantic), fills the templates (Jinja2) and writes YAML; never a cluster client."""
    out, modules = loaded("render", str(EXAMPLE))
    assert "kind: Pod" in out
    assert modules & set(HEAVY) == {"pydantic", "jinja2", "yaml"}


def test_the_api_constants_load_without_pydantic():
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, kvpilot.api.constants; print('pydantic' in sys.modules)"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.stdout.strip() == "False", proc.stderr


#: what serving or recording /metrics loads: the exporter, prometheus_client (whose package imports its HTTP
#: exposition) and the standard library's HTTP server
SERVING = {"kvpilot.engine.exporter", "prometheus_client", "http.server", "socketserver"}


@pytest.mark.parametrize("output", ["text", "json"])
def test_simulate_report_mode_imports_no_exporter_and_no_http_server(output):
    """Report mode streams its statistics (kvpilot.engine.report_stats); it serves and records nothing."""
    out, modules = loaded("simulate", "seed-lru", "-o", output)
    assert "seed-lru" in out  # the report was printed, not an error
    assert not modules & SERVING, sorted(modules & SERVING)
    assert not modules & {"kopf", "kubernetes", "aiohttp", "pydantic", "jinja2", "yaml", "huggingface_hub"}
    assert ("rich" in modules) == (output == "text")  # the text report is a rich table, JSON needs none


def test_simulate_record_mode_does_load_the_exporter(tmp_path):
    """The probe above can see the exporter: --record writes the exporter's families, so it loads them."""
    out, modules = loaded("simulate", "seed-lru", "--record", str(tmp_path / "x.om"), "--duration", "20s")
    assert out.startswith("wrote ")
    assert (tmp_path / "x.om").stat().st_size > 0
    assert {"kvpilot.engine.exporter", "prometheus_client"} <= modules
