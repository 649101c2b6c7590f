"""A built engine + workload + exporter advanced in simulated time, its ``vllm:cache_config_info``
labels, and ``--record``: snapshots of the exporter written as a recording (docs/metrics.md, "Recordings").
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvpilot.commands._common import fail, fail_input
from kvpilot.text.errors import InputError

if TYPE_CHECKING:
    from kvpilot.engine.core import Engine
    from kvpilot.engine.scenarios import ScenarioOverrides
    from kvpilot.engine.workloads import WorkloadSpec
    from kvpilot.metrics.recording import Snapshot
    from kvpilot.text.documents import JsonValue


def engine_call(what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run an engine-side call; its :class:`~kvpilot.text.errors.InputError` (a bad flag, workload or trace
    field, an unknown scenario) becomes exit 2, the line naming ``what`` (``scenario healthy``, ``--vllm-args``)
    and the field.

    A plain ``ValueError``/``KeyError`` is an engine value the engine did not name (a bug to fix where it is
    raised); it still exits 2 with one line, never a traceback.
    """
    try:
        return fn(*args, **kwargs)
    except InputError as exc:
        fail_input(exc, what)
    except (ValueError, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        fail(f"{what}: {message}")


def cache_config_labels(engine: Engine) -> dict[str, str]:
    """The ``vllm:cache_config_info`` labels for a built engine, as vLLM ``str()``s CacheConfig fields.

    Keys: ``block_size``, ``num_gpu_blocks`` (usable + the null block), ``gpu_memory_utilization``,
    ``enable_prefix_caching``, ``cache_dtype``, ``kv_cache_size_tokens`` (``num_gpu_blocks x block_size``) and
    ``kv_cache_max_concurrency`` (:func:`kvpilot.kv.capacity.max_concurrency`, two decimals, as vLLM's "Maximum
    concurrency for N tokens per request" log line); the exporter recomputes both from the blocks for vLLM 0.29+.
    """
    from kvpilot.kv.capacity import blocks_per_request, max_concurrency

    config = engine.config
    concurrency = max_concurrency(engine.num_gpu_blocks, blocks_per_request(config.max_model_len, engine.block_size))
    return {
        "block_size": str(engine.block_size),
        "num_gpu_blocks": str(engine.num_gpu_blocks),
        "kv_cache_size_tokens": str(engine.kv_cache_tokens),
        "kv_cache_max_concurrency": f"{concurrency:.2f}",
        "gpu_memory_utilization": str(config.gpu_memory_utilization),
        "enable_prefix_caching": str(bool(config.enable_prefix_caching)),
        "cache_dtype": str(config.kv_cache_dtype),
    }


def json_number(value: JsonValue, kind: type[int] | type[float]) -> int | float:
    """``kind(value)`` of a value a document gives: a number or a numeral; TypeError or ValueError otherwise (as
    ``kind`` raises them).
    """
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"{value!r} is not a number")
    return kind(value)


class Simulation:
    """A built engine + workload + exporter, advanced in simulated seconds (thread-safe ``advance_to``).

    Args:
        scenario: scenario name; ``overrides`` as :func:`kvpilot.engine.scenarios.resolve` takes them.
        horizon: simulated seconds the run must cover. A Poisson workload bounded by ``duration``
            is stretched to it (scenarios arrive for 300 s by default, a recording may be longer).
        endless: keep arrivals coming forever (``--serve`` without ``--duration``): when a Poisson
            workload runs out, the next chunk of the same length starts where it ended (seed + 1).
        fast_forward: the engine's switch (:class:`~kvpilot.engine.core.Engine`); snapshots and scrapes
            (``advance_to``'s ``t``) end a fast-forwarded stretch, so they see the state stepping would.
    """

    def __init__(
        self,
        scenario: str,
        overrides: ScenarioOverrides,
        vllm_version: str,
        model_name: str | None,
        horizon: float | None = None,
        endless: bool = False,
        fast_forward: bool = True,
    ):
        from kvpilot.engine import scenarios
        from kvpilot.engine.exporter import VLLMMetrics

        spec = engine_call(f"scenario {scenario}", scenarios.resolve, scenario, overrides or None)
        self._wl_spec: WorkloadSpec = spec.workload.copy()
        stretch = self._wl_spec.get("type") == "poisson" and "duration" in self._wl_spec
        if stretch and horizon and horizon > json_number(self._wl_spec["duration"], float):
            spec = engine_call(
                f"scenario {scenario}", scenarios.resolve, spec, {"workload": {"duration": float(horizon)}}
            )
            self._wl_spec = spec.workload.copy()
        self._endless = endless and stretch
        self._chunk = 0
        # Built once without metrics to learn the resolved flags (max_model_len, KV blocks) that
        # the exporter's buckets and cache_config_info need, then for real with the exporter.
        probe, _ = engine_call(f"scenario {scenario}", scenarios.build, spec)
        self.max_model_len = int(probe.config.max_model_len)
        self.model_name = str(model_name or probe.config.served_model_name or probe.config.model)
        self.metrics = engine_call(
            "--vllm-version",
            VLLMMetrics,
            vllm_version=vllm_version,
            model_name=self.model_name,
            cache_config=cache_config_labels(probe),
            max_model_len=self.max_model_len,
        )
        self.engine, self.workload = engine_call(
            f"scenario {scenario}",
            scenarios.build,
            spec,
            metrics=self.metrics,
            keep_finished=False,
            fast_forward=fast_forward,
        )
        self._lock = threading.Lock()

    @property
    def now(self) -> float:
        """Simulated seconds since the start."""
        return float(self.engine.now)

    def _refill(self) -> None:
        from kvpilot.engine.workloads import from_dict

        self._chunk += 1
        spec: WorkloadSpec = {
            **self._wl_spec,
            "start": self.engine.now,
            "seed": json_number(self._wl_spec.get("seed", 0), int) + self._chunk,
            "id_prefix": f"req{self._chunk}",
        }
        self.workload = from_dict(spec)

    def advance_to(self, t: float) -> None:
        """Run the engine until simulated time ``t`` (s); idle time passes when nothing is left to do."""
        with self._lock:
            if t <= self.engine.now:
                return
            if self._endless and self.workload.next_arrival_time() is None:
                self._refill()
            self.engine.run(self.workload, until=t)


def record(sim: Simulation, path: Path, duration: float, interval: float, end: float) -> tuple[int, float, float]:
    """Drive ``sim`` for ``duration`` simulated seconds and write a recording to ``path``.

    One snapshot at simulated 0, interval, 2·interval, … ≤ duration; timestamps are shifted so the
    last snapshot lands on ``end`` (Unix seconds). Returns ``(sample lines, first ts, last ts)``.
    """
    from kvpilot.metrics.recording import write_recording

    steps = int(duration // interval)
    offset = end - steps * interval

    def snapshots() -> Iterator[Snapshot]:
        for k in range(steps + 1):
            sim.advance_to(k * interval)
            yield offset + k * interval, sim.metrics.collect()

    lines = write_recording(snapshots(), path)
    return lines, offset, offset + steps * interval
