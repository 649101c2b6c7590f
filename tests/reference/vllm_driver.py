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
                    "record_steps": bool | "light"}]}
    -> {"vllm_version": str, "results": [{"name", "steps": [...], "snapshots": [[t, families]], ...}]}

Optional, for vLLM features kvpilot's engine does not model (absent: as before): in ``config``, ``policy``
(``"fcfs"`` | ``"priority"``: ``SchedulerConfig.policy``), ``lora`` (``{"max_loras", "max_lora_rank"}``:
``LoRAConfig``), ``speculative`` (``{"num_speculative_tokens", "acceptance_rate", "seed"}``: an n-gram
``SpeculativeConfig``, whose drafts and acceptance the stand-in model runner makes), ``remote_kv``
(``{"seconds_per_token", "latency"}``: ``RemoteKVStandIn``, a KV connector loading prompts computed elsewhere); in a
request, ``priority`` (int), ``lora`` (adapter name: a ``LoRARequest``), ``remote_prefill`` (bool).

``record_steps``: ``true`` records every step in full (``scheduled`` per request, ``preempted``, prefix-cache
stats, ``running``/``waiting``, ``kv_cache_usage``, ``refusal``); ``"light"`` only ``start``, ``duration``,
``tokens``, ``running``, ``queue``, ``kv_cache_usage``, ``compute_share``, ``refusal`` and ``refusal_detail``
(long recordings), and the result's ``admissions`` lists ``[request_id, time, computed tokens]`` for each first
admission (``NewRequestData.num_computed_tokens``: the prefix-cache hit); ``false`` none.

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
- Speculative decoding: after each step, as ``EngineCore.post_step`` does, the stand-in drafter hands
  ``num_speculative_tokens`` draft tokens per request to ``Scheduler.update_draft_token_ids``; the model runner
  accepts each next draft with probability ``acceptance_rate`` (seeded) and samples the accepted ones plus
  one, so vLLM's scheduler rolls back the rejected ones and its ``SpecDecodingStats`` count them.
- Time: ``time.time``/``time.monotonic`` are replaced by the simulated clock, which the step time
  advances: ``overhead + max(weight_time + context * kv_time_per_token, tokens * flop_per_token +
  pairs * attn_flop)`` (kvpilot's roofline, ``kvpilot/engine/hardware.py::CostModel.step_time``,
  with the same context/pair sums as ``kvpilot/engine/core.py``), so both sides see the same seconds.
  With nothing to run but KV transfers in flight (``remote_kv``), one empty step lasts until the next
  transfer lands or request arrives, as the engine loop would spin until then.
- Metrics are read from prometheus_client's registry vLLM's stat logger fills (``REGISTRY``).

Ground truth of every step (``refusal``, :class:`RefusalProbe`): why the head of vLLM's waiting queue was not
admitted, read from vLLM's own ``Scheduler.schedule`` as it runs, never re-derived. The head is the first request,
in the order ``schedule()`` visits the queues (``_select_waiting_queue_for_scheduling``: skipped requests first
under FCFS), that was waiting when the step began and is still waiting when it ends. Its reason:

- ``kv_cache``: the step preempted a request (``_preempt_request`` was called: the waiting loop does not run), or
  ``kv_cache_manager.allocate_slots`` returned ``None`` for the head;
