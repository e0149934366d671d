# treespec: `make up` installs, fetches + checks the models and starts the service on :8000.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
PORT ?= 8000

.PHONY: setup models up test test-fast compose-smoke clean

$(BIN)/treespec: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[test]'
	touch $@

setup: $(BIN)/treespec

models: setup
	$(BIN)/treespec models fetch

up: models
	$(BIN)/treespec up --port $(PORT)

test: models
	$(BIN)/python -m pytest -q -x tests

test-fast: setup
	$(BIN)/python -m pytest -q -m "not real" tests

# Whole Docker Compose stack on this machine, CPU only (needs Docker + Compose v2; slow).
compose-smoke:
	bash scripts/compose_smoke.sh

clean:
	rm -rf $(VENV) build *.egg-info
