"""How `make test` splits the suite over pytest-xdist workers: folders sharing a session fixture go whole to one
worker, and are handed out first, so the long real-server and reference tiers overlap with the short files.
"""

from __future__ import annotations

from tests.conftest import SHARED_FOLDERS, collection_rank, xdist_scope


def test_a_shared_folder_is_one_unit_of_work() -> None:
    assert xdist_scope("tests/realserver/test_real_server.py::test_verdicts[seqs2]") == "tests/realserver/"
    assert xdist_scope("tests/reference/test_schedules.py::test_x") == "tests/reference/"
    assert xdist_scope("tests/unit/kv/test_capacity.py::test_y") == "tests/unit/kv/test_capacity.py"


def test_the_shared_folders_come_first_in_their_order() -> None:
    ids = [
        "tests/unit/kv/test_capacity.py::test_y",
        "tests/integration/image/test_image.py::test_z",
        "tests/reference/test_schedules.py::test_x",
        "tests/integration/alerts/test_hook.py::test_w",
        "tests/realserver/test_real_server.py::test_v",
    ]
    ordered = sorted(ids, key=collection_rank)
    assert [xdist_scope(i) for i in ordered[:3]] == list(SHARED_FOLDERS)
    # the rest keep the order they were collected in (a stable sort)
    assert ordered[3:] == [ids[0], ids[3]]
