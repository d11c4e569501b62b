# The two commands of the README: `make up` runs the platform, `make test` runs the whole suite.
# Both install what they need (the virtual environment in .venv, Docker engine, PostgreSQL).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PG_URL ?= postgresql+asyncpg://gpuslice:gpuslice@127.0.0.1:5432/gpuslice

.PHONY: up test test-ml test-loaded test-sqlite test-pg test-pg-manager test-pg-cluster lint bench host host-test images images-ml venv web

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

host:
	bash tools/host-setup.sh

host-test:
	bash tools/host-setup.sh --postgres --prometheus --browser --idp

images: venv
	bash scripts/build-images.sh

# The framework images (PyTorch and TensorFlow, two versions each, FROM the notebook image):
# not in CI (GBs each). GPUSLICE_TORCH_INDEX=<PyTorch's CPU wheel index> builds CPU PyTorch.
images-ml: images
	bash scripts/build-images-ml.sh

# The framework images' own tests (each prints its version and trains on its slice): not in
# `make test`, as the images are not built there.
test-ml: images-ml
	GPUSLICE_TEST_ML_IMAGES=1 $(PY) -m pytest -q -p no:cacheprovider tests/images/test_ml_images.py

# The browser terminal's xterm.js, from npm at the versions web/terminal/package-lock.json pins.
web:
	bash tools/build-web.sh

UP_ARGS ?=

up: host venv web
	$(VENV)/bin/gpuslice up $(UP_ARGS)

# Everything: lint, then the tests marked docker or bench (GPUSLICE_TEST_DOCKER_WORKERS
# processes) and the cluster, beside all the others (on SQLite, then the manager's tests on
# PostgreSQL, in GPUSLICE_TEST_WORKERS processes): tools/test-passes.sh. Each test's wall and
# CPU time go to tests/artifacts/times (`python3 tools/test-times.py tests/artifacts/times`).
test: host-test venv web images lint
	bash tools/test-passes.sh

# The whole suite twice in a row with every core busy (tools/cpu-hog.sh: two busy processes
# per core for the whole run), as on a shared machine. Every bound the tests wait within
# (tests/waits.py) is stretched by GPUSLICE_TEST_TIMEOUT_SCALE, 2 here (1 in `make test`).
LOADED_RUNS ?= 2
LOADED_SCALE ?= 2
test-loaded: host-test venv web images lint
	for run in $$(seq $(LOADED_RUNS)); do \
		echo "== loaded run $$run of $(LOADED_RUNS) =="; \
		GPUSLICE_TEST_TIMEOUT_SCALE=$(LOADED_SCALE) \
			bash tools/cpu-hog.sh bash tools/test-passes.sh || exit 1; \
	done

# Parts, for a quicker look (see tests/README.md): everything on SQLite without the cluster,
# the manager's tests on PostgreSQL, the cluster.
test-sqlite:
	$(PY) -m pytest -q -p no:cacheprovider --durations=25 tests \
		--ignore tests/platform/test_cluster.py --deselect tests/bench/test_bench.py::test_recovery

test-pg: test-pg-manager test-pg-cluster

test-pg-manager:
	GPUSLICE_TEST_PG=$(PG_URL) $(PY) -m pytest -q -p no:cacheprovider \
		-n $${GPUSLICE_TEST_WORKERS:-2} tests/manager --durations=15

test-pg-cluster:
	GPUSLICE_TEST_PG=$(PG_URL) $(PY) -m pytest -q -p no:cacheprovider \
		tests/platform/test_cluster.py tests/bench/test_bench.py::test_recovery

# lint-imports: the import graph's layers and no cycle (pyproject.toml's [tool.importlinter])
# The linters' caches live outside the checkout, as pip's does: a fresh clone (CI's) checks
# only what changed since the last check on this machine (mypy compares each file's hash),
# instead of ~1 min of mypy from nothing.
LINT_CACHE ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/gpuslice-lint

lint: venv
	RUFF_CACHE_DIR=$(LINT_CACHE)/ruff $(VENV)/bin/ruff check .
	MYPY_CACHE_DIR=$(LINT_CACHE)/mypy $(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --cache-dir $(LINT_CACHE)/import-linter

bench: venv
	$(PY) bench/scheduler.py
