# Inferbus developer commands. Every target bootstraps what it needs (venv, pip, npm).
SHELL := /bin/bash
# Python 3.13: python3.13 on PATH (when it runs), else the newest 3.13 under pyenv's versions.
PYTHON ?= $(shell for candidate in python3.13 $$(ls -d $${PYENV_ROOT:-$$HOME/.pyenv}/versions/3.13*/bin/python3.13 2>/dev/null | sort -rV); do \
	"$$candidate" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' >/dev/null 2>&1 && { command -v "$$candidate"; break; }; done)
# The first line of each recipe that builds a venv with $(PYTHON).
REQUIRE_PYTHON = @test -n "$(PYTHON)" || { echo "Python 3.13 is required and was not found: install it \
	(pyenv install 3.13, or your system's python3.13 package) or name it: make PYTHON=/path/to/python3.13 ..."; exit 1; }
VENV := .venv
PY := $(VENV)/bin/python
VENV_STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
# Swagger UI for GET /api/docs (shared/entrypoints/http/docs): copied from the pinned swagger-ui-dist npm
# package into the app package, which ships it (gitignored; not in .funcignore).
SWAGGER_UI_DIR := shared/entrypoints/http/docs/vendor/swagger-ui
SWAGGER_UI_FILES := swagger-ui.css swagger-ui-bundle.js favicon-32x32.png \
	LICENSE NOTICE swagger-ui-bundle.js.LICENSE.txt
SWAGGER_UI := $(addprefix $(SWAGGER_UI_DIR)/,$(SWAGGER_UI_FILES))
# checkov (tests/infra) in a venv of its own: it pins an older packaging than pytest.
CHECKOV_VENV := .local/checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed
CHECKOV_REQUIREMENTS := tests/infra/requirements-checkov.txt
HOST_SRC := tools/functions-host/src
PROTO := $(HOST_SRC)/functions_host/protos/function_rpc.proto
PROTO_OUT := $(HOST_SRC)/functions_host/protos/function_rpc_pb2.py
# The local tools (tools/*/): packages installed in editable mode by requirements-dev.txt.
TOOLS := local-processes servicebus-emulator eventgrid-emulator openai-emulator functions-host
TOOL_PROJECTS := $(foreach tool,$(TOOLS),tools/$(tool)/pyproject.toml)
# Tests run on this many processes (pytest-xdist; each worker starts its own Azurite and
# emulators on ports they pick). --dist loadfile keeps a file on one worker, so the e2e
# stack starts once. The suite mostly waits on brokers, timers and the SDKs' polling, so
# more processes than cores pay off on the 2-core machine (2,086 tests: -n 4 about 6m30s,
# -n 6 5m06s).
TEST_WORKERS ?= 6

.PHONY: help bootstrap lock swagger-ui protos run test test-unit chaos fuzz lint format bench emulator clean

help:
	@echo "make run        start Azurite, the Service Bus emulator and the app (http://localhost:7071)"
	@echo "make test       run every test (starts Azurite and the emulator itself)"
	@echo "make test-unit  run the unit tests only (no services)"
	@echo "make chaos      the chaos suite alone, e.g. CHAOS_ARGS='--chaos-requests 1000 --chaos-host-kills 2'"
	@echo "make fuzz       the HTTP fuzz suite alone, e.g. FUZZ_ARGS='--fuzz-examples 1000'"
	@echo "make lint       ruff and mypy"
	@echo "make bench      run the benchmarks (bench/, tools/*/bench/) and print their figures"
	@echo "make emulator   run the Service Bus emulator alone on 127.0.0.1:5672"
	@echo "make protos     compile the FunctionRpc protocol of the local host (part of bootstrap)"
	@echo "make lock       compile requirements.in into the hashed lock requirements.txt"

bootstrap: $(VENV_STAMP) $(NODE_STAMP) $(SWAGGER_UI) $(PROTO_OUT) $(CHECKOV_STAMP)

# The FunctionRpc message classes the local host and its worker speak (generated, not committed).
$(PROTO_OUT): $(PROTO) $(VENV_STAMP)
	$(PY) -m functions_host.protos

protos: $(VENV_STAMP)
	$(PY) -m functions_host.protos

# Two installs, since pip checks the hashes of every requirement once one has a hash (in a
# constraints file too) and an editable install has none: first the app's lock
# (requirements.txt, what Azure installs), hash-checked; then the dev requirements, held to
# the lock's versions by its pins without their hashes (LOCK_PINS, derived here).
LOCK_PINS := $(VENV)/lock-pins.txt
$(VENV_STAMP): requirements.txt requirements-dev.txt $(TOOL_PROJECTS)
	$(REQUIRE_PYTHON)
	@$(PY) -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))' 2>/dev/null || \
	{ rm -rf $(VENV); echo "creating $(VENV) with $(PYTHON)"; $(PYTHON) -m venv $(VENV); }
	$(PY) -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(PY) -m pip install --quiet --disable-pip-version-check --require-hashes -r requirements.txt
	sed -e '/--hash=/d' -e 's/ *\\$$//' requirements.txt > $(LOCK_PINS)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements-dev.txt -c $(LOCK_PINS)
	@touch $@

