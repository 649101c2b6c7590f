"""The alert rules, defined once: each a PromQL expression that holds exactly when the diagnoser
(:mod:`kvpilot.diagnose.rules`, on the facts of :mod:`kvpilot.diagnose.facts`) would name its verdict,
plus labels and annotations.

:mod:`kvpilot.alerts.render` turns :func:`alert_rules` into a Prometheus rules file, a
``PrometheusRule``, Grafana alerting provisioning and the Alertmanager configurations that route them;
the committed files under ``manifests/monitoring/`` are its output (a test fails on drift). Thresholds,
``for:`` durations and the fallbacks without the operator's limits metric are explained in
docs/alerting.md; the decision each alert encodes is the one of docs/diagnosis.md, and every threshold
is the diagnoser's own constant, imported here, never restated.

Severity (:mod:`kvpilot.diagnose.severity`, the one policy the diagnoser and the hook follow too): an
alert whose verdict is critical under a condition (a growing queue; preemptions while requests queue)
is rendered twice with the same ``alertname``: ``severity: warning`` on its condition, and
``severity: critical`` on its condition and :attr:`AlertRule.critical_when`. The shipped Alertmanager
configurations inhibit the warning while the critical one fires.

Expression conventions (docs/diagnosis.md "Metric-name realities"):

- every vLLM series is selected as ``{__name__=~"vllm[:_]NAME"}``: the colon name and the escaped
  underscore name (prometheus_client >= 0.22 answering Prometheus 2.x's OpenMetrics request);
- a metric renamed between vLLM generations is read per generation and combined with ``or``, new
  first (``kv_cache_usage_perc`` before ``gpu_cache_usage_perc``): one regex over both names is
  refused by Prometheus 2.x once a server exposes both ("vector cannot contain metrics with the
  same labelset", vLLM 0.10);
- counters are read with ``_total`` (``rate(vllm:num_preemptions[5m])`` matches nothing);
- every signal is aggregated ``max by (namespace, pod, instance, job, model_name, engine)`` (a
  ``pid`` label of multiprocess gauges collapses), and the configured limits join
  ``on(namespace, pod)`` with ``kvpilot_vllmserver_limit`` (kvpilot.controller.metrics). Where that
  series is absent the rule falls back to the heuristic its docstring states and sets the label
  ``limit_source="heuristic"`` (else ``"kvpilot_vllmserver_limit"``), which the description repeats.

Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from kvpilot.diagnose import severity
from kvpilot.diagnose.facts import (
    BUDGET_FULL_FILL,
    LARGE_BUDGET,
    PINNED_NOISE_SD,
    PINNED_SLACK,
    PREFILL_SPLIT_STEPS,
    SPAN_AGREEMENT,
)
from kvpilot.diagnose.model import Severity, Verdict
from kvpilot.diagnose.rules import LOW_HIT_RATE, LRU_THRASH_HIT_RATE
from kvpilot.kv.capacity import DEFAULT_BLOCK_SIZE
from kvpilot.text.numbers import fig

#: labels a target is identified by (the diagnoser's TargetKey plus Prometheus's instance/job)
BY = "namespace, pod, instance, job, model_name, engine"
#: labels the limits metric joins on (a VLLMServer's pod)
JOIN = "namespace, pod"

#: default range of the rate/over_time functions: the diagnoser's default ``--window``
WINDOW = "5m"
#: the range over which a vanished target is still remembered (VLLMTargetDown)
DOWN_WINDOW = "1h"

#: p99 time to first token above this (seconds; a bound of vLLM's TTFT buckets) is an SLO breach: the one
#: threshold of the rules that is not the diagnoser's (the diagnoser reports latency, it does not judge it)
TTFT_P99_SECONDS = 5.0

_DURATION = re.compile(r"(\d+)(ms|s|m|h|d)")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def window_seconds(window: str) -> float:
    """A Prometheus duration (``5m``, ``1h30m``, ``30s``) in seconds.

    Raises:
        ValueError: not a Prometheus duration.
    """
    parts = _DURATION.findall(window)
    if not parts or "".join(n + u for n, u in parts) != window:
        raise ValueError(f"window: {window!r} is not a Prometheus duration such as 5m or 30s")
    return sum(int(n) * _UNIT_SECONDS[u] for n, u in parts)


def vllm(name: str, matchers: str = "") -> str:
    """The selector of vLLM metric ``name`` (without the ``vllm:`` prefix) in both spellings, plus
    ``matchers`` (e.g. ``namespace=~"$namespace"`` in the dashboard).
    """
    extra = f", {matchers}" if matchers else ""
    return f'{{__name__=~"vllm[:_]{name}"{extra}}}'


def over(fn: str, *names: str, window: str = WINDOW, matchers: str = "") -> str:
    """``fn(NAME[window])`` per target for the first generation of ``names`` that exists (new first)."""
    parts = [f"max by ({BY}) ({fn}({vllm(n, matchers)}[{window}]))" for n in names]
    return "(" + " or ".join(parts) + ")"


def limit(name: str, matchers: str = "") -> str:
    """The configured limit ``name`` per (namespace, pod), from the operator's metrics."""
    extra = f", {matchers}" if matchers else ""
    return f'max by ({JOIN}) (kvpilot_vllmserver_limit{{limit="{name}"{extra}}})'


