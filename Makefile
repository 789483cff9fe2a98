# Two commands matter: `make run` and `make test`. Both set everything up from python3.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PEER_VENV := .venv-peer
PEER_PY := $(PEER_VENV)/bin/python
PEER03_VENV := .venv-peer03
PEER03_PY := $(PEER03_VENV)/bin/python
WORKSPACE ?= workspace
HOST ?= 127.0.0.1
PORT ?= 8080
GRPC_PORT ?= 8081

.PHONY: run test lint gen dev peer clean pg postgres-bin chromium docs

$(VENV)/.deps: requirements/dev.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --disable-pip-version-check -r requirements/dev.txt
	touch $@

# Strict editable install: a symlink tree that mypy resolves. Re-run after adding a
# module (every target below does, it takes a second).
dev: $(VENV)/.deps
	@mkdir -p build
	@$(PY) -m pip install -q --disable-pip-version-check --no-deps --no-build-isolation \
		-e . --config-settings editable_mode=strict >build/dev-install.log 2>&1 \
		|| { cat build/dev-install.log; exit 1; }

# The official a2a-sdk lives in its own venv (it pins protobuf < 7): interop tests
# drive it as a subprocess and never import it into ours.
$(PEER_VENV)/.deps: requirements/peer.txt
	test -x $(PEER_PY) || $(PYTHON) -m venv $(PEER_VENV)
	$(PEER_PY) -m pip install -q --disable-pip-version-check -r requirements/peer.txt
	touch $@

# The newest a2a-sdk 0.3.x release, as deployed 0.3 agents and clients run it: its own
# venv too (tests/interop/peers/sdk03_*.py run in it).
$(PEER03_VENV)/.deps: requirements/peer03.txt
	test -x $(PEER03_PY) || $(PYTHON) -m venv $(PEER03_VENV)
	$(PEER03_PY) -m pip install -q --disable-pip-version-check -r requirements/peer03.txt
	touch $@

# The JS SDK's 0.3 client (tests/interop/peers/js03, run by node): npm installs the
# pinned @a2a-js/sdk there (no lockfile); without node/npm its tests skip.
JS03_DIR := tests/interop/peers/js03
$(JS03_DIR)/node_modules/.deps: $(JS03_DIR)/package.json
	@command -v npm >/dev/null || { echo "npm not found: the JS 0.3 interop tests will skip"; exit 0; }; \
	cd $(JS03_DIR) && npm install --no-package-lock --no-audit --no-fund --omit=peer --loglevel=error \
		&& touch node_modules/.deps

peer: $(PEER_VENV)/.deps $(PEER03_VENV)/.deps $(JS03_DIR)/node_modules/.deps

run: dev
	$(PY) -P -m a2a_gateway serve --faux --workspace $(WORKSPACE) --allow-anonymous \
		--host $(HOST) --port $(PORT) --grpc-port $(GRPC_PORT)

# The project's packages and tests only: a file a reader drops in the clone (an example
# agent, say) is not ours to lint.
LINT_PATHS := agent client gateway local protocol server telegram tests tools
lint: dev
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	cd gen && ../$(VENV)/bin/mypy --config-file ../pyproject.toml

# PostgreSQL's server binaries (the --store postgres tests start a throwaway cluster):
# installed from Debian's packages only when neither PATH nor /usr/lib/postgresql has them.
postgres-bin:
	@command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 \
		|| { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q postgresql-15; }

# Debian's Chromium (headless) for the consent-page test (tests/browser.py drives it over
# the DevTools protocol): installed from Debian's packages only when PATH has none.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 \
		|| { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
			--no-install-recommends chromium; }

# A throwaway PostgreSQL for trying --store postgres: prints its URL, runs until Ctrl-C.
pg: dev postgres-bin
	$(PY) -P -m a2a_gateway.server.pg_local

# Two workers (pytest-xdist), each test file on one of them (its module's servers start
# once): most of a test's time is waiting on servers and subprocesses, so two workers on
# two cores take about half the time of one.
test: lint peer postgres-bin chromium
	$(VENV)/bin/pytest -q -n 2 --dist loadfile

# docs/configuration.md is made from the settings tables (the suite checks it).
docs: dev
	$(PY) -P -m a2a_gateway.config_doc > docs/configuration.md

gen: $(VENV)/.deps
	$(VENV)/bin/buf generate

clean:
	rm -rf $(VENV) $(PEER_VENV) $(PEER03_VENV) $(JS03_DIR)/node_modules build *.egg-info