# The lock of what the app runs in Azure: requirements.txt, every package of requirements.in
# and their dependencies pinned with the hashes of all their files, resolved for this
# machine's Python 3.13 (Azure, CI and the dev container are Linux x86_64: run it there).
# Without --upgrade-package/--upgrade it keeps the pins that still satisfy requirements.in:
# make lock LOCK_ARGS='--upgrade-package openai' or LOCK_ARGS=--upgrade to move them.
# The options are the ones Dependabot reads back from the lock's header when it updates it.
lock: $(VENV_STAMP)
	$(PY) -m piptools compile --quiet --generate-hashes --allow-unsafe --strip-extras \
		--output-file requirements.txt $(LOCK_ARGS) requirements.in

$(CHECKOV_STAMP): $(CHECKOV_REQUIREMENTS)
	$(REQUIRE_PYTHON)
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip install --quiet --disable-pip-version-check -r $(CHECKOV_REQUIREMENTS)
	@touch $@

$(NODE_STAMP): package.json package-lock.json
	npm ci --no-audit --no-fund --loglevel=error
	@touch $@

# Copied again after every npm ci (a new pin); the licence files ship with the others.
$(SWAGGER_UI): $(SWAGGER_UI_DIR)/%: $(NODE_STAMP)
	@mkdir -p $(@D)
	cp node_modules/swagger-ui-dist/$* $@

swagger-ui: $(SWAGGER_UI)

local.settings.json:
	cp local.settings.sample.json local.settings.json
	@echo "created local.settings.json from local.settings.sample.json"

# STACK_ARGS: flags of the launcher, e.g. make run STACK_ARGS=--telemetry
run: bootstrap local.settings.json
	$(PY) -m devtools.stack $(STACK_ARGS)

# The bootstrap's independent steps (the app's venv, the checkov venv, npm ci) overlap: on a
# clean clone they are mostly downloads.
test:
	$(MAKE) --jobs=3 --output-sync=target --no-print-directory bootstrap
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile

test-unit: $(VENV_STAMP) $(PROTO_OUT)
	$(PY) -m pytest tests/unit

# The chaos and fuzz suites run in `make test` at their CI size; these run them alone,
# larger by their flags (tests/chaos/README.md, tests/fuzz/conftest.py).
chaos: bootstrap
	$(PY) -m pytest tests/chaos $(CHAOS_ARGS)

fuzz: bootstrap
	$(PY) -m pytest tests/fuzz $(FUZZ_ARGS)

lint: $(VENV_STAMP) $(PROTO_OUT)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m devtools.typecheck  # strict mypy over everything we write, program by program

format: $(VENV_STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .

# bench/_*.py are the benchmarks' shared helpers, not benchmarks.
bench: bootstrap
	@for script in bench/[!_]*.py tools/*/bench/[!_]*.py; do echo "== $$script"; $(PY) $$script || exit 1; done

emulator: $(VENV_STAMP)
	$(PY) -m servicebus_emulator --config infra/local/servicebus-emulator.json

clean:
	rm -rf $(VENV) node_modules .pytest_cache .mypy_cache .ruff_cache $(PROTO_OUT)
