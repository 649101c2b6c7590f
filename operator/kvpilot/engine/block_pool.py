"""vLLM V1's KV block pool: fixed-size blocks, a free queue with O(1) removal, prefix-cache hashing.

Model of ``vllm/v1/core/block_pool.py`` (``BlockPool``) and ``vllm/v1/core/kv_cache_utils.py``
(``FreeKVCacheBlockQueue``, ``hash_block_tokens``, ``KVCacheBlock``) as of vLLM v0.21-v0.33:

- ``num_blocks`` physical blocks of ``block_size`` tokens; block 0 is the reserved *null block*
  (``BlockPool.__init__`` pops it from the free queue and never frees it), so ``num_blocks - 1``
  are usable (docs/background.md §4: 21,520 tokens / 16 = 1,345 blocks, 1,344 usable).
- The free queue is a doubly linked list over block ids in vLLM, so a cached block hit by another
  request is removed from the middle in O(1) (``FreeKVCacheBlockQueue.remove``). Here it is one
  ``list[int]`` read from a front index, so that taking ``n`` blocks from the front, appending at the
  back and prepending are list slices and extends done in C; a removal from the middle leaves a stale
  entry that allocation skips (:class:`BlockPool` says how). The order is the linked list's.
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
from heapq import heappop, heappush

BlockHash = Hashable

_GONE = -(1 << 62)  # _pos of a block not in the free queue (no entry is live there)


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

    The free queue (``FreeKVCacheBlockQueue`` in vllm/v1/core/kv_cache_utils.py, a doubly linked list there) is
    held as one Python list ``_q`` read from index ``_qh`` (the front) to its end (the back), so that what vLLM
    does to it maps onto list operations done in C:

    - ``popleft_n`` (``get_new_blocks``: the ``n`` least recently freed blocks) is the slice ``_q[_qh:_qh + n]``;
    - ``append_n`` (hashed blocks freed, ``free_blocks``) is ``list.extend`` at the back;
    - ``prepend_n`` (unhashed blocks freed, vLLM PR #42656) writes into the room before ``_qh`` (the list is
      regrown on the left when there is none);
    - ``remove`` (a prefix-cache hit on a free block, ``touch``) leaves a *stale* entry behind: ``_pos[b]`` is the
      absolute position (``_qbase`` + list index) of block ``b``'s live entry, and an entry is live only where
      its position matches. ``_stale`` is a heap of the positions of stale entries ahead of the front, so an
      allocation whose slice holds none takes the slice as it is (the common case), and one that reaches a
      stale entry walks past it.

    The consumed part before ``_qh`` is dropped once it is more than half of the list (absolute positions do not
    change), so the list stays O(num_blocks).
    """

    __slots__ = (
        "num_blocks",
        "block_size",
        "enable_caching",
        "ref_cnt",
        "block_hash",
        "_q",
        "_qh",
        "_qbase",
        "_pos",
        "_stale",
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
        # free queue initially 1, 2, ..., num_blocks - 1 (the null block 0 is never free)
        self._q = list(range(1, num_blocks))
        self._qh = 0
        self._qbase = 0
        self._pos = [_GONE, *range(num_blocks - 1)]  # block b sits at absolute position b - 1
        self._stale: list[int] = []
        self.num_free = num_blocks - 1
        self._cached: dict[BlockHash, int] = {}
        self._dups: dict[BlockHash, list[int]] = {}
        self.num_evictions = 0

    # ------------------------------------------------------------------ queue primitives
    def _prepend(self, blocks: list[int]) -> None:
        """Put ``blocks`` at the front, ``blocks[0]`` first (``FreeKVCacheBlockQueue.prepend_n``)."""
        m = len(blocks)
        q, h, pos = self._q, self._qh, self._pos
        if h < m:  # regrow on the left; the live entries keep their absolute positions
            pad = m + max(64, len(q) >> 3)
            self._qbase += h - pad
            q[:h] = [0] * pad  # block 0's position is _GONE: these entries are never live
            h = pad
        h -= m
        q[h : h + m] = blocks
        p = self._qbase + h
        for b in blocks:
            pos[b] = p
            p += 1
        self._qh = h
        self.num_free += m

    def free_queue(self) -> list[int]:
        """Block ids in the free queue, front (evicted first) to back. O(queue); for tests."""
        q, pos, base = self._q, self._pos, self._qbase
        return [q[i] for i in range(self._qh, len(q)) if pos[q[i]] == base + i]

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
        ref, pos, stale = self.ref_cnt, self._pos, self._stale
        for b in blocks:
            if ref[b] == 0:  # in the free queue: its entry goes stale (FreeKVCacheBlockQueue.remove)
                heappush(stale, pos[b])
                pos[b] = _GONE
                self.num_free -= 1
            ref[b] += 1

    def allocate(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, evicting their hashes (LRU).

        Raises:
            ValueError: fewer than ``n`` free blocks (``get_new_blocks``).
        """
        if n > self.num_free:
            raise ValueError(f"cannot get {n} free blocks from the pool ({self.num_free} free)")
        q, h, base, stale = self._q, self._qh, self._qbase, self._stale
        if not stale or stale[0] >= base + h + n:  # no stale entry in the slice
            out = q[h : h + n]
            h += n
        else:  # walk past the stale entries
            pos = self._pos
            out = []
            while len(out) < n:
                b = q[h]
                if pos[b] == base + h:
                    out.append(b)
                h += 1
            while stale and stale[0] < base + h:
                heappop(stale)
        if h > 4096 and h + h > len(q):  # drop the consumed part
            del q[:h]
            self._qbase = base + h
            h = 0
        self._qh = h
        self.num_free -= n
        ref, bh = self.ref_cnt, self.block_hash
        if not self.enable_caching:
            for b in out:
                ref[b] = 1
        elif self._dups:
            for b in out:
                ref[b] = 1
                bhash = bh[b]
                if bhash is not None:
                    self._evict(b, bhash)
        else:  # the common case: each hashed block is the only one with its hash (_cached[hash] == b)
            cached = self._cached
            evicted = 0
            for b in out:
                ref[b] = 1
                bhash = bh[b]
                if bhash is not None:
                    bh[b] = None
                    del cached[bhash]
                    evicted += 1
            self.num_evictions += evicted
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
        setdefault = cached.setdefault
        for b, h in zip(blocks[start:end], hashes[start:end], strict=True):
            if bh[b] is not None:
                continue
            bh[b] = h
            if setdefault(h, b) != b:  # a duplicate of a cached block: findable once the first is evicted
                self._dups.setdefault(h, []).append(b)

    def free(self, ordered_blocks: Iterable[int]) -> None:
        """Drop one reference from each block, in eviction order (first = evicted first).

        Blocks reaching ``ref_cnt == 0`` go back to the queue: unhashed ones to the front (in the
        given order), hashed ones to the tail, keeping their hash (``BlockPool.free_blocks``, vLLM
        v0.21+). The null block 0 is never freed.

        Raises:
            ValueError: a block freed more often than it was referenced.
        """
        ref, bh, q, pos = self.ref_cnt, self.block_hash, self._q, self._pos
        caching = self.enable_caching
        front = []
        p = self._qbase + len(q)
        start = p
        append = q.append
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
                    append(b)
                    pos[b] = p
                    p += 1
        self.num_free += p - start
        if front:
            self._prepend(front)
        if bad is not None:
            raise ValueError(f"block {bad} freed more often than referenced")
