"""The numbers one simulated server may be given: every :class:`kvpilot.engine.config.EngineConfig` field's
range, and the size of the block pool the engine allocates up front.

Each bound keeps a run finite and within memory, far above any real server: a count of sequences or tokens
fits a signed 32-bit int (vLLM's scheduler and CUDA graphs hold them so); a byte count is at most 1 PiB; a
rate or bandwidth is positive and finite (it divides); a fraction is in (0, 1]; the step overhead is 0 to
60 s. :data:`MAX_GPU_BLOCKS` bounds the pool: the engine holds one list entry per block (about 40 bytes:
40,000,000 blocks measured 1.6 GB), and 4,194,304 blocks (170 MB) is 4x the largest pool a 192 GB GPU gives
a 0.5B model's KV (12 KiB/token: 16 M tokens = 1 M blocks of 16).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

#: Physical KV blocks of one simulated server, the null block included (see the module docstring).
MAX_GPU_BLOCKS: Final = 4_194_304
#: A count of sequences or tokens: a signed 32-bit int.
MAX_COUNT: Final = 2**31 - 1
#: A byte count: 1 PiB.
MAX_BYTES: Final = 2**50
#: Bytes per second of a link: 1 PB/s, a thousand times an HBM3e stack's.
MAX_BANDWIDTH: Final = 1e15
#: Simulated seconds of fixed cost per engine step.
MAX_STEP_OVERHEAD: Final = 60.0
#: A trace's latest arrival time, seconds: 10^10 (the year 2286 as Unix seconds), so a trace in Unix time
#: replays; a negative, infinite or NaN time is no arrival.
MAX_TRACE_TIME: Final = 1e10
#: A lognormal length's sigma: e^(10 x 8), the draw of an 8-sigma tail, still a finite float.
MAX_LOGNORMAL_SIGMA: Final = 10.0


@dataclass(frozen=True)
class Bound:
    """``low <= value <= high`` (``low < value`` when ``open_low``); a float must also be finite."""

    low: float
    high: float
    open_low: bool = False

    def problem(self, value: float) -> str | None:
        """Why ``value`` is out of range (a phrase), or None."""
        if isinstance(value, float) and not math.isfinite(value):
            return f"{value} is not a finite number"
        if value < self.low or (self.open_low and value == self.low) or value > self.high:
            opening = "(" if self.open_low else "["
            return f"must be in {opening}{_shown(self.low)}, {_shown(self.high)}], got {_shown(value)}"
        return None


def _shown(value: float) -> str:
    text = f"{value:,}" if isinstance(value, int) else f"{value:g}"
    return text if len(text) <= 40 else text[:37] + "..."


#: Largest efficiency (a fraction of the profile's peak) a calibrated replay may use: a thousand times the profile.
MAX_EFFICIENCY: Final = 1000.0

#: Every numeric field of ``EngineConfig`` -> its range.
FIELD_BOUNDS: Final[dict[str, Bound]] = {
    "block_size": Bound(1, 2**16),
    "num_gpu_blocks": Bound(0, MAX_GPU_BLOCKS),  # below 2: the null block's own message (config.py)
    "kv_cache_tokens": Bound(0, MAX_COUNT),
    "max_num_seqs": Bound(1, MAX_COUNT),
    "max_num_batched_tokens": Bound(1, MAX_COUNT),
    "max_model_len": Bound(1, MAX_COUNT),
    "kv_offload_cpu_bytes": Bound(0, MAX_BYTES),
    "offload_chunk_tokens": Bound(1, MAX_COUNT),
    "offload_load_bandwidth": Bound(0, MAX_BANDWIDTH, open_low=True),
    "offload_store_bandwidth": Bound(0, MAX_BANDWIDTH, open_low=True),
    "bytes_per_token": Bound(1, MAX_BYTES),
    "tensor_parallel_size": Bound(1, 1024),
    "gpu_memory_utilization": Bound(0, 1, open_low=True),
    "non_kv_reserve_bytes": Bound(0, MAX_BYTES),
    "weight_bytes": Bound(0, MAX_BYTES),
    # fractions of the GPU profile's peak; a replay calibrated to a server's measured step time divides them by its
    # factor, which exceeds 1 where the server is faster than the profile's roofline (another model or device)
    "bandwidth_efficiency": Bound(0, MAX_EFFICIENCY, open_low=True),
    "compute_efficiency": Bound(0, MAX_EFFICIENCY, open_low=True),
    "step_overhead": Bound(0, MAX_STEP_OVERHEAD),
}
