#!/usr/bin/env bash
# Build the kvpilot image on a machine without a container registry (Debian's buildah/podman/runc).
#
#   scripts/build-image.sh [TAG]        # default TAG: localhost/kvpilot:<version from pyproject.toml>
#
# 1. A base image made by debootstrap (Debian bookworm minbase + python3, python3-venv), imported with
#    `podman import` as localhost/kvpilot-base:bookworm, and the same with a C compiler and Python's headers
#    (gcc, libc6-dev, python3-dev) as localhost/kvpilot-build-base:bookworm, for the build stage, which
#    compiles the engine (setup.py). They are cached: built once, reused afterwards (KVPILOT_REBUILD_BASE=1
#    rebuilds them).
# 2. `buildah bud --pull=never` of ./Dockerfile with --build-arg BASE=<the base> BUILD_BASE=<the build base>.
#    The host's CA bundle is passed as a build secret (pip reads it through PIP_CERT); it is never copied
#    into a layer.
#
# Runs as root (debootstrap, chroot, rootful podman). Writes a containers.conf (runc, cgroupfs, the file
# events logger, ulimits at the machine's hard limit) to $KVPILOT_IMAGE_CACHE/containers.conf and
# exports CONTAINERS_CONF for buildah; tests use the same file for `podman run`.
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml | head -1)
TAG=${1:-localhost/kvpilot:${VERSION}}
BASE=${KVPILOT_BASE_IMAGE:-localhost/kvpilot-base:bookworm}
BUILD_BASE=${KVPILOT_BUILD_BASE_IMAGE:-localhost/kvpilot-build-base:bookworm}
CACHE=${KVPILOT_IMAGE_CACHE:-${HOME}/.cache/kvpilot/image}
CA_BUNDLE=${KVPILOT_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}
mkdir -p "$CACHE"

# Debian 12's crun fails on hybrid cgroups and podman's default ulimits exceed the hard limits here.
hard_nofile=$(ulimit -Hn)
cat > "$CACHE/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=${hard_nofile}:${hard_nofile}", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
export CONTAINERS_CONF="$CACHE/containers.conf"

mirror() {  # the machine's own Debian mirror (first URIs: line of its deb822 sources)
  local uri
  uri=$(sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
  echo "${uri:-http://deb.debian.org/debian}"
}

build_base() {
  local rootfs
  rootfs=$(mktemp -d "$CACHE/rootfs.XXXXXX")
  trap 'umount "$rootfs/proc" 2>/dev/null || true; rm -rf "$rootfs"' RETURN
  echo "== base: debootstrap bookworm from $(mirror)"
  debootstrap --variant=minbase bookworm "$rootfs" "$(mirror)" >"$CACHE/debootstrap.log" 2>&1 \
    || { tail -20 "$CACHE/debootstrap.log"; return 1; }
  cp /etc/resolv.conf "$rootfs/etc/resolv.conf"
  mount -t proc proc "$rootfs/proc"
  chroot "$rootfs" apt-get install -y -qq --no-install-recommends python3 python3-venv ca-certificates \
    >"$CACHE/chroot-apt.log" 2>&1 || { tail -20 "$CACHE/chroot-apt.log"; return 1; }
  import_rootfs "$rootfs" "$BASE"
  # the build stage's: the same system, and what mypyc's C needs
  chroot "$rootfs" apt-get install -y -qq --no-install-recommends gcc libc6-dev python3-dev \
    >"$CACHE/chroot-apt-build.log" 2>&1 || { tail -20 "$CACHE/chroot-apt-build.log"; return 1; }
  import_rootfs "$rootfs" "$BUILD_BASE"
  umount "$rootfs/proc"
}

import_rootfs() {  # ROOTFS IMAGE: the tree as an image, without apt's lists and with an empty resolv.conf
  local rootfs=$1 image=$2
  chroot "$rootfs" apt-get clean
  mv "$rootfs/etc/resolv.conf" "$rootfs/etc/resolv.conf.host"
  : > "$rootfs/etc/resolv.conf"
  tar --numeric-owner -C "$rootfs" --exclude './proc/*' --exclude './var/lib/apt/lists/*' \
    --exclude ./etc/resolv.conf.host -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["python3"]' - "$image" >/dev/null
  mv "$rootfs/etc/resolv.conf.host" "$rootfs/etc/resolv.conf"
}

if [[ "${KVPILOT_REBUILD_BASE:-0}" == 1 ]] || ! podman image exists "$BASE" || ! podman image exists "$BUILD_BASE"; then
  start=$SECONDS
  build_base
  echo "== bases $BASE and $BUILD_BASE built in $((SECONDS - start)) s"
else
  echo "== bases $BASE and $BUILD_BASE cached"
fi

old=$(podman image inspect --format '{{.Id}}' "$TAG" 2>/dev/null || true)
start=$SECONDS
# No --layers: intermediate images would pile up with every source change; the cached base is what
# makes a rebuild fast.
buildah bud --pull=never --runtime runc --network host \
  --build-arg "BASE=$BASE" --build-arg "BUILD_BASE=$BUILD_BASE" --build-arg "VERSION=$VERSION" \
  --secret "id=pipca,src=$CA_BUNDLE" \
  -t "$TAG" -f Dockerfile . >"$CACHE/buildah.log" 2>&1 || { tail -30 "$CACHE/buildah.log"; exit 1; }
echo "== image $TAG built in $((SECONDS - start)) s"
new=$(podman image inspect --format '{{.Id}}' "$TAG")
if [[ -n "$old" && "$old" != "$new" ]]; then  # the previous build of this tag, now untagged
  podman rmi "$old" >/dev/null 2>&1 || true
fi
podman image inspect "$TAG" --format '== size {{.Size}} bytes'
