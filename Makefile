# The two commands of the README: `make serve` and `make test`. Each installs what it
# needs into .venv first (pinned by constraints.txt), so a fresh clone needs only
# Python 3.11 and make.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install serve worker test lint format typecheck check bench bench-callbacks bench-longpoll bench-replacements clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c constraints.txt -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

serve: $(STAMP)
	$(BIN)/signoff serve --host $(HOST) --port $(PORT)

worker: $(STAMP)
	$(BIN)/signoff worker

test: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench

format: $(STAMP)
	$(BIN)/ruff format src tests bench
	$(BIN)/ruff check --fix src tests bench

typecheck: $(STAMP)
	$(BIN)/mypy src

check: lint typecheck test

bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Decision callbacks: decision-to-receipt latency, deliveries per second (docs/performance.md).
bench-callbacks: $(STAMP)
	$(BIN)/python -m bench.callbacks $(BENCH_ARGS)

# Long polls woken by a decision: 1,000 waiters answered within 1 s (docs/performance.md).
bench-longpoll: $(STAMP)
	$(BIN)/python -m bench.longpoll $(BENCH_ARGS)

# Each hand-written replacement of a library's job against the library, A/B in one run
# (docs/performance.md, *Hand-written replacements and what they earn*).
bench-replacements: $(STAMP)
	$(BIN)/python -m bench.replacements $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