def tag(expr: str, source: str) -> str:
    """``expr`` with the label ``limit_source`` set to ``source``."""
    return f'label_replace({expr}, "limit_source", "{source}", "", "")'


@dataclass(frozen=True)
class Signals:
    """The PromQL of each signal the rules use (names as in ``kvpilot diagnose -o json``)."""

    window: str = WINDOW
    #: extra label matchers on every vLLM selector (the dashboard's variables); none in the rules
    matchers: str = ""

    def _over(self, fn: str, *names: str) -> str:
        return over(fn, *names, window=self.window, matchers=self.matchers)

    @property
    def running_avg(self) -> str:
        """``avg_over_time(vllm:num_requests_running[w])``."""
        return self._over("avg_over_time", "num_requests_running")

    @property
    def running_max(self) -> str:
        """``max_over_time(vllm:num_requests_running[w])``."""
        return self._over("max_over_time", "num_requests_running")

    @property
    def samples(self) -> str:
        """``count_over_time(vllm:num_requests_running[w])``."""
        return self._over("count_over_time", "num_requests_running")

    @property
    def running_median(self) -> str:
        """``quantile_over_time(0.5, vllm:num_requests_running[w])``."""
        return f"max by ({BY}) (quantile_over_time(0.5, {vllm('num_requests_running', self.matchers)}[{self.window}]))"

    @property
    def running_level(self) -> str:
        """The larger of the running gauge's mean and median (:func:`kvpilot.diagnose.facts.running_level`): the
        median keeps a short lull from reading a held cap as free, the mean a large dip from hanging on which
        sample is the middle one.
        """
        return f"(({self.running_avg} >= on({BY}) {self.running_median}) or on({BY}) {self.running_median})"

    @property
    def waiting_avg(self) -> str:
        """``avg_over_time(vllm:num_requests_waiting[w])``."""
        return self._over("avg_over_time", "num_requests_waiting")

    @property
    def waiting_max(self) -> str:
        """``max_over_time(vllm:num_requests_waiting[w])``."""
        return self._over("max_over_time", "num_requests_waiting")

    @property
    def kv_avg(self) -> str:
        """``avg_over_time`` of the KV usage gauge (0-1; new name, else ``gpu_cache_usage_perc``)."""
        return self._over("avg_over_time", "kv_cache_usage_perc", "gpu_cache_usage_perc")

    @property
    def kv_max(self) -> str:
        """``max_over_time`` of the KV usage gauge (0-1)."""
        return self._over("max_over_time", "kv_cache_usage_perc", "gpu_cache_usage_perc")

    @property
    def preemptions(self) -> str:
        """``increase(vllm:num_preemptions_total[w])``."""
        return self._over("increase", "num_preemptions_total")

    @property
    def tokens_per_step(self) -> str:
        """Mean tokens per engine step: ``increase(_sum) / increase(_count)`` of ``vllm:iteration_tokens_total``."""
        return (
            f"({self._over('increase', 'iteration_tokens_total_sum')} / "
            f"({self._over('increase', 'iteration_tokens_total_count')} > 0))"
        )

    @property
    def prefix_queries(self) -> str:
        """``increase`` of prefix-cache queried tokens (legacy ``gpu_prefix_cache_queries_total``)."""
        return self._over("increase", "prefix_cache_queries_total", "gpu_prefix_cache_queries_total")

    @property
    def prefix_hits(self) -> str:
        """``increase`` of prefix-cache hit tokens (legacy ``gpu_prefix_cache_hits_total``)."""
        return self._over("increase", "prefix_cache_hits_total", "gpu_prefix_cache_hits_total")

    @property
    def external_prefix_hits(self) -> str:
        """``increase`` of the KV connector cache's hit tokens."""
        return self._over("increase", "external_prefix_cache_hits_total")

    @property
    def finished(self) -> str:
        """Requests finished in the window (``vllm:request_success_total`` over ``finished_reason``)."""
        return f"sum by ({BY}) (increase({vllm('request_success_total', self.matchers)}[{self.window}]))"

    @property
    def steps(self) -> str:
        """Engine steps with output in the window: ``increase(vllm:iteration_tokens_total_count[w])``."""
        return f"sum by ({BY}) (increase({vllm('iteration_tokens_total_count', self.matchers)}[{self.window}]))"

    @property
    def running_dip(self) -> str:
        """Requests finished per engine step, ``finished / steps`` (:func:`kvpilot.diagnose.facts.running_dip`):
        how far vLLM's running gauge reads below a pinned cap on average. vLLM sets the gauge after each step
        once that step's finished requests left the running list (``Scheduler.make_stats`` in
        ``update_from_output``, vllm/v1/core/sched/scheduler.py, vLLM 0.29); the next step admits their
        replacements. 0 where either counter is missing or no step ran (the diagnoser's unknown dip).
        """
        return f"(({self.finished} / on({BY}) ({self.steps} > 0)) or on({BY}) ({self.running_avg} * 0))"

    @property
    def dip_noise(self) -> str:
        """:data:`~kvpilot.diagnose.facts.PINNED_NOISE_SD` standard deviations of the mean dip over the window's
        samples, ``sqrt(dip / samples)`` (:func:`kvpilot.diagnose.facts._dip_noise`).
        """
        return f"({PINNED_NOISE_SD:g} * sqrt({self.running_dip} / on({BY}) clamp_min({self.samples}, 1)))"

    @property
    def pinned_slack(self) -> str:
        """Requests below a cap the running level may sit and still be pinned at it
        (:func:`kvpilot.diagnose.facts.pinned_slack`): :data:`~kvpilot.diagnose.facts.PINNED_SLACK` plus the dip
        plus its noise.
        """
        return f"({PINNED_SLACK:g} + {self.running_dip} + on({BY}) {self.dip_noise})"

    @property
    def hit_rate(self) -> str:
        """Prefix hit rate: hits / queries (queries > 0)."""
        return f"({self.prefix_hits} / ({self.prefix_queries} > 0))"

    @property
    def prompt_tokens_per_request(self) -> str:
        """Prompt tokens per finished request: ``increase(vllm:prompt_tokens_total) / finished``."""
        return f"({self._over('increase', 'prompt_tokens_total')} / ({self.finished} > 0))"

    @property
    def prefill_step_times(self) -> str:
        """Mean prefill time over the mean step time (``vllm:request_prefill_time_seconds`` and
        ``vllm:inter_token_latency_seconds``, legacy ``time_per_output_token_seconds``, ``_sum`` / ``_count``
        each): how many step times a prefill spans.
        """

        def mean(*names: str) -> str:
            parts = [
                f"({self._over('increase', n + '_sum')} / ({self._over('increase', n + '_count')} > 0))" for n in names
            ]
            return "(" + " or ".join(parts) + ")"

        prefill, step = (
            mean("request_prefill_time_seconds"),
            mean("inter_token_latency_seconds", "time_per_output_token_seconds"),
        )
        return f"({prefill} / ({step} > 0))"

    # ---------------------------------------------------------------- derived conditions
    @property
    def growing(self) -> str:
        """The queue grew by at least :data:`~kvpilot.diagnose.severity.GROWTH_REQUESTS` over the window:
        ``deriv(waiting[w]) x w`` (the diagnoser's ``waiting_trend_per_s`` x window).
        """
        seconds = f"{window_seconds(self.window):g}"
        return f"({self._over('deriv', 'num_requests_waiting')} * {seconds} >= {severity.GROWTH_REQUESTS:g})"

    @property
    def queued(self) -> str:
        """Requests queued: ``waiting_avg > 0`` and ``waiting_max >= 1``."""
        return f"(({self.waiting_avg} > 0) and ({self.waiting_max} >= 1))"

    @property
    def kv_ceiling(self) -> str:
        """The KV admission ceiling as the usage gauge reads it (:func:`kvpilot.diagnose.facts.kv_ceiling`):
        ``clamp(1 - (2 + dip + noise) x kv_avg / running_avg, 0.5, 1)``; 1 with nothing running.

        Admission stops two requests' worth below 1.0 (``2 x kv_avg / running_avg``), and vLLM sets the gauge after
        each step once that step's finished requests freed their blocks, so at the ceiling it reads below it by
        their share: the requests finished per step (:attr:`running_dip`) and its noise (:attr:`dip_noise`), times
        one running request's share. diagnose.facts.kv_ceiling also weighs ``prompt_tokens_per_request /
        kv_cache_tokens`` in the two requests' worth (the larger share wins); the rules keep the running share,
        which a label-valued ``cache_config_info`` cannot replace in PromQL.
        """
        share = f"({self.kv_avg} / on({BY}) ({self.running_avg} > 0))"
        weight = f"(2 + {self.running_dip} + on({BY}) {self.dip_noise})"
        return f"(clamp(1 - {weight} * on({BY}) {share}, 0.5, 1) or on({BY}) ({self.kv_avg} * 0 + 1))"

    @property
    def at_ceiling(self) -> str:
        """KV usage reached the admission ceiling in the window (value: the peak usage)."""
        return f"({self.kv_max} >= {self.kv_ceiling})"

    @property
    def preempted(self) -> str:
        """At least one preemption in the window (value: the count)."""
        return f"({self.preemptions} >= 1)"

    @property
    def kv_short(self) -> str:
        """The KV cache binds: a preemption, or a queue while KV is at its ceiling (kv_cache_exhaustion)."""
        return f"({self.preempted} or ({self.queued} and {self.at_ceiling}))"

    @property
    def pinned_by_limit(self) -> str:
        """The running level (:attr:`running_level`) within :attr:`pinned_slack` of the server's own
        ``max_num_seqs`` (the diagnoser's ``pinned``; value: the level).
        """
        threshold = f"({limit('max_num_seqs')} - on({JOIN}) group_right() {self.pinned_slack})"
        return f"({self.running_level} >= on({BY}) {threshold})"

    @property
    def decode_only(self) -> str:
        """Steps carried at most two tokens per running request (no prompt refused by the budget), or were
        not measured: the diagnoser's ``decode_only`` (kvpilot.diagnose.facts._infer_limits).
        """
        return (
            f"(({self.tokens_per_step} <= on({BY}) (2 * {self.running_max}))"
            f" or on({BY}) ({self.running_max} unless on({BY}) {self.tokens_per_step}))"
        )

    @property
    def generated_per_step(self) -> str:
        """Generated tokens per engine step, ``increase(vllm:generation_tokens_total) / steps``; 0 where unknown
        (the ``d`` of :func:`kvpilot.diagnose.facts.steps_a_budget_needs`).
        """
        return (
            f"(({self._over('increase', 'generation_tokens_total')} / on({BY}) ({self.steps} > 0))"
            f" or on({BY}) ({self.tokens_per_step} * 0))"
        )

    @property
    def steps_a_mean_step_budget_needs(self) -> str:
        """Steps a budget of the mean step takes to prefill the mean prompt, ``P / (mean step - d)``
        (:func:`kvpilot.diagnose.facts.steps_a_budget_needs`); absent where the decodes fill the mean step.
        """
        room = f"(({self.tokens_per_step} - on({BY}) {self.generated_per_step}) > 0)"
        return f"({self.prompt_tokens_per_request} / on({BY}) {room})"

    @property
    def whole_prompts(self) -> str:
        """Prompts not split the way a budget of the mean step would split them (the diagnoser's ``whole``, in
        :func:`kvpilot.diagnose.facts.infer_limits`): prompts longer than the mean step, each prefilled in under
        :data:`~kvpilot.diagnose.facts.PREFILL_SPLIT_STEPS` step times (the budget holds a whole prompt), or
        prefilled in fewer than :data:`~kvpilot.diagnose.facts.SPAN_AGREEMENT` of the steps such a budget needs
        (one long prefill step reads as a couple of step times): that budget refused none of them.
        """
        return (
            f"((({self.prefill_step_times} < {PREFILL_SPLIT_STEPS:g})"
            f" and on({BY}) ({self.prompt_tokens_per_request} > on({BY}) {self.tokens_per_step}))"
            f" or on({BY}) ({self.prefill_step_times} < on({BY}) ({SPAN_AGREEMENT:g} * "
            f"{self.steps_a_mean_step_budget_needs})))"
        )

    @property
    def pinned_flat(self) -> str:
        """Heuristic without the limit, the diagnoser's inferred cap (:func:`kvpilot.diagnose.facts.fits_a_cap_at`
        at ``running_max``, in :func:`~kvpilot.diagnose.facts.infer_limits`): the batch each step ran, the running
        level plus the requests finished per step (:attr:`running_dip`), is within
        :data:`~kvpilot.diagnose.facts.PINNED_SLACK` and the dip's noise (:attr:`dip_noise`) of the window maximum
        (>= 1, in >= 3 samples), while steps were decode only or held whole prompts (so the budget refused
        nothing). Value: the level.

        vLLM reports running after removing the requests a step finished and before the next step admits
        waiting ones (``Scheduler.update_from_output`` -> ``make_stats``, vllm/v1/core/sched/scheduler.py,
        vLLM 0.29), so a pinned server's gauge reads below its cap by the requests that just finished: the rule
        adds them back, where ``min == max`` reset on the first dip and an absolute 0.5 called a large cap free.
        """
        batch_off = f"abs({self.running_level} + on({BY}) {self.running_dip} - on({BY}) {self.running_max})"
        return (
            f"(({self.running_level} and on({BY}) ({batch_off} <= on({BY}) ({PINNED_SLACK:g} + {self.dip_noise})))"
            f" and on({BY}) ({self.running_max} >= 1) and on({BY}) ({self.samples} >= 3)"
            f" and on({BY}) ({self.decode_only} or on({BY}) {self.whole_prompts})"
            f" unless on({JOIN}) {limit('max_num_seqs')})"
        )

    @property
    def pinned(self) -> str:
        """Running pinned at max_num_seqs: by the limit, else by the flat-running heuristic (``limit_source``)."""
        by_limit, flat = tag(self.pinned_by_limit, "kvpilot_vllmserver_limit"), tag(self.pinned_flat, "heuristic")
        return f"({by_limit} or on({BY}) {flat})"


