# Inferbus developer commands. Every target bootstraps what it needs (venv, pip, npm).
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed

.PHONY: help bootstrap run test test-unit lint format bench emulator clean

help:
	@echo "make run        start Azurite, the Service Bus emulator and the app (http://localhost:7071)"
	@echo "make test       run every test (starts Azurite and the emulator itself)"
	@echo "make test-unit  run the unit tests only (no services)"
	@echo "make lint       ruff and mypy"
	@echo "make bench      run the benchmarks in bench/ and print their figures"
	@echo "make emulator   run the Service Bus emulator alone on 127.0.0.1:5672"

bootstrap: $(VENV_STAMP) $(NODE_STAMP)

$(VENV_STAMP): requirements.txt requirements-dev.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

local.settings.json:
	cp local.settings.sample.json local.settings.json
	@echo "created local.settings.json from local.settings.sample.json"

run: bootstrap local.settings.json
	$(PY) -m devtools.stack

test: bootstrap
	$(PY) -m pytest

test-unit: $(VENV_STAMP)
	$(PY) -m pytest tests/unit

lint: $(VENV_STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy shared devtools

format: $(VENV_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

bench: bootstrap
	@for script in bench/*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

emulator: $(VENV_STAMP)
	$(PY) -m devtools.servicebus_emulator --config infra/local/servicebus-emulator.json

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache
