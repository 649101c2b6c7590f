"""Drive vLLM's own V1 scheduler, output processor and Prometheus stat logger in simulated time.

Runs inside the vLLM reference venv (``make vllm-ref``), never in kvpilot's: vLLM is imported from
the installed wheel, and nothing of vLLM is copied here. Speaks JSON: a document on stdin, one on
stdout::

    {"workloads": [{"name": str,
                    "config": {"block_size", "num_gpu_blocks", "max_num_seqs", "max_num_batched_tokens",
                               "max_model_len", "enable_prefix_caching", "enable_chunked_prefill",
                               "served_model_name", "hf_config": {...config.json...}},
                    "cost": {"weight_time", "kv_time_per_token", "flop_per_token", "attn_flop", "overhead"},
                    "requests": [{"request_id", "arrival_time", "segments": [[key, length], ...],
                                  "output_len", "finish_reason": "length" | "stop"}],
                    "snapshot_interval": seconds | null, "until": seconds | null,
                    "record_steps": bool}]}
    -> {"vllm_version": str, "results": [{"name", "steps": [...], "snapshots": [[t, families]], ...}]}

How each piece is built (vLLM 0.29.0):

- ``Scheduler(vllm_config, kv_cache_config, structured_output_manager, block_size, log_stats=True)`` as
  vLLM's ``tests/v1/core/utils.py::create_scheduler`` builds it: a ``VllmConfig`` from a
  ``ModelConfig`` on a local folder holding only ``config.json`` (``skip_tokenizer_init=True``,
  ``HF_HUB_OFFLINE=1``, ``VLLM_TARGET_DEVICE=cpu``), and a ``KVCacheConfig`` with ``num_blocks`` given
  directly and one full-attention group.
- Requests enter as ``EngineCore.add_request`` makes them: ``Request.from_engine_core_request`` with
  the block hasher ``EngineCore`` uses (``get_request_block_hasher`` on the configured hash algorithm).
- The model runner is a stand-in: one sampled token for each request whose computed tokens reached
  its token count after ``schedule()`` (a finished prefill or a decode), none for a partial prefill
  chunk. Token ids: each prompt segment ``key`` gets its own id range, so equal leading segments are
  equal tokens; generated tokens are unique per request; the last token of a ``"stop"`` request is
  a stop token id.
- ``update_from_output`` -> ``OutputProcessor.process_outputs(outputs, timestamp, IterationStats())``
  -> ``PrometheusStatLogger.record(scheduler_stats, iteration_stats)``, the order of ``AsyncLLM``'s
  output handler (an ``IterationStats`` only when the step has outputs).
- Time: ``time.time``/``time.monotonic`` are replaced by the simulated clock, which the step time
  advances: ``overhead + max(weight_time + context * kv_time_per_token, tokens * flop_per_token +
  pairs * attn_flop)`` (kvpilot's roofline, ``kvpilot/engine/hardware.py::CostModel.step_time``,
  with the same context/pair sums as ``kvpilot/engine/core.py``), so both sides see the same seconds.
- Metrics are read from prometheus_client's registry vLLM's stat logger fills (``REGISTRY``).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("PYTHONHASHSEED", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")

_REAL_TIME, _REAL_MONOTONIC = time.time, time.monotonic
# vLLM's logger writes to stdout: keep stdout for the JSON answer, send everything else to stderr.
_ANSWER = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)


class SimClock:
    """The simulated clock vLLM reads instead of ``time.time``/``time.monotonic`` (seconds).

    ``now`` counts simulated seconds from the workload's start; vLLM reads ``EPOCH + now``. The
    epoch keeps every timestamp vLLM sees positive: ``IterationStats.update_from_events`` takes a
    ``scheduled_ts`` of 0.0 for "not scheduled yet", which a real monotonic clock never returns.
    """

    EPOCH = 1000.0

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.EPOCH + self.now


CLOCK = SimClock()

GEN_BASE = 1 << 40  # generated token ids: GEN_BASE * (request index + 1) + i, never a prompt token
SEG_STRIDE = 1 << 24  # prompt tokens of segment j: j * SEG_STRIDE + position
STOP_TOKEN = 7  # the stop token id of "stop" requests (no prompt segment id range starts below SEG_STRIDE)


def _imports() -> dict:
    """VLLM's classes, imported only inside the vLLM venv (after the stdout redirection above)."""
    import torch
    from prometheus_client import REGISTRY
    from vllm import SamplingParams
    from vllm.config import CacheConfig, ModelConfig, SchedulerConfig, VllmConfig
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, update_kv_cache_capacity
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.stats import IterationStats
    from vllm.v1.outputs import ModelRunnerOutput
    from vllm.v1.request import Request
    from vllm.v1.structured_output import StructuredOutputManager

    return {
        "torch": torch,
        "REGISTRY": REGISTRY,
        "SamplingParams": SamplingParams,
        "CacheConfig": CacheConfig,
        "ModelConfig": ModelConfig,
        "SchedulerConfig": SchedulerConfig,
        "VllmConfig": VllmConfig,
        "get_hash_fn_by_name": get_hash_fn_by_name,
        "get_request_block_hasher": get_request_block_hasher,
        "init_none_hash": init_none_hash,
        "update_kv_cache_capacity": update_kv_cache_capacity,
        "Scheduler": Scheduler,
        "EngineCoreRequest": EngineCoreRequest,
        "OutputProcessor": OutputProcessor,
        "FullAttentionSpec": FullAttentionSpec,
        "KVCacheConfig": KVCacheConfig,
        "KVCacheGroupSpec": KVCacheGroupSpec,
        "PrometheusStatLogger": PrometheusStatLogger,
        "IterationStats": IterationStats,
        "ModelRunnerOutput": ModelRunnerOutput,
        "Request": Request,
        "StructuredOutputManager": StructuredOutputManager,
    }


