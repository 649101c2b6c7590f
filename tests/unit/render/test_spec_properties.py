"""Property: any spec through validation and rendering: a SpecError naming a field, or objects the
Kubernetes 1.37 OpenAPI schema accepts strictly (kubernetes-validate); never another exception.

Specs are drawn from strategies mixing valid values with the hostile ones found by fuzzing
(control characters, U+0085/U+2028, absurd quantities, token-shaped strings, over-long keys).
Failures found are kept as explicit ``@example`` regression seeds.
"""

from __future__ import annotations

import kubernetes_validate
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvpilot.api import SpecError, parse_spec
from kvpilot.render import render_objects

_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_WORDS = st.sampled_from(
    ["a", "gpu", "nvidia.com/gpu", "x" * 64, "a b", "", "\x7f", "\x85", "\u2028", "hf_" + "A" * 24]
)
_KEY = st.one_of(_WORDS, _TEXT)
_QTY = st.sampled_from(["6Gi", "1e9999999", "0", "-1", "1.5Gi", "8Ei", "500m", "abc", "2"])
_INT = st.one_of(st.integers(min_value=-3, max_value=70000), st.sampled_from([2**63, 2**31]))

SPECS = st.fixed_dictionaries(
    {"model": st.one_of(st.just("Qwen/Qwen2.5-1.5B-Instruct"), _TEXT)},
    optional={
        "engine": st.fixed_dictionaries(
            {},
            optional={
                "maxNumSeqs": _INT,
                "maxModelLen": _INT,
                "maxNumBatchedTokens": _INT,
                "tensorParallelSize": _INT,
                "gpuMemoryUtilization": st.floats(allow_nan=True, allow_infinity=True),
                "extraArgs": st.lists(
                    st.one_of(_WORDS, _TEXT, st.sampled_from(["-t", "--seed", "1", "-tp=2"])), max_size=3
                ),
            },
        ),
        "resources": st.fixed_dictionaries({}, optional={"memory": _QTY, "cpu": _QTY, "gpus": _INT}),
        "env": st.lists(st.fixed_dictionaries({"name": _KEY, "value": _TEXT}), max_size=2),
        "podLabels": st.dictionaries(_KEY, _KEY, max_size=2),
        "podAnnotations": st.dictionaries(_KEY, _TEXT, max_size=2),
        "nodeSelector": st.dictionaries(_KEY, _KEY, max_size=2),
        "tolerations": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "key": _KEY,
                    "operator": st.sampled_from(["Exists", "Equal"]),
                    "value": _KEY,
                    "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
                    "tolerationSeconds": _INT,
                },
            ),
            max_size=2,
        ),
        "ttlSeconds": _INT,
        "shmSize": _QTY,
    },
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(SPECS)
@example({"model": "m", "resources": {"memory": "1e9999999"}})  # decimal.Overflow (was stuck forever)
@example({"model": "m\x7f"})  # yaml ReaderError inside the renderer
@example(  # U+2028 in an affinity key crashed the YAML read-back
    {
        "model": "m",
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [{"key": "k\u2028", "operator": "Exists"}]}]
                }
            }
        },
    }
)
@example({"model": "m", "tolerations": [{"key": "k", "tolerationSeconds": 2**63, "effect": "NoExecute"}]})
def test_any_spec_is_a_field_error_or_valid_objects(spec):
    try:
        pod, service = render_objects("qwen", "default", parse_spec(spec))
    except SpecError as exc:
        assert exc.field.startswith("spec") and exc.message
        return
    for obj in (pod, service):
        kubernetes_validate.validate(obj, "1.37", strict=True)
