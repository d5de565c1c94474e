# syntax=docker/dockerfile:1
# gpu-guard's container image: ghcr.io/gpu-guard/gpu-guard:<version> (manifests/base/deployment.yaml).
#
#   docker build -t ghcr.io/gpu-guard/gpu-guard:0.1.0 .
#
# Two stages: the first builds wheels (the project's and its dependencies'); the second installs
# them into a clean python:3.11-slim with no compiler, no build tools, no pip cache, and runs as
# the non-root user the Deployment's securityContext expects.

FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is made of (.dockerignore keeps everything else out of the context).
COPY pyproject.toml README.md ./
COPY policies ./policies
COPY webhook ./webhook
RUN pip wheel --wheel-dir /wheels .

FROM python:3.11-slim
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# The wheels are bind-mounted for this one step, so they never become a layer of the image. The
# install compiles the bytecode once, here. Packaging tools are removed afterwards, as nothing
# installs at run time (`pip check` first proves no dependency needs them). The user exists so
# that nothing resolves a home directory to / (~/.kube/config).
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-index --find-links=/wheels gpu-guard \
    && pip uninstall --yes setuptools wheel \
    && pip check \
    && pip uninstall --yes pip \
    && groupadd --gid 65532 gpu-guard \
    && useradd --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin gpu-guard
# Set after the install: the root filesystem is read-only at run time, so write no bytecode then.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1
# The entry point imports everything it serves with: a broken install fails the build, not a pod.
RUN gpu-guard --help > /dev/null
LABEL org.opencontainers.image.title="gpu-guard" \
      org.opencontainers.image.description="Kubernetes admission guard for GPU nodes, KubeVirt GPU VMs and the NVIDIA GPU Operator" \
      org.opencontainers.image.licenses="Apache-2.0"
USER 65532:65532
EXPOSE 8443
ENTRYPOINT ["gpu-guard"]
CMD ["--help"]
