"""kvpilot's build: the engine model's hot modules compiled with mypyc, where the build can.

Everything else about the package is in pyproject.toml. mypyc (mypy's compiler) turns the type-annotated modules
listed in ``COMPILED`` into C extensions: the same code, 3-4x faster (docs/performance.md, "Engine"). The build
installs them as Python source instead when ``KVPILOT_COMPILE=0`` is set or when they do not compile (no C
compiler: pip says why only with ``-v``). It is all or nothing: the compiled modules share one library, and a
build that made only some of them keeps none. A type error mypy finds in them stops the build.
``python -c 'import kvpilot.engine as e; print(e.COMPILED)'`` says which one a venv runs.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

#: The engine's modules that run once per step or per request (the rest of kvpilot is interpreted).
COMPILED = [
    "operator/kvpilot/engine/block_pool.py",
    "operator/kvpilot/engine/core.py",
    "operator/kvpilot/engine/fast_forward.py",
    "operator/kvpilot/engine/hardware.py",
    "operator/kvpilot/engine/request.py",
    "operator/kvpilot/engine/workloads.py",
]

#: The setuptools commands that build extensions (the metadata steps, egg_info and dist_info, need none).
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install"}


def remove_inplace_builds() -> None:
    """Delete the compiled modules an earlier editable install built beside their source: this editable build
    makes its own or none, and Python would import a stale one first.
    """
    stale = list(Path("operator").glob("kvpilot__mypyc.*.so"))
    for source in COMPILED:
        path = Path(source)
        stale += path.parent.glob(f"{path.stem}.*.so")
    for path in stale:
        path.unlink()


class AllOrNothing(build_ext):
    """``build_ext`` whose optional extensions are kept only if every one of them was built."""

    def run(self) -> None:
        """Build them; if one failed, delete the others: the package is then the Python source."""
        super().run()
        outputs = [Path(self.get_ext_fullpath(ext.name)) for ext in self.extensions]
        if all(path.exists() for path in outputs):
            return
        for path in outputs:
            path.unlink(missing_ok=True)
        print("kvpilot: the engine did not compile; it is installed as Python source", file=sys.stderr)


def ext_modules() -> list[Extension]:
    """The compiled modules: none for the metadata steps or with ``KVPILOT_COMPILE=0``."""
    if "editable_wheel" in sys.argv:
        remove_inplace_builds()
    if os.environ.get("KVPILOT_COMPILE", "1") == "0" or not BUILDS.intersection(sys.argv):
        return []
    from mypyc.build import mypycify

    os.environ["MYPYPATH"] = "operator"  # the source root: module kvpilot.engine.core, not operator.kvpilot...
    # mypy's own settings, not pyproject's [tool.mypy] (its plugins are not installed in an isolated build): the
    # modules they import are read for their types only
    options = ["--config-file=", "--explicit-package-bases", "--ignore-missing-imports", "--follow-imports=silent"]
    exts = mypycify([*options, *COMPILED], opt_level="3", group_name="kvpilot")
    for ext in exts:
        ext.optional = True  # a compiler error: the Python modules (AllOrNothing)
        # a * b + c stays two roundings, as the interpreter computes it: a compiler may otherwise fuse it into one
        # multiply-add (aarch64, or x86 with FMA) and the compiled engine's floats would differ in the last bit
        ext.extra_compile_args.append("-ffp-contract=off")
    return exts


setup(ext_modules=ext_modules(), cmdclass={"build_ext": AllOrNothing})