V: dict = {}


def build(cfg: dict, workdir: Path):
    """(scheduler, output_processor, stat_logger, block_hasher, vllm_config) for one workload."""
    model_dir = workdir / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(cfg["hf_config"]))
    bs = int(cfg["block_size"])
    scheduler_config = V["SchedulerConfig"](
        max_num_seqs=int(cfg["max_num_seqs"]),
        max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
        max_model_len=int(cfg["max_model_len"]),
        enable_chunked_prefill=bool(cfg["enable_chunked_prefill"]),
        is_encoder_decoder=False,
    )
    model_config = V["ModelConfig"](
        model=str(model_dir),
        tokenizer=str(model_dir),
        skip_tokenizer_init=True,
        dtype="float16",
        seed=0,
        max_model_len=int(cfg["max_model_len"]),
        served_model_name=cfg.get("served_model_name") or None,
    )
    cache_config = V["CacheConfig"](
        block_size=bs,
        gpu_memory_utilization=float(cfg.get("gpu_memory_utilization", 0.9)),
        cache_dtype="auto",
        enable_prefix_caching=bool(cfg["enable_prefix_caching"]),
    )
    vllm_config = V["VllmConfig"](
        scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config
    )
    num_blocks = int(cfg["num_gpu_blocks"])
    kv_cache_config = V["KVCacheConfig"](
        num_blocks=num_blocks,
        kv_cache_tensors=[],
        kv_cache_groups=[
            V["KVCacheGroupSpec"](
                ["layer"], V["FullAttentionSpec"](block_size=bs, num_kv_heads=1, head_size=1, dtype=V["torch"].float32)
            )
        ],
    )
    cache_config.num_gpu_blocks = num_blocks
    V["update_kv_cache_capacity"](vllm_config, kv_cache_config)  # kv_cache_size_tokens / max_concurrency, as a server
    hasher = None
    if cache_config.enable_prefix_caching:
        hash_fn = V["get_hash_fn_by_name"](cache_config.prefix_caching_hash_algo)
        V["init_none_hash"](hash_fn)
        hasher = V["get_request_block_hasher"](bs, hash_fn)
    scheduler = V["Scheduler"](
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=V["StructuredOutputManager"](vllm_config),
        block_size=bs,
        log_stats=True,
    )
    output_processor = V["OutputProcessor"](None, log_stats=True)
    stat_logger = V["PrometheusStatLogger"](vllm_config, engine_indexes=[0])
    stat_logger.log_engine_initialized()
    return scheduler, output_processor, stat_logger, hasher, vllm_config


