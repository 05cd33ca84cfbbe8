# Cuvee developer commands. `make setup` once, then `make test` or `make quickstart`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP    := $(VENV)/bin/pip

.PHONY: setup test test-fast quickstart bench system-deps clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q -e '.[test]'
	touch $@

setup: $(VENV)/.installed

# Debian packages the tests start for real (ZooKeeper). Installs only what is missing.
system-deps:
	@bash scripts/install-system-deps.sh

test: setup system-deps
	$(PY) -m pytest -q

# Unit and conformance tests for the embedded implementations only (no ZooKeeper, no Kafka).
test-fast: setup
	$(PY) -m pytest -q -m "not zookeeper and not kafka"

# A 3-server local cluster in ./quickstart, a sample stream, example queries. Stop: .venv/bin/cuvee cluster down --dir quickstart
quickstart: setup
	$(VENV)/bin/cuvee quickstart --dir quickstart

bench: setup
	$(PIP) install -q -e '.[bench]'
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
