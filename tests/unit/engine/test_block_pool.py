"""BlockPool: null block, free-queue order, LRU eviction, hashing, duplicates; extents split exactly where blocks
differ; the same block ids, queue, references and hashes as a per-block model of vLLM's pool on random sequences.

Hashes here are ``block_hash_value(family, offset)`` with family 1 (or 2) and offsets 16, 32, ...: block ``i`` of a
chain has ``h(i)``; runs ``[(h(i), n)]`` are ``n`` consecutive blocks of the chain from block ``i``.
"""

from __future__ import annotations

import gc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.engine.block_pool import BlockPool, BlockTable, block_hash_value, hash_block
from kvpilot.engine.request import Request
from tests.unit.engine.per_block_pool import PerBlockPool


def h(i: int, family: int = 1) -> int:
    return block_hash_value(family, 16 * (i + 1))


def runs(first: int, n: int, family: int = 1) -> list[tuple[int, int]]:
    return [(h(first, family), n)]


def table(pool: BlockPool, n: int) -> BlockTable:
    t = BlockTable()
    pool.grow(t, n)
    return t


def snap(pool: BlockPool, *tables: BlockTable) -> dict:
    return pool.snapshot(tables)


def test_null_block_reserved_and_initial_order():
    pool = BlockPool(6, block_size=16)
    assert pool.free_queue() == [1, 2, 3, 4, 5]
    assert pool.num_free == 5
    assert pool.usage() == 0.0
    t = table(pool, 2)
    assert t.block_ids() == [1, 2]
    assert pool.usage() == pytest.approx(1 - 3 / 5)
    pool.release(t)
    assert pool.num_free == 5
    assert t.block_ids() == []
    assert pool.free_queue() == [2, 1, 3, 4, 5]  # unhashed, tail first, to the front


def test_release_puts_unhashed_blocks_first_hashed_ones_last_and_keeps_hashes():
    pool = BlockPool(8, block_size=16)
    t = table(pool, 3)  # [1, 2, 3]; 1 and 2 full, 3 partial
    pool.cache(t, runs(0, 2))
    pool.release(t)  # tail first: 3, 2, 1
    # unhashed 3 at the front; hashed 2 then 1 at the back after the never-used 4..7
    assert pool.free_queue() == [3, 4, 5, 6, 7, 2, 1]
    s = snap(pool)
    assert s["block_hash"][1:4] == [h(0), h(1), None]
    assert s["cached"] == {h(0): 1, h(1): 2}
    hit = pool.lookup(runs(0, 2), 2)
    assert (hit.num_blocks, hit.num_free) == (2, 2)


def test_caching_off_appends_everything():
    pool = BlockPool(5, block_size=16, enable_caching=False)
    t = table(pool, 2)
    pool.cache(t, runs(0, 2))  # nothing is hashed with caching off
    pool.release(t)
    assert pool.free_queue() == [3, 4, 2, 1]
    assert pool.lookup(runs(0, 1), 1).num_blocks == 0


def test_eviction_takes_chain_ends_first_and_cuts_the_extent_where_it_stops():
    pool = BlockPool(7, block_size=16)  # 6 usable
    a = table(pool, 6)
    pool.cache(a, runs(0, 6))
    pool.release(a)  # all hashed, tail first to the back
    assert pool.free_queue() == [6, 5, 4, 3, 2, 1]
    b = table(pool, 2)  # the front: blocks 6 and 5 (hashes 5 and 4 evicted)
    assert b.block_ids() == [6, 5]
    assert pool.num_evictions == 2
    hit = pool.lookup(runs(0, 6), 6)  # the cut: block 4 (hash 3) still cached, block 5 (hash 4) not
    assert hit.num_blocks == 4
    assert snap(pool, b)["cached"] == {h(0): 1, h(1): 2, h(2): 3, h(3): 4}
    c = table(pool, 3)  # 4, 3, 2: everything but the chain's first block
    assert c.block_ids() == [4, 3, 2]
    assert pool.lookup(runs(0, 6), 6).num_blocks == 1
    pool.release(c)  # unhashed now: to the front, tail first
    assert pool.free_queue() == [2, 3, 4, 1]
    d = table(pool, 4)  # takes the last cached block too
    assert d.block_ids() == [2, 3, 4, 1]
    assert pool.lookup(runs(0, 6), 6).num_blocks == 0
    assert pool.num_evictions == 2 + 3 + 1
    assert snap(pool, b, d)["cached"] == {}