def snapshot() -> list:
    """The registry's vLLM families now: [[name, type, help, [[sample, labels, value], ...]], ...]."""
    out = []
    for fam in V["REGISTRY"].collect():
        if not fam.name.startswith("vllm:"):
            continue
        samples = [
            [s.name, dict(sorted(s.labels.items())), s.value] for s in fam.samples if not s.name.endswith("_created")
        ]
        out.append([fam.name, fam.type, fam.documentation, samples])
    return out


class Runner:
    """One workload through vLLM's scheduler loop, the way ``EngineCore`` + ``AsyncLLM`` run it."""

    def __init__(self, spec: dict, workdir: Path):
        self.spec = spec
        self.cost = spec["cost"]
        self.sched, self.proc, self.logger, self.hasher, self.vllm_config = build(spec["config"], workdir)
        self.seg_ids: dict[str, int] = {}
        self.pending = sorted(
            (dict(r, _index=i) for i, r in enumerate(spec["requests"])),
            key=lambda r: (float(r["arrival_time"]), r["_index"]),
        )
        self.next_req = 0
        self.meta: dict[str, dict] = {}
        self.steps: list = []
        self.snapshots: list = []

    def tokens(self, segments) -> list[int]:
        out: list[int] = []
        for key, length in segments:
            j = self.seg_ids.setdefault(json.dumps(key), len(self.seg_ids) + 1)
            out.extend(range(j * SEG_STRIDE, j * SEG_STRIDE + int(length)))
        return out

    def add(self, r: dict) -> None:
        rid = str(r["request_id"])
        output_len = int(r["output_len"])
        stop = r.get("finish_reason", "length") == "stop"
        prompt = self.tokens(r["segments"])
        room = int(self.spec["config"]["max_model_len"]) - len(prompt)
        params = V["SamplingParams"](
            # a request that stops by itself was sent without max_tokens: vLLM's default is the room left
            max_tokens=room if stop else min(output_len, room),
            ignore_eos=True,
            stop_token_ids=[STOP_TOKEN] if stop else None,
            detokenize=False,
        )
        params.update_from_generation_config({}, None)
        ecr = V["EngineCoreRequest"](
            request_id=rid,
            prompt_token_ids=prompt,
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=CLOCK.EPOCH + float(r["arrival_time"]),
            lora_request=None,
            cache_salt=None,
            data_parallel_rank=None,
            external_req_id=rid,
        )
        self.meta[rid] = {"index": r["_index"], "output_len": output_len, "stop": stop}
        self.proc.add_request(ecr, None)
        self.sched.add_request(V["Request"].from_engine_core_request(ecr, self.hasher))

    def model_output(self, so):
        req_ids, sampled = [], []
        for rid in so.num_scheduled_tokens:
            req = self.sched.requests[rid]
            req_ids.append(rid)
            if req.num_computed_tokens >= req.num_tokens:
                m = self.meta[rid]
                k = req.num_output_tokens
                if m["stop"] and k + 1 >= m["output_len"]:
                    sampled.append([STOP_TOKEN])
                else:
                    sampled.append([GEN_BASE * (m["index"] + 1) + k])
            else:
                sampled.append([])
        return V["ModelRunnerOutput"](
            req_ids=req_ids, req_id_to_index={r: i for i, r in enumerate(req_ids)}, sampled_token_ids=sampled
        )

    def step_time(self, so) -> tuple[float, int, int]:
        context = pairs = 0
        for rid, n in so.num_scheduled_tokens.items():
            end = self.sched.requests[rid].num_computed_tokens
            c = end - n
            context += end
            pairs += end if n == 1 else n * c + ((n * n + n) >> 1)
        k = self.cost
        t_mem = k["weight_time"] + context * k["kv_time_per_token"]
        t_cmp = so.total_num_scheduled_tokens * k["flop_per_token"] + pairs * k["attn_flop"]
        return k["overhead"] + (t_mem if t_mem > t_cmp else t_cmp), context, pairs

    def arrivals(self) -> None:
        now = CLOCK.now
        while self.next_req < len(self.pending) and float(self.pending[self.next_req]["arrival_time"]) <= now:
            r = self.pending[self.next_req]
            self.next_req += 1
            CLOCK.now = float(r["arrival_time"])  # queued at its arrival, as the API server would hand it on
            self.add(r)
            CLOCK.now = now

    def maybe_snapshot(self, final: bool = False) -> None:
        interval = self.spec.get("snapshot_interval")
        if interval is None:
            if final:
                self.snapshots.append([CLOCK.now, snapshot()])
            return
        while self.next_snap <= CLOCK.now + 1e-12:
            self.snapshots.append([self.next_snap, snapshot()])
            self.next_snap += interval

    def idle_to(self, target: float) -> None:
        """Let time pass with nothing to schedule, logging scheduler stats every interval (AsyncLLM's idle)."""
        interval = self.spec.get("snapshot_interval")
        while CLOCK.now < target:
            nxt = target if interval is None else min(target, self.next_snap)
            if nxt <= CLOCK.now:
                nxt = target
            CLOCK.now = nxt
            self.maybe_snapshot()

    def run(self) -> dict:
        until = self.spec.get("until")
        interval = self.spec.get("snapshot_interval")
        self.next_snap = 0.0 if interval is not None else float("inf")
        self.maybe_snapshot()
        record = self.spec.get("record_steps", True)
        wall0 = _REAL_MONOTONIC()
        sched_wall = 0.0
        while True:
            if until is not None and CLOCK.now >= until:
                break
            self.arrivals()
            if not self.sched.has_requests():
                if self.next_req >= len(self.pending):
                    if until is not None:
                        self.idle_to(until)
                    break
                nxt = float(self.pending[self.next_req]["arrival_time"])
                if until is not None and nxt > until:
                    self.idle_to(until)
                    break
                self.idle_to(nxt)
                continue
            t0 = CLOCK.now
            w0 = _REAL_MONOTONIC()
            so = self.sched.schedule()
            dt, context, pairs = self.step_time(so) if so.total_num_scheduled_tokens else (0.0, 0, 0)
            model_out = self.model_output(so)
            CLOCK.now = t0 + dt
            outputs = self.sched.update_from_output(so, model_out)
            sched_wall += _REAL_MONOTONIC() - w0
            stats = None
            for eco in outputs.values():
                iteration_stats = V["IterationStats"]() if eco.outputs else None
                self.proc.process_outputs(eco.outputs, eco.timestamp, iteration_stats)
                self.proc.update_scheduler_stats(eco.scheduler_stats)
                self.logger.record(scheduler_stats=eco.scheduler_stats, iteration_stats=iteration_stats)
                stats = eco.scheduler_stats
            if record:
                pcs = stats.prefix_cache_stats if stats is not None else None
                self.steps.append(
                    {
                        "start": t0,
                        "duration": dt,
                        "scheduled": dict(so.num_scheduled_tokens),
                        "preempted": sorted(so.preempted_req_ids or ()),
                        "prefix_queries": pcs.queries if pcs else 0,
                        "prefix_hits": pcs.hits if pcs else 0,
                        "preempted_queries": pcs.preempted_queries if pcs else 0,
                        "preempted_hits": pcs.preempted_hits if pcs else 0,
                        "running": len(self.sched.running),
                        "waiting": len(self.sched.waiting),
                        "kv_cache_usage": stats.kv_cache_usage if stats is not None else None,
                    }
                )
            self.maybe_snapshot()
            if not so.total_num_scheduled_tokens and not outputs:
                raise RuntimeError(f"vLLM scheduled nothing with requests pending at t={CLOCK.now}")
        self.maybe_snapshot(final=True)
        return {
            "name": self.spec.get("name"),
            "steps": self.steps,
            "snapshots": self.snapshots,
            "final": snapshot(),
            "end": CLOCK.now,
            "wall_seconds": _REAL_MONOTONIC() - wall0,
            "scheduler_wall_seconds": sched_wall,
        }


def main() -> int:
    doc = json.load(sys.stdin)
    V.update(_imports())
    import vllm

    time.time = CLOCK
    time.monotonic = CLOCK
    results = []
    with tempfile.TemporaryDirectory(prefix="kvpilot-vllm-ref-") as tmp:
        for i, spec in enumerate(doc["workloads"]):
            CLOCK.now = 0.0
            work = Path(tmp) / str(i)
            work.mkdir()
            results.append(Runner(spec, work).run())
    time.time, time.monotonic = _REAL_TIME, _REAL_MONOTONIC
    json.dump({"vllm_version": vllm.__version__, "results": results}, _ANSWER)
    _ANSWER.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
