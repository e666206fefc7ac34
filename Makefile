# The two commands of the README: `make serve` and `make test`. Each installs what it
# needs into .venv first (pinned by constraints.txt), so a fresh clone needs only
# Python 3.11 and make.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Serving needs the runtime alone; the tests and linters need the dev tools beside it.
RUNTIME_STAMP := $(VENV)/.runtime-stamp
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 8000
PIP := PYTHONWARNINGS="ignore:Editable installation" $(BIN)/python -m pip install --disable-pip-version-check --progress-bar off -c constraints.txt

.PHONY: install install-runtime serve worker test lint format typecheck check bench bench-compare bench-callbacks bench-longpoll bench-dashboard bench-notifications bench-replacements bench-fleet bench-size bench-expiry bench-policies bench-receipts clean

CLIENT := clients/python

$(RUNTIME_STAMP): pyproject.toml constraints.txt
	@echo "signoff: creating $(VENV) and installing the server's runtime (first run only)..."
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@$(PIP) --quiet --upgrade pip
	@$(PIP) --quiet -e . && echo "signoff: runtime installed"
	@touch $(RUNTIME_STAMP)

$(STAMP): $(RUNTIME_STAMP) $(CLIENT)/pyproject.toml
	@echo "signoff: installing the test and lint tools into $(VENV) (first run only)..."
	@$(PIP) --quiet -e '.[dev]' -e './$(CLIENT)[mcp]' && echo "signoff: test tools installed"
	@touch $(STAMP)

install-runtime: $(RUNTIME_STAMP)

install: $(STAMP)

serve: $(RUNTIME_STAMP)
	$(BIN)/signoff serve --host $(HOST) --port $(PORT)

worker: $(RUNTIME_STAMP)
	$(BIN)/signoff worker

test: $(STAMP)
	$(BIN)/pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check src tests bench $(CLIENT)
	$(BIN)/ruff format --check src tests bench $(CLIENT)

format: $(STAMP)
	$(BIN)/ruff format src tests bench $(CLIENT)
	$(BIN)/ruff check --fix src tests bench $(CLIENT)

typecheck: $(STAMP)
	$(BIN)/mypy src $(CLIENT)/src

check: lint typecheck test

# signoff on SQLite and PostgreSQL against plain-FastAPI baselines (docs/performance.md).
# BENCH_ARGS="--save-reference" also keeps the report as bench/results/reference-<commit>.json.
bench: $(STAMP)
	$(BIN)/python -m bench.run $(BENCH_ARGS)

# Two builds in one run: BASE=<commit> (A), built in a temporary git worktree with a venv of
# its own, against this checkout as it is (B; or HEAD=<commit>), make bench's scenarios
# interleaved A, B, A, B round by round. Prints each scenario's ratio B/A (req/s, p99, CPU
# per call) with its spread; writes bench/results/compare-<date>-<A>-<B>.json. Options in
# BENCH_ARGS: --rounds (5), --duration (10), --scenarios, --databases (docs/performance.md,
# *Comparing two builds*). Example:
#   make bench-compare BASE=7fd4f54 BENCH_ARGS="--scenarios create,decide --databases sqlite"
bench-compare: $(STAMP)
	$(BIN)/python -m bench.compare --base "$(BASE)" $(if $(HEAD),--head "$(HEAD)") $(BENCH_ARGS)

# Decision callbacks: decision-to-receipt latency, deliveries per second (docs/performance.md).
# Policies: the dry run over 100,000 past requests; create CPU under 1,000 rules against none.
bench-policies: $(STAMP)
	$(BIN)/python -m bench.policies $(BENCH_ARGS)

bench-callbacks: $(STAMP)
	$(BIN)/python -m bench.callbacks $(BENCH_ARGS)

# Long polls woken by a decision: 1,000 waiters answered within 1 s (docs/performance.md).
bench-longpoll: $(STAMP)
	$(BIN)/python -m bench.longpoll $(BENCH_ARGS)

# The dashboard's pages in an org of 10,000 requests: p50, p95 and size of each.
bench-dashboard: $(STAMP)
	$(BIN)/python -m bench.dashboard $(BENCH_ARGS)

# Notifications: create to mail accepted, a burst's Slack digests (docs/notifications.md).
bench-notifications: $(STAMP)
	$(BIN)/python -m bench.notifications $(BENCH_ARGS)

# Each hand-written replacement of a library's job against the library, A/B in one run
# (docs/performance.md, *Hand-written replacements and what they earn*).
bench-replacements: $(STAMP)
	$(BIN)/python -m bench.replacements $(BENCH_ARGS)

# 1, then 2 API replicas on PostgreSQL, and their ratio (docs/performance.md).
bench-fleet: $(STAMP)
	$(BIN)/python -m bench.fleet $(BENCH_ARGS)

# One org of 1M requests seeded directly: list, filter and search p95; SQLite creates at 10k
# and 1M rows (docs/performance.md). Minutes, and a few GB of disk.
bench-size: $(STAMP)
	$(BIN)/python -m bench.size $(BENCH_ARGS)

# 100,000 requests expiring at one instant, seeded directly, with callbacks to a loopback
# receiver, while another org calls the API: time to all expired, to all callbacks
# received, and the other org's p99 meanwhile (docs/performance.md).
bench-expiry: $(STAMP)
	$(BIN)/python -m bench.expiry $(BENCH_ARGS)

# Receipts: verify_receipt offline per second on one core (target >= 5,000/s), and
# POST /api/v1/receipts/redeem's rate and p99 on each database (docs/performance.md).
bench-receipts: $(STAMP)
	$(BIN)/python -m bench.receipts $(BENCH_ARGS)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
