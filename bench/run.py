"""``make bench``: signoff on SQLite and PostgreSQL against two plain-FastAPI baselines.

For each database: a fresh database, an org, a user and a connection made with the real
CLI (``--json``), the connection's hourly limit raised to the operator's ceiling (rate
limiting stays on), ``signoff serve`` started as users start it, 10,000 requests seeded
through the API, then wrk at a fixed concurrency for a fixed time on each scenario:

- create: ``POST /api/v1/approvals`` (five-field body, unique titles);
- get:    ``GET /api/v1/approvals/:id`` of random seeded requests;
- ciba_poll: ``POST /oauth/token`` with the OpenID CIBA grant for random pending
  backchannel requests (a CIBA client authenticated with Basic, answered
  ``authorization_pending``; the server's poll interval set to 0 so none is ``slow_down``);
- list:   ``GET /api/v1/approvals?page=N`` with N random in 1..50 (20 per page);
- decide: ``PATCH /api/v1/approvals/:id`` approving, every request hit exactly once;
- redeem: ``POST /api/v1/receipts/redeem``, each receipt redeemed exactly once: before the
  timed part, pending requests are approved through the API and their receipts kept
  (lua/redeem.lua);
- chain:  whole approval chains (lua/chain.lua): create a sequential request, set three
  steps, and each of three approvers votes in turn, five calls per chain, each answered
  before the next is sent; wrk with one thread per connection, so that each thread can
  carry the ids of its answers into its next call.

The baselines (``bench/baseline.py``: a Pydantic echo for writes, a constant object for
reads) run on the same uvicorn settings before and after; each ratio divides by the
*higher* of the two baseline figures, so machine noise can only make our ratios look
worse. Figures are printed, and written to ``bench/results/latest.json``; nothing here
asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.builds import checkout_source

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
LUA_DIR = BENCH_DIR / "lua"
RESULTS_DIR = BENCH_DIR / "results"
SIGNOFF = Path(sys.executable).parent / "signoff"
HOST = "127.0.0.1"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# The operator's ceiling for this run; the bench connection's limit is raised up to it.
RATE_LIMIT_CEILING = 100_000_000
# The bench's own HTTP clients drop a connection idle this long, before uvicorn's
# keep-alive timeout (5 s) can close it under a request just sent (an httpx.ReadError
# that ended a callbacks bench after its 22nd drain).
KEEPALIVE_EXPIRY = 2.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
SCENARIOS = ("create", "get", "ciba_poll", "list", "decide", "redeem", "chain", "task_poll")
CIBA_REQUESTS = 1_000
# Before each scenario the server settles: under this share of a core over this window.
QUIET_SHARE = 0.05
QUIET_WINDOW_SECONDS = 0.5
QUIET_TIMEOUT_SECONDS = 60.0
# Which baseline each scenario is compared with.
BASELINE_OF = {"create": "echo", "decide": "echo", "get": "constant", "list": "constant"}
# The targets. Both databases: p99, peak RSS, no failed calls. SQLite, the
# embedded default: throughput against the plain-FastAPI baselines. PostgreSQL: throughput
# as a share of SQLite's in the same run, and server CPU per call at most a factor of
# SQLite's; without SQLite in the run those two are not checked.
TARGET_RATIOS = {"create": 0.30, "get": 0.40}
POSTGRES_SHARE_OF_SQLITE = {"create": 0.50, "get": 0.60, "list": 0.50, "decide": 0.50}
POSTGRES_CPU_FACTOR = 1.5
TARGET_P99_MS = 50.0
TARGET_RSS_MB = 150.0

WORDS = (  # noqa: SIM905 - one readable paragraph of vocabulary
    "deploy billing service region canary rollback database migration schema index "
    "refund invoice customer payout vendor contract renewal access grant admin role "
    "production staging cluster node upgrade kernel patch secret rotation certificate "
    "domain firewall rule budget purchase laptop license seat report quarterly audit "
    "export delete account merge branch release hotfix feature flag traffic shift"
).split()
PRIORITIES = ("low", "medium", "high", "critical")
ACTION_TYPES = ("deploy.production", "refund.issue", "access.grant", "db.migrate", None)
SOURCES = ("github-actions", "zapier", "n8n", "agent", None)


class BenchError(RuntimeError):
    """The bench itself could not run (not a slow result: those are only reported)."""


@dataclass
class Options:
    duration: int
    connections: int
    threads: int
    seed: int
    list_pages: int
    databases: list[str]
    postgres_url: str
    output: Path
    scenarios: tuple[str, ...] = SCENARIOS
    save_reference: bool = False


@dataclass(frozen=True)
class Approver:
    """A member with a connection of their own: each step is voted with its approver's key."""

    user_id: str
    api_key: str


