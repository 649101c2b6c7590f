"""The test run's guard against a compiled engine older than its source (tests/conftest.py)."""

from __future__ import annotations

import os

from tests.conftest import stale_compiled_modules


def test_a_source_edited_after_its_compiled_module_is_stale(tmp_path):
    engine = tmp_path / "kvpilot" / "engine"
    engine.mkdir(parents=True)
    for name in ("core", "block_pool"):
        (engine / f"{name}.py").write_text("")
        (engine / f"{name}.cpython-311-x86_64-linux-gnu.so").write_text("")
    (engine / "config.py").write_text("")  # not compiled: never stale
    os.utime(engine / "core.py", (2_000, 2_000))
    os.utime(engine / "core.cpython-311-x86_64-linux-gnu.so", (1_000, 1_000))  # built before the edit
    os.utime(engine / "block_pool.py", (1_000, 1_000))
    os.utime(engine / "block_pool.cpython-311-x86_64-linux-gnu.so", (1_000, 1_000))  # the same second: built from it
    assert stale_compiled_modules(tmp_path / "kvpilot") == ["kvpilot/engine/core.py"]
    os.utime(engine / "core.cpython-311-x86_64-linux-gnu.so", (3_000, 3_000))  # rebuilt
    assert stale_compiled_modules(tmp_path / "kvpilot") == []
