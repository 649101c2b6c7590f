# kvpilot: the operator, the alert hook and the GPU-less vLLM stand-in, in one image.
#
#   docker build -t localhost/kvpilot:0.1.0 .            # or scripts/build-image.sh (podman/buildah)
#   docker run --rm localhost/kvpilot:0.1.0 --help
#
# Entrypoint `kvpilot` (operator, alert-hook, diagnose, kv, simulate, ...). `vllm` is also on PATH,
# only in this image: it is kvpilot's engine-model shim (`vllm serve MODEL [vLLM flags]` answers
# /health, /v1/models and /metrics like vLLM), so a VLLMServer whose spec.image is this image runs on
# a cluster without GPUs. pip installs of kvpilot get it as `kvpilot-vllm-shim` instead, which cannot
# shadow a real vLLM.
#
# Build arguments: BASE, any Debian-like image with python3 >= 3.11 and its venv module, for the image;
# BUILD_BASE, the same system with a C compiler and Python's headers, for the build stage, which compiles the
# engine's hot modules (setup.py; the venv links to the base's python, so both must have the same one). A
# BUILD_BASE without a compiler builds the engine as Python: the same results, 2-3x slower.
ARG BASE=python:3.12-slim-bookworm
ARG BUILD_BASE=python:3.12-bookworm

FROM ${BUILD_BASE} AS build
ENV PYTHONDONTWRITEBYTECODE=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY operator/ operator/
# An extra CA bundle (a TLS-intercepting proxy) may be passed as build secret `pipca`; it is read from
# /run/secrets and never lands in a layer.
RUN --mount=type=secret,id=pipca \
    if [ -s /run/secrets/pipca ]; then export PIP_CERT=/run/secrets/pipca; fi \
 && python3 -m venv /opt/build \
 && /opt/build/bin/pip install -q build \
 && /opt/build/bin/python -m build -q --wheel --outdir /wheels . \
 && python3 -m venv /opt/venv \
 && /opt/venv/bin/pip install -q /wheels/kvpilot-*.whl \
 && /opt/venv/bin/pip uninstall -q -y pip \
 && ln -s kvpilot-vllm-shim /opt/venv/bin/vllm

FROM ${BASE}
ARG VERSION=0.1.0
ARG SOURCE=https://github.com/kvpilot/kvpilot
LABEL org.opencontainers.image.title="kvpilot" \
      org.opencontainers.image.description="Run vLLM servers on Kubernetes and tell their operators, with numbers, why a server is slow." \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.licenses="Apache-2.0"
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp
# A numeric non-root user (no passwd entry needed): Kubernetes' runAsNonRoot can verify it.
USER 65532:65532
WORKDIR /tmp
EXPOSE 8000 8080
ENTRYPOINT ["kvpilot"]
CMD ["--help"]
