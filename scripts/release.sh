#!/usr/bin/env bash
# Publish kvpilot to an OCI registry: the image and the Helm chart, the chart's image defaults pointing at them.
#
#   scripts/release.sh REGISTRY          # or: make release REGISTRY=...
#
# REGISTRY is host[:port][/path], e.g. ghcr.io/acme, registry.example.com:5000/ml. With VERSION the version of
# pyproject.toml (the chart's version and appVersion):
# 1. the image REGISTRY/kvpilot:VERSION, built by scripts/build-image.sh (podman/buildah, no registry needed),
#    or KVPILOT_RELEASE_IMAGE=<a local image> tagged instead of a build;
# 2. `podman push` of it;
# 3. `helm package` of a copy of charts/kvpilot whose values.yaml says image.repository REGISTRY/kvpilot (the tag:
#    the chart's appVersion, VERSION): kvpilot-VERSION.tgz, left in $KVPILOT_RELEASE_DIR (default: dist/);
# 4. `helm push` of it to oci://REGISTRY/charts, so a platform team installs with
#      helm install kvpilot oci://REGISTRY/charts/kvpilot --version VERSION -n kvpilot-system --create-namespace
#
# Log in first (`podman login REGISTRY`, `helm registry login REGISTRY`). KVPILOT_RELEASE_PLAIN_HTTP=1 talks
# plain HTTP to the registry (a registry on loopback; podman --tls-verify=false, helm --plain-http).
# HELM (default: helm on PATH) and PODMAN (default: podman) name the tools.
set -euo pipefail
cd "$(dirname "$0")/.."

REGISTRY=${1:-${REGISTRY:-}}
if [ -z "$REGISTRY" ] || [[ "$REGISTRY" == *://* ]] || [[ "$REGISTRY" == */ ]]; then
  echo "usage: scripts/release.sh REGISTRY   (host[:port][/path], no scheme, no trailing slash; e.g. ghcr.io/acme)" >&2
  exit 2
fi
HELM=${HELM:-helm}
PODMAN=${PODMAN:-podman}
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
CHART_VERSION=$(sed -n 's/^version: *//p' charts/kvpilot/Chart.yaml)
APP_VERSION=$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}/\1/p' charts/kvpilot/Chart.yaml)
if [ "$CHART_VERSION" != "$VERSION" ] || [ "$APP_VERSION" != "$VERSION" ]; then
  echo "release: charts/kvpilot/Chart.yaml version $CHART_VERSION / appVersion $APP_VERSION differ from" \
    "pyproject.toml's $VERSION: set them equal first" >&2
  exit 2
fi
IMAGE="$REGISTRY/kvpilot:$VERSION"
OUT=${KVPILOT_RELEASE_DIR:-dist}
TLS=()
PLAIN=()
if [ "${KVPILOT_RELEASE_PLAIN_HTTP:-0}" = 1 ]; then
  TLS=(--tls-verify=false)
  PLAIN=(--plain-http)
fi
# the build script's containers.conf (runc, cgroupfs, ulimits) for podman too
export CONTAINERS_CONF=${CONTAINERS_CONF:-${KVPILOT_IMAGE_CACHE:-${HOME}/.cache/kvpilot/image}/containers.conf}

echo "== image $IMAGE"
if [ -n "${KVPILOT_RELEASE_IMAGE:-}" ]; then
  "$PODMAN" tag "$KVPILOT_RELEASE_IMAGE" "$IMAGE"
else
  scripts/build-image.sh "$IMAGE"
fi
"$PODMAN" push "${TLS[@]}" "$IMAGE"

echo "== chart kvpilot $VERSION, image $REGISTRY/kvpilot"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp -r charts/kvpilot "$work/kvpilot"
# the one default that names the registry: image.repository (its tag is the chart's appVersion)
sed -i "s|^  repository: localhost/kvpilot$|  repository: $REGISTRY/kvpilot|" "$work/kvpilot/values.yaml"
grep -q "^  repository: $REGISTRY/kvpilot$" "$work/kvpilot/values.yaml" \
  || { echo "release: image.repository not found in charts/kvpilot/values.yaml" >&2; exit 1; }
mkdir -p "$OUT"
"$HELM" package "$work/kvpilot" --destination "$OUT"
"$HELM" push "${PLAIN[@]}" "$OUT/kvpilot-$VERSION.tgz" "oci://$REGISTRY/charts"

echo "== published"
echo "image: $IMAGE"
echo "chart: oci://$REGISTRY/charts/kvpilot --version $VERSION"
echo "install: $HELM install kvpilot oci://$REGISTRY/charts/kvpilot --version $VERSION -n kvpilot-system --create-namespace"
