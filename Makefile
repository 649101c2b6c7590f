# kvpilot developer commands. `make demo` and `make test` work on a fresh clone:
# they create .venv and install what they need first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test install lint crd chart image clean vllm-ref alert-walkthrough

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test,demo,lint]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/kvpilot demo

# A simulated vLLM, real Prometheus and Alertmanager with the shipped rules and config, and the alert hook, on
# loopback: about 6 minutes to the first alert at the hook (docs/alerting.md, "A local walkthrough").
alert-walkthrough: $(STAMP)
	$(BIN)/python scripts/alert-walkthrough.py

# pytest exit code 5 (no tests collected) is a failure, like any other non-zero code.
test: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/pytest tests

# vLLM 0.29.0's own scheduler and stat logger (CPU), for the `vllm_ref` test tier; cached in
# ${KVPILOT_VLLM_VENV:-$HOME/.cache/kvpilot/vllm-0.29.0}.
vllm-ref:
	tests/reference/install-vllm.sh

# Static checks, the same as the pre-commit hooks: lint, format, layer contracts, types.
LINT_PATHS := operator tests benchmarks
lint: $(STAMP)
	$(BIN)/ruff check $(LINT_PATHS)
	$(BIN)/ruff format --check $(LINT_PATHS)
	$(BIN)/lint-imports
	$(BIN)/mypy

crd: $(STAMP)
	$(BIN)/python -m kvpilot.api.crd > manifests/crd/vllmservers.yaml
	$(MAKE) chart

# The Helm chart carries copies of manifests/crd/ (crds/) and manifests/monitoring/ (files/); tests check them.
chart:
	cp manifests/crd/*.yaml charts/kvpilot/crds/
	cp manifests/monitoring/prometheus-rules.yaml manifests/monitoring/alertmanagerconfig.yaml charts/kvpilot/files/
	find charts/kvpilot/files/dashboards -name '*.json' -delete
	for f in manifests/monitoring/*.json; do [ ! -e "$$f" ] || cp "$$f" charts/kvpilot/files/dashboards/; done

# The container image, built with podman/buildah and a cached debootstrap base (no registry needed).
image:
	scripts/build-image.sh

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
