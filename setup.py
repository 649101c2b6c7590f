"""kvpilot's build: the engine model's hot modules compiled with mypyc, where the build can.

Everything else about the package is in pyproject.toml. mypyc (mypy's compiler) turns the type-annotated modules
listed in ``COMPILED`` into C extensions: the same code, 2-3x faster (docs/performance.md, "Engine"). The build
falls back to pure Python, the same modules as source, when ``KVPILOT_COMPILE=0`` is set or the machine has no C
compiler (each extension is optional: pip prints a warning and installs the ``.py`` files).
``python -c 'import kvpilot.engine; print(kvpilot.engine.COMPILED)'`` says which one a venv runs.
"""

from __future__ import annotations

import os
from pathlib import Path

from setuptools import Extension, setup

#: The engine's modules that run once per step or per request (the rest of kvpilot is interpreted).
COMPILED = [
    "operator/kvpilot/engine/block_pool.py",
    "operator/kvpilot/engine/core.py",
    "operator/kvpilot/engine/fast_forward.py",
    "operator/kvpilot/engine/hardware.py",
    "operator/kvpilot/engine/request.py",
    "operator/kvpilot/engine/workloads.py",
]


def remove_inplace_builds() -> None:
    """Delete the compiled modules an earlier editable install left beside their source (``pip install -e``
    builds them in place): this build makes its own or none, and Python would import a stale one first.
    """
    stale = list(Path("operator").glob("kvpilot__mypyc.*.so"))
    for source in COMPILED:
        path = Path(source)
        stale += path.parent.glob(f"{path.stem}.*.so")
    for path in stale:
        path.unlink()


def ext_modules() -> list[Extension]:
    """The compiled modules, none with ``KVPILOT_COMPILE=0``."""
    remove_inplace_builds()
    if os.environ.get("KVPILOT_COMPILE", "1") == "0":
        return []
    from mypyc.build import mypycify

    # mypy's own settings, not pyproject's [tool.mypy] (its plugins are not installed in an isolated build): the
    # modules they import are read for their types only
    os.environ["MYPYPATH"] = "operator"  # the source root: module kvpilot.engine.core, not operator.kvpilot...
    options = ["--config-file=", "--explicit-package-bases", "--ignore-missing-imports", "--follow-imports=silent"]
    exts = mypycify([*options, *COMPILED], opt_level="3", group_name="kvpilot")
    for ext in exts:
        ext.optional = True  # no C compiler: the pure-Python modules
    return exts


setup(ext_modules=ext_modules())
