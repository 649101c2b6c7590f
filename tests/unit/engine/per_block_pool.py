"""A straightforward per-block model of vLLM's KV block pool, to check kvpilot's extent pool against.

One entry per block, as ``vllm/v1/core/block_pool.py`` (v0.21-v0.33) keeps them: the free queue an ordered
dict (front first: ``popitem(last=False)`` is ``popleft``, ``move_to_end(last=False)`` a prepend, ``del`` a
removal from the middle), a reference count and a hash per block, and ``cached[hash]`` a dict of the blocks
holding that hash in registration order (``cached_block_hash_to_block``; a lookup takes the first). Tables are
lists of block ids. Nothing here is shared with :mod:`kvpilot.engine.block_pool`.
"""

from __future__ import annotations

from collections import OrderedDict


class PerBlockPool:
    def __init__(self, num_blocks: int, block_size: int, enable_caching: bool = True) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.queue: OrderedDict[int, None] = OrderedDict((b, None) for b in range(1, num_blocks))
        self.ref = [0] * num_blocks
        self.hash: list[int | None] = [None] * num_blocks
        self.cached: dict[int, dict[int, None]] = {}
        self.num_evictions = 0

    @property
    def num_free(self) -> int:
        return len(self.queue)

    def lookup(self, hashes: list[int], max_blocks: int) -> list[int]:
        """``find_longest_cache_hit``: the first holder of each hash, up to the first miss."""
        out: list[int] = []
        if not self.enable_caching:
            return out
        for h in hashes[:max_blocks]:
            holders = self.cached.get(h)
            if not holders:
                break
            out.append(next(iter(holders)))
        return out

    def touch(self, blocks: list[int]) -> None:
        for b in blocks:
            if self.ref[b] == 0:
                del self.queue[b]
            self.ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """``get_new_blocks``: from the front, each popped block's hash evicted (``_maybe_evict_cached_block``)."""
        assert n <= len(self.queue)
        out = []
        for _ in range(n):
            b, _ = self.queue.popitem(last=False)
            h = self.hash[b]
            if h is not None:
                del self.cached[h][b]
                if not self.cached[h]:
                    del self.cached[h]
                self.hash[b] = None
                self.num_evictions += 1
            self.ref[b] = 1
            out.append(b)
        return out

    def cache(self, blocks: list[int], hashes: list[int]) -> None:
        """``cache_full_blocks``: every block registered, a second holder of a hash after the first."""
        if not self.enable_caching:
            return
        for b, h in zip(blocks, hashes, strict=True):
            assert self.hash[b] is None
            self.hash[b] = h
            self.cached.setdefault(h, {})[b] = None

    def free(self, table: list[int]) -> None:
        """``free_blocks`` of a table: tail first; unhashed blocks to the front, hashed ones to the back."""
        front = []
        for b in reversed(table):
            self.ref[b] -= 1
            assert self.ref[b] >= 0
            if self.ref[b] == 0:
                if self.enable_caching and self.hash[b] is None:
                    front.append(b)
                else:
                    self.queue[b] = None
        for b in reversed(front):
            self.queue[b] = None
            self.queue.move_to_end(b, last=False)

    def snapshot(self) -> dict[str, object]:
        """The fields of :meth:`kvpilot.engine.block_pool.BlockPool.snapshot`."""
        return {
            "queue": list(self.queue),
            "ref_cnt": list(self.ref),
            "block_hash": list(self.hash),
            "cached": dict(sorted((h, next(iter(v))) for h, v in self.cached.items())),
            "dups": {h: list(v)[1:] for h, v in sorted(self.cached.items()) if len(v) > 1},
            "num_evictions": self.num_evictions,
            "num_free": self.num_free,
        }