def test_a_hit_on_part_of_a_free_extent_takes_it_out_and_leaves_the_rest_in_place():
    pool = BlockPool(10, block_size=16)  # 9 usable
    x, a, y = table(pool, 2), table(pool, 4), table(pool, 2)  # [1, 2], [3, 4, 5, 6], [7, 8]
    pool.cache(a, runs(0, 4))
    for t in (x, a, y):
        pool.release(t)
    assert pool.free_queue() == [8, 7, 2, 1, 9, 6, 5, 4, 3]
    hit = pool.lookup(runs(0, 4), 2)  # max_blocks 2: blocks 3 and 4 of the 4
    assert (hit.num_blocks, hit.num_free) == (2, 2)
    b = BlockTable()
    pool.take(b, hit)
    assert b.block_ids() == [3, 4]
    assert pool.free_queue() == [8, 7, 2, 1, 9, 6, 5]  # 5 and 6 stay where they were
    assert pool.num_free == 7
    s = snap(pool, b)
    assert s["ref_cnt"][3:7] == [1, 1, 0, 0]
    hit = pool.lookup(runs(0, 4), 4)  # the other side of the cut: 5 and 6 still cached, free
    assert (hit.num_blocks, hit.num_free) == (4, 2)
    c = table(pool, 7)  # the whole queue: 6 and 5 evicted last
    assert c.block_ids() == [8, 7, 2, 1, 9, 6, 5]
    assert pool.num_evictions == 2
    assert pool.lookup(runs(0, 4), 4).num_blocks == 2


def test_a_hit_on_part_of_a_used_extent_counts_references_per_part():
    pool = BlockPool(8, block_size=16)
    a = table(pool, 4)
    pool.cache(a, runs(0, 4))
    assert len(a.exts) == 1
    b = BlockTable()
    hit = pool.lookup(runs(0, 4), 2)
    assert (hit.num_blocks, hit.num_free) == (2, 0)  # in use: nothing taken from the queue
    pool.take(b, hit)
    assert len(a.exts) == 2
    assert a.block_ids() == [1, 2, 3, 4]
    assert snap(pool, a, b)["ref_cnt"][1:5] == [2, 2, 1, 1]
    pool.release(a)  # 4 and 3 reach 0 (to the back); 1 and 2 are still b's
    assert pool.free_queue() == [5, 6, 7, 4, 3]
    assert snap(pool, b)["ref_cnt"][1:5] == [1, 1, 0, 0]
    pool.release(b)
    assert pool.free_queue() == [5, 6, 7, 4, 3, 2, 1]
    assert pool.lookup(runs(0, 4), 4).num_blocks == 4


def test_duplicates_are_found_once_every_earlier_holder_is_evicted():
    pool = BlockPool(8, block_size=16)  # 7 usable
    a = table(pool, 4)  # [1, 2, 3, 4]
    pool.cache(a, runs(0, 4))
    b = BlockTable()
    pool.take(b, pool.lookup(runs(0, 4), 1))  # b hits block 1 only, then computes blocks 1-3 itself
    pool.grow(b, 3)
    assert b.block_ids() == [1, 5, 6, 7]
    pool.cache(b, runs(1, 3))
    s = snap(pool, a, b)
    assert s["cached"] == {h(0): 1, h(1): 2, h(2): 3, h(3): 4}
    assert s["dups"] == {h(1): [5], h(2): [6], h(3): [7]}
    pool.release(a)  # 4, 3, 2 to the back; 1 is still b's
    assert pool.free_queue() == [4, 3, 2]
    c = table(pool, 1)  # block 4 evicted: b's block 7 is the holder of hash 3 now
    assert c.block_ids() == [4]
    s = snap(pool, b, c)
    assert s["cached"] == {h(0): 1, h(1): 2, h(2): 3, h(3): 7}
    assert s["dups"] == {h(1): [5], h(2): [6]}  # the other side: hash 2's first holder is still cached
    d = BlockTable()
    hit = pool.lookup(runs(0, 4), 4)
    pool.take(d, hit)
    assert d.block_ids() == [1, 2, 3, 7]
    assert pool.num_free == 0  # 2 and 3 left the queue; 1 and 7 were in use (b's)
    assert snap(pool, b, c, d)["ref_cnt"][1:8] == [2, 1, 1, 1, 1, 1, 2]


