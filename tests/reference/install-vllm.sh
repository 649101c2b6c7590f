#!/usr/bin/env bash
# Create (or confirm) a vLLM reference venv the `vllm_ref` test tier runs vLLM's own scheduler,
# output processor and stat logger in.
#
#   usage:   install-vllm.sh [VERSION]    (VERSION: 0.29.0, the default, or 0.33.0)
#   venv:    $HOME/.cache/kvpilot/vllm-VERSION   (cached between runs; env below moves it)
#   list:    tests/reference/requirements-vllm-VERSION-cpu.txt           (every package pinned)
#   python:  ${PYTHON:-python3} (3.11: the torch CPU wheel is cp311)
#
# `pip install --no-deps -r LIST`: nothing outside the list is resolved, so pip can never pull
# another torch (a CUDA build is several GB). torch==2.13.0 comes from the machine's local CPU wheel
# (pip's find-links) when there is one, else from PyTorch's CPU index. Idempotent: a stamp holding
# the list's sha256 makes a second run a no-op; a changed list reinstalls into the same venv.
# pip prints a "dependency resolver does not currently take into account" line with --no-deps:
# expected, pip exits 0.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${1:-0.29.0}"
req="$here/requirements-vllm-$version-cpu.txt"
if [[ ! -f "$req" ]]; then
  echo "install-vllm.sh: no package list for vLLM $version ($req)" >&2
  exit 2
fi
# env KVPILOT_VLLM_VENV moves 0.29.0's venv, KVPILOT_VLLM_VENV_0_33_0 (dots as underscores) another's
if [[ "$version" == 0.29.0 ]]; then
  venv="${KVPILOT_VLLM_VENV:-$HOME/.cache/kvpilot/vllm-$version}"
else
  var="KVPILOT_VLLM_VENV_${version//./_}"
  venv="${!var:-$HOME/.cache/kvpilot/vllm-$version}"
fi
py="${PYTHON:-python3}"
stamp="$venv/.kvpilot-installed"
want="$(sha256sum "$req" | cut -d' ' -f1)"

check() {
  "$venv/bin/python" - "$version" <<'PY'
import importlib.metadata as md
import sys
torch, vllm = md.version("torch"), md.version("vllm")
if not torch.startswith("2.13.0") or vllm != sys.argv[1]:
    sys.exit(f"unexpected versions in the reference venv: torch {torch}, vllm {vllm}")
print(f"vLLM {vllm}, torch {torch}")
PY
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && check; then
  echo "vLLM reference venv up to date: $venv"
  exit 0
fi

start=$(date +%s)
[[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
extra=()
if ! compgen -G "${PIP_FIND_LINKS:-/opt/wheels}/torch-2.13.0+cpu-*.whl" >/dev/null; then
  extra=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
"$venv/bin/pip" install -q --no-deps "${extra[@]}" -r "$req"
check
echo "$want" >"$stamp"
echo "vLLM reference venv ready: $venv ($(du -sh "$venv" | cut -f1), $(($(date +%s) - start)) s)"
