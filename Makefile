# The few commands people type. `make run` and `make test` are all a newcomer needs.
#
# Every target that runs project code first makes sure .venv exists, was made from a Python >= 3.12
# (found by scripts/find-python) and has exactly what requirements.lock pins installed.

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# `make run PORT=9000` or `PORT=9000 make run`.
PORT ?= 8000
# Extra pytest arguments, e.g. `make test-fast ARGS="-k decline -x"`.
ARGS ?=

.PHONY: help install venv-check chromium run test test-fast lint lock bench clean

help:
	@echo "make run        set up .venv, migrate, seed the demo, serve on http://127.0.0.1:$(PORT)/"
	@echo "make test       set up .venv (and Chromium), lint, then run every test"
	@echo "make test-fast  every test except the slow ones (multi-process, browser), no lint"
	@echo "make lint       ruff check, ruff format --check, mypy, import-linter contracts"
	@echo "make bench      run the benchmarks in bench/ (figures under bench/results/)"
	@echo "make lock       re-resolve pyproject.toml into requirements.lock (hash-pinned)"
	@echo "make clean      remove .venv, var/ (local database) and caches"

install: venv-check
	@$(MAKE) --no-print-directory --silent $(STAMP)

# A .venv made from an older Python (or a broken one) is removed, so the stamp rule rebuilds it.
venv-check:
	@if [ -e $(VENV) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))' >/dev/null 2>&1; then \
		echo "$(VENV) is missing a working Python >= 3.12; recreating it"; \
		rm -rf $(VENV); \
	fi

$(STAMP): requirements.lock
	@if [ ! -x $(PY) ]; then \
		python="$$(scripts/find-python)" || exit 1; \
		echo "Creating $(VENV) with $$python"; \
		"$$python" -m venv $(VENV) || exit 1; \
	fi
	@echo "Installing requirements.lock into $(VENV)"
	$(VENV)/bin/pip install --quiet --require-hashes -r requirements.lock
	@touch $@

# Browser tests drive Debian's Chromium (Playwright's own browser download is blocked here).
chromium:
	@if [ -x /usr/bin/chromium ]; then \
		:; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		echo "Installing Debian's chromium for the browser tests"; \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
			|| echo "!!! WARNING: installing chromium failed; browser tests will be skipped !!!"; \
	else \
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
		echo "!!! WARNING: /usr/bin/chromium is missing and cannot be installed (needs root and"; \
		echo "!!! apt-get). Browser tests will be SKIPPED. Install it: apt-get install chromium"; \
		echo "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!"; \
	fi

run: install
	$(PY) manage.py migrate --noinput
	@if $(PY) manage.py help demo_setup >/dev/null 2>&1; then $(PY) manage.py demo_setup; fi
	@echo "Serving Countersign on http://127.0.0.1:$(PORT)/ (Ctrl-C to stop)"
	DEBUG=$${DEBUG:-true} $(VENV)/bin/daphne -b 127.0.0.1 -p $(PORT) config.asgi:application

test: install chromium
	@$(MAKE) --no-print-directory lint
	$(PY) -m pytest $(ARGS)

test-fast: install
	$(PY) -m pytest -m "not slow" $(ARGS)

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

lock: install
	$(VENV)/bin/uv pip compile pyproject.toml --group dev --python-version 3.12 --generate-hashes \
		--quiet -o requirements.lock

bench: install
	@shopt -s nullglob; for script in bench/[!_]*.py; do \
		echo "== $$script"; \
		$(PY) "$$script" || exit 1; \
	done

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache test-artifacts bench/results/*.tmp
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