def test_lookup_stops_at_the_first_miss_and_at_max_blocks():
    pool = BlockPool(10, block_size=16)
    a = table(pool, 3)
    pool.cache(a, runs(0, 3))
    assert pool.lookup([(h(0), 1), (h(1, family=2), 2)], 3).num_blocks == 1  # block 1 differs
    assert pool.lookup(runs(0, 3), 2).num_blocks == 2
    assert pool.lookup(runs(0, 3), 3).num_blocks == 3
    assert pool.lookup(runs(0, 5), 5).num_blocks == 3
    assert pool.lookup(runs(0, 3, family=2), 3).num_blocks == 0


def test_growing_or_hashing_more_than_there_is_raises():
    pool = BlockPool(3)
    with pytest.raises(ValueError, match="cannot get 3 free blocks"):
        table(pool, 3)
    t = table(pool, 2)
    with pytest.raises(ValueError, match="3 blocks to hash"):
        pool.cache(t, runs(0, 3))
    with pytest.raises(ValueError, match="cannot get 1 free blocks"):
        pool.grow_tails([pool.open_tail(t)])


def test_grow_tails_gives_one_block_per_table_in_order():
    pool = BlockPool(10, block_size=16)  # 9 usable
    a, b = table(pool, 2), table(pool, 2)  # [1, 2], [3, 4]
    pool.grow_tails([pool.open_tail(a), pool.open_tail(b)])  # the front is never-used blocks: 5 then 6
    assert (a.block_ids(), b.block_ids()) == ([1, 2, 5], [3, 4, 6])
    c = table(pool, 3)  # [7, 8, 9]
    pool.cache(c, runs(0, 3))
    pool.release(c)
    assert pool.free_queue() == [9, 8, 7]
    pool.cache(a, runs(0, 3, family=2))  # a is all hashed now: its tail is a new, empty extent
    tails = [pool.open_tail(b), pool.open_tail(a)]
    assert tails[1] == []
    assert len(a.exts) == 2
    pool.grow_tails(tails)  # hashed blocks at the front: 9 (hash 2) and 8 (hash 1) evicted
    assert (a.block_ids(), b.block_ids()) == ([1, 2, 5, 8], [3, 4, 6, 9])
    assert pool.num_evictions == 2
    assert pool.lookup(runs(0, 3), 3).num_blocks == 1
    pool.grow_tails([pool.open_tail(a)])  # the last block of c's: a partial pop becomes a whole one
    assert a.block_ids() == [1, 2, 5, 8, 7]
    assert pool.num_free == 0
    assert pool.lookup(runs(0, 3), 3).num_blocks == 0


def test_grow_runs_gives_each_table_its_count_in_order():
    pool = BlockPool(14, block_size=16)  # 13 usable
    a, b = table(pool, 1), table(pool, 1)  # [1], [2]
    pool.grow_runs([(pool.open_tail(a), 1), (pool.open_tail(b), 3), (pool.open_tail(a), 2)])  # never-used blocks
    assert (a.block_ids(), b.block_ids()) == ([1, 3, 7, 8], [2, 4, 5, 6])
    assert pool.num_free == 5
    c = table(pool, 3)  # [9, 10, 11]
    pool.cache(c, runs(0, 3))
    pool.release(c)
    assert pool.free_queue() == [12, 13, 11, 10, 9]
    # the front extent (12, 13) is shorter than the 4 blocks asked: the slow path, evicting c's 11 and 10
    pool.grow_runs([(pool.open_tail(b), 3), (pool.open_tail(a), 1)])
    assert (a.block_ids(), b.block_ids()) == ([1, 3, 7, 8, 10], [2, 4, 5, 6, 12, 13, 11])
    assert pool.num_evictions == 2
    assert pool.lookup(runs(0, 3), 3).num_blocks == 1  # block 9 (hash 1) still cached
    with pytest.raises(ValueError, match="cannot get 2 free blocks"):
        pool.grow_runs([(pool.open_tail(a), 2)])


