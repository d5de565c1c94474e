# Two commands set everything up on a fresh machine (Python 3.11, pip, venv):
#   make demo   the home-lab incident predicted, then caught by gpu-guard on 127.0.0.1, then its DRA
#               form, then an OpenShift Virtualization cluster
#   make test   the test suite
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: demo demo-dra demo-openshift test test-e2e test-hermetic lint check clean behaviour fuzz soak overload \
	audit-deps lock image bench bench-sync bench-dra bench-restart chart chart-files generate mutate

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
	touch $(STAMP)

# The home lab on its last green day, where the audit predicts the incident and a what-if shows
# it (exit 1: the hypothetical has a deny); then the incident caught; then its DRA form; then
# OpenShift Virtualization's HyperConverged (examples/openshift).
BEFORE_NOW ?= 2026-07-09T12:00:00Z
demo: $(STAMP)
	@echo '== the home lab on 2026-07-09, omen2 still Ready: what if omen2 goes down?'
	$(BIN)/gpu-guard audit --state examples/homelab-before/cluster.yaml --now $(BEFORE_NOW) \
	  --what-if node-down=omen2 -o text || test $$? -eq 1
	$(BIN)/gpu-guard demo
	$(BIN)/gpu-guard demo --example examples/dra
	$(BIN)/gpu-guard demo --example examples/openshift

# The DRA form alone (examples/dra/README.md).
demo-dra: $(STAMP)
	$(BIN)/gpu-guard demo --example examples/dra

# OpenShift Virtualization alone (examples/openshift/README.md).
demo-openshift: $(STAMP)
	$(BIN)/gpu-guard demo --example examples/openshift

# The unit tier, and the e2e tier too when KUBEBUILDER_ASSETS names the control plane's binaries
# (otherwise one line says how to get them; tests/e2e/README.md).
test: $(STAMP)
	$(BIN)/python -m pytest -q

# The e2e tier alone, against a real kube-apiserver and etcd: an e2e test that cannot run fails.
test-e2e: $(STAMP)
	GPU_GUARD_REQUIRE_E2E=$${GPU_GUARD_REQUIRE_E2E-1} $(BIN)/python -m pytest -q -m e2e tests/e2e

# No machine fact changes an outcome (issue 22): the unit tier twice (the e2e tier runs once, in
# `make test`), in another time zone (Chatham, +12:45/+13:45, as a POSIX rule: no tzdata needed)
# and locale, a 40-column terminal, a KUBECONFIG and a ~/.kube/config that are both garbage;
# first with no system pci.ids (GPU_GUARD_PCI_IDS empty), then with a full one (Debian's pci.ids
# package; .ci/run installs it).
HERMETIC_PCI_IDS ?= /usr/share/misc/pci.ids
test-hermetic: $(STAMP)
	@test -r $(HERMETIC_PCI_IDS) || { echo "test-hermetic: no $(HERMETIC_PCI_IDS)" \
	  "(apt-get install pci.ids, or HERMETIC_PCI_IDS=FILE)" >&2; exit 2; }
	@home=$$(mktemp -d) && trap 'rm -rf "$$home"' EXIT && mkdir "$$home/.kube" && \
	echo 'clusters: [broken' > "$$home/.kube/config" && echo '{not yaml' > "$$home/kubeconfig" && \
	status=0 && for ids in '' $(HERMETIC_PCI_IDS); do \
	  echo "== GPU_GUARD_PCI_IDS='$$ids' TZ=Chatham LANG=tr_TR.UTF-8 COLUMNS=40 HOME=$$home"; \
	  env HOME="$$home" KUBECONFIG="$$home/kubeconfig" GPU_GUARD_PCI_IDS="$$ids" \
	    TZ='CHAST-12:45CHADT,M9.5.0/2:45,M4.1.0/3:45' LANG=tr_TR.UTF-8 LC_ALL=tr_TR.UTF-8 \
	    COLUMNS=40 LINES=12 $(BIN)/python -m pytest -q -p no:cacheprovider -m 'not e2e' \
	    || status=1; \
	done; exit $$status

# ruff, mypy --strict, and the import contracts of pyproject.toml (lint-imports: the rooms of
# policies/ and what each may import, no cycle anywhere).
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/lint-imports

check: lint test

# Re-record what every review, check and audit answers (tests/test_behaviour.py holds refactors to
# it). Only for a deliberate change of behaviour, explained in the commit that carries the file.
behaviour: $(STAMP)
	$(BIN)/python -m tools.behaviour -o tests/data/behaviour.json

# The Helm chart as dist/gpu-guard-<version>.tgz (version: pyproject.toml), after checking that
# its copies of the manifests' files and its version are current and `helm lint --strict`.
# helm from $KUBEBUILDER_ASSETS, else PATH.
chart: $(STAMP)
	$(BIN)/python -m tools.chart package --dist dist

