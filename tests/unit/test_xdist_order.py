"""How `make test` splits the suite over pytest-xdist workers: files sharing a session fixture go together to one
worker, and the long units are handed out first, so the real-server and reference tiers overlap with the rest.
"""

from __future__ import annotations

from tests.conftest import collection_rank, xdist_scope

SERVER = "tests/realserver/test_real_server.py::test_verdicts[seqs2]"
SCHEDULES = "tests/reference/test_schedules.py::test_x[vllm-0.29.0-a]"
METRICS = "tests/reference/test_metrics.py::test_y"
COUNTERFACTUAL = "tests/reference/test_counterfactual.py::test_z"
IMAGE = "tests/integration/image/test_image.py::test_help"
UNIT = "tests/unit/kv/test_capacity.py::test_y"
HOOK = "tests/integration/alerts/test_hook.py::test_w"


def test_files_sharing_a_session_fixture_are_one_unit_of_work() -> None:
    assert xdist_scope(SERVER) == xdist_scope("tests/realserver/test_other.py::t")
    assert xdist_scope(SCHEDULES) == xdist_scope(METRICS)  # both read the vLLM reference runs
    assert xdist_scope(SCHEDULES) != xdist_scope(COUNTERFACTUAL)  # which runs vLLM on its own
    assert xdist_scope(COUNTERFACTUAL) == "tests/reference/test_counterfactual.py"
    assert xdist_scope(UNIT) == "tests/unit/kv/test_capacity.py"


def test_the_long_units_come_first_in_their_order() -> None:
    ids = [UNIT, IMAGE, COUNTERFACTUAL, HOOK, METRICS, SERVER]
    assert sorted(ids, key=collection_rank) == [SERVER, METRICS, COUNTERFACTUAL, IMAGE, UNIT, HOOK]
