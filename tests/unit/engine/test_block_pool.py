"""BlockPool: null block, free-queue order, LRU eviction, hashing; invariants under hypothesis."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpilot.engine.block_pool import BlockPool, hash_block


def test_null_block_reserved_and_initial_order():
    pool = BlockPool(6, block_size=16)
    assert pool.free_queue() == [1, 2, 3, 4, 5]
    assert pool.num_free == 5
    assert pool.usage() == 0.0
    assert pool.allocate(2) == [1, 2]
    assert pool.usage() == pytest.approx(1 - 3 / 5)
    pool.free([0, 2, 1])  # the null block is ignored
    assert pool.num_free == 5


def test_free_puts_unhashed_blocks_first_hashed_ones_last_and_keeps_hashes():
    pool = BlockPool(8, block_size=16)
    blocks = pool.allocate(3)  # [1, 2, 3]; 1 and 2 full, 3 partial
    pool.cache_block(1, "h1")
    pool.cache_block(2, "h2")
    pool.free(reversed(blocks))  # tail first: 3, 2, 1
    # unhashed 3 at the front; hashed 2 then 1 at the tail after the never-used 4..7
    assert pool.free_queue() == [3, 4, 5, 6, 7, 2, 1]
    assert pool.lookup(["h1", "h2"], 2) == [1, 2]


def test_caching_off_appends_everything():
    pool = BlockPool(5, block_size=16, enable_caching=False)
    blocks = pool.allocate(2)
    pool.free(reversed(blocks))
    assert pool.free_queue() == [3, 4, 2, 1]
    assert pool.lookup(["x"], 1) == []


def test_lru_eviction_from_the_front_and_touch_removes_from_the_middle():
    pool = BlockPool(4, block_size=16)  # 3 usable
    a = pool.allocate(3)
    for b, h in zip(a, ["a", "b", "c"], strict=True):
        pool.cache_block(b, h)
    pool.free(a)  # order given: 1, 2, 3 -> all hashed, appended in that order
    assert pool.free_queue() == [1, 2, 3]
    pool.touch(pool.lookup(["b"], 1))  # hit block 2: removed from the middle
    assert pool.free_queue() == [1, 3]
    assert pool.ref_cnt[2] == 1
    assert pool.allocate(1) == [1]  # front: the least recently freed, its hash evicted
    assert pool.lookup(["a"], 1) == []
    assert pool.lookup(["c"], 1) == [3]


def test_lookup_stops_at_first_miss_and_respects_max_blocks():
    pool = BlockPool(5, block_size=16)
    bl = pool.allocate(3)
    for b, h in zip(bl, ["p", "q", "r"], strict=True):
        pool.cache_block(b, h)
    assert pool.lookup(["p", "x", "r"], 3) == [bl[0]]
    assert pool.lookup(["p", "q", "r"], 2) == bl[:2]


def test_allocate_more_than_free_raises():
    pool = BlockPool(3)
    with pytest.raises(ValueError, match="cannot get 3 free blocks"):
        pool.allocate(3)


def test_double_free_raises():
    pool = BlockPool(3)
    b = pool.allocate(1)
    pool.free(b)
    with pytest.raises(ValueError, match="freed more often"):
        pool.free(b)


def test_hash_chain_depends_on_the_whole_prefix():
    h1 = hash_block(None, ("a", 0))
    assert hash_block(h1, ("b", 0)) == hash_block(hash_block(None, ("a", 0)), ("b", 0))
    assert hash_block(h1, ("b", 0)) != hash_block(hash_block(None, ("z", 0)), ("b", 0))
    assert hash_block(None, ("a", 0), (None, "salt")) != h1


def _check_invariants(pool: BlockPool, held: list[list[int]]) -> None:
    queue = pool.free_queue()
    assert len(queue) == len(set(queue)) == pool.num_free
    assert 0 not in queue
    referenced = {b for req in held for b in req}
    assert not referenced & set(queue), "a block is both free and referenced"
    for b in range(1, pool.num_blocks):
        assert (pool.ref_cnt[b] == 0) == (b in set(queue))
    total = pool.num_blocks
    assert pool.usage() == pytest.approx(1 - pool.num_free / (total - 1))
    for h, b in pool._cached.items():
        assert pool.block_hash[b] == h


ops = st.lists(st.tuples(st.sampled_from(["alloc", "free", "hit"]), st.integers(0, 6), st.integers(0, 3)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops=ops, num_blocks=st.integers(2, 12))
def test_pool_invariants(ops, num_blocks):
    pool = BlockPool(num_blocks, block_size=4)
    held: list[list[int]] = []
    for op, k, prefix in ops:
        if op == "alloc":
            n = min(k, pool.num_free)
            blocks = pool.allocate(n)
            for i, b in enumerate(blocks):  # some full blocks of prefix family `prefix`
                if i < n - 1:
                    pool.cache_block(b, (prefix, i))
            held.append(blocks)
        elif op == "free" and held:
            blocks = held.pop(k % len(held))
            pool.free(reversed(blocks))
        elif op == "hit":
            hashes = [(prefix, i) for i in range(k)]
            hit = pool.lookup(hashes, len(hashes))
            assert [pool.block_hash[b] for b in hit] == hashes[: len(hit)]
            pool.touch(hit)
            held.append(hit)
        _check_invariants(pool, held)


def test_a_hit_in_the_middle_is_skipped_by_the_next_allocation():
    pool = BlockPool(7, block_size=16)  # 6 usable, queue 1..6
    a = pool.allocate(6)
    for b in a:
        pool.cache_block(b, ("h", b))
    pool.free(a)  # all hashed: appended in the order given, queue 1..6
    pool.touch([3, 4])  # two hits in the middle leave the queue 1, 2, 5, 6
    assert pool.free_queue() == [1, 2, 5, 6]
    assert pool.num_free == 4
    assert pool.allocate(3) == [1, 2, 5]  # 3 and 4 are not free: skipped
    pool.free([4, 3])  # hashed: to the back, 4 then 3
    assert pool.free_queue() == [6, 4, 3]
    assert pool.allocate(3) == [6, 4, 3]


def test_the_queue_keeps_its_order_across_thousands_of_operations():
    # 6,000 blocks; taking 5,000 one at a time consumes the front (the consumed part is dropped as it goes)
    pool = BlockPool(6001, block_size=16)
    taken = [pool.allocate(1)[0] for _ in range(5000)]
    assert taken == list(range(1, 5001))
    assert pool.free_queue() == list(range(5001, 6001))
    pool.free(reversed(taken[:3]))  # unhashed: to the front, in the order given (3, 2, 1)
    pool.cache_block(10, "x")
    pool.free([10])  # hashed: to the back
    assert pool.free_queue() == [3, 2, 1, *range(5001, 6001), 10]
    assert pool.allocate(4) == [3, 2, 1, 5001]
    assert pool.num_free == 1000
