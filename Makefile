# The few commands people type. `make run` and `make test` are all a newcomer needs.
#
# Every target that runs project code first makes sure .venv exists, was made from a Python >= 3.12
# (found by scripts/find-python) and has what it needs installed, hash-pinned: `make run` only what the
# app needs (requirements.lock), every other target the development tools too (requirements-dev.lock,
# a superset with the same versions). A run-only .venv gains the tools at the first `make test`.

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
RUN_STAMP := $(VENV)/.installed-run
DEV_STAMP := $(VENV)/.installed-dev
# `make run PORT=9000` or `PORT=9000 make run`.
PORT ?= 8000
# `make run HOST=0.0.0.0` shows the demo to other machines (every address of this one).
HOST ?= 127.0.0.1
# `make run DEBUG=false` runs the way production does: collected static files, no debug pages.
DEBUG ?= true
# The demo MCP gateway `make run` serves beside the desk (on this machine only): `make run MCP_PORT=9765`.
MCP_PORT ?= 8765
# Extra pytest arguments, e.g. `make test-fast ARGS="-k decline -x"`.
ARGS ?=
# Test processes running side by side (pytest-xdist); `make test WORKERS=0` runs every test in one.
# More than the cores: the tests spend much of their time waiting on the servers, processes and
# browser they start, and a fourth worker fills those waits (docs/scaling.md, "The cost of a test run").
WORKERS ?= 4
PARALLEL := $(if $(filter 0,$(WORKERS)),,-n $(WORKERS) --dist loadgroup)

.PHONY: help install-run install-dev venv-check chromium api-client run-settings run mcp-demo test test-fast screenshots lint lock bench clean

help:
	@echo "make run        set up .venv (the app only), migrate, seed the demo, serve on http://$(HOST):$(PORT)/"
	@echo "                (HOST=0.0.0.0 to show it on the network, PORT=9000, DEBUG=false)"
	@echo "make mcp-demo   with make run up: an MCP client asks the demo gateway (http://127.0.0.1:$(MCP_PORT)/mcp)"
	@echo "                for a call that waits at the desk"
	@echo "make test       set up .venv with the development tools (and Chromium), lint, run every test"
	@echo "                (in WORKERS=4 processes side by side; ARGS=\"tests/api -x\" for pytest)"
	@echo "make test-fast  every test except the slow ones (multi-process, browser), no lint"
	@echo "make screenshots  the browser tests that take docs/screenshots/*.png, saving them there"
	@echo "make lint       ruff check, ruff format --check, mypy, import-linter contracts"
	@echo "make bench      run the benchmarks in bench/ (figures under bench/results/)"
	@echo "make lock       re-resolve pyproject.toml into requirements.lock and requirements-dev.lock"
	@echo "make clean      remove .venv, var/ (local database) and caches"

install-run: venv-check
	@$(MAKE) --no-print-directory --silent $(RUN_STAMP)

install-dev: venv-check
	@$(MAKE) --no-print-directory --silent $(DEV_STAMP)

# A .venv made from an older Python (or a broken one) is removed, so the stamp rule rebuilds it.
venv-check:
	@if [ -e $(VENV) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then \
		echo "$(VENV) is missing a working Python >= 3.12; recreating it"; \
		rm -rf $(VENV); \
	fi

define create_venv
	@if [ ! -x $(PY) ]; then \
		python="$$(scripts/find-python)" || exit 1; \
		echo "Creating $(VENV) with $$python"; \
		"$$python" -m venv $(VENV) || exit 1; \
	fi
endef

$(RUN_STAMP): requirements.lock
	$(create_venv)
	@echo "Installing requirements.lock (what the app needs) into $(VENV)"
	$(VENV)/bin/pip install --quiet --require-hashes -r requirements.lock
	@touch $@

# The development lock holds the app's packages at the same versions (`make lock` resolves it first
# and the app's lock within it), so installing it brings the run set up to date as well.
$(DEV_STAMP): requirements-dev.lock requirements.lock
	$(create_venv)
	@echo "Installing requirements-dev.lock (the app and the development tools) into $(VENV)"
	$(VENV)/bin/pip install --quiet --require-hashes -r requirements-dev.lock
	@touch $@ $(RUN_STAMP)

# Browser tests drive Debian's Chromium (Playwright's own browser download is blocked here), through
# its headless shell when installed (chromium-headless-shell, what Playwright itself runs headless:
# the browser tests spend well under half the CPU in it; docs/scaling.md, "The cost of a test run").
# With Chromium there, installing the shell is tried once (var/.chromium-tried): an offline machine
# does not wait on apt-get at every run.
CHROMIUM_PACKAGES := chromium chromium-headless-shell
CHROMIUM_TRIED := var/.chromium-tried
chromium:
	@if [ -x /usr/bin/chromium ] && { [ -x /usr/lib/chromium/chromium-headless-shell ] || [ -e $(CHROMIUM_TRIED) ]; }; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Debian's $(CHROMIUM_PACKAGES) for the browser tests"; \
		mkdir -p var && touch $(CHROMIUM_TRIED); \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $(CHROMIUM_PACKAGES) >/dev/null) \
			|| echo "!!! WARNING: installing $(CHROMIUM_PACKAGES) failed; browser tests will be skipped or slower !!!"; \
	elif [ -x /usr/bin/chromium ]; then \
		echo "Note: browser tests run on the full Chromium; apt-get install chromium-headless-shell makes them faster"; \
	else \
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
		echo "!!! WARNING: /usr/bin/chromium is missing and cannot be installed (needs root and"; \
		echo "!!! apt-get). Browser tests will be SKIPPED. Install it: apt-get install $(CHROMIUM_PACKAGES)"; \
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	fi

# ALLOWED_HOSTS (which the CSRF and websocket origin checks follow) gets the names a browser can use
# to reach HOST (scripts/run-hosts), unless it is set. With DEBUG off the server serves only collected
# static files, so they are collected first; and since this server speaks plain HTTP, cookies are not
# marked HTTPS-only (browsers would drop them, and logins with them, anywhere but on localhost).
# With DEBUG off the app refuses the repository's public SECRET_KEY (approvals/checks.py): say so before
# anything is installed or migrated.
run-settings:
	@case "$$(echo '$(DEBUG)' | tr A-Z a-z)" in 1|true|yes|on) ;; \
		*) case "$${SECRET_KEY:-django-insecure-}" in django-insecure-*) \
			echo "DEBUG is off: set SECRET_KEY to a long random value first, e.g."; \
			echo "  SECRET_KEY=\"\$$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')\" make run DEBUG=false"; \
			echo "(the default key is public; the server refuses to start with it unless DEBUG=true)"; \
			exit 1;; esac;; \
	esac

