# The two commands of the README: `make serve` and `make test`. Each installs what it
# needs into .venv first (pinned by constraints.txt), so a fresh clone needs only
# Python 3.11 and make.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: install serve worker test lint format typecheck check bench bench-callbacks bench-fleet bench-size clean

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

# 1, then 2 API replicas on PostgreSQL, and their ratio (docs/performance.md).
bench-fleet: $(STAMP)
	$(BIN)/python -m bench.fleet $(BENCH_ARGS)

# One org of 1M requests seeded directly: list, filter and search p95; SQLite creates at 10k
# and 1M rows (docs/performance.md). Minutes, and a few GB of disk.
bench-size: $(STAMP)
	$(BIN)/python -m bench.size $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