@dataclass
class Figure:
    """One wrk run."""

    target: str  # sqlite, postgresql or baseline
    scenario: str
    requests: int
    seconds: float
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    errors: int  # non-2xx/3xx answers plus socket errors
    cpu_ms_per_request: float  # the server's CPU time per answer: steadier than req/s
    peak_rss_mb: float
    load_before: float
    load_after: float
    baseline: str | None = None
    ratio: float | None = None
    chains: int | None = None  # the chain scenario: whole chains completed


@dataclass
class Report:
    started_at: str
    machine: dict[str, Any]
    options: dict[str, Any]
    figures: list[Figure] = field(default_factory=list)
    seeding: dict[str, dict[str, float]] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)  # the commit benched, and if dirty


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def load_average() -> float:
    return os.getloadavg()[0]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def bench_env(database_url: str, secret_key: str) -> dict[str, str]:
    """The environment of every signoff process: ours only, nothing inherited from SIGNOFF_*."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update(
        SIGNOFF_DATABASE_URL=database_url,
        SIGNOFF_SECRET_KEY=secret_key,
        SIGNOFF_RATE_LIMIT_CEILING=str(RATE_LIMIT_CEILING),
        # ciba_poll measures what a poll costs, not how soon slow_down answers it.
        SIGNOFF_CIBA_INTERVAL_SECONDS="0",
    )
    return env


# ---- processes ----


class Server:
    """A server subprocess, its log file, and its peak resident memory."""

    def __init__(self, name: str, argv: list[str], env: dict[str, str], cwd: Path) -> None:
        self.name = name
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log_path = cwd / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [*argv, "--host", HOST, "--port", str(self.port)],
            env=env,
            cwd=cwd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise BenchError(f"{self.name} exited at start:\n{self.log_tail()}")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise BenchError(f"{self.name} did not answer /healthz in {timeout:.0f} s")

    def peak_rss_mb(self) -> float:
        """VmHWM: the most resident memory the process has had so far."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def cpu_seconds(self) -> float:
        """User plus system CPU time of the process (all its threads) so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rpartition(")")[2].split()
        # proc(5): after the command name come field 3 (state) on; utime, stime are 14, 15.
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS

    def wait_quiet(self, timeout: float = QUIET_TIMEOUT_SECONDS) -> bool:
        """Wait until the server's background work (sealing, notifications, indexing) left
        by what ran before has settled, so that a scenario's CPU per call is its own: the
        process used under ``QUIET_SHARE`` of a core over ``QUIET_WINDOW_SECONDS``. False
        if it never did within ``timeout`` (the figure is then taken all the same)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            before = self.cpu_seconds()
            time.sleep(QUIET_WINDOW_SECONDS)
            if self.cpu_seconds() - before < QUIET_SHARE * QUIET_WINDOW_SECONDS:
                return True
        return False

    def log_tail(self, lines: int = 30) -> str:
        self._log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


@contextmanager
def running(server: Server) -> Iterator[Server]:
    try:
        server.wait_ready()
        yield server
    except Exception:
        log(f"{server.name} log, last lines:\n{server.log_tail()}")
        raise
    finally:
        server.stop()