def test_a_prompt_hashed_in_chunks_and_its_decodes_stay_one_extent():
    pool = BlockPool(20, block_size=16)
    t = table(pool, 2)
    pool.cache(t, runs(0, 2))
    pool.grow(t, 3)
    pool.cache(t, runs(2, 2))  # a second chunk continues the first
    assert [len(e.ids) for e in t.exts] == [4, 1]  # hashed 4, then the unhashed partial block
    pool.grow_tails([pool.open_tail(t)])
    pool.cache(t, runs(4, 1))  # a decode fills the partial block
    assert [len(e.ids) for e in t.exts] == [5, 1]
    pool.cache(t, runs(5, 1, family=3))  # another family: an extent of its own
    assert [len(e.ids) for e in t.exts] == [5, 1]
    assert t.block_ids() == [1, 2, 3, 4, 5, 6]
    assert snap(pool, t)["block_hash"][1:7] == [h(0), h(1), h(2), h(3), h(4), h(5, family=3)]


def test_hash_chain_depends_on_the_whole_prefix():
    h1 = hash_block(None, ("a", 0))
    assert hash_block(h1, ("b", 0)) == hash_block(hash_block(None, ("a", 0)), ("b", 0))
    assert hash_block(h1, ("b", 0)) != hash_block(hash_block(None, ("z", 0)), ("b", 0))
    assert hash_block(None, ("a", 0), (None, "salt")) != h1


# ---------------------------------------------------------------------- the per-block model, on random sequences

_KEYS = ("p", "q", "r")  # a few segment keys: prompts share prefixes, the same request id shares generated tokens


def _request(segments: list[tuple[int, int]], rid: int) -> Request:
    segs = [(_KEYS[k], n) for k, n in segments]
    return Request(f"r{rid}", sum(n for _, n in segs), 1, segments=segs)


# prompts from few segments (so they share prefixes and recur whole) and few request ids (so generated blocks recur)
segment_st = st.tuples(st.integers(0, 2), st.sampled_from([3, 4, 8, 13]))
request_st = st.tuples(st.lists(segment_st, min_size=1, max_size=3), st.integers(0, 2))
_n_st = st.one_of(st.just(99), st.integers(0, 12))  # 99: all of them (the whole prompt's hit, blocks, full blocks)
op_st = st.one_of(
    st.tuples(st.just("new"), request_st, _n_st, _n_st, _n_st),
    st.tuples(st.just("grow"), st.integers(0, 7), st.integers(0, 4)),
    st.tuples(st.just("cache"), st.integers(0, 7), st.integers(0, 6)),
    st.tuples(st.just("tails"), st.lists(st.integers(0, 7), max_size=4, unique=True)),
    st.tuples(st.just("release"), st.integers(0, 7)),
)


class _Live:
    """A request's table in both pools: the extent pool's table, the model's block list, blocks hashed so far."""

    def __init__(self, req: Request) -> None:
        self.req = req
        self.table = BlockTable()
        self.blocks: list[int] = []
        self.hashed = 0


def _compare(pool: BlockPool, model: PerBlockPool, live: list[_Live]) -> None:
    assert pool.snapshot([x.table for x in live]) == model.snapshot()
    for x in live:
        assert x.table.block_ids() == x.blocks


