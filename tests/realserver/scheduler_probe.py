"""The real server's ground truth: why the head of vLLM's waiting queue was not admitted, each step.

Loaded by the server under test through vLLM's own ``--scheduler-cls scheduler_probe.ProbedScheduler`` (this
folder on ``PYTHONPATH``); runs inside vLLM 0.32's EngineCore process, never in kvpilot's. It subclasses vLLM's V1
``Scheduler`` and decides nothing: every fact it writes is something vLLM's own ``schedule()`` did in that call.

- ``kv_cache``: the step preempted a running request (``_preempt_request``), or ``allocate_slots`` returned None
  for a waiting request (no free blocks for its prompt);
- ``max_num_seqs``: requests were left waiting while the running set was at the scheduler's cap
  (``max_num_active_reqs``: ``--max-num-seqs``, or ``--max-num-active-seqs`` where set below it); when the token
  budget ran out in the same step the cap still binds (a larger budget would admit no one past it);
- ``token_budget``: requests were left waiting, the running set below the cap, and the step's token budget
  (``--max-num-batched-tokens``) used up;
- ``other``: requests were left waiting for none of those (deferred requests, a paused scheduler);
- ``none``: no request was left waiting.

One JSON line per ``schedule()`` call to ``$KVPILOT_PROBE_OUT``: ``t`` (Unix seconds, the step's start),
``running``, ``waiting`` (after the step), ``tokens`` (scheduled), ``refusal``, ``cap`` (the running cap),
``budget``. The same reasons, in the same precedence, as the reference tier's probe of vLLM 0.29's scheduler.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import RequestStatus


class ProbedScheduler(Scheduler):
    """vLLM's scheduler, writing each step's refusal of the head of the waiting queue (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._probe_active = False
        self._probe_kv_refused = False
        self._probe_preempted = 0
        self._probe_out = open(os.environ["KVPILOT_PROBE_OUT"], "a", buffering=1)  # noqa: SIM115
        kvm = self.kv_cache_manager
        allocate_slots = kvm.allocate_slots

        def probed_allocate_slots(request: Any, *a: Any, **kw: Any) -> Any:
            blocks = allocate_slots(request, *a, **kw)
            if self._probe_active and blocks is None and request.status != RequestStatus.RUNNING:
                self._probe_kv_refused = True
            return blocks

        kvm.allocate_slots = probed_allocate_slots

    def _preempt_request(self, request: Any, *args: Any, **kwargs: Any) -> Any:
        if self._probe_active:
            self._probe_preempted += 1
        return super()._preempt_request(request, *args, **kwargs)

    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        start = time.time()
        self._probe_active, self._probe_kv_refused, self._probe_preempted = True, False, 0
        try:
            out = super().schedule(*args, **kwargs)
        finally:
            self._probe_active = False
        running, waiting = self.get_request_counts()  # vLLM's own count: waiting + KV-holding waiting
        tokens = int(out.total_num_scheduled_tokens)
        cap = int(self.max_num_active_reqs)
        budget = int(self.max_num_scheduled_tokens)
        if self._probe_preempted or (waiting and self._probe_kv_refused):
            refusal = "kv_cache"
        elif not waiting:
            refusal = "none"
        elif running >= cap:
            refusal = "max_num_seqs"
        elif tokens >= budget:
            refusal = "token_budget"
        else:
            refusal = "other"
        record = {
            "t": round(start, 6),
            "running": running,
            "waiting": waiting,
            "tokens": tokens,
            "refusal": refusal,
            "preempted": self._probe_preempted,
            "cap": cap,
            "budget": budget,
        }
        self._probe_out.write(json.dumps(record) + "\n")
        return out
