"""The server a replay runs: the engine model's flags from the diagnosed limits, and its step time.

**Flags** (:func:`engine_config`): ``max_num_seqs``, ``max_num_batched_tokens`` (the ones the rules used:
read, or inferred from the gauges), the KV capacity (``kv_cache_tokens``: ``vllm:cache_config_info``'s
``kv_cache_size_tokens`` or ``num_gpu_blocks x block_size``; without it the engine derives one from the
GPU's memory, and the replay says so), ``block_size``, ``enable_prefix_caching``, ``kv_cache_dtype``,
``max_model_len`` (at most what the KV cache holds, as vLLM requires at start-up).

**Step time** (:class:`StepTime`): the engine model's roofline (``kvpilot.engine.hardware.CostModel``: a fixed
overhead plus the larger of reading the weights and the KV cache, and computing the step's tokens) for the
GPU (``--gpu-name``) and the model (the ``model_name`` label, e.g. ``Qwen/Qwen2.5-7B-Instruct`` ->
``qwen2.5-7b``), calibrated to the window: vLLM exports no step time, but its mean inter-token gap
(``vllm:inter_token_latency_seconds``, one observation per decoding request per step) is the mean step
time over the steps that decode. The replay measures the same gap; their ratio ``k`` scales every part of
the roofline (overhead x k, both efficiencies / k), and the replay is run again until the gaps agree within
:data:`CALIBRATED` (at most :data:`MAX_CALIBRATIONS` runs). One operating point fixes one scale: whether the
gap lies in the memory or the compute part is not measured, so a change that moves steps across the
roofline's knee carries that uncertainty, which the report states. A GPU or model kvpilot has no profile for
is replaced by the H100 SXM / Qwen2.5-7B roofline, calibrated the same way, and said.

Pure functions, no I/O.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from kvpilot.diagnose.limits import Limits
from kvpilot.diagnose.recommend import platform
from kvpilot.diagnose.signals import Signals
from kvpilot.diagnose.steptime import fit_step_time
from kvpilot.engine.config import EngineConfig, EngineFlags
from kvpilot.engine.hardware import MODEL_PROFILES, ModelProfile, profile_from_config
from kvpilot.gpus import gpu_profile
from kvpilot.kv import KVConfigError
from kvpilot.kv.spec import ModelConfig
from kvpilot.text.documents import JsonObject
from kvpilot.text.numbers import fig, times
from kvpilot.text.safe import one_line

#: the replay's mean inter-token gap within this share of the window's counts as calibrated
CALIBRATED = 0.05
#: replays run to calibrate the step time at most (the first with the datasheet roofline)
MAX_CALIBRATIONS = 3
#: profiles used when the GPU or the model has none (said in the report)
FALLBACK_GPU, FALLBACK_MODEL = "h100-sxm", "qwen2.5-7b"
#: the longest max_model_len a replay uses when none is known (tokens; vLLM's is the model's own)
DEFAULT_MAX_MODEL_LEN = 32768

_DEFAULTS = EngineConfig()


def model_profile_name(model_name: str) -> str | None:
    """The engine model profile for a served model name (``Qwen/Qwen2.5-7B-Instruct`` -> ``qwen2.5-7b``), or None.

    The name after the last ``/``, lowercased, without an ``-instruct`` / ``-chat`` suffix.
    """
    key = model_name.rsplit("/", 1)[-1].strip().lower()
    for suffix in ("-instruct", "-chat"):
        key = key.removesuffix(suffix)
    return key if key in MODEL_PROFILES else None


@dataclass(frozen=True)
class MeasuredClock:
    """The server's own clock, fitted from the window (:func:`measured_clock`).

    Attributes:
        per_step_s: seconds every step costs (the fit's intercept: scheduling, sampling, reading the weights).
        per_token_s: seconds each token computed in a step adds (its slope).
        points: the sub-windows fitted.
    """

    per_step_s: float
    per_token_s: float
    points: int


def measured_clock(signals: Signals) -> MeasuredClock | None:
    """Seconds per step ``= a + b x tokens per step`` fitted over the window's sub-windows (tokens per step from
    ``vllm:iteration_tokens_total``, seconds per step from ``vllm:inter_token_latency_seconds``:
    :func:`kvpilot.diagnose.steptime.fit_step_time`), None when the window does not measure both terms (too few
    sub-windows, steps of one size) or the fit is not a clock (a negative term).
    """
    fit = fit_step_time(signals.step_points)
    a, b = fit.intercept_s, fit.slope_s_per_token
    if a is None or b is None or a < 0 or b <= 0:
        return None
    return MeasuredClock(a, b, len(fit.points))


@dataclass(frozen=True)
class StepTime:
    """The step-time model a replay runs with.

    Attributes:
        gpu / model: engine profiles (``kvpilot.gpus``, ``kvpilot.engine.hardware``); ``model`` names the served
            model when ``profile`` is its own (built from its config.json).
        scale: ``k``, every step ``k`` times the datasheet roofline's.
        observed_s: the window's mean inter-token gap (s), None when it has none.
        replayed_s: the calibrated replay's (s).
        runs: replays it took.
        notes: what was assumed.
    """

    gpu: str
    model: str
    profile: ModelProfile | None = None
    scale: float = 1.0
    observed_s: float | None = None
    replayed_s: float | None = None
    runs: int = 0
    notes: tuple[str, ...] = field(default=())
    measured: MeasuredClock | None = None

    def overrides(self) -> EngineFlags:
        """EngineConfig fields: the GPU and the model (``model`` unless the model has its own ``profile``, an object
        set apart), and the roofline scaled by ``scale``; with a measured clock, its
        per-step cost as the step's overhead and its per-token cost as the compute term (``2 x params / (peak x
        efficiency)`` = the seconds per token), the weights' read folded into the per-step cost (``weight_bytes``
        0), the roofline's KV read and attention terms left as the prior for what the fit does not measure.
        """
        k = self.scale
        own: EngineFlags = {} if self.profile is not None else {"model": self.model}
        if self.measured is not None:
            profile = self.profile or MODEL_PROFILES[self.model]
            efficiency = 2.0 * profile.params / (gpu_profile(self.gpu).peak_flops * self.measured.per_token_s)
            return {
                "gpu": self.gpu,
                **own,
                "weight_bytes": 0,
                "bandwidth_efficiency": _DEFAULTS.bandwidth_efficiency / k,
                "compute_efficiency": efficiency / k,
                "step_overhead": self.measured.per_step_s * k,
            }
        return {
            "gpu": self.gpu,
            **own,
            "bandwidth_efficiency": _DEFAULTS.bandwidth_efficiency / k,
            "compute_efficiency": _DEFAULTS.compute_efficiency / k,
            "step_overhead": _DEFAULTS.step_overhead * k,
        }

    def terms(self) -> dict[str, str]:
        """Where each term of the step time comes from: ``measured`` (the window's fit), ``calibrated`` (the
        roofline scaled to the window's mean inter-token gap) or ``prior`` (the roofline alone).
        """
        if self.measured is not None:
            return {"per_step": "measured", "per_token": "measured", "per_context": "prior"}
        calibrated = "calibrated" if self.observed_s is not None else "prior"
        return {"per_step": calibrated, "per_token": calibrated, "per_context": calibrated}

    def describe(self) -> str:
        """One sentence: which model, calibrated how, the uncertainty left."""
        model = f"{self.model} (its config.json)" if self.profile is not None else self.model
        base = f"the roofline of {self.gpu} and {model} (kvpilot.engine.hardware)"
        if self.measured is not None:
            m = self.measured
            return (
                f"Step time: the server's own clock, measured over {m.points} sub-windows of the window: "
                f"{fig(m.per_step_s * 1000, 3)} ms a step + {fig(m.per_token_s * 1e6, 3)} us a token computed "
                f"(vllm:iteration_tokens_total against vllm:inter_token_latency_seconds), scaled "
                f"{times(self.scale, 3)} to the window's mean inter-token gap {fig((self.observed_s or 0) * 1000, 2)} "
                f"ms ({self.runs} replay{'s' if self.runs != 1 else ''}); the cost of each running request's "
                f"context (its KV read, its attention) is not measured apart: {model}'s roofline on {self.gpu} is "
                "its prior."
            )
        if self.observed_s is None:
            return (
                f"Step time: {base}, not calibrated: the window has no inter-token gap (no request decoded), so "
                "its step time is the datasheet's, uncertain by the efficiencies assumed (docs/engine.md)."
            )
        return (
            f"Step time: {base}, calibrated to the window's one operating point: its mean inter-token gap "
            f"{fig(self.observed_s * 1000, 2)} ms, the replay's {fig((self.replayed_s or 0) * 1000, 2)} ms with "
            f"every step {times(self.scale, 3)} the datasheet's ({self.runs} replay{'s' if self.runs != 1 else ''}). "
            "Whether the difference lies in the memory or the compute part is not measured: predictions that move "
            "steps across the roofline's knee carry that uncertainty."
        )

    def to_json(self) -> JsonObject:
        """The ``replay.step_time`` object of ``-o json``."""
        return {
            "source": (
                "measured from the window"
                if self.measured is not None
                else "roofline calibrated to the window"
                if self.observed_s is not None
                else "roofline"
            ),
            "terms": {**self.terms()},
            "gpu": self.gpu,
            "model": self.model,
            "model_source": "config.json" if self.profile is not None else "engine profile",
            "scale": round(self.scale, 4),
            "observed_itl_s": self.observed_s,
            "replayed_itl_s": self.replayed_s,
            "replays": self.runs,
        }


_UNMEASURED = (
    "the H100 SXM roofline's shape assumed, then calibrated (the window does not measure a per-step and a "
    "per-token cost apart: too few sub-windows, or steps of one size)."
)


def step_time_prior(
    limits: Limits, model_name: str, model_config: ModelConfig | None = None, signals: Signals | None = None
) -> StepTime:
    """The uncalibrated step-time model for this target's GPU and model (fallbacks said in ``notes``).

    The server's own clock (:func:`measured_clock` over ``signals``) where no GPU roofline describes it: a CPU
    server (``kvpilot.diagnose.recommend.platform``), or a GPU not named or without a kvpilot profile; a profiled GPU
    keeps its roofline, calibrated to the window.

    The model is the served model's own when its config.json is given (``--model-config``: any architecture
    ``kvpilot kv`` reads, :func:`kvpilot.engine.hardware.profile_from_config`), else the engine profile its name
    names, else Qwen2.5-7B's, said.
    """
    notes = []
    gpu = FALLBACK_GPU
    if limits.gpu_name:
        try:
            gpu = gpu_profile(limits.gpu_name).name
        except ValueError:
            notes.append(
                f"GPU {one_line(limits.gpu_name)!r} has no profile: the H100 SXM roofline assumed, then calibrated."
            )
    else:
        notes.append("GPU not given (--gpu-name): the H100 SXM roofline assumed, then calibrated.")
    on_cpu = platform(limits)[0] == "cpu"
    clock = measured_clock(signals) if signals is not None and (on_cpu or notes) else None
    if on_cpu:
        how = "its clock is measured from the window." if clock else _UNMEASURED
        notes = [f"A CPU server: no GPU roofline describes it; {how}"]
    label = model_name.rsplit("/", 1)[-1] or "the served model"
    if model_config is not None and model_config.document:
        try:
            own = profile_from_config(model_config.document, label)
            return StepTime(gpu, label, own, notes=tuple(notes), measured=clock)
        except KVConfigError as exc:
            notes.append(f"--model-config not used for the step time ({exc}).")
    model = model_profile_name(model_name)
    if model is None:
        shown = one_line(model_name) or "(no model_name label)"
        notes.append(
            f"Model {shown!r} has no engine profile: Qwen2.5-7B's weights and shape "
            "assumed, then calibrated (give --model-config for its own)."
        )
        model = FALLBACK_MODEL
    return StepTime(gpu, model, notes=tuple(notes), measured=clock)


def engine_config(limits: Limits, step: StepTime, overrides: EngineFlags | None = None) -> EngineConfig:
    """The engine flags of the diagnosed server (module docstring), with ``overrides`` (EngineConfig fields).

    Raises:
        ValueError: the flags are not ones vLLM would start with (``EngineConfig.validate``).
    """
    fields = step.overrides()
    seqs, budget, block = (limits.value(n) for n in ("max_num_seqs", "max_num_batched_tokens", "block_size"))
    if seqs is not None:
        fields["max_num_seqs"] = int(seqs)
    if budget is not None:
        fields["max_num_batched_tokens"] = int(budget)
    if block is not None:
        fields["block_size"] = int(block)
    kv = limits.value("kv_cache_tokens")
    if kv is not None:
        fields["kv_cache_tokens"] = int(kv)
    caching = limits.value("enable_prefix_caching")
    if caching is not None:
        fields["enable_prefix_caching"] = bool(caching)
    dtype = limits.value("kv_cache_dtype")
    if isinstance(dtype, str) and dtype:
        fields["kv_cache_dtype"] = dtype
    util = limits.value("gpu_memory_utilization")
    if util is not None:
        fields["gpu_memory_utilization"] = float(util)
    tp = limits.value("tensor_parallel_size")
    if tp:
        fields["tensor_parallel_size"] = int(tp)
    fields.update(overrides or {})
    weights = fields.pop("weight_bytes", None)
    config = dataclasses.replace(EngineConfig.from_dict(fields), profile=step.profile)
    if weights is not None:  # a measured clock: the weights' read is in its per-step cost, the KV pool as before
        config = dataclasses.replace(config, num_gpu_blocks=config.resolved_num_gpu_blocks(), weight_bytes=weights)
    mml = limits.value("max_model_len") or DEFAULT_MAX_MODEL_LEN
    usable = (config.resolved_num_gpu_blocks() - 1) * config.block_size
    config = dataclasses.replace(config, max_model_len=max(2, min(int(mml), usable)))
    resolved = config.resolved()
    resolved.validate()
    return resolved
