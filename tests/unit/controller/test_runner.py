"""Where the operator connects: kubeconfig read when called, and kopf's connection from it."""

from __future__ import annotations

import threading

import pytest
import yaml

from kvpilot.controller.runner import ClusterConfigError, load_configuration
from kvpilot.controller.settings import connection_info


def _kubeconfig(path, server="https://10.0.0.1:6443", token="s3cret"):
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "k", "cluster": {"server": server, "insecure-skip-tls-verify": True}}],
                "users": [{"name": "u", "user": {"token": token}}],
                "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
            }
        )
    )
    return path


def test_kubeconfig_from_the_environment_at_call_time(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "config")))
    configuration = load_configuration()
    info = connection_info(configuration)
    assert info.server == "https://10.0.0.1:6443"
    assert (info.scheme, info.token) == ("Bearer", "s3cret")
    assert info.insecure is True


def test_explicit_kubeconfig_wins_over_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("KUBECONFIG", str(_kubeconfig(tmp_path / "env", server="https://env:6443")))
    explicit = _kubeconfig(tmp_path / "explicit", server="https://explicit:6443")
    assert load_configuration(str(explicit)).host == "https://explicit:6443"


def test_unusable_kubeconfig_names_the_file(tmp_path, monkeypatch):
    missing = tmp_path / "nope"
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(ClusterConfigError, match=str(missing)):
        load_configuration(str(missing))


def test_start_order_priority_ranks_the_earlier_replica_higher_and_below_any_explicit_priority():
    from kvpilot.controller.settings import start_order_priority

    # 2026-12-01T13:00:00Z = 1_796_130_000 s; in ms x 1000 + the tie-breaker, negated
    started = 1_796_130_000 * 10**9
    assert start_order_priority(started, 7) == -(1_796_130_000_000 * 1000 + 7)
    # one millisecond later ranks lower, whatever the tie-breakers
    assert start_order_priority(started, 999) > start_order_priority(started + 10**6, 0)
    # the same millisecond: the tie-breaker separates them
    assert start_order_priority(started, 1) != start_order_priority(started, 2)
    # exact as a JSON number (below 2**53) and outranked by kopf's default priority 0
    assert -(2**53) < start_order_priority(started, 999) < 0


def test_settings_carry_the_peering_lifetime_and_the_reporting_instance():
    import kopf

    from kvpilot.commands.operator import DEFAULT_PEERING_LIFETIME as CLI_DEFAULT
    from kvpilot.controller.settings import DEFAULT_PEERING_LIFETIME, make_settings

    assert CLI_DEFAULT == DEFAULT_PEERING_LIFETIME == kopf.OperatorSettings().peering.lifetime == 60
    settings = make_settings(peering_lifetime=5, reporting_instance="x" * 200)
    assert settings.peering.lifetime == 5
    assert settings.posting.reporting_instance == "x" * 128  # events.k8s.io: at most 128 characters


def test_settings_give_the_handlers_their_thread_pool_unless_the_caller_chose():
    import kopf

    from kvpilot.controller.settings import HANDLER_THREADS, make_settings

    settings = make_settings()
    assert settings.execution.max_workers == HANDLER_THREADS
    # more handlers wait on API round trips at once than Python's default pool would run on a 2-core node
    # (concurrent.futures.ThreadPoolExecutor: min(32, CPUs + 4) = 6): all of them meet at a barrier
    assert min(32, 2 + 4) < HANDLER_THREADS
    barrier = threading.Barrier(HANDLER_THREADS, timeout=10)
    futures = [settings.execution.executor.submit(barrier.wait) for _ in range(HANDLER_THREADS)]
    assert sorted(f.result(timeout=15) for f in futures) == list(range(HANDLER_THREADS))
    chosen = kopf.OperatorSettings()
    chosen.execution.max_workers = 3
    assert make_settings(chosen).execution.max_workers == 3
    assert make_settings(chosen).persistence.diffbase_storage.field == ("status", "kopf", "last-handled-digest")