def _admit(pool: BlockPool, model: PerBlockPool, live: list[_Live], req: Request, max_blocks: int, need: int, k: int):
    """Look ``req`` up (at most ``max_blocks``), take its hit, ``need`` more blocks (99: its prompt's), hash ``k``."""
    bs = pool.block_size
    max_blocks = min(max_blocks, (req.prompt_len - 1) // bs)
    hashes = req.hashes(max_blocks, bs)
    hit = pool.lookup(req.hash_runs(0, max_blocks, bs), max_blocks)
    expect = model.lookup(hashes, max_blocks)
    assert hit.num_blocks == len(expect)
    assert hit.num_free == sum(1 for b in expect if model.ref[b] == 0)
    if need == 99:
        need = max(0, -(-req.prompt_len // bs) - hit.num_blocks)
        if need + hit.num_free > pool.num_free:  # does not fit: not admitted
            return
    need = min(need, pool.num_free - hit.num_free)
    x = _Live(req)
    pool.take(x.table, hit)
    model.touch(expect)
    x.blocks = list(expect)
    x.hashed = len(expect)
    pool.grow(x.table, need)
    x.blocks += model.allocate(need)
    live.append(x)
    _hash(pool, model, x, k)


def _hash(pool: BlockPool, model: PerBlockPool, x: _Live, k: int) -> None:
    """Hash ``k`` more of ``x``'s blocks (those a scheduler would have filled)."""
    bs = pool.block_size
    k = min(k, len(x.blocks) - x.hashed)
    if k <= 0:
        return
    pool.cache(x.table, x.req.hash_runs(x.hashed, x.hashed + k, bs))
    model.cache(x.blocks[x.hashed : x.hashed + k], x.req.hashes(x.hashed + k, bs)[x.hashed :])
    x.hashed += k


@settings(max_examples=400, deadline=None)
@given(
    ops=st.lists(op_st, min_size=10, max_size=50),
    num_blocks=st.integers(2, 24),
    bs=st.sampled_from([1, 2, 4]),
    caching=st.booleans(),
)
def test_the_extent_pool_is_the_per_block_model(ops, num_blocks, bs, caching):
    pool = BlockPool(num_blocks, bs, caching)
    model = PerBlockPool(num_blocks, bs, caching)
    live: list[_Live] = []
    for op in ops:
        kind = op[0]
        if kind == "new":
            (segments, rid), max_blocks, need, k = op[1:]
            _admit(pool, model, live, _request(segments, rid), max_blocks, need, k)
        elif kind == "grow" and live:
            x = live[op[1] % len(live)]
            n = min(op[2], pool.num_free)
            pool.grow(x.table, n)
            x.blocks += model.allocate(n)
        elif kind == "cache" and live:
            _hash(pool, model, live[op[1] % len(live)], op[2])
        elif kind == "tails" and live:
            picked = list(dict.fromkeys(live[i % len(live)] for i in op[1]))[: pool.num_free]
            pool.grow_tails([pool.open_tail(x.table) for x in picked])
            for x in picked:
                x.blocks += model.allocate(1)
        elif kind == "release" and live:
            x = live.pop(op[1] % len(live))
            pool.release(x.table)
            model.free(x.blocks)
        _compare(pool, model, live)


def _cyclic_garbage(run) -> list[object]:
    """The objects ``run()`` left that only the cyclic garbage collector can free (none: reference counts free them)."""
    gc.collect()
    gc.disable()
    try:
        run()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return [o for o in gc.garbage if type(o).__name__ == "_Ext" or isinstance(o, list)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


def test_extents_dropped_by_tables_and_evictions_are_freed_without_the_cycle_collector():
    # every operation that drops an extent: a chunk merged into the previous extent, a whole eviction of a family's
    # only extent and of one of several, a partial eviction, a release, a lookup that splits; the pool and its
    # tables stay alive, so nothing of theirs counts
    pool = BlockPool(9, block_size=16)
    keep: list[BlockTable] = []

    def run() -> None:
        for rnd in range(3):
            a = table(pool, 3)
            pool.cache(a, runs(0, 2))  # family 1: blocks 0-1, one unhashed left
            pool.grow(a, 1)
            pool.cache(a, runs(2, 1))  # merged into the previous extent: the tail extent is dropped
            b = BlockTable()
            hit = pool.lookup(runs(0, 1), 1)
            pool.take(b, hit)  # splits a's first extent
            pool.grow(b, 2)
            pool.cache(b, runs(0, 1, family=2 + rnd))
            pool.release(a)
            pool.release(b)
            c = table(pool, 8)  # evicts everything hashed, whole and in part
            pool.release(c)
        keep.append(BlockTable())

    # the control: an extent left pointing at itself is cyclic garbage once dropped
    from kvpilot.engine import block_pool as bp

    def cyclic() -> None:
        e = bp._Ext([1], None, [])
        e.prev = e.next = e

    assert len(_cyclic_garbage(cyclic)) >= 1
    assert _cyclic_garbage(run) == []
