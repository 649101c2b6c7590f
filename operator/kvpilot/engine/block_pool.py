"""vLLM V1's KV block pool: fixed-size blocks, a free queue with O(1) removal, prefix-cache hashing.

Model of ``vllm/v1/core/block_pool.py`` (``BlockPool``) and ``vllm/v1/core/kv_cache_utils.py``
(``FreeKVCacheBlockQueue``, ``hash_block_tokens``, ``KVCacheBlock``) as of vLLM v0.21-v0.33:

- ``num_blocks`` physical blocks of ``block_size`` tokens; block 0 is the reserved *null block*
  (``BlockPool.__init__`` pops it from the free queue and never frees it), so ``num_blocks - 1``
  are usable (docs/background.md §4: 21,520 tokens / 16 = 1,345 blocks, 1,344 usable).
- The free queue is a doubly linked list over block ids (here two ``list[int]`` arrays, ``prev``
  and ``next``, with sentinel head/tail), so a cached block hit by another request is removed from
  the middle in O(1) (``FreeKVCacheBlockQueue.remove``).
- A full block gets a hash chained through its parent's hash plus extra keys (LoRA id, cache salt)
  (``hash_block_tokens(parent_hash, token_ids, extra_keys)``); only full blocks are hashed.
- A freed block keeps its hash (it stays findable until the block is reused); eviction happens
  lazily when ``allocate`` pops a block from the *front* of the queue (``get_new_blocks`` ->
  ``_maybe_evict_cached_block``): LRU.
- ``free`` takes the blocks in eviction order (the manager passes a request's blocks reversed, tail
  first). Blocks *without* a hash are put at the *front* (``prepend_n``), hashed ones at the tail
  (``append_n``): vLLM PR #42656 (v0.21, "blocks without hash get evicted first"); with caching
  disabled everything is appended (PR #48017). This ordering is what makes the §9 reversed pass
  hit 21,488 tokens (1,343 of 1,344 blocks); with plain tail appends it would be 21,376.
- ``usage()`` = 1 - free / (num_blocks - 1), free including cached-but-evictable blocks
  (``BlockPool.get_usage``), the value of ``vllm:kv_cache_usage_perc``.

Duplicates: vLLM registers every full block, even when an identical block is already cached
(so block tables stay append-only), and a lookup returns the first one. Here the first block
with a hash is the one found; later duplicates keep their hash (so they are freed to the tail)
and are promoted when the first is evicted.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

BlockHash = Hashable


def hash_block(parent: BlockHash | None, content: Hashable, extra_keys: Hashable = None) -> int:
    """Chained block hash: ``hash((parent, content, extra_keys))``.

    Args:
        parent: the previous block's hash, ``None`` for the first block of a sequence.
        content: identity of the block's ``block_size`` tokens (any hashable).
        extra_keys: LoRA id, cache salt, multimodal hashes (``None`` when absent).

    Returns:
        an ``int``; equal prefixes give equal hashes, and one differing early token changes every
        later hash. Source: ``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py (vLLM uses
        sha256 or the builtin hash of the same tuple).
    """
    return hash((parent, content, extra_keys))


class BlockPool:
    """Physical KV blocks, their reference counts and prefix-cache hashes.

    Args:
        num_blocks: total physical blocks including the null block 0 (>= 2).
        block_size: tokens per block (> 0).
        enable_caching: prefix caching on (``--enable-prefix-caching``).

    Raises:
        ValueError: ``num_blocks < 2`` or ``block_size < 1``.
    """

    __slots__ = (
        "num_blocks",
        "block_size",
        "enable_caching",
        "ref_cnt",
        "block_hash",
        "_prev",
        "_next",
        "_head",
        "_tail",
        "num_free",
        "_cached",
        "_dups",
        "num_evictions",
    )

    def __init__(self, num_blocks: int, block_size: int = 16, enable_caching: bool = True) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is the null block), got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.ref_cnt = [0] * num_blocks
        self.block_hash: list[BlockHash | None] = [None] * num_blocks
        head, tail = num_blocks, num_blocks + 1
        self._head, self._tail = head, tail
        # free queue initially 1, 2, ..., num_blocks - 1 (the null block 0 is never free)
        self._next = [i + 1 for i in range(num_blocks)] + [1, -1]
        self._prev = [i - 1 for i in range(num_blocks)] + [-1, num_blocks - 1]
        self._next[num_blocks - 1] = tail
        self._prev[1] = head
        self._next[0] = self._prev[0] = -1
        self.num_free = num_blocks - 1
        self._cached: dict[BlockHash, int] = {}
        self._dups: dict[BlockHash, list[int]] = {}
        self.num_evictions = 0

    # ------------------------------------------------------------------ queue primitives
    def _unlink(self, b: int) -> None:
        nxt, prv = self._next, self._prev
        p, n = prv[b], nxt[b]
        nxt[p] = n
        prv[n] = p
        nxt[b] = prv[b] = -1
        self.num_free -= 1

    def _prepend(self, blocks: Sequence[int]) -> None:
        nxt, prv = self._next, self._prev
        first = nxt[self._head]
        p = self._head
        for b in blocks:
            nxt[p] = b
            prv[b] = p
            p = b
        nxt[p] = first
        prv[first] = p
        self.num_free += len(blocks)

    def free_queue(self) -> list[int]:
        """Block ids in the free queue, front (evicted first) to back. O(free blocks); for tests."""
        out, b = [], self._next[self._head]
        while b != self._tail:
            out.append(b)
            b = self._next[b]
        return out

    # ------------------------------------------------------------------ public operations
    def usage(self) -> float:
        """KV usage 0-1: ``1 - free / (num_blocks - 1)`` (``BlockPool.get_usage``)."""
        return 1.0 - self.num_free / (self.num_blocks - 1)

    def num_cached_blocks(self) -> int:
        """Blocks currently findable by hash (in use or evictable)."""
        return len(self._cached)

    def lookup(self, hashes: Sequence[BlockHash], max_blocks: int) -> list[int]:
        """Longest cached prefix: block ids for ``hashes[0..k)``, stopping at the first miss.

        Args:
            hashes: the request's full-block hashes in order.
            max_blocks: at most this many blocks (the caller passes ``(num_tokens - 1) //
                block_size`` so the last prompt token is always recomputed:
                ``max_cache_hit_length = request.num_tokens - 1`` in
                vllm/v1/core/kv_cache_manager.py ``get_computed_blocks``).

        Returns:
            block ids (not yet referenced: call :meth:`touch`). Empty when caching is off.
        """
        if not self.enable_caching:
            return []
        cached = self._cached
        out = []
        for h in hashes[:max_blocks]:
            b = cached.get(h)
            if b is None:
                break
            out.append(b)
        return out

    def touch(self, blocks: Iterable[int]) -> None:
        """Reference blocks hit by a request: remove free ones from the queue, ``ref_cnt += 1``."""
        ref = self.ref_cnt
        for b in blocks:
            if ref[b] == 0:
                self._unlink(b)
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, evicting their hashes (LRU).

        Raises:
            ValueError: fewer than ``n`` free blocks (``get_new_blocks``).
        """
        if n > self.num_free:
            raise ValueError(f"cannot get {n} free blocks from the pool ({self.num_free} free)")
        nxt, prv, ref, bh, head = self._next, self._prev, self.ref_cnt, self.block_hash, self._head
        cached, dups = self._cached, self._dups
        out = []
        b = nxt[head]
        for _ in range(n):
            out.append(b)
            ref[b] = 1
            h = bh[b]
            if h is not None:
                if dups or cached.get(h) != b:
                    self._evict(b, h)
                else:  # the common case: the only block with this hash
                    bh[b] = None
                    del cached[h]
                    self.num_evictions += 1
            b2 = nxt[b]
            nxt[b] = prv[b] = -1
            b = b2
        # the first remaining block becomes the front
        nxt[head] = b
        prv[b] = head
        self.num_free -= n
        return out

    def _evict(self, b: int, h: BlockHash) -> None:
        self.block_hash[b] = None
        cached = self._cached
        if cached.get(h) == b:
            dups = self._dups.get(h) if self._dups else None
            if dups:
                cached[h] = dups.pop(0)
                if not dups:
                    del self._dups[h]
            else:
                del cached[h]
            self.num_evictions += 1
        else:
            dups = self._dups.get(h)
            if dups and b in dups:
                dups.remove(b)
                if not dups:
                    del self._dups[h]

    def cache_block(self, b: int, h: BlockHash) -> None:
        """Give full block ``b`` hash ``h`` and make it findable (``cache_full_blocks``)."""
        if not self.enable_caching or self.block_hash[b] is not None:
            return
        self.block_hash[b] = h
        if h in self._cached:
            self._dups.setdefault(h, []).append(b)
        else:
            self._cached[h] = b

    def cache_blocks(self, blocks: Sequence[int], hashes: Sequence[BlockHash], start: int, end: int) -> None:
        """:meth:`cache_block` for ``blocks[k], hashes[k]``, ``start <= k < end``."""
        if not self.enable_caching:
            return
        bh, cached = self.block_hash, self._cached
        for k in range(start, end):
            b = blocks[k]
            if bh[b] is not None:
                continue
            h = hashes[k]
            bh[b] = h
            if h in cached:
                self._dups.setdefault(h, []).append(b)
            else:
                cached[h] = b

    def free(self, ordered_blocks: Iterable[int]) -> None:
        """Drop one reference from each block, in eviction order (first = evicted first).

        Blocks reaching ``ref_cnt == 0`` go back to the queue: unhashed ones to the front (in the
        given order), hashed ones to the tail, keeping their hash (``BlockPool.free_blocks``, vLLM
        v0.21+). The null block 0 is never freed.

        Raises:
            ValueError: a block freed more often than it was referenced.
        """
        ref, bh, nxt, prv, tail = self.ref_cnt, self.block_hash, self._next, self._prev, self._tail
        caching = self.enable_caching
        front = []
        last = prv[tail]
        appended = 0
        bad = None
        for b in ordered_blocks:
            if b == 0:
                continue
            r = ref[b] - 1
            if r < 0:
                bad = b
                break
            ref[b] = r
            if r == 0:
                if caching and bh[b] is None:
                    front.append(b)
                else:  # append at the tail
                    nxt[last] = b
                    prv[b] = last
                    last = b
                    appended += 1
        nxt[last] = tail
        prv[tail] = last
        self.num_free += appended
        if front:
            self._prepend(front)
        if bad is not None:
            raise ValueError(f"block {bad} freed more often than referenced")
