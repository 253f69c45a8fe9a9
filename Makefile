# The two commands of the quick start: `make demo` and `make test`. CI (.ci/run) runs
# `make lint` and then `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: demo test bench lint clean

# One line of our own while installing; pip's output (warnings included) goes to a log,
# printed in full if the install fails.
$(VENV)/.installed: pyproject.toml
	@echo "installing jobcenter into $(VENV) (log: $(VENV)/install.log) ..."
	@$(PYTHON) -m venv $(VENV)
	@{ $(PY) -m pip install --upgrade pip && $(PY) -m pip install -e '.[test]'; } \
		> $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log >&2; echo "install failed; its log: $(VENV)/install.log" >&2; exit 1; }
	@touch $@

demo: $(VENV)/.installed  ## the seed-000 DAG on an embedded Redis with two workers
	@$(PY) scripts/demo.py $(DEMO_ARGS)

test: $(VENV)/.installed  ## the whole suite, against Redis servers it starts itself
	$(PY) -m pytest -q $(TEST_ARGS)

bench: $(VENV)/.installed  ## throughput benchmark (prints its figures)
	$(PY) scripts/bench.py $(BENCH_ARGS)

lint: $(VENV)/.installed  ## what CI checks besides the tests: lint rules, formatting, types
	$(VENV)/bin/ruff check jobcenter tests scripts
	$(VENV)/bin/ruff format --check jobcenter tests scripts
	$(VENV)/bin/mypy jobcenter

clean:
	rm -rf $(VENV) .jobcenter build *.egg-info