@dataclass(frozen=True)
class AlertRule:
    """One alert: the condition and what an alert carries.

    ``severity`` is the alert's severity on ``expr`` (:mod:`kvpilot.diagnose.severity`); with
    ``critical_when`` (a PromQL condition per target) the alert is warning on ``expr`` and critical on
    ``expr and on(...) critical_when`` (two rules of one ``alertname``, :meth:`variants`).
    """

    name: str
    verdict: Verdict | None
    bottleneck: str
    severity: Severity
    for_: str
    expr: str
    summary: str
    description: str
    reasoning: str
    labels: dict[str, str] = field(default_factory=dict)
    critical_when: str = ""
    #: True on the critical variant :meth:`variants` makes of a rule with ``critical_when``
    escalated: bool = False

    def variants(self) -> list[AlertRule]:
        """The rules as Prometheus evaluates them: this one, or its warning and its critical variant."""
        if not self.critical_when:
            return [self]
        warning = replace(self, severity=severity.WARNING, critical_when="")
        critical = replace(
            self,
            severity=severity.CRITICAL,
            critical_when="",
            escalated=True,
            expr=f"({self.expr} and on({BY}) {self.critical_when})",
        )
        return [warning, critical]


_LIMIT_NOTE = (
    '{{ if eq $labels.limit_source "heuristic" }} No kvpilot_vllmserver_limit for this pod (a vLLM server kvpilot'
    " did not create): judged by the documented heuristic.{{ end }}"
)