run: run-settings install-run
	$(PY) manage.py migrate --noinput
	@case "$$(echo '$(DEBUG)' | tr A-Z a-z)" in 1|true|yes|on) ;; \
		*) echo "DEBUG is off: collecting static files"; $(PY) manage.py collectstatic --noinput -v 0 || exit 1;; \
	esac
	@hosts="$$($(PY) scripts/run-hosts '$(HOST)')" || exit 1; \
	urls=""; for host in $$hosts; do urls="$$urls http://$$host:$(PORT)/"; done; \
	$(PY) manage.py demo_setup --banner $$urls || exit 1; \
	DEBUG='$(DEBUG)' $(PY) manage.py mcp_gateway --config demo/mcp_gateway.toml --host 127.0.0.1 --port '$(MCP_PORT)' & \
	DEBUG='$(DEBUG)' ALLOWED_HOSTS="$${ALLOWED_HOSTS:-$$(echo $$hosts | tr ' ' ,)}" \
		SECURE_COOKIES="$${SECURE_COOKIES:-false}" \
		exec $(VENV)/bin/daphne -b '$(HOST)' -p '$(PORT)' config.asgi:application

# The demo gateway's client: its calls wait in the queue of `make run`'s desk until decided there.
mcp-demo: install-run
	$(PY) demo/mcp_client.py http://127.0.0.1:$(MCP_PORT)/mcp

test: install-dev chromium api-client
	@$(MAKE) --no-print-directory lint
	$(PY) -m pytest $(PARALLEL) $(ARGS)

# The official Mastra client the API test drives (tests/api/test_mastra_client.py), exactly as locked.
# Node comes from the machine; without it the test is skipped with a warning (a failure in CI).
API_CLIENT := tests/api/mastra
API_CLIENT_STAMP := $(API_CLIENT)/node_modules/.package-lock.json

api-client:
	@if command -v npm >/dev/null; then \
		$(MAKE) --no-print-directory $(API_CLIENT_STAMP); \
	else \
		echo "WARNING: npm not found: the @mastra/client-js test will be skipped (install Node.js)" >&2; \
	fi

$(API_CLIENT_STAMP): $(API_CLIENT)/package.json $(API_CLIENT)/package-lock.json
	cd $(API_CLIENT) && npm ci --no-audit --no-fund --loglevel=error
	@touch $@

test-fast: install-dev
	$(PY) -m pytest $(PARALLEL) -m "not slow" $(ARGS)

# Tests save the docs' pictures under test-artifacts/docs-screenshots/; this writes them into the docs.
screenshots: install-dev chromium
	UPDATE_DOCS_SCREENSHOTS=1 $(PY) -m pytest $(PARALLEL) $(ARGS) tests/e2e/test_escalation.py \
		tests/e2e/test_mobile.py tests/e2e/test_queue.py tests/e2e/test_undo.py tests/e2e/test_votes_and_claims.py

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# The development lock first (everything), then the app's within it, so the two never disagree on a
# version (tests/test_install.py checks it).
lock: install-dev
	$(VENV)/bin/uv pip compile pyproject.toml --group dev --python-version 3.12 --generate-hashes \
		--quiet -o requirements-dev.lock
	$(VENV)/bin/uv pip compile pyproject.toml --python-version 3.12 --generate-hashes \
		--quiet -c requirements-dev.lock -o requirements.lock

bench: install-dev
	@shopt -s nullglob; for script in bench/[!_]*.py; do \
		echo "== $$script"; \
		$(PY) "$$script" || exit 1; \
	done

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache test-artifacts bench/results/*.tmp $(API_CLIENT)/node_modules
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
