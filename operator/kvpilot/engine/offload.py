"""An LMCache-like CPU tier for KV: fixed-size chunks, its own capacity, LRU eviction.

Model of LMCache's local CPU backend behind vLLM's KV connector (LMCacheConnectorV1):

- KV is saved in chunks of ``chunk_tokens`` (LMCache ``chunk_size``, default 256) as a request's
  prompt is computed; only *full* chunks are kept, so lookups hit in multiples of 256 tokens
  (docs/background.md §9: 10 documents x 19 full chunks = 48,640 external tokens).
- A chunk's key is the prefix hash at its last token (here: the GPU block hash of its last block,
  which chains the whole prefix), so like GPU blocks only prefixes match.
- Capacity ``capacity_bytes // (chunk_tokens * bytes_per_token)`` chunks (LMCache
  ``max_local_cpu_size``); a full tier evicts its least recently used chunk (LMCache's default
  LRU policy); a hit refreshes the chunk.
- Loading and storing cost ``tokens * bytes_per_token / bandwidth`` seconds, added to the step.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence


class CPUOffloadTier:
    """Chunks of KV kept in CPU memory.

    Args:
        capacity_bytes: CPU bytes for KV (> 0).
        chunk_tokens: tokens per chunk.
        bytes_per_token: KV bytes per token.
        load_bandwidth, store_bandwidth: bytes/s CPU->GPU and GPU->CPU.
    """

    def __init__(
        self,
        capacity_bytes: int,
        chunk_tokens: int,
        bytes_per_token: int,
        load_bandwidth: float,
        store_bandwidth: float,
    ) -> None:
        self.chunk_tokens = chunk_tokens
        self.capacity_chunks = int(capacity_bytes // (chunk_tokens * bytes_per_token))
        self.load_time_per_token = bytes_per_token / load_bandwidth
        self.store_time_per_token = bytes_per_token / store_bandwidth
        self._lru: OrderedDict[Hashable, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._lru)

    def lookup(self, keys: Sequence[Hashable]) -> int:
        """Number of leading chunks of ``keys`` present (a prefix), refreshing them as MRU."""
        lru = self._lru
        n = 0
        for key in keys:
            if key not in lru:
                break
            lru.move_to_end(key)
            n += 1
        return n

    def store(self, key: Hashable) -> bool:
        """Keep one chunk; evict the LRU chunk when full. Returns True when newly stored."""
        lru = self._lru
        if key in lru:
            lru.move_to_end(key)
            return False
        if self.capacity_chunks <= 0:
            return False
        if len(lru) >= self.capacity_chunks:
            lru.popitem(last=False)
        lru[key] = None
        return True