- ``lora``: the head was set aside (``step_skipped_waiting``) because its adapter cannot join the batch
  (``max_loras`` adapters already scheduled: vLLM's ``deferred`` waiting reason);
- ``other``: set aside for another reason (``refusal_detail`` names its status: ``WAITING_FOR_REMOTE_KVS``,
  ``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR``, ...), or the loop stopped at the head on a path this driver never
  exercises (``scheduler_break``);
- ``token_budget``: the loop ended with the budget used up (``token_budget`` or ``input_budget`` spent, read from
  ``schedule()``'s locals when its waiting loop ends), whatever runs: the loop's own condition
  (``while ... and token_budget > 0``) and ``input_budget <= draft_slots`` are checked before the running cap, so
  with both at once it is the budget that stops admission (``budget_used_at_cap`` says the cap was reached too);
  or the loop stopped at the head because its prompt cannot be chunked (``enable_chunked_prefill`` off and the
  prompt longer than the budget left) or its speculative padding does not fit;
- ``max_num_seqs``: the loop ended on its running cap (``len(running) >= max_num_running_reqs``) with budget left;
- ``none``: nothing was left waiting.
"""

from __future__ import annotations

import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from types import FrameType

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
    from vllm.config import (
        CacheConfig,
        KVTransferConfig,
        LoRAConfig,
        ModelConfig,
        SchedulerConfig,
        SpeculativeConfig,
        VllmConfig,
    )
    from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorBase_V1, KVConnectorMetadata
    from vllm.lora.request import LoRARequest
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash, update_kv_cache_capacity
    from vllm.v1.core.sched import scheduler as scheduler_module
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine import EngineCoreRequest
    from vllm.v1.engine.output_processor import OutputProcessor
    from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec
    from vllm.v1.metrics.loggers import PrometheusStatLogger
    from vllm.v1.metrics.stats import IterationStats
    from vllm.v1.outputs import DraftTokenIds, KVConnectorOutput, ModelRunnerOutput
    from vllm.v1.request import Request, RequestStatus
    from vllm.v1.structured_output import StructuredOutputManager

    return {
        "torch": torch,
        "REGISTRY": REGISTRY,
        "SamplingParams": SamplingParams,
        "CacheConfig": CacheConfig,
        "KVTransferConfig": KVTransferConfig,
        "LoRAConfig": LoRAConfig,
        "SpeculativeConfig": SpeculativeConfig,
        "KVConnectorBase_V1": KVConnectorBase_V1,
        "KVConnectorMetadata": KVConnectorMetadata,
        "LoRARequest": LoRARequest,
        "DraftTokenIds": DraftTokenIds,
        "KVConnectorOutput": KVConnectorOutput,
        "ModelConfig": ModelConfig,
        "SchedulerConfig": SchedulerConfig,
        "VllmConfig": VllmConfig,
        "get_hash_fn_by_name": get_hash_fn_by_name,
        "get_request_block_hasher": get_request_block_hasher,
        "init_none_hash": init_none_hash,
        "update_kv_cache_capacity": update_kv_cache_capacity,
        "Scheduler": probed_scheduler_class(Scheduler, scheduler_module),
        "EngineCoreRequest": EngineCoreRequest,
        "OutputProcessor": OutputProcessor,
        "FullAttentionSpec": FullAttentionSpec,
        "KVCacheConfig": KVCacheConfig,
        "KVCacheGroupSpec": KVCacheGroupSpec,
        "PrometheusStatLogger": PrometheusStatLogger,
        "IterationStats": IterationStats,
        "ModelRunnerOutput": ModelRunnerOutput,
        "Request": Request,
        "RequestStatus": RequestStatus,
        "StructuredOutputManager": StructuredOutputManager,
    }


def probed_scheduler_class(scheduler_cls, scheduler_module):
    """The ``Scheduler`` of vLLM with two observation points for :class:`RefusalProbe`, its code unchanged.

    - ``prefill_capacity_bound`` becomes a property: ``schedule()`` assigns it right after its waiting loop
      ends (``if not defer_prefills: self.prefill_capacity_bound = bool(self.waiting)``), so its setter sees
      ``schedule()``'s frame at that moment;
    - ``create_request_queue`` (the name ``scheduler.py`` calls) marks the queue ``schedule()`` creates, its
      ``step_skipped_waiting``.
    """
    create_request_queue = scheduler_module.create_request_queue

    def probed_create_request_queue(policy):
        queue = create_request_queue(policy)
        caller = sys._getframe(1)
        owner = caller.f_locals.get("self")
        probe = getattr(owner, "__dict__", {}).get("refusal_probe")
        if probe is not None and caller.f_code.co_name == "schedule":
            probe.step_queue(queue)
        return queue

    scheduler_module.create_request_queue = probed_create_request_queue

    class ProbedScheduler(scheduler_cls):
        @property
        def prefill_capacity_bound(self) -> bool:
            return self.__dict__.get("_prefill_capacity_bound", False)

        @prefill_capacity_bound.setter
        def prefill_capacity_bound(self, value: bool) -> None:
            self.__dict__["_prefill_capacity_bound"] = value
            probe = self.__dict__.get("refusal_probe")
            if probe is not None:
                probe.loop_exit(sys._getframe(1))

    return ProbedScheduler


V: dict = {}


class RefusalProbe:
    """Why the head of vLLM's waiting queue was not admitted in one ``schedule()`` call (module docstring).

    Installed on one scheduler: wraps its ``kv_cache_manager.allocate_slots``, ``_preempt_request`` and
    ``_select_waiting_queue_for_scheduling`` (instance attributes), marks the step's ``step_skipped_waiting``
    queue (``create_request_queue`` called during ``schedule()``), and is called by :class:`ProbedScheduler`
    when the waiting loop ends, with ``schedule()``'s frame. Nothing here decides admission: every fact is
    something vLLM's code did.
    """

    def __init__(self, sched) -> None:
        self.sched = sched
        self.active = False
        self.visited: list = []  # requests the waiting loop peeked, in order
        self.skipped: dict[str, tuple[str, str]] = {}  # request id -> (reason, detail) when set aside
        self.kv_refused: set[str] = set()  # waiting requests allocate_slots returned None for
        self.preempted: list[str] = []
        self.loop_exit_locals: dict | None = None
        kvm = sched.kv_cache_manager
        allocate_slots = kvm.allocate_slots
        running = V["RequestStatus"].RUNNING

        def probed_allocate_slots(request, *args, **kwargs):
            blocks = allocate_slots(request, *args, **kwargs)
            if self.active and blocks is None and request.status != running:
                self.kv_refused.add(request.request_id)
            return blocks

        kvm.allocate_slots = probed_allocate_slots
        preempt = sched._preempt_request

        def probed_preempt(request, *args, **kwargs):
            if self.active:
                self.preempted.append(request.request_id)
            return preempt(request, *args, **kwargs)

        sched._preempt_request = probed_preempt
        if hasattr(sched, "_select_waiting_queue_for_scheduling"):
            # 0.29: schedule() picks the queue to peek (skipped requests first under FCFS)
            select = sched._select_waiting_queue_for_scheduling

            def probed_select():
                queue = select()
                if self.active and queue is not None:
                    self.visited.append(queue.peek_request())
                return queue

            sched._select_waiting_queue_for_scheduling = probed_select
        else:
            # 0.31+: schedule() peeks ``kv_holding_waiting`` first, then ``waiting``, and sets a request aside with
            # its local ``skip_request``, which adds it to ``deferred_waiting``
            for queue in (sched.kv_holding_waiting, sched.waiting):
                self.probe_peeks(queue)
            sched.deferred_waiting = self.ProbedSet(self, sched.deferred_waiting)

    def probe_peeks(self, queue) -> None:
        """Record every request ``schedule()`` peeks at the head of ``queue`` (0.31+)."""
        peek = queue.peek_request

        def probed_peek():
            request = peek()
            if self.active:
                self.visited.append(request)
            return request

        queue.peek_request = probed_peek

    class ProbedSet(set):
        """0.31+'s ``deferred_waiting``: records why ``schedule()``'s ``skip_request`` set a request aside."""

        def __init__(self, probe, items) -> None:
            super().__init__(items)
            self.probe = probe

        def add(self, request) -> None:
            frame = sys._getframe(1)
            if self.probe.active and frame.f_code.co_name == "skip_request" and frame.f_back is not None:
                self.probe.skipped[request.request_id] = self.probe.skip_reason(request, frame.f_back)
            super().add(request)

    def step_queue(self, queue) -> None:
        """``queue`` was created by ``schedule()``: its ``step_skipped_waiting``; record what it is given."""
        prepend = queue.prepend_request

        def probed_prepend(request):
            if self.active:
                self.skipped[request.request_id] = self.skip_reason(request, sys._getframe(1))
            return prepend(request)

        queue.prepend_request = probed_prepend

    def skip_reason(self, request, frame: FrameType) -> tuple[str, str]:
        """Which of ``schedule()``'s set-aside branches ``request`` took, from its state at that moment."""
        status = request.status
        if self.sched._is_blocked_waiting_status(status):
            return "other", status.name
        if request.num_stale_output_tokens > 0 and not request.drop_stale_output:
            return "other", "stale_output"
        lora_config = self.sched.lora_config
        loras = frame.f_locals.get("scheduled_loras")
        if (
            lora_config is not None
            and request.lora_request is not None
            and loras is not None
            and len(loras) == lora_config.max_loras
            and request.lora_request.lora_int_id not in loras
        ):
            return "lora", "max_loras"
        return "other", "kv_connector"

    def loop_exit(self, frame: FrameType) -> None:
        """``schedule()``'s waiting loop ended: keep the locals that say why."""
        if self.active and frame.f_code.co_name == "schedule":
            self.loop_exit_locals = dict(frame.f_locals)

    def begin(self) -> None:
        self.active = True
        self.visited, self.skipped, self.kv_refused, self.preempted = [], {}, set(), []
        self.loop_exit_locals = None

    def end(self, so) -> tuple[str, str]:
        """``(reason, detail)`` for the step ``so`` (a ``SchedulerOutput``) just scheduled."""
        self.active = False
        sched = self.sched
        if self.preempted:
            return "kv_cache", "preempted"
        scheduled = so.num_scheduled_tokens
        head = next((r for r in self.visited if r.request_id not in scheduled), None)
        if head is not None:
            rid = head.request_id
            if rid in self.skipped:
                return self.skipped[rid]
            if rid in self.kv_refused:
                return "kv_cache", "allocate_slots"
            return self.stopped_at_head()
        if not sched.get_request_counts()[1]:
            return "none", ""
        return self.loop_ended()

    def stopped_at_head(self) -> tuple[str, str]:
        """The waiting loop broke at the head without asking the KV cache (``schedule()``'s locals then)."""
        loc = self.loop_exit_locals or {}
        budget_left = loc.get("request_token_budget")
        if budget_left is None:
            return "other", "scheduler_break"
        if not self.sched.scheduler_config.enable_chunked_prefill and loc.get("num_new_tokens", 0) > budget_left:
            return "token_budget", "prompt_cannot_be_chunked"
        if self.sched.num_spec_tokens > 0 and loc.get("padded_num_tokens", 0) > budget_left:
            return "token_budget", "spec_decode_padding"
        return "other", "scheduler_break"

    def loop_ended(self) -> tuple[str, str]:
        """The waiting loop ended before the head: which of its checks, in ``schedule()``'s order."""
        sched = self.sched
        loc = self.loop_exit_locals
        if loc is None:
            return "other", "paused"
        # 0.31+ admits while running is below max_num_active_seqs (max_num_seqs when unset)
        cap = getattr(sched, "max_num_active_reqs", sched.max_num_running_reqs)
        active = "_active" if cap < sched.max_num_running_reqs else ""
        at_cap = len(sched.running) + sched.num_waiting_for_streaming_input >= cap
        if loc["token_budget"] <= 0 or loc["input_budget"] <= loc["draft_slots"]:
            # schedule() checks the budget first (the loop's condition), the running cap after it
            return "token_budget", f"budget_used_at{active}_cap" if at_cap else "budget_used"
        if at_cap:
            return "max_num_seqs", f"running_at{active}_cap"
        return "other", "loop_ended"


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
        policy=cfg.get("policy", "fcfs"),
        **{k: int(cfg[k]) for k in ("max_num_active_seqs", "prefill_schedule_interval") if cfg.get(k) is not None},
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
    extra = {}
    if cfg.get("lora"):
        extra["lora_config"] = V["LoRAConfig"](
            max_loras=int(cfg["lora"]["max_loras"]), max_lora_rank=int(cfg["lora"].get("max_lora_rank", 16))
        )
    if cfg.get("speculative"):
        # n-gram drafting needs no draft model; the drafts and their acceptance are the stand-in's (Runner)
        extra["speculative_config"] = V["SpeculativeConfig"](
            method="ngram", num_speculative_tokens=int(cfg["speculative"]["num_speculative_tokens"])
        )
    if cfg.get("remote_kv"):
        globals()["RemoteKVStandIn"] = remote_kv_connector_class()  # the factory imports it from __main__
        extra["kv_transfer_config"] = V["KVTransferConfig"](
            kv_connector="RemoteKVStandIn",
            kv_role="kv_consumer",
            kv_connector_module_path="__main__",
            kv_connector_extra_config={
                "seconds_per_token": float(cfg["remote_kv"].get("seconds_per_token", 0.0)),
                "latency": float(cfg["remote_kv"].get("latency", 0.0)),
            },
        )
    vllm_config = V["VllmConfig"](
        scheduler_config=scheduler_config, model_config=model_config, cache_config=cache_config, **extra
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
    scheduler.refusal_probe = RefusalProbe(scheduler)
    output_processor = V["OutputProcessor"](None, log_stats=True)
    stat_logger = V["PrometheusStatLogger"](vllm_config, engine_indexes=[0])
    stat_logger.log_engine_initialized()
    return scheduler, output_processor, stat_logger, hasher, vllm_config


def remote_kv_connector_class():  # noqa: C901
    """``RemoteKVStandIn``: the decode side of prefill/decode disaggregation, through vLLM's connector API.

    A request the workload marks ``remote_prefill`` had its prompt's KV computed elsewhere: the connector tells
    the scheduler all its prompt tokens are external and load asynchronously
    (``get_num_new_matched_tokens -> (prompt - computed, True)``, as vLLM's NixlConnector does for
    ``do_remote_prefill``), so vLLM allocates its blocks and parks it in ``WAITING_FOR_REMOTE_KVS`` (its
    ``deferred`` waiting reason) until a step's output reports it in ``finished_recving``. Each transfer takes
    ``latency + tokens x seconds_per_token`` from its admission (``kv_connector_extra_config``), transfers run side
    by side. Worker-side methods do nothing: there is no worker.
    """

    class RemoteKVStandIn(V["KVConnectorBase_V1"]):
        def __init__(self, vllm_config, role, kv_cache_config):
            super().__init__(vllm_config, role, kv_cache_config)
            extra = vllm_config.kv_transfer_config.kv_connector_extra_config
            self.seconds_per_token = float(extra.get("seconds_per_token", 0.0))
            self.latency = float(extra.get("latency", 0.0))
            self.remote: dict[str, int] = {}  # request id -> prompt tokens computed remotely, not loaded yet
            self.transfers: dict[str, float] = {}  # request id -> simulated time its transfer lands

        def get_num_new_matched_tokens(self, request, num_computed_tokens):
            n = self.remote.get(request.request_id, 0)
            return (n - num_computed_tokens, True) if n > num_computed_tokens else (0, False)

        def update_state_after_alloc(self, request, _blocks, num_external_tokens):
            if num_external_tokens > 0:
                landing = CLOCK.now + self.latency + num_external_tokens * self.seconds_per_token
                self.transfers[request.request_id] = landing
                self.remote.pop(request.request_id, None)  # loaded once; a preempted request recomputes

        def build_connector_meta(self, _scheduler_output):
            return V["KVConnectorMetadata"]()

        def request_finished(self, _request, _block_ids):
            return False, None

        def start_load_kv(self, _forward_context, **_kwargs):
            return None

        def wait_for_layer_load(self, _layer_name):
            return None

        def save_kv_layer(self, _layer_name, _kv_layer, _attn_metadata, **_kwargs):
            return None

        def wait_for_save(self):
            return None

        def finished_by(self, t: float) -> set[str]:
            done = {rid for rid, at in self.transfers.items() if at <= t + 1e-12}
            for rid in done:
                del self.transfers[rid]
            return done

        def next_done(self) -> float:
            return min(self.transfers.values(), default=float("inf"))

    return RemoteKVStandIn


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
        self.admissions: list = []
        self.snapshots: list = []
        self.lora_ids: dict[str, int] = {}
        spec_cfg = spec["config"].get("speculative") or {}
        self.acceptance = float(spec_cfg.get("acceptance_rate", 0.0))
        self.draft_rng = random.Random(int(spec_cfg.get("seed", 0)))
        self.connector = self.sched.connector

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
        lora = r.get("lora")
        lora_request = None
        if lora:
            lora_id = self.lora_ids.setdefault(str(lora), len(self.lora_ids) + 1)
            lora_request = V["LoRARequest"](lora_name=str(lora), lora_int_id=lora_id, lora_path=f"/adapters/{lora}")
        if r.get("remote_prefill"):
            self.connector.remote[rid] = len(prompt)
        ecr = V["EngineCoreRequest"](
            request_id=rid,
            prompt_token_ids=prompt,
            mm_features=None,
            sampling_params=params,
            pooling_params=None,
            arrival_time=CLOCK.EPOCH + float(r["arrival_time"]),
            lora_request=lora_request,
            cache_salt=None,
            data_parallel_rank=None,
            priority=int(r.get("priority", 0)),
            external_req_id=rid,
        )
        self.meta[rid] = {"index": r["_index"], "output_len": output_len, "stop": stop}
        self.proc.add_request(ecr, None)
        self.sched.add_request(V["Request"].from_engine_core_request(ecr, self.hasher))

    def accepted(self, drafts: int) -> int:
        """How many of ``drafts`` scheduled draft tokens the stand-in verifier accepts.

        Each next draft is accepted with probability ``acceptance_rate`` until the first rejection (the
        prefix acceptance of speculative decoding), drawn from the workload's seeded generator.
        """
        n = 0
        while n < drafts and self.draft_rng.random() < self.acceptance:
            n += 1
        return n

    def model_output(self, so, end: float):
        """The stand-in model runner's output for the step ``so``, which ends at simulated ``end``.

        One sampled token per request whose prefill is complete, plus the draft tokens accepted; a
        ``"stop"`` request's tokens from its last position on are the stop token. With the remote-KV
        stand-in, the transfers done by ``end`` are reported as ``finished_recving`` (a worker's
        ``get_finished``).
        """
        req_ids, sampled = [], []
        for rid in so.num_scheduled_tokens:
            req = self.sched.requests[rid]
            req_ids.append(rid)
            if req.num_computed_tokens >= req.num_tokens:
                m = self.meta[rid]
                k0 = req.num_output_tokens
                n = 1 + self.accepted(len(so.scheduled_spec_decode_tokens.get(rid, ())))
                sampled.append(
                    [
                        STOP_TOKEN if m["stop"] and k + 1 >= m["output_len"] else GEN_BASE * (m["index"] + 1) + k
                        for k in range(k0, k0 + n)
                    ]
                )
            else:
                sampled.append([])
        kv_out = None
        if self.connector is not None:
            done = self.connector.finished_by(end)
            if done:
                kv_out = V["KVConnectorOutput"](finished_recving=done)
        return V["ModelRunnerOutput"](
            req_ids=req_ids,
            req_id_to_index={r: i for i, r in enumerate(req_ids)},
            sampled_token_ids=sampled,
            kv_connector_output=kv_out,
        )

    def propose_drafts(self, so) -> None:
        """``EngineCore.post_step``: the stand-in drafter's tokens for every request that ran this step.

        Always ``num_speculative_tokens`` drafts (vLLM's n-gram proposer may find fewer; acceptance is what
        :meth:`accepted` decides); vLLM drops the ones of finished requests and of unfinished prefills.
        """
        k = self.sched.num_spec_tokens
        ids = [rid for rid in so.num_scheduled_tokens if rid in self.sched.requests]
        drafts = [[GEN_BASE * (self.meta[rid]["index"] + 1) + (1 << 30) + j for j in range(k)] for rid in ids]
        self.sched.update_draft_token_ids(V["DraftTokenIds"](req_ids=ids, draft_token_ids=drafts))

    def step_time(self, so) -> tuple[float, float, float]:
        """``(seconds, memory term, compute term)`` of the step ``so`` (module docstring)."""
        context = pairs = 0
        for rid, n in so.num_scheduled_tokens.items():
            end = self.sched.requests[rid].num_computed_tokens
            c = end - n
            context += end
            pairs += end if n == 1 else n * c + ((n * n + n) >> 1)
        k = self.cost
        t_mem = k["weight_time"] + context * k["kv_time_per_token"]
        t_cmp = so.total_num_scheduled_tokens * k["flop_per_token"] + pairs * k["attn_flop"]
        return k["overhead"] + (t_mem if t_mem > t_cmp else t_cmp), t_mem, t_cmp

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

    def run(self) -> dict:  # noqa: C901
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
            probe = self.sched.refusal_probe
            probe.begin()
            so = self.sched.schedule()
            refusal, refusal_detail = probe.end(so)
            queue = self.sched.get_request_counts()[1]
            dt, t_mem, t_cmp = self.step_time(so) if so.total_num_scheduled_tokens else (0.0, 0.0, 0.0)
            transfers = self.connector is not None and bool(self.connector.transfers)
            if not so.total_num_scheduled_tokens and transfers:
                # nothing to run but KV transfers in flight: the engine loops until one lands or a request arrives
                nxt = self.connector.next_done()
                if self.next_req < len(self.pending):
                    nxt = min(nxt, float(self.pending[self.next_req]["arrival_time"]))
                if until is not None:
                    nxt = min(nxt, until)
                dt = max(0.0, nxt - t0)
            model_out = self.model_output(so, t0 + dt)
            CLOCK.now = t0 + dt
            outputs = self.sched.update_from_output(so, model_out)
            if self.sched.num_spec_tokens and so.total_num_scheduled_tokens:
                self.propose_drafts(so)
            sched_wall += _REAL_MONOTONIC() - w0
            stats = None
            for eco in outputs.values():
                iteration_stats = V["IterationStats"]() if eco.outputs else None
                self.proc.process_outputs(eco.outputs, eco.timestamp, iteration_stats)
                self.proc.update_scheduler_stats(eco.scheduler_stats)
                self.logger.record(scheduler_stats=eco.scheduler_stats, iteration_stats=iteration_stats)
                stats = eco.scheduler_stats
            if record == "light":
                # first admissions: vLLM's computed tokens at admission (its prefix-cache hit, or remote KV)
                self.admissions.extend([nr.req_id, t0, nr.num_computed_tokens] for nr in so.scheduled_new_reqs)
                self.steps.append(
                    {
                        "start": t0,
                        "duration": dt,
                        "tokens": so.total_num_scheduled_tokens,
                        "running": len(self.sched.running),
                        "queue": queue,
                        "kv_cache_usage": stats.kv_cache_usage if stats is not None else None,
                        # the share of the step's time that grows with the tokens computed (roofline compute term)
                        "compute_share": t_cmp / dt if dt and t_cmp >= t_mem else 0.0,
                        "refusal": refusal,
                        "refusal_detail": refusal_detail,
                    }
                )
            elif record:
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
                        "queue": queue,
                        "refusal": refusal,
                        "refusal_detail": refusal_detail,
                    }
                )
            self.maybe_snapshot()
            if not so.total_num_scheduled_tokens and not outputs and not transfers:
                raise RuntimeError(f"vLLM scheduled nothing with requests pending at t={CLOCK.now}")
        self.maybe_snapshot(final=True)
        return {
            "name": self.spec.get("name"),
            "steps": self.steps,
            "admissions": self.admissions,
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
