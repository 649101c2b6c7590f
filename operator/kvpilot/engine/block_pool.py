"""vLLM V1's KV block pool: fixed-size blocks, an LRU free queue, prefix-cache hashing, held as extents.

Model of ``vllm/v1/core/block_pool.py`` (``BlockPool``), ``vllm/v1/core/kv_cache_utils.py``
(``FreeKVCacheBlockQueue``, ``hash_block_tokens``, ``KVCacheBlock``) and the block tables of
``vllm/v1/core/single_type_kv_cache_manager.py`` as of vLLM v0.21-v0.33. What it does, block by block, is
vLLM's:

- ``num_blocks`` physical blocks of ``block_size`` tokens; block 0 is the reserved *null block*
  (``BlockPool.__init__`` pops it from the free queue and never frees it), so ``num_blocks - 1``
  are usable (docs/background.md §4: 21,520 tokens / 16 = 1,345 blocks, 1,344 usable). The free queue starts
  as blocks 1, 2, ..., ``num_blocks - 1``.
- Allocation takes blocks from the *front* of the free queue (``get_new_blocks``) and evicts the hash a popped
  block still carries (``_maybe_evict_cached_block``): LRU.
- A full block gets a hash standing for its whole token prefix plus extra keys (LoRA id, cache salt)
  (``hash_block_tokens(parent_hash, token_ids, extra_keys)``); only full blocks are hashed, when they are
  scheduled (``cache_full_blocks``). A lookup returns the longest cached prefix of a request's hashes
  (``find_longest_cache_hit``); a hit on a free block takes it out of the middle of the queue
  (``FreeKVCacheBlockQueue.remove``) and every hit block gains a reference (``touch``).
- A request's blocks are freed *tail first* (``free_blocks`` passes them reversed). Blocks reaching zero
  references keep their hash; those *without* a hash go to the *front* of the queue (reused first), hashed
  ones to the back: vLLM PR #42656 (v0.21, "blocks without hash get evicted first"); with caching disabled
  everything goes to the back (PR #48017). This ordering is what makes the §9 reversed pass hit 21,488 tokens
  (1,343 of 1,344 blocks); with plain tail appends it would be 21,376.
- ``usage()`` = 1 - free / (num_blocks - 1), free including cached-but-evictable blocks
  (``BlockPool.get_usage``), the value of ``vllm:kv_cache_usage_perc``.
- Duplicates: vLLM registers every full block, even when a block with the same hash is already cached (block
  tables stay append-only); a lookup returns the first one registered that is still cached
  (``cached_block_hash_to_block``: a dict per hash in insertion order). So here: the first holder of a hash is
  the one found, later ones keep their hash (they are freed to the back) and are found once every earlier holder
  is evicted.

**Extents.** vLLM keeps one object per block; a prompt of 1,000 tokens costs 63 of each operation. Here the
blocks are held in *extents*: consecutive blocks of one block table that share one reference count (the tables
holding them), one hash run (block ``i`` of the extent has hash ``h0 + i * block_size``, or no hash at all),
one place in the free queue, and one entry in the hash index. A prompt's blocks are one extent from
allocation to eviction: allocating, hashing and freeing them are a handful of list operations whatever their
number. An extent is split only where the block-level model would treat its blocks differently: a lookup hits
part of it, an eviction takes part of it from the front of the queue, or a duplicate hash is promoted.

Hashes (:func:`block_hash_value`): ``(family << 64) + offset``, where the family names a prompt segment and
everything before it and the offset is the token count from the segment's start to the block's end
(``Request.hash_runs`` makes them). The blocks ending in one segment so have consecutive hashes ``h, h +
block_size, ...``; a hash's family is ``h >> 64``, and the index keeps, per family, the extents holding its
hashes (usually one).

The free queue is a doubly linked list of extents. A free extent's blocks are in the queue in the *reverse*
of its table order (a table is freed tail first): the block at the front of the queue is its last id, so
taking ``n`` blocks from the front takes the end of its id list, and the hashes evicted first are the ends of
prefix chains, as in vLLM.

``tests/unit/engine/test_block_pool.py`` checks the operations against hand-computed block ids, hashes and
queue orders on both sides of each split, and against a per-block model of vLLM's pool on random sequences of
operations.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Iterable, Sequence
from typing import Final, TypedDict

BlockHash = int

#: Bits of a block hash below its family (:func:`block_hash_value`).
FAMILY_SHIFT: Final = 64


def hash_block(parent: Hashable | None, content: Hashable, extra_keys: Hashable = None) -> int:
    """Chained hash: ``hash((parent, content, extra_keys))``.

    Args:
        parent: the previous link of the chain, ``None`` at its start.
        content: identity of what the link adds (any hashable).
        extra_keys: LoRA id, cache salt, multimodal hashes (``None`` when absent).

    Returns:
        an ``int``; equal chains give equal values, and one differing early link changes every later value.
        Source: ``hash_block_tokens`` in vllm/v1/core/kv_cache_utils.py (vLLM uses sha256 or the builtin hash of
        the same tuple).
    """
    return hash((parent, content, extra_keys))


def block_hash_value(family: int, offset: int) -> BlockHash:
    """A block's hash: ``(family << 64) + offset`` (``0 < offset < 2**64``, the block's end in its segment)."""
    return (family << FAMILY_SHIFT) + offset


class _Ext:
    """Consecutive blocks of one block table with one reference count, one hash run and one place in the queue.

    ``ids``: block ids in table order. ``h0``: the hash of ``ids[0]`` (``ids[i]`` has ``h0 + i * block_size``),
    None when unhashed. ``dup``: its hashes are all held by an earlier-registered block (not found by lookups).
    ``seq``: registration order (duplicates are promoted in it). ``holders``: the tables holding it (its
    reference count is their number; ``[]``: free, in the queue). ``prev``/``next``: free-queue links (``_NOWHERE`` when
    not in the queue). ``fl``: its family's list of extents in the hash index (None once it left the index).

    No extent refers to itself, and one evicted whole leaves its family's list: an extent a table dropped or an
    eviction took is freed by its reference count as soon as nothing holds it, not by the cyclic garbage
    collector (a run creates tens of thousands, and collecting them took about a third of the engine's time).
    """

    __slots__ = ("ids", "h0", "dup", "seq", "holders", "prev", "next", "fl")

    def __init__(
        self, ids: list[int], h0: BlockHash | None, holders: list[BlockTable], detached_link: bool = False
    ) -> None:
        self.ids = ids
        self.h0 = h0
        self.dup = False
        self.seq = 0
        self.holders = holders
        # detached_link: this is _NOWHERE itself, the one extent that links to itself
        self.prev: _Ext = self if detached_link else _NOWHERE
        self.next: _Ext = self.prev
        self.fl: list[_Ext] | None = None


#: The free-queue link of every extent not in a queue (``_Ext.prev``/``next``).
_NOWHERE: Final = _Ext([], None, [], detached_link=True)


class BlockTable:
    """One request's blocks, in order: hashed extents (its prefix-cache hits and the full blocks it computed),
    then at most one extent of unhashed blocks. Built and changed only by :class:`BlockPool`.
    """

    __slots__ = ("exts",)

    def __init__(self) -> None:
        self.exts: list[_Ext] = []

    def __len__(self) -> int:
        return sum([len(e.ids) for e in self.exts])

    def block_ids(self) -> list[int]:
        """Block ids in table order (a new list)."""
        out: list[int] = []
        for e in self.exts:
            out += e.ids
        return out


class Hit:
    """What :meth:`BlockPool.lookup` found: ``pieces`` (extent, first block, blocks), ``num_blocks`` in all and
    ``num_free`` of them in the free queue (they count against the free blocks when admitting).
    """

    __slots__ = ("pieces", "num_blocks", "num_free")

    def __init__(self) -> None:
        self.pieces: list[tuple[_Ext, int, int]] = []
        self.num_blocks = 0
        self.num_free = 0


NO_HIT: Final = Hit()  # shared by every lookup that finds nothing: never mutated


class PoolSnapshot(TypedDict):
    """The pool block by block (:meth:`BlockPool.snapshot`), for tests."""

    queue: list[int]
    ref_cnt: list[int]
    block_hash: list[BlockHash | None]
    cached: dict[BlockHash, int]
    dups: dict[BlockHash, list[int]]
    num_evictions: int
    num_free: int


class BlockPool:
    """Physical KV blocks, their reference counts and prefix-cache hashes, as extents (module docstring).

    Args:
        num_blocks: total physical blocks including the null block 0 (>= 2).
        block_size: tokens per block (> 0).
        enable_caching: prefix caching on (``--enable-prefix-caching``).

    Raises:
        ValueError: ``num_blocks < 2`` or ``block_size < 1``.

    Attributes: ``num_free`` (blocks in the free queue), ``num_evictions`` (hashed blocks reused, vLLM's
    evicted blocks).
    """

    __slots__ = ("num_blocks", "block_size", "enable_caching", "num_free", "num_evictions", "_head", "_fam", "_seq")

    def __init__(self, num_blocks: int, block_size: int = 16, enable_caching: bool = True) -> None:
        if num_blocks < 2:
            raise ValueError(f"num_blocks must be >= 2 (block 0 is the null block), got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.num_free = num_blocks - 1
        self.num_evictions = 0
        self._fam: dict[int, list[_Ext]] = {}
        self._seq = 0
        head = self._head = _Ext([], None, [])  # the queue's sentinel: head.next is the front, head.prev the back
        first = _Ext(list(range(num_blocks - 1, 0, -1)), None, [])  # queue order is reversed ids: 1, 2, ...
        head.next = head.prev = first
        first.prev = first.next = head

    # ------------------------------------------------------------------ reading
    def usage(self) -> float:
        """KV usage 0-1: ``1 - free / (num_blocks - 1)`` (``BlockPool.get_usage``)."""
        return 1.0 - self.num_free / (self.num_blocks - 1)

    def num_cached_blocks(self) -> int:
        """Blocks currently findable by hash (in use or evictable)."""
        return sum(len(e.ids) for fl in self._fam.values() for e in fl if not e.dup)

    def free_queue(self) -> list[int]:
        """Block ids in the free queue, front (evicted first) to back. O(blocks); for tests."""
        out: list[int] = []
        head = self._head
        e = head.next
        while e is not head:
            out += e.ids[::-1]
            e = e.next
        return out

    def snapshot(self, tables: Iterable[BlockTable]) -> PoolSnapshot:
        """The pool block by block, for tests: ``queue`` (:meth:`free_queue`), ``ref_cnt`` and ``block_hash`` (lists
        indexed by block id), ``cached`` ({hash: the block a lookup finds}), ``dups`` ({hash: later holders in
        registration order}), ``num_evictions``, ``num_free``. ``tables``: every table holding blocks.
        """
        bs = self.block_size
        ref = [0] * self.num_blocks
        bh: list[BlockHash | None] = [None] * self.num_blocks
        exts: dict[int, _Ext] = {}
        head = self._head
        e = head.next
        while e is not head:
            exts[id(e)] = e
            e = e.next
        for t in tables:
            for x in t.exts:
                exts[id(x)] = x
        cached: dict[BlockHash, int] = {}
        dups: dict[BlockHash, list[tuple[int, int]]] = {}
        for x in exts.values():
            for i, b in enumerate(x.ids):
                ref[b] = len(x.holders)
                if x.h0 is not None:
                    h = bh[b] = x.h0 + i * bs
                    if x.dup:
                        dups.setdefault(h, []).append((x.seq, b))
                    else:
                        cached[h] = b
        return {
            "queue": self.free_queue(),
            "ref_cnt": ref,
            "block_hash": bh,
            "cached": dict(sorted(cached.items())),
            "dups": {h: [b for _, b in sorted(v)] for h, v in sorted(dups.items())},
            "num_evictions": self.num_evictions,
            "num_free": self.num_free,
        }

    # ------------------------------------------------------------------ lookups
    def lookup(self, runs: Sequence[tuple[BlockHash, int]], max_blocks: int) -> Hit:
        """Longest cached prefix of a request's block hashes, stopping at the first miss.

        Args:
            runs: the request's hashes from its first block on, as ``(first hash, blocks)`` runs of consecutive
                hashes (``Request.hash_runs``).
            max_blocks: at most this many blocks (the caller passes ``(num_tokens - 1) // block_size`` so the
                last prompt token is always recomputed: ``max_cache_hit_length = request.num_tokens - 1`` in
                vllm/v1/core/kv_cache_manager.py ``get_computed_blocks``).

        Returns:
            a :class:`Hit` (nothing referenced yet: :meth:`take` does it). Empty when caching is off.
        """
        if not self.enable_caching or max_blocks <= 0 or not runs:
            return NO_HIT
        fam = self._fam
        if runs[0][0] >> FAMILY_SHIFT not in fam:  # the common miss
            return NO_HIT
        bs = self.block_size
        hit = Hit()
        left = max_blocks
        for h, c in runs:
            c = min(c, left)
            while c > 0:
                e = _primary_at(fam.get(h >> FAMILY_SHIFT), h, bs)
                if e is None:
                    return hit if hit.num_blocks else NO_HIT
                h0 = e.h0
                if h0 is None:
                    raise _unhashed_in_index()
                j = (h - h0) // bs
                m = min(len(e.ids) - j, c)
                hit.pieces.append((e, j, m))
                hit.num_blocks += m
                if not e.holders:
                    hit.num_free += m
                h += m * bs
                c -= m
                left -= m
            if left <= 0:
                break
        return hit if hit.num_blocks else NO_HIT

    # ------------------------------------------------------------------ changing tables
    def take(self, table: BlockTable, hit: Hit) -> None:
        """Append the blocks of ``hit`` (the last :meth:`lookup`, nothing changed since) to ``table``: free ones
        leave the queue, each gains a reference (``touch``).
        """
        exts = table.exts
        for e, j, m in hit.pieces:
            if j or m < len(e.ids):
                e = self._split(e, j, m)
            if not e.holders:
                self._unlink(e)
                self.num_free -= m
            e.holders.append(table)
            exts.append(e)

    def grow(self, table: BlockTable, n: int) -> None:
        """Append ``n`` blocks from the front of the free queue to ``table`` (``get_new_blocks``).

        Raises:
            ValueError: fewer than ``n`` free blocks.
        """
        if n > self.num_free:
            raise ValueError(f"cannot get {n} free blocks from the pool ({self.num_free} free)")
        if n <= 0:
            return
        fids = self._front_ids(n)
        if fids is not None:
            ids = fids[-n:][::-1]
            del fids[-n:]
        else:
            ids = self._pop(n)
        exts = table.exts
        if exts and exts[-1].h0 is None:
            exts[-1].ids += ids
        else:
            exts.append(_Ext(ids, None, [table]))

    def open_tail(self, table: BlockTable) -> list[int]:
        """The ids of ``table``'s unhashed last extent (an empty one appended when it has none), for
        :meth:`grow_tails`: stable until ``table`` is hashed, grown by :meth:`grow` or released.
        """
        exts = table.exts
        if exts and exts[-1].h0 is None:
            return exts[-1].ids
        e = _Ext([], None, [table])
        exts.append(e)
        return e.ids

    def grow_tails(self, tails: Collection[list[int]]) -> None:
        """One block from the front of the queue for each of ``tails`` (:meth:`open_tail`), in order: ``grow(t, 1)``
        for each table.

        Raises:
            ValueError: fewer free blocks than tails.
        """
        n = len(tails)
        if n > self.num_free:
            raise ValueError(f"cannot get {n} free blocks from the pool ({self.num_free} free)")
        ids = self._front_ids(n)
        if ids is not None:
            for tail in tails:  # ids.pop() itself, not a bound method: compiled, that is a direct call
                tail.append(ids.pop())
            return
        taken = self._pop(n)  # exactly n
        for i, tail in enumerate(tails):  # not zip(..., strict=True): a Python call, compiled or not
            tail.append(taken[i])

    def grow_runs(self, runs: Sequence[tuple[list[int], int]]) -> None:
        """``n`` blocks from the front of the queue for each ``(tail, n)`` of ``runs`` (:meth:`open_tail`), in order:
        ``grow(t, n)`` for each table in turn (:meth:`grow_tails` with counts).

        Raises:
            ValueError: fewer free blocks than the runs ask for.
        """
        n = 0
        for _, k in runs:
            n += k
        if n > self.num_free:
            raise ValueError(f"cannot get {n} free blocks from the pool ({self.num_free} free)")
        ids = self._front_ids(n)
        if ids is not None:  # the blocks are the end of the front extent's ids, last first
            pos = len(ids)
            for tail, k in runs:
                tail += ids[pos - k : pos][::-1]
                pos -= k
            del ids[pos:]
            return
        taken = self._pop(n)
        pos = 0
        for tail, k in runs:
            tail += taken[pos : pos + k]
            pos += k

    def may_hit(self, first_hash: BlockHash | None) -> bool:
        """Some block of ``first_hash``'s family is cached (else a lookup starting with it finds nothing)."""
        return first_hash is not None and first_hash >> FAMILY_SHIFT in self._fam

    def cache(self, table: BlockTable, runs: Sequence[tuple[BlockHash, int]]) -> None:
        """Hash the first unhashed blocks of ``table`` with ``runs`` (``cache_full_blocks``).

        Args:
            table: a table ending in unhashed blocks.
            runs: ``(first hash, blocks)`` runs of consecutive hashes for its first unhashed blocks, in order.

        Raises:
            ValueError: the runs cover more blocks than the table's unhashed ones.
        """
        if not self.enable_caching:
            return
        bs = self.block_size
        fam = self._fam
        exts = table.exts
        for h, c in runs:
            tail = exts[-1] if exts else None
            if tail is None or tail.h0 is not None or c > len(tail.ids):
                raise ValueError(f"cache: {c} blocks to hash, the table has fewer unhashed blocks")
            ids = tail.ids
            fl = fam.get(h >> FAMILY_SHIFT)
            if fl is None:  # the family's first blocks (a prompt's own, a request's generated tokens)
                e = self._carve(table, tail, h, c)
                self._seq += 1
                e.seq = self._seq
                e.fl = fam[h >> FAMILY_SHIFT] = [e]
                continue
            prev = exts[-2] if len(exts) > 1 else None
            if (
                prev is not None
                and prev.fl is fl
                and not prev.dup
                and len(prev.holders) == 1
                and prev.h0 is not None
                and prev.h0 + len(prev.ids) * bs == h
                and (len(fl) == 1 or not _overlaps(fl, h, c, bs))
            ):  # continues the table's previous extent (a chunk, a decode's next block), nobody else has the hashes
                if c == len(ids):
                    prev.ids += ids
                    exts.pop()
                else:
                    prev.ids += ids[:c]
                    del ids[:c]
                continue
            if _overlaps(fl, h, c, bs):
                self._cache_duplicates(table, h, c)
                continue
            self._register(self._carve(table, tail, h, c))

    def _carve(self, table: BlockTable, tail: _Ext, h: BlockHash, c: int) -> _Ext:
        """The first ``c`` blocks of ``table``'s unhashed ``tail`` as an extent with hashes from ``h`` (not indexed)."""
        ids = tail.ids
        if c == len(ids):
            tail.h0 = h
            return tail
        e = _Ext(ids[:c], h, [table])
        del ids[:c]
        table.exts.insert(-1, e)
        return e

    def release(self, table: BlockTable) -> None:
        """Drop ``table``'s reference on each of its blocks, tail first (``free_blocks``), and empty it.

        Blocks reaching zero references go back to the queue: unhashed ones to the front (the table's last block
        first), hashed ones to the back, keeping their hash; with caching off all to the back.
        """
        caching = self.enable_caching
        head = self._head
        front: list[_Ext] = []
        freed = 0
        for e in reversed(table.exts):
            hs = e.holders
            if not e.ids:  # an empty tail (open_tail)
                continue
            if len(hs) > 1:
                hs.remove(table)
                continue
            hs.clear()
            freed += len(e.ids)
            if caching and e.h0 is None:
                front.append(e)
            else:  # to the back
                last = head.prev
                e.prev = last
                e.next = head
                last.next = e
                head.prev = e
        for e in reversed(front):  # the first freed ends up at the very front
            first = head.next
            e.prev = head
            e.next = first
            first.prev = e
            head.next = e
        self.num_free += freed
        table.exts = []

    # ------------------------------------------------------------------ internals
    def _front_ids(self, n: int) -> list[int] | None:
        """The common case of taking ``n`` blocks from the front of the queue: the front extent has more, and evicting
        them promotes nothing (unhashed, or its family's only extent and no duplicate). Then they are counted as taken
        (free blocks, evictions) and the extent's ids returned: the blocks are the end of the list, last first (the
        caller takes them off); None otherwise (:meth:`_pop`).
        """
        front = self._head.next
        ids = front.ids
        fl = front.fl
        if len(ids) > n and (front.h0 is None or (fl is not None and len(fl) == 1 and not front.dup)):
            if front.h0 is not None:
                self.num_evictions += n
            self.num_free -= n
            return ids
        return None

    def _pop(self, n: int) -> list[int]:
        """Take ``n`` blocks from the front of the queue (``popleft_n``), evicting their hashes; queue order."""
        out: list[int] = []
        head = self._head
        while n > 0:
            e = head.next
            ids = e.ids
            m = len(ids)
            if m <= n:
                nxt = e.next
                head.next = nxt
                nxt.prev = head
                e.prev = e.next = _NOWHERE
                out += ids[::-1]
                if e.h0 is not None:
                    self._evict(e, 0, m, True)
                n -= m
            else:
                taken = ids[m - n :]
                taken.reverse()
                out += taken
                del ids[m - n :]
                if e.h0 is not None:
                    self._evict(e, m - n, m, False)
                n = 0
        self.num_free -= len(out)
        return out

    def _evict(self, e: _Ext, j: int, k: int, whole: bool) -> None:
        """Blocks ``j..k-1`` of hashed extent ``e`` leave the pool's index (``e`` keeps blocks ``0..j-1``)."""
        self.num_evictions += k - j
        fl = e.fl
        if fl is None or e.h0 is None:
            raise _unhashed_in_index()
        if whole:
            e.fl = None
            if len(fl) == 1:
                del self._fam[e.h0 >> FAMILY_SHIFT]
                return
            fl.remove(e)
        elif len(fl) == 1:
            return
        if e.dup or not any(x.dup for x in fl):
            return
        bs = self.block_size
        for h in range(e.h0 + j * bs, e.h0 + k * bs, bs):  # a primary with duplicates: promote the earliest
            found = _earliest_duplicate(fl, h, bs)
            if found is not None:
                self._split(*found, 1).dup = False

    def _register(self, e: _Ext, dup: bool = False) -> None:
        """Enter hashed extent ``e`` in the index (registration order ``seq``)."""
        if e.h0 is None:
            raise _unhashed_in_index()
        self._seq += 1
        e.seq = self._seq
        e.dup = dup
        key = e.h0 >> FAMILY_SHIFT
        fl = self._fam.get(key)
        if fl is None:
            fl = self._fam[key] = []
        fl.append(e)
        e.fl = fl

    def _cache_duplicates(self, table: BlockTable, h: BlockHash, c: int) -> None:
        """:meth:`cache` for a run some of whose hashes are held already: those blocks become duplicates."""
        bs = self.block_size
        exts = table.exts
        tail = exts[-1]
        fl = self._fam[h >> FAMILY_SHIFT]
        i = 0
        while i < c:
            held = _overlaps(fl, h + i * bs, 1, bs)
            k = i + 1
            while k < c and _overlaps(fl, h + k * bs, 1, bs) == held:
                k += 1
            if k - i == len(tail.ids):
                e = tail
                e.h0 = h + i * bs
            else:
                e = _Ext(tail.ids[: k - i], h + i * bs, [table])
                del tail.ids[: k - i]
                exts.insert(len(exts) - 1, e)
            self._register(e, held)
            i = k

    def _split(self, e: _Ext, j: int, m: int) -> _Ext:
        """Cut ``e`` into blocks ``[0, j)``, ``[j, j + m)`` and the rest (empty parts left out), each where ``e``
        was (its tables, the queue, the index); return the middle part.
        """
        ids = e.ids
        n = len(ids)
        bs = self.block_size
        h0 = e.h0
        parts = []
        for a, b in ((0, j), (j, j + m), (j + m, n)):
            if a < b:
                parts.append((a, b))
        first_a, first_b = parts[0]
        new: list[_Ext] = []
        for a, b in parts[1:]:
            x = _Ext(ids[a:b], None if h0 is None else h0 + a * bs, list(e.holders))
            x.dup = e.dup
            x.seq = e.seq
            x.fl = e.fl
            new.append(x)
        del ids[first_b:]
        if not new:
            return e
        if e.holders:
            for t in e.holders:
                i = t.exts.index(e)
                t.exts[i + 1 : i + 1] = new
        else:  # in the queue: its parts in reverse table order, where it was
            anchor = e
            for x in new:
                p = anchor.prev
                x.prev = p
                x.next = anchor
                p.next = x
                anchor.prev = x
                anchor = x
        if e.fl is not None:
            e.fl.extend(new)
        return e if j == 0 else new[0]

    def _unlink(self, e: _Ext) -> None:
        p, x = e.prev, e.next
        p.next = x
        x.prev = p
        e.prev = e.next = _NOWHERE


def _unhashed_in_index() -> RuntimeError:
    """The error for an extent without a hash where only hashed ones belong (the hash index): a broken invariant."""
    return RuntimeError("block pool: an extent without a hash in the hash index")


def _covers(e: _Ext, h: BlockHash, bs: int) -> bool:
    h0 = e.h0
    if h0 is None:
        raise _unhashed_in_index()
    d = h - h0
    return 0 <= d < len(e.ids) * bs and d % bs == 0


def _earliest_duplicate(fl: list[_Ext], h: BlockHash, bs: int) -> tuple[_Ext, int] | None:
    """The earliest-registered duplicate extent of ``fl`` holding hash ``h`` and that block's index in it."""
    best, at = None, 0
    for x in fl:
        h0 = x.h0
        if x.dup and h0 is not None and _covers(x, h, bs) and (best is None or x.seq < best.seq):
            best, at = x, (h - h0) // bs
    return None if best is None else (best, at)


def _primary_at(fl: list[_Ext] | None, h: BlockHash, bs: int) -> _Ext | None:
    """The extent whose block a lookup of ``h`` finds (not a duplicate), None when ``h`` is not cached."""
    if fl is not None:
        for e in fl:
            if not e.dup and _covers(e, h, bs):
                return e
    return None


def _overlaps(fl: list[_Ext], h: BlockHash, c: int, bs: int) -> bool:
    """Some extent of ``fl`` holds one of the hashes ``h, h + bs, ..., h + (c - 1) * bs``."""
    last = h + (c - 1) * bs
    for e in fl:
        h0 = e.h0
        if h0 is None:
            raise _unhashed_in_index()
        end = h0 + (len(e.ids) - 1) * bs
        if h0 <= last and h <= end and (h - h0) % bs == 0:
            return True
    return False