# Rewrite every file that mirrors the registry: both guard.yaml files' policies, the webhooks'
# "judged here" lines, docs/policies.md, README's count, and the chart's generated parts (files/
# from manifests/, the schema's ids, Chart.yaml's version). tools/generate.py says which;
# tests/test_generated.py fails while one is stale.
generate: $(STAMP)
	$(BIN)/python -m tools.generate

# The chart's part of `make generate` alone (tools/chart.py).
chart-files: $(STAMP)
	$(BIN)/python -m tools.chart sync

clean:
	rm -rf dist $(VENV) $(AUDIT_VENV) $(LOCK_VENV) .pytest_cache .mypy_cache .ruff_cache .import_linter_cache \
	  .hypothesis .mutate *.egg-info

# --- longer runs, by hand; none of them is part of `make test` -----------------------------------

# Mutation scores of the admission rules (90 % killed or more) and the diagnoses: each module
# mutated alone against its own tests and samples, one mutmut child at a time under nice; rows in
# docs/mutation-scores.md (rules about 40 minutes on 2 cores). MUTATE=mig_reconfig runs one module
# (or a room: MUTATE=diagnoses). Exit 1 when a rule module is below the bar.
MUTATE ?=
mutate: $(STAMP)
	@$(BIN)/python -c 'import mutmut' 2>/dev/null || \
	  $(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[mutate]'
	$(BIN)/python -m tools.mutate $(if $(MUTATE),--module $(MUTATE))

# More generated inputs than CI's 10,000 reviews (and ~2,700 files): about 1 min per 10,000.
FUZZ_EXAMPLES ?= 100000
fuzz: $(STAMP)
	GPU_GUARD_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(BIN)/python -m pytest -q \
	  tests/test_fuzz_review.py tests/test_fuzz_inputs.py

# A real `gpu-guard serve` at 200 reviews/s; RSS and fds must stay flat. Appends to bench/RESULTS.md.
SOAK_SECONDS ?= 600
soak: $(STAMP)
	$(BIN)/python -m bench.soak --duration $(SOAK_SECONDS) --record

# Load above capacity: nothing may wait past the deadline; appends to bench/RESULTS.md.
overload: $(STAMP)
	$(BIN)/python -m bench.overload --duration 20 --record

# Admission side by side with a baseline, scale, memory, audit and policy cost, the record's size,
# writes and lag from a pod's start (on a real kube-apiserver with KUBEBUILDER_ASSETS set, else the
# API double) (bench/README.md),
# then live sync: about 30 minutes on 2 cores, ~7 GB free for bench_sync. Uses wrk (apt-get
# install wrk), py-spy and uvloop when present. Figures go to bench/RESULTS.md by hand.
BENCH_DIR ?= /tmp/gpu-guard-bench
bench: export GPU_GUARD_BENCH_DIR = $(BENCH_DIR)
bench: $(STAMP)
	-$(BIN)/python -m pip install --quiet --disable-pip-version-check py-spy uvloop
	$(BIN)/python -m bench.synthetic --compact -o $(BENCH_DIR)/big.json --scale 1.0 --if-missing
	$(BIN)/python -m bench.bench_policies
	$(BIN)/python -m bench.bench_record
	$(BIN)/python -m bench.bench_record_lag
	$(BIN)/python -m bench.bench_audit --profile
	$(BIN)/python -m bench.bench_memory --variant
	$(BIN)/python -m bench.bench_admission --profile 10
	$(BIN)/python -m bench.bench_sync --scales 0.1,1.0 --repeat 2

# DRA at 5,000 nodes x 8 GPUs, 20,000 claims, 10,000 VMs: load, RSS, admission p99, audit against
# the device-plugin cluster (bench/bench_dra.py): 2-3 minutes on 2 cores, ~2 GB free.
# The DynamicMIG state's load and memory per device (bench/bench_dra_devices.py), with
# BEFORE=../main that checkout's code on the same state, in the same run (target: x1.2 per device).
# Device taints at 5,000 nodes (bench/bench_taints.py): DeviceTaintRule, claim and core-switch
# admission by this tree, by the commit before the DRA taints merge and by that merge (git archive
# copies in a temporary directory), in the same run; TAINTS_BASELINE=REV another baseline. About
# 3 minutes.
DMIG_SCALE ?= 0.2
TAINTS_BASELINE ?=
bench-dra: export GPU_GUARD_BENCH_DIR = $(BENCH_DIR)
bench-dra: $(STAMP)
	$(BIN)/python -m bench.bench_dra --scales 0.1,1.0
	$(BIN)/python -m bench.bench_dra_devices --scale $(DMIG_SCALE) $(if $(BEFORE),--before $(BEFORE))
	$(BIN)/python -m bench.bench_taints --nodes 5000 $(if $(TAINTS_BASELINE),--baseline $(TAINTS_BASELINE))

# From a restarted API server (the double: refused, then 429s on custom resources) answering again
# to the first fresh deny, after 20 s and 60 s outages (about 3 minutes; BEFORE=../main measures
# that checkout's code too, the same way, in the same run: about 5 more). With KUBEBUILDER_ASSETS
# set, then the same against a real kube-apiserver killed for 20 s and started on the same etcd,
# measured from outside from its port listening and from /readyz 200 (bench/bench_restart_real.py:
# RESTART_RUNS outages, about 40 s each).
BEFORE ?=
RESTART_RUNS ?= 5
bench-restart: $(STAMP)
	$(BIN)/python -m bench.bench_restart $(if $(BEFORE),--before $(BEFORE))
	$(if $(KUBEBUILDER_ASSETS),$(BIN)/python -m bench.bench_restart_real --runs $(RESTART_RUNS),\
	  @echo "bench-restart: the real-server mode not run: KUBEBUILDER_ASSETS is not set")

# Live sync at 5,000 nodes / 150,000 pods (2-3 minutes, about 6 GB free at scale 1.0).
bench-sync: $(STAMP)
	$(BIN)/python -m bench.bench_sync --scales 0.1,1.0 --repeat 2

# Known vulnerabilities in what the image installs: requirements.lock, the file the Dockerfile
# installs from (pinned, with hashes); says so when no database is reachable.
AUDIT_VENV ?= .venv-audit
LOCK       := requirements.lock
audit-deps:
	@test -x $(AUDIT_VENV)/bin/pip-audit || { $(PYTHON) -m venv $(AUDIT_VENV) && \
	  $(AUDIT_VENV)/bin/python -m pip install --quiet --disable-pip-version-check pip-audit; }
	@status=0; $(AUDIT_VENV)/bin/pip-audit --strict --no-deps --disable-pip --require-hashes \
	  --progress-spinner off -r $(LOCK) \
	  > $(AUDIT_VENV)/report.txt 2>&1 || status=$$?; \
	cat $(AUDIT_VENV)/report.txt; \
	if grep -q -e 'could not be audited' -e 'ConnectionError' $(AUDIT_VENV)/report.txt; then \
	  echo "audit-deps: NOT AUDITED: the vulnerability database (the package index's" \
	    'vulnerability service, or OSV with -s osv) could not be reached for the packages' \
	    'above; this is not a pass' >&2; exit 2; \
	elif [ $$status -ne 0 ]; then \
	  echo 'audit-deps: known vulnerabilities (above)' >&2; exit 1; \
	else \
	  echo "audit-deps: no known vulnerabilities in the $$(grep -c '^[A-Za-z]' $(LOCK)) packages" \
	    "of $(LOCK)"; \
	fi

# requirements.lock from pyproject.toml: every dependency and the build backend pinned, with the
# hashes of their published files (pip-tools, in a venv of its own). Run after changing a
# dependency; the image then installs exactly this, and tests/test_lock.py checks the ranges.
LOCK_VENV ?= .venv-lock
lock:
	@test -x $(LOCK_VENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_VENV) && \
	  $(LOCK_VENV)/bin/python -m pip install --quiet --disable-pip-version-check pip-tools; }
	$(LOCK_VENV)/bin/pip-compile --quiet --all-build-deps --allow-unsafe --generate-hashes \
	  --no-emit-find-links --no-emit-index-url --strip-extras --output-file=$(LOCK) pyproject.toml

# The container image, gpu-guard:<version>, with whichever of docker, podman or buildah is on
# PATH (IMAGE_TOOL=podman picks one; IMAGE=<your registry>/gpu-guard:0.1.0 names it for
# your registry). Nothing publishes an image: push it where your nodes pull from, then install
# the chart with --set image.repository=... (README, "Install in a cluster").
VERSION    := $(shell sed -n 's/^version = "\(.*\)"/\1/p' pyproject.toml)
IMAGE      ?= gpu-guard:$(VERSION)
IMAGE_TOOL ?= $(firstword $(foreach t,docker podman buildah,$(if $(shell command -v $(t)),$(t))))
image:
	@test -n "$(IMAGE_TOOL)" || { echo "make image: none of docker, podman or buildah is on" \
	  "PATH; install one (or build $(IMAGE) from the Dockerfile elsewhere)" >&2; exit 2; }
	$(IMAGE_TOOL) build -t $(IMAGE) .
	@echo "make image: built $(IMAGE); push it where your nodes pull from, e.g." \
	  "$(notdir $(IMAGE_TOOL)) push $(IMAGE)"
