# syntax=docker/dockerfile:1
# gpu-guard's container image, gpu-guard:<version>: nothing publishes it; `make image` builds it
# with docker, podman or buildah (README "Install in a cluster": push it where your nodes pull
# from and set the chart's image.repository).
#
#   make image                       # or: docker build -t gpu-guard:0.1.0 .
#
# Two stages: the first builds wheels (the project's and its dependencies'); the second installs
# them into a clean python:3.11-slim with no compiler, no build tools, no pip cache, and runs as
# the non-root user the Deployment's securityContext expects.
#
# Reproducible inputs: every dependency (and the build backend) comes from requirements.lock,
# pinned with the hashes of its published files (pip's --require-hashes refuses anything else;
# `make lock` regenerates it, `make audit-deps` audits the same file), and the base image is
# pinned by digest. The digest is python:3.11-slim's multi-platform index as public Dockerfiles
# pin it; it could not be checked from the machine that wrote it (no access to the image's
# registry). Verify it before relying on it, and update it with the tag's security releases:
#   docker buildx imagetools inspect python:3.11-slim   (or: skopeo inspect, crane digest)
# then replace the digest below and rebuild (CHANGELOG.md says when it changed).
ARG PYTHON_IMAGE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
# Only what the wheel is made of (.dockerignore keeps everything else out of the context).
COPY requirements.lock pyproject.toml README.md ./
COPY policies ./policies
COPY webhook ./webhook
# The locked wheels, each checked against its hash; the build backend from the same lock; then
# the project's own wheel, built without fetching anything unlocked.
RUN pip wheel --require-hashes --no-deps --wheel-dir /wheels -r requirements.lock \
    && pip install --require-hashes --no-deps -r requirements.lock \
    && pip wheel --no-deps --no-build-isolation --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
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