def signoff_cli(
    env: dict[str, str], cwd: Path, *args: str, binary: Path = SIGNOFF
) -> dict[str, Any]:
    """Run the real ``signoff`` command (this checkout's, or ``binary``: another build's);
    with ``--json`` its last line is one object."""
    result = subprocess.run(
        [str(binary), *args], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise BenchError(f"signoff {' '.join(args)} failed:\n{result.stderr or result.stdout}")
    if "--json" not in args:
        return {}
    data: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return data


# ---- wrk ----


def wrk_version() -> str:
    result = subprocess.run(["wrk", "-v"], capture_output=True, text=True, check=False)
    lines = (result.stdout or result.stderr).splitlines()
    return lines[0] if lines else ""


def run_wrk(
    opts: Options,
    workdir: Path,
    url: str,
    script: str | None,
    args: list[str] | None = None,
    headers: list[str] | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """One fixed-time wrk run; returns the summary its ``done()`` prints (times in µs)."""
    source = (LUA_DIR / "common.lua").read_text()
    if script:
        source += "\n" + (LUA_DIR / f"{script}.lua").read_text()
    script_path = workdir / f"{script or 'plain'}.lua"
    script_path.write_text(source)
    command = [
        "wrk",
        "--threads",
        str(threads or opts.threads),
        "--connections",
        str(opts.connections),
        "--duration",
        f"{opts.duration}s",
        "--timeout",
        "10s",
        "--latency",
        "--script",
        str(script_path),
    ]
    for header in headers or []:
        command += ["--header", header]
    command.append(url)
    if args:
        command += ["--", *args]
    result = subprocess.run(
        command, capture_output=True, text=True, timeout=opts.duration + 120, check=False
    )
    for line in result.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            summary: dict[str, Any] = json.loads(line.removeprefix("BENCH_RESULT "))
            return summary
    raise BenchError(f"wrk gave no summary:\n{result.stdout}\n{result.stderr}")


def measure(
    opts: Options,
    workdir: Path,
    server: Server,
    target: str,
    scenario: str,
    path: str,
    script: str | None,
    args: list[str] | None = None,
    headers: list[str] | None = None,
    threads: int | None = None,
) -> Figure:
    if not server.wait_quiet():
        log(f"  warning: {target} was still busy before {scenario}; its CPU per call counts it")
    load_before = load_average()
    cpu_before = server.cpu_seconds()
    summary = run_wrk(opts, workdir, server.url + path, script, args, headers, threads)
    cpu = server.cpu_seconds() - cpu_before
    seconds = summary["duration_us"] / 1e6
    errors = summary.get("failures", 0) + sum(  # failures: wrong answers a script counted
        summary[k]
        for k in (
            "status_errors",
            "connect_errors",
            "read_errors",
            "write_errors",
            "timeouts",
        )
    )
    figure = Figure(
        target=target,
        scenario=scenario,
        requests=summary["requests"],
        seconds=round(seconds, 2),
        rps=round(summary["requests"] / seconds, 1),
        p50_ms=round(summary["p50_us"] / 1000, 2),
        p90_ms=round(summary["p90_us"] / 1000, 2),
        p99_ms=round(summary["p99_us"] / 1000, 2),
        max_ms=round(summary["max_us"] / 1000, 2),
        errors=errors,
        cpu_ms_per_request=round(cpu * 1000 / max(1, summary["requests"]), 3),
        peak_rss_mb=round(server.peak_rss_mb(), 1),
        load_before=round(load_before, 2),
        load_after=round(load_average(), 2),
        chains=summary.get("chains"),
    )
    log(
        f"  {target:<10} {scenario:<8} {figure.rps:>9,.0f} req/s  p50 {figure.p50_ms:6.2f} ms  "
        f"p99 {figure.p99_ms:6.2f} ms  CPU {figure.cpu_ms_per_request:5.2f} ms/req  "
        f"peak RSS {figure.peak_rss_mb:5.1f} MB" + (f"  ERRORS {errors}" if errors else "")
    )
    if errors:
        log(f"  warning: {errors} failed calls in {target} {scenario}: see the server log")
    return figure


# ---- seeding through the API ----


def approval_body(index: int) -> dict[str, Any]:
    """Varied bodies, so the full-text index holds realistic, distinct rows."""
    words = [WORDS[(index * 7 + k * 13) % len(WORDS)] for k in range(12)]
    body: dict[str, Any] = {
        "title": f"{words[0].title()} {words[1]} {words[2]} #{index}",
        "description": " ".join(words) + f". Ticket OPS-{index}.",
        "priority": PRIORITIES[index % len(PRIORITIES)],
        "metadata": {"ticket": f"OPS-{index}", "bench": True},
    }
    if action_type := ACTION_TYPES[index % len(ACTION_TYPES)]:
        body["action_type"] = action_type
    if source := SOURCES[(index // 5) % len(SOURCES)]:
        body["source"] = source
    return body


def _seeding_client(base_url: str, api_key: str) -> httpx.AsyncClient:
    """The client that seeds before the timed part: 32 calls at a time."""
    limits = httpx.Limits(
        max_connections=32, max_keepalive_connections=32, keepalive_expiry=KEEPALIVE_EXPIRY
    )
    headers = {"Authorization": f"Bearer {api_key}"}
    return httpx.AsyncClient(base_url=base_url, headers=headers, limits=limits, timeout=60.0)


async def _create_many(base_url: str, api_key: str, start: int, count: int) -> list[str]:
    ids: list[str] = []
    indexes = iter(range(start, start + count))
    async with _seeding_client(base_url, api_key) as client:

        async def post(index: int) -> httpx.Response:
            # The key makes a retry after a dropped connection safe: no request twice.
            body = {**approval_body(index), "idempotency_key": f"bench-{index}"}
            for attempt in range(3):
                try:
                    return await client.post("/api/v1/approvals", json=body)
                except httpx.TransportError as exc:
                    log(f"  seeding: {exc!r} on attempt {attempt + 1}; retrying")
            raise BenchError("seeding: the server dropped the connection three times")

        async def worker() -> None:
            for index in indexes:
                response = await post(index)
                if response.status_code not in (200, 201):
                    raise BenchError(f"seeding: {response.status_code} {response.text}")
                ids.append(response.json()["id"])

        await asyncio.gather(*(worker() for _ in range(32)))
    return ids


def create_many(base_url: str, api_key: str, start: int, count: int) -> list[str]:
    return asyncio.run(_create_many(base_url, api_key, start, count))


async def _approve_all(base_url: str, api_key: str, ids: list[str]) -> list[str]:
    """Approve each pending request of ``ids``; the receipts their approvals issued."""
    receipts: list[str] = []
    pending = iter(ids)
    async with _seeding_client(base_url, api_key) as client:

        async def worker() -> None:
            for request_id in pending:
                answer = await client.patch(
                    f"/api/v1/approvals/{request_id}", json={"decision": "approve"}
                )
                if answer.status_code != 200 or not answer.json().get("receipt"):
                    raise BenchError(f"approving: {answer.status_code} {answer.text}")
                receipts.append(answer.json()["receipt"])

        await asyncio.gather(*(worker() for _ in range(32)))
    return receipts


def approve_all(base_url: str, api_key: str, ids: list[str]) -> list[str]:
    return asyncio.run(_approve_all(base_url, api_key, ids))


def pending_ids(base_url: str, api_key: str) -> list[str]:
    """Every pending request, through the list endpoint (oldest page last)."""
    ids: list[str] = []
    headers = {"Authorization": f"Bearer {api_key}"}
    limits = httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY)
    with httpx.Client(base_url=base_url, headers=headers, timeout=60.0, limits=limits) as client:
        page = 1
        while True:
            response = client.get(
                "/api/v1/approvals", params={"status": "pending", "page": page, "page_size": 100}
            )
            response.raise_for_status()
            data = response.json()
            ids += [item["id"] for item in data["data"]]
            if page >= data["pagination"]["total_pages"]:
                return ids
            page += 1


# ---- one database ----


@contextmanager
def postgres_database(admin_url: str) -> Iterator[str]:
    """A database of our own on the server of ``admin_url``, dropped afterwards."""
    import asyncpg  # type: ignore[import-untyped]
    from sqlalchemy.engine import make_url

    name = f"signoff_bench_{uuid.uuid4().hex[:10]}"

    async def execute(statement: str) -> None:
        conn = await asyncpg.connect(admin_url)
        try:
            await conn.execute(statement)
        finally:
            await conn.close()

    asyncio.run(execute(f'CREATE DATABASE "{name}"'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        asyncio.run(execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


def check_postgres(admin_url: str) -> None:
    import asyncpg

    async def ping() -> None:
        conn = await asyncpg.connect(admin_url, timeout=5)
        await conn.close()

    try:
        asyncio.run(ping())
    except Exception as exc:
        raise BenchError(
            f"PostgreSQL is not reachable at {admin_url} ({exc}). Start it, pass "
            "--postgres-url, or run only SQLite: make bench BENCH_ARGS='--databases sqlite'"
        ) from None


@contextmanager
def database_url(target: str, opts: Options, workdir: Path) -> Iterator[str]:
    if target == "sqlite":
        yield f"sqlite:///{workdir / 'signoff.db'}"
        return
    with postgres_database(opts.postgres_url) as url:
        yield url


@dataclass
class Deployment:
    """One signoff build serving a fresh, seeded database: what each scenario runs against."""

    target: str  # sqlite or postgresql
    binary: Path
    env: dict[str, str]
    workdir: Path
    org_id: str
    api_key: str
    server: Server
    ids_file: Path
    connection_id: str = ""
    create_rps: float | None = None  # the create scenario's, once run: sizes decide's pool
    topped_up: int = 0  # requests created after the seeding (``pending_pool``)

    @property
    def auth(self) -> list[str]:
        return [f"Authorization: Bearer {self.api_key}"]


@contextmanager
def deployed(
    target: str,
    opts: Options,
    workdir: Path,
    report: Report | None = None,
    binary: Path = SIGNOFF,
    name: str | None = None,
) -> Iterator[Deployment]:
    """A fresh database, an org, a connection made with ``binary``'s CLI, ``binary serve``
    started, and ``opts.seed`` requests seeded through the API; stopped on exit."""
    from signoff.crypto import generate_secret_key

    name = name or target
    workdir.mkdir()
    with database_url(target, opts, workdir) as url:
        env = bench_env(url, generate_secret_key())

        def cli(*args: str) -> dict[str, Any]:
            return signoff_cli(env, workdir, *args, binary=binary)

        if target == "postgresql":
            cli("db", "upgrade")
        org = cli("org", "create", "Bench", "--json")
        user = cli(
            "user", "create", "--org", org["id"], "--email", "bench@example.com",
            "--name", "Bench Admin", "--role", "admin", "--json",
        )  # fmt: skip
        connection = cli(
            "connection", "create", "--org", org["id"], "--owner", user["id"],
            "--name", "bench", "--json",
        )  # fmt: skip
        cli(
            "connection", "set-rate-limit", connection["id"],
            str(RATE_LIMIT_CEILING), "--org", org["id"], "--json",
        )  # fmt: skip
        api_key = connection["api_key"]
        server = Server(f"signoff-{name}", [str(binary), "serve"], env, workdir)
        with running(server):
            log(f"[{name}] seeding {opts.seed:,} requests through POST /api/v1/approvals")
            started = time.monotonic()
            seeded = create_many(server.url, api_key, 0, opts.seed)
            elapsed = time.monotonic() - started
            if report is not None:
                report.seeding[target] = {
                    "requests": opts.seed,
                    "seconds": round(elapsed, 1),
                    "rps": round(opts.seed / elapsed, 1),
                }
            log(f"[{name}] seeded in {elapsed:.1f} s ({opts.seed / elapsed:,.0f}/s)")
            ids_file = workdir / "seeded-ids.txt"
            ids_file.write_text("\n".join(seeded) + "\n")
            yield Deployment(
                target, binary, env, workdir, org["id"], api_key, server, ids_file,
                connection["id"],
            )  # fmt: skip


def ciba_requests(d: Deployment) -> tuple[str, str, Path]:
    """A CIBA client registered with the CLI, and ``CIBA_REQUESTS`` pending backchannel
    requests made at ``/oauth/bc-authorize``: the client, its secret, the auth_req_ids file."""
    client = signoff_cli(
        d.env, d.workdir, "oauth-client", "create", "--connection", d.connection_id,
        "--name", "bench agent", "--ciba", "--json",
    )  # fmt: skip
    auth = (client["client_id"], client["client_secret"])
    form = {"scope": "openid", "login_hint": "bench@example.com", "binding_message": "bench"}
    ids = []
    with httpx.Client(base_url=d.server.url, timeout=30) as http:
        for _ in range(CIBA_REQUESTS):
            answer = http.post("/oauth/bc-authorize", data=form, auth=auth)
            if answer.status_code != 200:
                raise BenchError(f"bc-authorize answered {answer.status_code}: {answer.text}")
            ids.append(answer.json()["auth_req_id"])
    ids_file = d.workdir / "ciba-ids.txt"
    ids_file.write_text("\n".join(ids) + "\n")
    return auth[0], auth[1], ids_file


def run_scenario(opts: Options, deployment: Deployment, scenario: str) -> Figure:
    """One scenario of ``make bench`` against a deployment (``SCENARIOS``' order matters:
    decide's pool is sized by create's rate when create ran first)."""
    d = deployment

    def run(args: list[str] | None = None) -> Figure:
        return measure(
            opts, d.workdir, d.server, d.target, scenario, "/api/v1/approvals", scenario,
            args, d.auth,
        )  # fmt: skip

    if scenario == "create":
        figure = run()
        d.create_rps = figure.rps
        return figure
    if scenario == "get":
        return run([str(d.ids_file)])
    if scenario == "ciba_poll":
        client_id, secret, ids_file = ciba_requests(d)
        basic = base64.b64encode(f"{client_id}:{secret}".encode()).decode()
        return measure(
            opts, d.workdir, d.server, d.target, scenario, "/oauth/token", scenario,
            [str(ids_file)], [f"Authorization: Basic {basic}"],
        )  # fmt: skip
    if scenario == "list":
        return run([str(opts.list_pages)])
    if scenario == "decide":
        pool = pending_pool(opts, d, "decide")
        decide_file = d.workdir / "pending-ids.txt"
        decide_file.write_text("\n".join(pool) + "\n")
        figure = run([str(decide_file), str(opts.threads)])
        if figure.requests > len(pool):
            log(f"[{d.target}] warning: decide ran past its {len(pool):,} pending requests")
        return figure
    if scenario == "redeem":
        pool = pending_pool(opts, d, "redeem")[: pool_size(opts, d)]
        log(f"[{d.target}] approving {len(pool):,} requests for their receipts")
        receipts = approve_all(d.server.url, d.api_key, pool)
        receipts_file = d.workdir / "receipts.txt"
        receipts_file.write_text("\n".join(receipts) + "\n")
        figure = measure(
            opts, d.workdir, d.server, d.target, scenario, "/api/v1/receipts/redeem",
            scenario, [str(receipts_file), str(opts.threads)], d.auth,
        )  # fmt: skip
        if figure.requests > len(receipts):
            log(f"[{d.target}] warning: redeem ran past its {len(receipts):,} receipts")
        return figure
    if scenario == "task_poll":
        return measure_task_poll(opts, d)
    if scenario == "chain":
        approvers = [make_approver(d, index) for index in range(1, 4)]
        return measure_chains(opts, d.workdir, d.server, d.target, d.api_key, approvers)
    raise BenchError(f"unknown scenario: {scenario}")


def pool_size(opts: Options, d: Deployment) -> int:
    create_rps = d.create_rps if d.create_rps is not None else 1_000.0
    return max(5_000, int(create_rps * opts.duration * 2))


def pending_pool(opts: Options, d: Deployment, scenario: str) -> list[str]:
    """Pending requests for a scenario that takes each once (decide, redeem), created
    if there are too few: sized from create's rate when create ran, with a wide margin
    so that no id repeats (decisions and redeems run about as fast as creates)."""
    pool = pending_ids(d.server.url, d.api_key)
    needed = pool_size(opts, d)
    if len(pool) < needed:
        log(f"[{d.target}] topping up the {scenario} pool: {needed - len(pool):,} more")
        start = opts.seed + d.topped_up  # a new idempotency key for each
        d.topped_up += needed - len(pool)
        pool += create_many(d.server.url, d.api_key, start, needed - len(pool))
    return pool


def measure_task_poll(opts: Options, d: Deployment) -> Figure:
    """An MCP client polling its task: ``tasks/get`` on ``/mcp`` for a seeded request (the
    task is the request), to set beside ``get``, the same read through the API."""
    return measure_polls(opts, d.workdir, d.server, d.target, d.api_key, d.ids_file)


def measure_polls(
    opts: Options, workdir: Path, server: Server, target: str, api_key: str, ids_file: Path
) -> Figure:
    """wrk on ``tasks/get`` for the requests of ``ids_file``. One poll first: ``/mcp``
    loads the MCP SDK on its first call, once per process, not per poll."""
    task_id = ids_file.read_text().split()[0]
    poll = {"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"taskId": task_id}}
    headers = {
        "Authorization": f"Bearer {api_key}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    first = httpx.post(f"{server.url}/mcp", json=poll, headers=headers, timeout=60)
    if first.status_code != 200 or rpc_answer(first).get("result", {}).get("taskId") != task_id:
        raise BenchError(f"tasks/get on /mcp failed: {first.status_code} {first.text}")
    return measure(
        opts, workdir, server, target, "task_poll", "/mcp", "task_poll",
        [str(ids_file)], [f"Authorization: Bearer {api_key}"],
    )  # fmt: skip


def rpc_answer(answer: httpx.Response) -> dict[str, Any]:
    """A JSON-RPC answer from ``/mcp``: a JSON body, or the SDK's one SSE event."""
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        data = [line[5:] for line in answer.text.splitlines() if line.startswith("data:")]
        return dict(json.loads(data[-1])) if data else {}
    return dict(answer.json())


def bench_signoff(target: str, opts: Options, workdir: Path, report: Report) -> list[Figure]:
    with deployed(target, opts, workdir, report) as deployment:
        return [run_scenario(opts, deployment, scenario) for scenario in opts.scenarios]


def make_approver(deployment: Deployment, index: int) -> Approver:
    """A member with a connection of their own: each step is voted with its approver's key."""
    d = deployment
    user = signoff_cli(
        d.env, d.workdir, "user", "create", "--org", d.org_id, "--email",
        f"approver{index}@example.com", "--name", f"Approver {index}", "--json",
        binary=d.binary,
    )  # fmt: skip
    connection = signoff_cli(
        d.env, d.workdir, "connection", "create", "--org", d.org_id, "--owner", user["id"],
        "--name", f"approver-{index}", "--rate-limit", str(RATE_LIMIT_CEILING), "--json",
        binary=d.binary,
    )  # fmt: skip
    return Approver(user["id"], connection["api_key"])


def measure_chains(
    opts: Options,
    workdir: Path,
    server: Server,
    target: str,
    api_key: str,
    approvers: list[Approver],
) -> Figure:
    """Whole chains (lua/chain.lua): create, set three steps, three votes in order; req/s
    counts calls, five per chain."""
    args = [api_key, *(f"{a.user_id}:{a.api_key}" for a in approvers)]
    figure = measure(
        opts, workdir, server, target, "chain", "/api/v1/approvals", "chain", args,
        threads=opts.connections,  # one connection per thread: see chain.lua
    )  # fmt: skip
    log(f"  {target:<10} chain    {(figure.chains or 0) / figure.seconds:>9,.1f} chains/s")
    return figure


def bench_baselines(opts: Options, workdir: Path, round_name: str) -> list[Figure]:
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env["PYTHONPATH"] = str(REPO_DIR)
    server = Server("baseline", [sys.executable, "-m", "bench.baseline"], env, workdir)
    with running(server):
        log(f"[baseline, {round_name}]")
        return [
            measure(opts, workdir, server, "baseline", "echo", "/echo", "create"),
            measure(opts, workdir, server, "baseline", "constant", "/constant", None),
        ]


# ---- the report ----


def apply_ratios(figures: list[Figure], baselines: list[Figure]) -> dict[str, float]:
    best: dict[str, float] = {}
    for figure in baselines:
        best[figure.scenario] = max(best.get(figure.scenario, 0.0), figure.rps)
    for figure in figures:
        if figure.scenario in BASELINE_OF:
            figure.baseline = BASELINE_OF[figure.scenario]
            figure.ratio = round(figure.rps / best[figure.baseline], 3)
    return best


def check_targets(figures: list[Figure], target: str) -> list[dict[str, Any]]:
    ours = {f.scenario: f for f in figures if f.target == target}
    if not ours:
        return []
    if target == "postgresql":
        sqlite = {f.scenario: f for f in figures if f.target == "sqlite"}
        checks = _postgres_against_sqlite(ours, sqlite)
    else:
        checks = _against_baselines(ours, target)
    checks += _absolute_checks(ours, target)
    # The verdict is part of each check, so that the printed report and latest.json agree.
    for check in checks:
        check["verdict"] = target_verdict(check)
    return checks


def _against_baselines(ours: dict[str, Figure], target: str) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    for scenario, minimum in TARGET_RATIOS.items():
        if scenario not in ours:
            continue  # not in this run (--scenarios)
        ratio = ours[scenario].ratio or 0.0
        checks.append(
            {
                "target": target,
                "check": f"{scenario} >= {minimum:.0%} of {BASELINE_OF[scenario]}",
                "measured": f"{ratio:.1%}",
                "met": ratio >= minimum,
            }
        )
    return checks


def _postgres_against_sqlite(
    ours: dict[str, Figure], sqlite: dict[str, Figure]
) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    for scenario, minimum in POSTGRES_SHARE_OF_SQLITE.items():
        check: dict[str, Any] = {
            "target": "postgresql",
            "check": f"{scenario} >= {minimum:.0%} of SQLite's",
        }
        if scenario not in ours:
            continue  # not in this run (--scenarios)
        if scenario in sqlite:
            share = ours[scenario].rps / max(sqlite[scenario].rps, 0.1)
            check.update(measured=f"{share:.1%}", met=share >= minimum)
        else:
            check.update(measured="SQLite not in this run", met=None)
        checks.append(check)
    for scenario, figure in ours.items():
        check = {
            "target": "postgresql",
            "check": f"{scenario} CPU/call <= {POSTGRES_CPU_FACTOR}x SQLite's",
        }
        if scenario in sqlite:
            factor = figure.cpu_ms_per_request / max(sqlite[scenario].cpu_ms_per_request, 0.001)
            check.update(measured=f"{factor:.2f}x", met=factor <= POSTGRES_CPU_FACTOR)
        else:
            check.update(measured="SQLite not in this run", met=None)
        checks.append(check)
    return checks


def _absolute_checks(ours: dict[str, Figure], target: str) -> list[dict[str, Any]]:
    checks: list[dict[str, Any]] = []
    worst = max(ours.values(), key=lambda f: f.p99_ms)
    checks.append(
        {
            "target": target,
            "check": f"p99 < {TARGET_P99_MS:.0f} ms on every endpoint",
            "measured": f"{worst.p99_ms:.1f} ms (worst: {worst.scenario})",
            "met": all(f.p99_ms < TARGET_P99_MS for f in ours.values()),
        }
    )
    peak = max(f.peak_rss_mb for f in ours.values())
    checks.append(
        {
            "target": target,
            "check": f"peak RSS < {TARGET_RSS_MB:.0f} MB",
            "measured": f"{peak:.1f} MB",
            "met": peak < TARGET_RSS_MB,
        }
    )
    errors = sum(f.errors for f in ours.values())
    checks.append(
        {
            "target": target,
            "check": "no failed calls",
            "measured": str(errors),
            "met": errors == 0,
        }
    )
    return checks


def target_verdict(check: dict[str, Any]) -> str:
    """How a check reads: met, MISSED, or not checked (what it compares with did not run)."""
    if check["met"] is None:
        return "not checked"
    return "met" if check["met"] else "MISSED"


def print_report(report: Report, best: dict[str, float]) -> None:
    print()
    print(
        f"signoff bench, {report.started_at}, {report.machine['cpus']} CPUs "
        f"({report.machine['cpu_model']}), {report.options['connections']} connections, "
        f"{report.options['threads']} wrk threads, {report.options['duration']} s per scenario"
    )
    header = (
        f"{'target':<11}{'scenario':<10}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'CPU ms/req':>12}{'peak RSS MB':>13}{'vs baseline':>20}{'errors':>8}"
    )
    print(header)
    print("-" * len(header))
    for f in report.figures:
        versus = f"{f.ratio:.0%} of {f.baseline}" if f.ratio is not None else ""
        print(
            f"{f.target:<11}{f.scenario:<10}{f.rps:>9,.0f}{f.p50_ms:>9.2f}{f.p99_ms:>9.2f}"
            f"{f.cpu_ms_per_request:>12.3f}{f.peak_rss_mb:>13.1f}{versus:>20}{f.errors:>8}"
        )
    print(
        "ratios divide by the better baseline round: "
        + ", ".join(f"{name} {rps:,.0f} req/s" for name, rps in best.items())
    )
    print()
    for check in report.targets:
        print(f"{check['target']:<11}{check['check']:<36}{check['measured']:<28}{check['verdict']}")


def machine_info() -> dict[str, Any]:
    cpu_model = ""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    memory_mb = 0
    meminfo = Path("/proc/meminfo")
    if meminfo.exists():
        memory_mb = int(meminfo.read_text().split()[1]) // 1024
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "memory_mb": memory_mb,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "wrk": wrk_version(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
    }


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a signoff run that ``make bench`` and ``make bench-compare`` share."""
    parser.add_argument("--duration", type=int, default=10, help="seconds per scenario")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--seed", type=int, default=10_000, help="requests seeded first")
    parser.add_argument("--list-pages", type=int, default=50, help="list pages picked from")
    parser.add_argument(
        "--databases",
        default="sqlite,postgresql",
        help="comma-separated: sqlite, postgresql",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SIGNOFF_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
        help="a server where the bench may create (and drop) a database of its own",
    )
    parser.add_argument(
        "--scenarios",
        default=",".join(SCENARIOS),
        help=f"comma-separated, of: {', '.join(SCENARIOS)} (the baselines run only for "
        "scenarios compared with one)",
    )


def bench_options(
    parser: argparse.ArgumentParser, args: argparse.Namespace, output: Path
) -> Options:
    """``Options`` from the arguments of ``add_bench_arguments``; unknown names are errors."""
    databases = [d.strip() for d in args.databases.split(",") if d.strip()]
    if unknown := set(databases) - {"sqlite", "postgresql"}:
        parser.error(f"unknown database(s): {', '.join(sorted(unknown))}")
    wanted = {name.strip() for name in args.scenarios.split(",") if name.strip()}
    if unknown := wanted - set(SCENARIOS):
        parser.error(f"unknown scenario(s): {', '.join(sorted(unknown))}")
    scenarios = tuple(name for name in SCENARIOS if name in wanted)
    return Options(
        duration=args.duration,
        connections=args.connections,
        threads=args.threads,
        seed=args.seed,
        list_pages=args.list_pages,
        databases=databases,
        postgres_url=args.postgres_url,
        output=output,
        scenarios=scenarios,
    )


def parse_args(argv: list[str] | None) -> Options:
    parser = argparse.ArgumentParser(prog="make bench", description=__doc__.split("\n\n")[0])
    add_bench_arguments(parser)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "latest.json")
    parser.add_argument(
        "--save-reference",
        action="store_true",
        help="also write the report to bench/results/reference-<commit>.json, kept in git, "
        "so that figures quoted in the docs can be traced to a commit and re-run",
    )
    args = parser.parse_args(argv)
    opts = bench_options(parser, args, args.output)
    opts.save_reference = args.save_reference
    return opts


def reference_path(source: dict[str, Any]) -> Path:
    """Where ``--save-reference`` keeps a commit's figures."""
    return RESULTS_DIR / f"reference-{source['short']}.json"


def main(argv: list[str] | None = None) -> int:
    opts = parse_args(argv)
    if shutil.which("wrk") is None:
        log("error: wrk is not installed: install Debian's wrk (sudo apt-get install wrk)")
        return 2
    try:
        if "postgresql" in opts.databases:
            check_postgres(opts.postgres_url)
        report = Report(
            started_at=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            machine=machine_info(),
            options={k: str(v) if isinstance(v, Path) else v for k, v in asdict(opts).items()},
            source=checkout_source(),
        )
        with tempfile.TemporaryDirectory(prefix="signoff-bench-") as tmp:
            workdir = Path(tmp)
            compared = any(scenario in BASELINE_OF for scenario in opts.scenarios)
            baselines = (
                bench_baselines(opts, workdir / "baseline-before", "before") if compared else []
            )
            for target in opts.databases:
                report.figures += bench_signoff(target, opts, workdir / target, report)
            if compared:
                baselines += bench_baselines(opts, workdir / "baseline-after", "after")
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    best = apply_ratios(report.figures, baselines)
    report.figures = baselines[:2] + report.figures + baselines[2:]
    for target in opts.databases:
        report.targets += check_targets(report.figures, target)
    report.machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print_report(report, best)
    opts.output.parent.mkdir(parents=True, exist_ok=True)
    opts.output.write_text(json.dumps(asdict(report), indent=2) + "\n")
    print(f"\nwritten to {opts.output}")
    if opts.save_reference:
        reference = reference_path(report.source)
        reference.write_text(json.dumps(asdict(report), indent=2) + "\n")
        print(f"kept as {reference}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
