# gapless — developer commands. `make install` first; every target uses .venv.
PY ?= .venv/bin/python
DURATION ?= 90
INVOICES ?= 1200
WORKERS ?= 3
SEED ?= 7
FAULTS ?= default

.PHONY: install lock test lint typecheck schema bench bench-check bench-tools chaos demo clean-test-dbs

## The pinned versions of constraints.txt: what CI, the benchmarks and the image run.
install:
	python3 -m venv .venv
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -c constraints.txt -e ".[dev]"

## constraints.txt anew: the newest versions pyproject.toml allows, installed in a scratch venv
## and pinned (its header kept). Then `make install`, the tests and `make bench-check`, and commit.
LOCK_VENV ?= /tmp/gapless-lock-venv
lock:
	rm -rf $(LOCK_VENV) && python3 -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(LOCK_VENV)/bin/python -m pip install --quiet -e ".[dev]"
	{ grep '^#' constraints.txt; $(LOCK_VENV)/bin/python -m pip freeze --exclude-editable --all \
		| grep -v -E '^(pip|setuptools|wheel)=='; } > constraints.txt.new
	mv constraints.txt.new constraints.txt
	rm -rf $(LOCK_VENV)

## The test command (README, CI): every tier, the chaos short profile included, on $(TEST_WORKERS)
## processes (pytest-xdist; every process has its own template database and queue prefixes).
TEST_WORKERS ?= 2
test:
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

## ruff, then the import contracts of pyproject.toml's [tool.importlinter] (roles import downward;
## message and documents stay pure), then mypy strict.
lint:
	$(PY) -m ruff check gapless worker recovery tests bench
	.venv/bin/lint-imports --no-cache
	$(PY) -m mypy

## The message's JSON Schema, generated from the model (tests/unit/test_message_schema.py checks
## the committed copy equals it).
schema:
	$(PY) -m gapless.message.schema > docs/message.schema.json

bench:
	$(PY) bench/run_all.py

## The regression guard (docs/benchmarks.md): the benchmarks' short runs against bench/goals.toml;
## exits 1 naming each goal missed. ONLY=issue,reserve,feed,api,instructions runs some suites; ARGS are passed
## on (e.g. ARGS=--report-only, ARGS="--repeat 5"). Run it on an idle machine (~13 minutes, of
## which the counted suite ~6); the api suite needs wrk, the counted one valgrind
## (`make bench-tools`).
ONLY ?=
ARGS ?=
bench-check:
	$(PY) bench/check.py $(if $(ONLY),--only $(ONLY)) $(ARGS)

## The benchmarks' external tools, from Debian's packages: wrk (bench/api.py's load generator)
## and valgrind (bench/instructions.py and the guard's counted suite run the worker under it).
bench-tools:
	@for tool in wrk valgrind; do \
		command -v $$tool >/dev/null 2>&1 || { \
			echo "installing $$tool (apt-get install -y $$tool)"; \
			if [ "$$(id -u)" = 0 ]; then apt-get install -y $$tool; \
			else sudo apt-get install -y $$tool; fi; } || exit 1; \
	done

chaos:
	GAPLESS_CHAOS_DURATION=$(DURATION) GAPLESS_CHAOS_INVOICES=$(INVOICES) \
	GAPLESS_CHAOS_WORKERS=$(WORKERS) GAPLESS_CHAOS_SEED=$(SEED) GAPLESS_CHAOS_FAULTS=$(FAULTS) \
	$(PY) -m pytest tests/chaos -m chaos -p no:cacheprovider -s

demo:
	.venv/bin/gapless demo
