# The two commands of the README are `make demo` and `make test`; both build the
# environment first. Everything else here is a building block of those two.
SHELL := /bin/bash
# The host's python3, never the venv's (the venv has no pip or uv of its own).
PYTHON ?= $(shell PATH=$$(printf %s "$$PATH" | tr ':' '\n' | grep -vF '$(CURDIR)/.venv' | paste -sd:) command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
STATE := .state

export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
export AIRFLOW_CONFIG := $(CURDIR)/airflow.cfg
export AIRFLOW_HOME := $(CURDIR)/$(STATE)/airflow

.PHONY: setup test test-fast lint demo up down status bench bench-quick chaos s3-up s3-down

# nftables: localkube's kubelets enforce NetworkPolicies with `nft` (localkube/README.md,
# "Pod network"); checked at every setup, so a venv built before it came still gets it.
setup: $(STAMP) $(NODE_STAMP)
	@command -v nft >/dev/null 2>&1 || (apt-get install -y -qq nftables >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq nftables) >/dev/null 2>&1) || echo "note: nftables not installed; localkube cannot enforce NetworkPolicies and pods of a namespace with one do not start"

# The TFJob tab's browser library (Chart.js), pinned in package-lock.json; the plugin
# serves it from node_modules/ (plugins/tfjob_view/, runview/api.py). Rebuilt
# only when the lock changes: a second `make setup` does nothing.
$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null 2>&1 || (apt-get install -y -qq npm >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq npm) >/dev/null 2>&1) || echo "note: npm not installed; the TFJob tab draws no chart"
	npm ci --no-audit --no-fund --silent
	@touch $(NODE_STAMP)

# Rebuilt only when the pins change: a second `make setup` does nothing.
# --compile-bytecode: uv writes no .pyc of its own, and where PYTHONDONTWRITEBYTECODE
# is set no import ever caches one, so every Airflow task process and every pod
# would compile Airflow, the Kubernetes clients and TensorFlow from source again.
# PostgreSQL holds Airflow's metadata: scripts/postgres_server.py runs a cluster of its own
# with Debian's binaries, which live in /usr/lib/postgresql/<major>/bin (not on PATH). The
# createcluster.d line keeps the package from creating, and where systemd runs starting,
# a system cluster of its own on port 5432 that nothing here uses.
$(STAMP): requirements.txt constraints.txt pyproject.toml
	@$(PYTHON) -m uv --version >/dev/null 2>&1 || $(PYTHON) -m pip install -q uv==0.13.9
	@test -x $(PY) || $(PYTHON) -m uv venv -q --python $(PYTHON) $(VENV)
	$(PYTHON) -m uv pip install -q --compile-bytecode --python $(PY) -r requirements.txt -c constraints.txt
	$(PYTHON) -m uv pip install -q --python $(PY) --no-deps -e .
	@command -v kubectl >/dev/null 2>&1 || (apt-get install -y -qq kubernetes-client >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq kubernetes-client) >/dev/null 2>&1) || echo "note: kubectl not installed; its tests will fail"
	@ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || { \
	  mkdir -p /etc/postgresql-common/createcluster.d 2>/dev/null && \
	  echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/tfjob.conf; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get install -y -qq --no-install-recommends postgresql >/dev/null 2>&1 || \
	  (apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql) >/dev/null 2>&1 || \
	  echo "note: PostgreSQL not installed (apt-get install postgresql); make up, make demo and the end-to-end tests need it"; }
	@command -v chromium >/dev/null 2>&1 || (apt-get install -y -qq chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium) >/dev/null 2>&1) || echo "note: chromium not installed; the browser tests of the TFJob tab will fail"
	@touch $(STAMP)

# Files run whole on 3 workers, in the order tests/conftest.py gives (longest first;
# xdist would otherwise order files by their number of tests). Most end-to-end time
# is waiting (Airflow's scheduler, pods starting), so 3 workers on 2 cores finish
# sooner than one.
TEST_WORKERS ?= 3

# lint first: a test run on code that fails `ruff check` or is not `ruff format`ted stops
# before any server starts.
test: setup lint
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder --durations=25 $(PYTEST_ARGS)

test-fast: setup
	$(PY) -m pytest -q -m "not e2e and not slow"

# ruff's settings are in pyproject.toml ([tool.ruff], [tool.ruff.format]).
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# The main job: services up, digits-ps packed, uploaded, submitted and followed.
demo: setup
	$(PY) scripts/demo.py

up: setup
	$(PY) scripts/services.py up

down:
	@test -x $(PY) || { echo "nothing to stop: no .venv"; exit 0; }
	$(PY) scripts/services.py down

# What runs, since when, how many restarts (scripts/supervisor.py restarts what dies).
status:
	@test -x $(PY) || { echo "nothing runs: no .venv"; exit 0; }
	@$(PY) scripts/services.py status

s3-up: setup
	$(PY) scripts/s3_server.py up --port 9000 --state-dir $(STATE)/s3 --bucket tfjob-demo

s3-down:
	$(PY) scripts/s3_server.py down --state-dir $(STATE)/s3

# The local S3 keeps its buckets and objects in $(STATE)/s3/data across `make down`;
# this removes them (nothing else), refuses while the S3 server runs, and asks first.
# YES=1 skips the question; ARGS passes more options (scripts/clean_state.py --help).
.PHONY: clean-state
clean-state:
	$(if $(wildcard $(PY)),$(PY),$(PYTHON)) scripts/clean_state.py --state-dir $(STATE) $(if $(YES),--yes) $(ARGS)

# Figures, not tests: every measurement of issue 8 (< 20 min on 2 cores) → bench/RESULTS.md.
bench: setup
	$(PY) bench/run_all.py

# A check that every measurement still runs (1 repetition, small sizes, a few minutes; run
# by .ci/run): fails when one breaks; writes only bench/out/quick/, never bench/RESULTS.md.
bench-quick: setup
	$(PY) bench/run_all.py --quick

# The chaos soak (issue 30): 30 runs while faults land at random times and phases, on its own
# self-healing services (free ports, a temporary state dir); exits 1 on any invariant
# violation. SEED=n for another soak; its JSON in bench/out/chaos-<seed>.json.
SEED ?= 0
chaos: setup
	$(PY) -m bench.chaos --seed $(SEED) --results bench/RESULTS.md \
		--also $(filter-out bench/out/chaos-$(SEED).json,$(wildcard bench/out/chaos-*.json))
