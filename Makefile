# The two commands of the README: `make up` runs the platform, `make test` runs the whole suite.
# Both install what they need (the virtual environment in .venv, Docker engine, PostgreSQL).

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PG_URL ?= postgresql+asyncpg://gpuslice:gpuslice@127.0.0.1:5432/gpuslice

.PHONY: up test test-sqlite test-pg test-pg-manager test-pg-cluster lint bench host host-test images venv web

venv: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $@

host:
	bash tools/host-setup.sh

host-test:
	bash tools/host-setup.sh --postgres --prometheus --browser

images: venv
	bash scripts/build-images.sh

# The browser terminal's xterm.js, from npm at the versions web/terminal/package-lock.json pins.
web:
	bash tools/build-web.sh

UP_ARGS ?=

up: host venv web
	$(VENV)/bin/gpuslice up $(UP_ARGS)

# Everything: unit and property tests, the manager on SQLite, real Docker; the database tests
# again on PostgreSQL (beside the SQLite pass: tools/test-passes.sh), then the cluster.
test: host-test venv web images lint
	bash tools/test-passes.sh

test-sqlite:
	$(PY) -m pytest -q -p no:cacheprovider --durations=25

# The manager's tests are the ones that talk to the database; each gets a database of its own.
# The multi-node cluster (two managers on PostgreSQL, two agents) runs here too.
test-pg: test-pg-manager test-pg-cluster

test-pg-manager:
	GPUSLICE_TEST_PG=$(PG_URL) $(PY) -m pytest -q -p no:cacheprovider tests/manager --durations=15

test-pg-cluster:
	GPUSLICE_TEST_PG=$(PG_URL) $(PY) -m pytest -q -p no:cacheprovider \
		tests/platform/test_cluster.py

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

bench: venv
	$(PY) bench/scheduler.py
