"""``make test-changed``: which tests cover a change (tests/support/changed.py)."""

from __future__ import annotations

from tests.support.changed import covering


def test_a_package_module_runs_its_unit_tests_and_the_integration_tests_of_what_it_serves():
    status = "operator/kvpilot/controller/status.py"
    assert covering([status]) == ["tests/integration/operator", "tests/unit/controller"]
    assert covering(["operator/kvpilot/kv/capacity.py"]) == ["tests/unit/kv"]


def test_a_changed_test_runs_itself_and_a_helper_runs_the_tests_beside_it():
    assert covering(["tests/unit/kv/test_bounds.py"]) == ["tests/unit/kv/test_bounds.py"]
    assert covering(["tests/integration/alerts/timelines.py"]) == ["tests/integration/alerts"]


def test_a_folder_covers_the_files_inside_it_and_docs_run_nothing():
    changed = ["operator/kvpilot/engine/core.py", "tests/unit/engine/test_core.py", "docs/engine.md"]
    assert covering(changed) == ["tests/integration/engine", "tests/integration/simulate", "tests/unit/engine"]
    assert covering(["operator/kvpilot/gpus.py"]) == ["tests/unit"]
    assert covering(["docs/operator.md", "tests/support/prom.py"]) == []