def _collections_while_allocating(objects: int) -> list[int]:
    """The generation of each collection the collector runs while ``objects`` tracked objects are made and kept
    (what kopf's cache of watched bodies does in a burst).
    """
    import gc

    started: list[int] = []

    def count(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.collect()  # start from empty generation counts
    gc.callbacks.append(count)
    try:
        kept = [[None] for _ in range(objects)]  # a list is tracked from its creation
    finally:
        gc.callbacks.remove(count)
    assert len(kept) == objects
    return started


def test_operator_process_collects_garbage_less_often():
    """A burst makes a heap of hundreds of thousands of long-lived objects: kopf keeps every watched body.

    700,000 of them cost CPython's default thresholds (700, 10, 10) a collection every 700 allocations (1,000),
    an older generation's every 10 of the younger (and full ones of the whole heap, unless the process already
    holds four times as many long-lived objects: CPython runs a full collection only when the objects waiting for
    one exceed a quarter of those that survived the last, so a long test session may see none). After tune_gc: a young
    collection every 50,000 (14) and, 20 young ones being needed before an older one, none of an older generation
    (with 10 there would be one after the 11th young one).
    """
    import gc

    from kvpilot.controller.runner import tune_gc

    before = gc.get_threshold()
    try:
        gc.set_threshold(700, 10, 10)  # the control: the count below tells the thresholds apart
        default = _collections_while_allocating(700_000)
        tune_gc()
        tuned = _collections_while_allocating(700_000)
    finally:
        gc.set_threshold(*before)
    assert len(default) >= 700_000 // 700 - 10
    assert {1, 2} & set(default), sorted(set(default))  # older generations collected
    assert 0 < len(tuned) <= 700_000 // 50_000
    assert set(tuned) == {0}


def test_controller_pools_a_connection_per_handler_thread():
    import kubernetes.client

    from kvpilot.controller.handlers import Controller
    from kvpilot.controller.settings import HANDLER_THREADS

    configuration = kubernetes.client.Configuration(host="http://127.0.0.1:1")
    configuration.connection_pool_maxsize = 4
    controller = Controller(configuration, hub=False)
    # the kubernetes client sizes its urllib3 pool from this setting: a connection for each handler thread
    assert controller.kube.configuration.connection_pool_maxsize == configuration.connection_pool_maxsize
    assert configuration.connection_pool_maxsize == HANDLER_THREADS


def test_digest_diffbase_tells_a_change_from_a_restart_without_copying_the_spec():
    import hashlib
    import json

    import kopf

    from kvpilot.controller.settings import DigestDiffBaseStorage

    storage = DigestDiffBaseStorage(field="status.kopf.last-handled-digest")
    spec = {"model": "m", "hfTokenSecretRef": {"name": "hf_PLANTEDsecret"}}
    raw = {"apiVersion": "kvpilot.dev/v1alpha1", "kind": "VLLMServer", "metadata": {"name": "a"}, "spec": spec}
    assert storage.fetch(body=kopf.Body(raw)) is None  # nothing stored yet: kopf's "create"
    patch = kopf.Patch()
    storage.store(body=kopf.Body(raw), patch=patch, essence=storage.build(body=kopf.Body(raw)))
    stored = patch["status"]["kopf"]["last-handled-digest"]
    # sha256 of kopf's essence (here only the spec) as compact JSON with sorted keys, written out:
    expected = hashlib.sha256(json.dumps({"spec": spec}, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    assert json.loads(stored) == {"sha256": expected}
    assert "hf_PLANTED" not in stored
    handled = {**raw, "status": {"kopf": {"last-handled-digest": stored}}}
    assert storage.fetch(body=kopf.Body(handled)) == {"spec": spec}  # unchanged: equal to the current essence
    changed = {**handled, "spec": {**spec, "model": "n"}}
    assert storage.fetch(body=kopf.Body(changed)) != storage.build(body=kopf.Body(changed))  # a change: an update


def test_digest_diffbase_builds_kopfs_own_essence_without_copying_status():
    import kopf

    from kvpilot.controller.settings import DigestDiffBaseStorage

    raw = {
        "apiVersion": "kvpilot.dev/v1alpha1",
        "kind": "VLLMServer",
        "metadata": {"name": "a", "uid": "u", "labels": {"team": "ml"}, "annotations": {"x.dev/y": "1"}},
        "spec": {"model": "m"},
        "status": {"phase": "Pending", "kopf": {"last-handled-digest": "{}"}, "conditions": [{"type": "Ready"}]},
    }
    ours = DigestDiffBaseStorage(field="status.kopf.last-handled-digest").build(body=kopf.Body(raw))
    assert ours == kopf.StatusDiffBaseStorage(name="kopf").build(body=kopf.Body(raw))  # kopf's own build: the reference
    assert ours == {"spec": {"model": "m"}, "metadata": {"labels": {"team": "ml"}, "annotations": {"x.dev/y": "1"}}}


def test_digest_diffbase_reuses_an_essence_only_for_the_same_object_state_in_any_call_order(monkeypatch):
    """Nothing depends on kopf calling fetch before build: the memo is keyed by (uid, resourceVersion)."""
    import kopf

    from kvpilot.controller.settings import DigestDiffBaseStorage

    built: list[dict] = []
    kopfs_build = kopf.StatusDiffBaseStorage.build

    def counted(self, *, body, extra_fields=None):
        built.append(dict(body))
        return kopfs_build(self, body=body, extra_fields=extra_fields)

    monkeypatch.setattr(kopf.StatusDiffBaseStorage, "build", counted)
    storage = DigestDiffBaseStorage(field="status.kopf.last-handled-digest")

    def body(rv, model):
        meta = {"name": "a", "uid": "u", "resourceVersion": rv} if rv else {"name": "a"}
        return kopf.Body({"metadata": meta, "spec": {"model": model}})

    patch = kopf.Patch()
    storage.store(body=body("1", "m"), patch=patch, essence={"spec": {"model": "m"}})
    record = {"status": {"kopf": {"last-handled-digest": patch["status"]["kopf"]["last-handled-digest"]}}}

    def stored(b):
        return kopf.Body({**b, **record})

    first = stored(body("1", "m"))
    assert storage.build(body=first) == storage.fetch(body=first) == {"spec": {"model": "m"}}  # build, then fetch
    second = stored(body("2", "n"))  # a spec change: a new resourceVersion
    assert storage.fetch(body=second) == {}  # differs from the record: kopf's "update"
    assert storage.build(body=second) == {"spec": {"model": "n"}}  # fetch, then build: not the old essence
    assert len(built) == 2  # one essence per object state, whichever call came first
    assert storage.build(body=first) == {"spec": {"model": "m"}}  # an older state again: built anew
    unversioned = stored(body(None, "m"))
    storage.build(body=unversioned)
    storage.build(body=unversioned)
    assert len(built) == 5  # never memoised without a resourceVersion