def alert_rules(window: str = WINDOW, for_override: str | None = None) -> list[AlertRule]:
    """The kvpilot alerts, in the diagnoser's rule order.

    Args:
        window: range of every rate/over_time function (the diagnoser's ``--window``).
        for_override: replace every ``for:`` (tests that evaluate a short timeline); None keeps them.
    """
    s = Signals(window)
    kv_room = f"unless on({BY}) {s.at_ceiling} unless on({BY}) {s.preempted}"
    # kvpilot.diagnose.severity: critical while the queue grows (queue verdicts, the latency symptom), or
    # while requests are preempted and others queue or the queue grows (kv_cache_exhaustion)
    grows = s.growing
    preempted_while_queued = f"({s.preempted} and on({BY}) ({s.queued} or on({BY}) {s.growing}))"
    budget = limit("max_num_batched_tokens")
    rules = [
        AlertRule(
            name="VLLMKVCacheExhaustion",
            verdict="kv_cache_exhaustion",
            bottleneck="kv_cache",
            severity=severity.WARNING,
            critical_when=preempted_while_queued,
            for_="5m",
            expr=f"{s.kv_short}",
            summary="vLLM {{ $labels.namespace }}/{{ $labels.pod }}: KV cache exhausted",
            description=(
                "Requests preempted, or queued while KV cache usage sits at the admission ceiling "
                "(1 - 2 x one request's share of KV) over the last " + window + ": the KV cache limits "
                "throughput. Raise gpu_memory_utilization, use an fp8 KV cache, or lower max_model_len."
            ),
            reasoning="any preemption is a KV shortage (vLLM frees and recomputes a running request); a queue "
            "with KV at its ceiling means requests wait for blocks",
        ),
        AlertRule(
            name="VLLMPreemptions",
            verdict="kv_cache_exhaustion",
            bottleneck="kv_cache",
            severity=severity.WARNING,
            critical_when=preempted_while_queued,
            for_="2m",
            expr=s.preempted,
            summary="vLLM {{ $labels.namespace }}/{{ $labels.pod }}: {{ $value | humanize }} preemptions",
            description=(
                "{{ $value | humanize }} requests preempted in the last " + window + " (vllm:num_preemptions_total): "
                "running requests needed KV blocks and none were free, so vLLM will recompute them."
            ),
            reasoning="a preemption costs a request's whole prefill again; one sustained for two evaluations is "
            "not a single burst",
        ),
        AlertRule(
            name="VLLMMaxNumSeqsCap",
            verdict="max_num_seqs_cap",
            bottleneck="max_num_seqs",
            severity=severity.WARNING,
            critical_when=grows,
            for_="5m",
            expr=f"({s.pinned} and on({BY}) {s.queued} {kv_room})",
            summary="vLLM {{ $labels.namespace }}/{{ $labels.pod }}: running pinned at max_num_seqs",
            description=(
                "Running requests sat at max_num_seqs ({{ $value | humanize }}, the larger of their mean and "
                "median, within the requests a step finishes of the cap: vLLM's gauge dips by those) while "
                "requests waited and the KV cache had room, over the last "
                + window
                + ": raise --max-num-seqs."
                + _LIMIT_NOTE
            ),
            reasoning="a cap with KV room and a queue is a configuration limit, not a resource one; the gauge is "
            "read after a step's finished requests left, so a pinned cap reads below itself by the requests "
            "finished per step",
        ),
        AlertRule(
            name="VLLMTokenBudgetCap",
            verdict="token_budget_cap",
            bottleneck="token_budget",
            severity=severity.WARNING,
            critical_when=grows,
            for_="5m",
            expr=(
                f"(label_replace({s.tokens_per_step} >= on({JOIN}) group_left() ({BUDGET_FULL_FILL} * "
                f'({budget} < {LARGE_BUDGET})), "limit_source", "kvpilot_vllmserver_limit", "", "")'
                f" and on({BY}) {s.queued} unless on({BY}) {s.pinned} {kv_room})"
            ),
            summary="vLLM {{ $labels.namespace }}/{{ $labels.pod }}: steps full at max_num_batched_tokens",
            description=(
                "Engine steps averaged {{ $value | humanize }} tokens, at least "
                + f"{BUDGET_FULL_FILL:.0%}"
                + " of max_num_batched_tokens, while requests waited with free sequence slots and KV room, "
                "over the last " + window + ": raise --max-num-batched-tokens."
            ),
            reasoning="full steps below vLLM's large-GPU budget (8192) are a token-budget cap, at or above it compute "
            "(the diagnoser's rule); without the limits metric the budget is unknown and the rule stays silent "
            "(kvpilot diagnose infers it from the step sizes)",
        ),
        AlertRule(
            name="VLLMLoRASlotCap",
            verdict="lora_slot_cap",
            bottleneck="lora",
            severity=severity.WARNING,
            critical_when=grows,
            for_="5m",
            # requests deferred while a LoRA label set current in the window (its value, the server's time, changed:
            # vLLM sets the current one each step) names as many adapters as max_lora (every slot held; vLLM 0.29
            # names an adapter once a request of it was scheduled, so never more); PromQL cannot count a label's
            # commas, so one arm per max_lora 1-16 asks for at least max_lora names
            expr=(
                "(max by ("
                + BY
                + ") (avg_over_time("
                + vllm("num_requests_waiting_by_reason", 'reason="deferred"')
                + f"[{window}])) > 0) and on(namespace, pod, instance, job) count by (namespace, pod, instance, job) ("
                + " or ".join(
                    "(changes("
                    + vllm("lora_requests_info", f'max_lora="{k}", running_lora_adapters=~"[^,]+(,[^,]+){{{k - 1},}}"')
                    + f"[{window}]) > 0)"
                    for k in range(1, 17)
                )
                + ")"
            ),
            summary="vLLM {{ $labels.namespace }}/{{ $labels.pod }}: requests deferred for a LoRA slot",
            description=(
                "{{ $value | humanize }} requests on average were deferred over the last " + window + " while every "
                "LoRA slot (--max-loras) held an adapter (vllm:lora_requests_info): raise --max-loras (and "
                "--max-cpu-loras)."
            ),
            reasoning="vLLM skips a waiting request whose adapter would exceed max_loras; a deferral sustained "
            "five minutes is not one burst of a new adapter",
        ),
        AlertRule(
            name="VLLMPrefixCacheIneffective",
            verdict="prefix_cache_ineffective",
            bottleneck="prefix_cache",
            severity=severity.FIXED["prefix_cache_ineffective"],
            for_="15m",
            expr=(
                f"(label_replace((({s.hit_rate} > 0 < {LRU_THRASH_HIT_RATE}) and "
                f"(({s.prefix_queries} - {s.prefix_hits}) > on({JOIN}) group_left() {limit('kv_cache_tokens')})), "
                f'"limit_source", "kvpilot_vllmserver_limit", "", "")'
                f" or on({BY}) label_replace((({s.hit_rate} > 0 < {LRU_THRASH_HIT_RATE}) unless on({JOIN}) "
                f'{limit("kv_cache_tokens")}), "limit_source", "heuristic", "", "")'
                f" or on({BY}) (({s.hit_rate} < {LOW_HIT_RATE}) and ({s.external_prefix_hits} > {s.prefix_hits}))"
                f" or on({BY}) (({s.hit_rate} < {LOW_HIT_RATE}) and (({s.prefix_queries} / ({s.finished} > 0)) < "
                f"{DEFAULT_BLOCK_SIZE})))"
            ),
            summary="vLLM {{ $labels.namespace }}/{{ $labels.pod }}: prefix cache hit rate "
            "{{ $value | humanizePercentage }}",
            description=(
                "Prefix cache hit rate {{ $value | humanizePercentage }} over the last " + window + " with a reason "
                "to expect hits: the tokens that missed exceed the KV capacity (LRU evicts reused prefixes), an "
                "external KV cache hits more than the GPU cache, or prompts are shorter than one block." + _LIMIT_NOTE
            ),
            reasoning="a prefix problem costs throughput slowly; 15 minutes keeps changing traffic from flapping it",
        ),
        AlertRule(
            name="VLLMTargetDown",
            verdict="target_down",
            bottleneck="target",
            severity=severity.FIXED["target_down"],
            for_="1m",
            expr=(
                f"({over('max_over_time', 'num_requests_running', window=DOWN_WINDOW)} "
                f"unless max by ({BY}) ({vllm('num_requests_running')}))"
            ),
            summary="vLLM {{ $labels.namespace }}/{{ $labels.pod }}: metrics stopped",
            description=(
                "vllm:num_requests_running reported within the last " + DOWN_WINDOW + " but has no current sample "
                "(the scrape fails or the pod is gone)."
            ),
            reasoning="a failed scrape marks the series stale at once; one minute rides out a single lost scrape",
        ),
        AlertRule(
            name="VLLMTTFTHigh",
            verdict=None,
            bottleneck="latency",
            severity=severity.WARNING,
            critical_when=grows,
            for_="5m",
            expr=(
                f"(histogram_quantile(0.99, sum by ({BY}, le) "
                f"(rate({vllm('time_to_first_token_seconds_bucket')}[{window}]))) > {TTFT_P99_SECONDS:g})"
            ),
            summary="vLLM {{ $labels.namespace }}/{{ $labels.pod }}: p99 TTFT {{ $value | humanizeDuration }}",
            description=(
                "p99 time to first token {{ $value | humanizeDuration }} over the last " + window + f" (threshold "
                f"{fig(TTFT_P99_SECONDS, 3)} s). A symptom: the diagnosis names the limit behind it."
            ),
            reasoning="an SLO symptom, not a cause; set the threshold to your own SLO",
        ),
    ]
    if for_override is not None:
        rules = [replace(r, for_=for_override) for r in rules]
    return rules


def diagnose_command(prometheus_url: str) -> str:
    """The ``kvpilot diagnose`` command for an alert's target (a template over its labels)."""
    return (
        f"kvpilot diagnose --prometheus {prometheus_url} --namespace {{{{ $labels.namespace }}}} "
        f"--pod {{{{ $labels.pod }}}} --window {WINDOW}"
    )
