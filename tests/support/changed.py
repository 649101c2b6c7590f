"""The test folders and files that cover what changed since a git revision (``make test-changed``).

A changed test file is run itself; a changed module of ``operator/kvpilot/<package>/`` runs the package's
unit tests and the integration tests of what it serves (:data:`INTEGRATION`); a change elsewhere in the
package (``cli.py``, ``gpus.py``, ``data/``) runs the unit tier. Docs and manifests run nothing here: their
tests are in the unit tier (``make test-unit``), and ``make test`` runs everything (a change of a shared test
helper, ``tests/conftest.py`` or ``tests/support/``, too).

Run from the repository root::

    .venv/bin/python -m tests.support.changed [REVISION]    # default: HEAD (the edits not committed yet)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = Path("operator/kvpilot")
#: the integration folders that exercise a package beyond its unit tests
INTEGRATION = {
    "alerts": ["tests/integration/alerts"],
    "controller": ["tests/integration/operator"],
    "sandbox": ["tests/integration/operator"],
    "diagnose": ["tests/integration/diagnose"],
    "advice": ["tests/integration/diagnose"],
    "engine": ["tests/integration/engine", "tests/integration/simulate"],
    "commands": ["tests/integration/simulate"],
}


def covering(paths: list[str]) -> list[str]:
    """The test paths (folders or files) that cover the changed ``paths`` (repository-relative), sorted."""
    out: set[str] = set()
    for name in paths:
        path = Path(name)
        if path.parts[:1] == ("tests",) and path.suffix == ".py":
            if path.name.startswith("test_"):
                out.add(name)
            elif any((REPO / path.parent).glob("test_*.py")):
                out.add(str(path.parent))  # a helper or conftest beside tests: those tests
            continue
        if path.parts[: len(PACKAGE.parts)] != PACKAGE.parts:
            continue
        rest = path.parts[len(PACKAGE.parts) :]
        package = rest[0] if len(rest) > 1 else None
        if package is None or not (REPO / "tests" / "unit" / package).is_dir():
            out.add("tests/unit")
            continue
        out.add(f"tests/unit/{package}")
        out.update(INTEGRATION.get(package, []))
    existing = {p for p in out if (REPO / p).exists()}
    return sorted(p for p in existing if not any(Path(p).is_relative_to(q) and p != q for q in existing))


def changed_files(revision: str) -> list[str]:
    """Files changed since ``revision``, committed or not, and files git does not track yet."""

    def git(*args: str) -> list[str]:
        out = subprocess.run(["git", *args], cwd=REPO, check=True, capture_output=True, text=True).stdout
        return [line for line in out.splitlines() if line]

    return git("diff", "--name-only", revision) + git("ls-files", "--others", "--exclude-standard")


def main(argv: list[str]) -> int:
    paths = covering(changed_files(argv[0] if argv else "HEAD"))
    print(" ".join(paths))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
