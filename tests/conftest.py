"""Shared test fixtures.

Real components (Prometheus, promtool, Alertmanager, Helm) are used wherever they run here.
``require_tool`` skips a test when a binary is missing, except in CI (``CI=true``), where a
missing tool is a failure: CI must install everything it needs.
"""

from __future__ import annotations

import os
import random
import shutil
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
FIXTURES = TESTS / "fixtures"
REPO = TESTS.parent


def in_ci() -> bool:
    """True when running under CI (``CI`` set to a true-ish value)."""
    return os.environ.get("CI", "").lower() in {"1", "true", "yes"}


def require_tool(name: str) -> str:
    """Return the path of binary ``name``; skip the test without it, or fail under CI."""
    candidates = [shutil.which(name), str(REPO / ".tools" / "bin" / name)]
    for path in candidates:
        if path and os.access(path, os.X_OK):
            return path
    message = f"{name} is not installed (.ci/run installs it)"
    if in_ci():
        pytest.fail(message + "; CI=true, so a missing tool is a failure")
    pytest.skip(message)


VLLM_VENV_DEFAULT = Path.home() / ".cache" / "kvpilot" / "vllm-0.29.0"
#: the vLLM releases the reference tier runs (``make vllm-ref`` installs each beside the others)
VLLM_VERSIONS = ("0.29.0", "0.33.0")


def vllm_venv(version: str = "0.29.0") -> Path:
    """The reference venv of vLLM ``version``: ``~/.cache/kvpilot/vllm-VERSION``.

    Env ``KVPILOT_VLLM_VENV`` moves 0.29.0's, ``KVPILOT_VLLM_VENV_0_33_0`` (dots as underscores) another's.
    """
    if version == "0.29.0":
        return Path(os.environ.get("KVPILOT_VLLM_VENV") or VLLM_VENV_DEFAULT)
    key = "KVPILOT_VLLM_VENV_" + version.replace(".", "_")
    return Path(os.environ.get(key) or VLLM_VENV_DEFAULT.parent / f"vllm-{version}")


def require_vllm_python(version: str = "0.29.0") -> str:
    """Return the python of the vLLM ``version`` reference venv; skip without it, or fail under CI.

    Located through env ``KVPILOT_VLLM_PYTHON`` for 0.29.0 (default: ``bin/python`` of :func:`vllm_venv`);
    ``make vllm-ref`` creates every version's.
    """
    env = os.environ.get("KVPILOT_VLLM_PYTHON") if version == "0.29.0" else None
    path = env or str(vllm_venv(version) / "bin" / "python")
    if os.access(path, os.X_OK):
        return path
    message = f"the vLLM {version} reference python {path} is missing (make vllm-ref creates it)"
    if in_ci():
        pytest.fail(message + "; CI=true, so a missing tool is a failure")
    pytest.skip(message)


@pytest.fixture
def fixtures_dir() -> Path:
    """tests/fixtures: the test data, each folder with a PROVENANCE.md naming its public source."""
    return FIXTURES


def pytest_configure(config: pytest.Config) -> None:
    """Property tests get a fresh hypothesis seed every run, CI included, unless ``--hypothesis-seed`` is
    given; the seed is printed in the header and again after a failure (``--hypothesis-seed=N`` replays it).
    Under pytest-xdist (``-n``) every worker takes the seed of the run (:func:`pytest_configure_node`).

    Hypothesis' own ``ci`` profile (loaded when ``$CI`` is set) derandomizes, running the same examples
    every time; it is kept otherwise (no database, no deadline, ``print_blob``).
    """
    from hypothesis import core, settings

    settings.register_profile("ci", settings.get_profile("ci"), derandomize=False)
    if in_ci() and not config.getoption("hypothesis_profile", None):
        settings.load_profile("ci")
    worker_seed = getattr(config, "workerinput", {}).get("hypothesis_seed")
    if worker_seed is not None:
        core.global_force_seed = worker_seed
    elif config.getoption("hypothesis_seed", None) is None:
        core.global_force_seed = random.SystemRandom().getrandbits(32)
    config.stash[ACCURACY_SEED] = getattr(config, "workerinput", {}).get("accuracy_seed") or accuracy_seed()


#: the master seed of the random scenarios the verdict-accuracy sample draws (tests/reference/test_random_accuracy.py)
ACCURACY_SEED = pytest.StashKey[int]()


def accuracy_seed() -> int:
    """``$KVPILOT_ACCURACY_SEED`` (to replay a run), else a fresh seed: no fixed set of scenarios to tune on."""
    given = os.environ.get("KVPILOT_ACCURACY_SEED", "").strip()
    return int(given) if given else random.SystemRandom().randrange(1, 2**31)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist: a worker runs with the seed the run printed (``--hypothesis-seed=N`` replays it)."""
    from hypothesis import core

    node.workerinput["hypothesis_seed"] = core.global_force_seed
    node.workerinput["accuracy_seed"] = node.config.stash[ACCURACY_SEED]


#: Test files that share a session fixture (built once per process), by the name of what they share: each group
#: runs on one pytest-xdist worker, so it is built once. The real vLLM servers' model and Prometheus; the vLLM
#: reference runs (``reference_runs``, ``versioned_runs``); the image.
SHARED_GROUPS: dict[str, tuple[str, ...]] = {
    "tests/realserver/": ("tests/realserver/",),
    "tests/reference/ (vLLM runs)": ("tests/reference/test_schedules.py", "tests/reference/test_metrics.py"),
    "tests/integration/image/": ("tests/integration/image/",),
}
#: The order work is handed out in, longest first (a unit: a group, else a test file): the groups, then the
#: reference tier's other files (each runs vLLM itself for minutes), then the rest. Each worker takes the next unit
#: when it runs out, so the short files fill in beside the long ones.
FIRST = ("tests/realserver/", "tests/reference/ (vLLM runs)", "tests/reference/", "tests/integration/image/")


def xdist_scope(nodeid: str) -> str:
    """The unit of work of a pytest-xdist worker: a :data:`SHARED_GROUPS` group, else a test file (its module
    fixtures, a Prometheus or a sandbox API, are started once).
    """
    path = nodeid.split("::", 1)[0]
    return next((name for name, paths in SHARED_GROUPS.items() if path.startswith(paths)), path)


def collection_rank(nodeid: str) -> int:
    """Where a test goes in the run: the first of :data:`FIRST` its unit starts with, then everything else."""
    scope = xdist_scope(nodeid)
    return next((i for i, head in enumerate(FIRST) if scope.startswith(head)), len(FIRST))


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The long units first (a stable sort: each keeps its files' and tests' order)."""
    items.sort(key=lambda item: collection_rank(item.nodeid))


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """pytest-xdist (``make test``: ``-n 2``) hands out whole :func:`xdist_scope` units, not single tests, in the
    order they were collected (not xdist's default of the units with the most tests first).
    """
    from xdist.scheduler import LoadScopeScheduling

    class SharedFixtureScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_scope(nodeid)

    config.option.loadscopereorder = False
    return SharedFixtureScheduling(config, log)


def _utf8(text: str) -> str:
    """``text`` with what UTF-8 cannot carry (a lone surrogate) written as its escape."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # noqa: ARG001 (the hook's signature)
    """A report's captured output and failure text made UTF-8: pytest-xdist sends reports as UTF-8, and a lone
    surrogate in a captured log line (a fuzzer's input echoed by a library) would end the whole run with an internal
    error instead of failing or passing the one test. The tests that hold the product's output to UTF-8 assert it
    themselves.
    """
    outcome = yield
    report = outcome.get_result()
    report.sections = [(title, _utf8(content)) for title, content in report.sections]
    if report.longrepr is not None:
        text = str(report.longrepr)
        if _utf8(text) != text:
            report.longrepr = _utf8(text)


def stale_compiled_modules(package: Path) -> list[str]:
    """The modules under ``package`` whose compiled extension (``name.*.so``, built in place by ``make install``)
    is older than their source: an edit since, which Python would not run (it imports the extension first).
    """
    stale = []
    for ext in sorted(package.rglob("*.so")):
        source = ext.with_name(ext.name.split(".", 1)[0] + ".py")
        if source.exists() and source.stat().st_mtime > ext.stat().st_mtime:
            stale.append(str(source.relative_to(package.parent)))
    return stale


def pytest_sessionstart(session: pytest.Session) -> None:  # noqa: ARG001 (the hook's signature)
    """Refuse to test a compiled engine older than its source (setup.py compiles it in ``make install``)."""
    stale = stale_compiled_modules(REPO / "operator" / "kvpilot")
    if stale:
        pytest.exit(
            f"the compiled engine is older than {', '.join(stale)}: run `make install` to rebuild it "
            "(`make test` does), or `KVPILOT_COMPILE=0 make install` to run its Python source",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )


def _hypothesis_seed_line() -> str:
    from hypothesis import core

    seed = core.global_force_seed
    return f"hypothesis seed: {seed} (replay with --hypothesis-seed={seed})"


def pytest_report_header(config: pytest.Config) -> list[str]:
    from kvpilot.engine import COMPILED

    engine = "compiled (setup.py)" if COMPILED else "its Python source (KVPILOT_COMPILE=0 or no C compiler)"
    return [_hypothesis_seed_line(), f"engine: {engine}", _accuracy_seed_line(config)]


def _accuracy_seed_line(config: pytest.Config) -> str:
    seed = config.stash[ACCURACY_SEED]
    return f"verdict accuracy seed: {seed} (replay with KVPILOT_ACCURACY_SEED={seed})"


def pytest_terminal_summary(terminalreporter, exitstatus: int) -> None:
    if exitstatus not in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        terminalreporter.write_line(_hypothesis_seed_line())
    # the verdict-accuracy sample's figures (a test's ``record_property("verdict_accuracy", ...)``), every run
    for reports in list(terminalreporter.stats.values()):
        for rep in reports:
            for name, value in getattr(rep, "user_properties", ()):
                if name == "verdict_accuracy" and getattr(rep, "when", "") == "call":
                    terminalreporter.write_line(str(value))
