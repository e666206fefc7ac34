"""``make bench-replacements``: each hand-written replacement of a library's job against
the library's own behaviour, side by side in one run, on SQLite (the PostgreSQL pool's on
PostgreSQL).

Every replacement has a measurement switch (docs/performance.md, *Hand-written replacements*)
that puts the stock behaviour back in the same build. For each replacement this runs two
servers on one database, ``A`` as shipped and ``B`` with the switch, and
measures them in turn on the path the replacement serves, in ``--pairs`` pairs whose
order alternates (A B, B A, A B, ...), so that both sides share the machine's moments:

- routes (``LeanRoute`` vs FastAPI's handler; ``SIGNOFF_STOCK_ROUTES``): wrk on get,
  create, list and decide (the scenarios of ``make bench``);
- accept (``serving.PendingAcceptor`` vs uvicorn's own accepting; ``SIGNOFF_STOCK_ACCEPT``):
  bursts of 32 connections opened at once while wrk keeps 32 others busy listing, the
  time until the last of the burst is answered (the median, mean and worst of
  ``--bursts``); and wrk on get for throughput and CPU;
- pgpool (``asyncpg_connections.ConnectionLender`` vs asyncpg's ``Pool``;
  ``SIGNOFF_STOCK_PG_POOL``): wrk on get, create and decide, on a PostgreSQL database of
  its own (``--postgres-url``);
- prepared, prepared-pg (``storage/prepared/`` vs SQLAlchemy's execution;
  ``SIGNOFF_STOCK_EXECUTION``): wrk on get, create, list and decide, on SQLite and on
  PostgreSQL;
- driver (``sqlite_driver``'s calls on the event loop's thread vs each call handed to a
  thread of the connection's own, as aiosqlite does; ``SIGNOFF_STOCK_SQLITE_DRIVER``):
  wrk on get, create, list and decide;
- groupcommit (``group_commit`` vs a transaction per writer; ``SIGNOFF_STOCK_COMMITS``):
  wrk on create and decide;
- writesalone (``writes_alone``: a decision written as one statement in autocommit, vs
  read under a row lock in a transaction; ``SIGNOFF_STOCK_WRITES_ALONE``): wrk on decide,
  on PostgreSQL;
- canonical (``audit/canonical.py``: orjson where it writes RFC 8785's bytes, vs the
  ``rfc8785`` package for every audit event; ``SIGNOFF_STOCK_CANONICAL``): wrk on create
  and decide (the sealer runs in the serving process); then the chain those runs sealed,
  exported once, checked offline by ``signoff audit verify`` (the auditor's path), the
  command's whole CPU time per side;
- writes (``serving.CoalescingTransport``: a response's writes of one turn of the loop
  sent in one system call, vs uvicorn's write of each at once;
  ``SIGNOFF_STOCK_SOCKET_WRITES``): wrk on get, create and decide;
- taskpoll (``remote_mcp/task_poll.py``: ``tasks/get`` on ``/mcp`` answered by the API
  guard with one read, vs the MCP SDK's request handling; ``SIGNOFF_STOCK_TASK_POLL``):
  wrk on ``make bench``'s task_poll;
- hotroutes (``hot_routes.py``: a create, a get and a decision handed by the API guard
  straight to their handlers, vs the app's routing; ``SIGNOFF_STOCK_HOT_ROUTES``): wrk on
  get, create and decide.

The index hints are measured on the large database they serve, by ``make bench-size``
(``--planner``).

(``MemoryCounters`` and the callback transport's ``_Stream`` were measured the same way,
earned less than the rule asks and went back to their libraries:
docs/decisions/0019-replacements-earn-ten-percent.md.)

Per pair the *gain* is what the replacement saves against the stock side: for CPU per
call (the server's CPU time from /proc over the answers, steadier than req/s on a shared
machine) ``1 - A/B``, for req/s ``A/B - 1``, for burst times ``1 - A/B``; printed as
each pair's figure and their mean with its 95 % interval. Written to
``bench/results/replacements.json``; nothing asserts a timing.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.callbacks import mean_with_interval
from bench.run import (
    HOST,
    RATE_LIMIT_CEILING,
    RESULTS_DIR,
    SIGNOFF,
    BenchError,
    Figure,
    Options,
    Server,
    bench_env,
    create_many,
    log,
    machine_info,
    measure,
    measure_polls,
    pending_ids,
    postgres_database,
    run_wrk,
    running,
    signoff_cli,
)

SWITCHES = {
    "routes": "SIGNOFF_STOCK_ROUTES",
    "accept": "SIGNOFF_STOCK_ACCEPT",
    "pgpool": "SIGNOFF_STOCK_PG_POOL",
    "prepared": "SIGNOFF_STOCK_EXECUTION",
    "prepared-pg": "SIGNOFF_STOCK_EXECUTION",
    "driver": "SIGNOFF_STOCK_SQLITE_DRIVER",
    "groupcommit": "SIGNOFF_STOCK_COMMITS",
    "writesalone": "SIGNOFF_STOCK_WRITES_ALONE",
    "canonical": "SIGNOFF_STOCK_CANONICAL",
    "taskpoll": "SIGNOFF_STOCK_TASK_POLL",
    "hotroutes": "SIGNOFF_STOCK_HOT_ROUTES",
    "writes": "SIGNOFF_STOCK_SOCKET_WRITES",
}
WRK_SCENARIOS = {
    "routes": ("get", "create", "list", "decide"),
    "pgpool": ("get", "create", "decide"),
    "prepared": ("get", "create", "list", "decide"),
    "prepared-pg": ("get", "create", "list", "decide"),
    "driver": ("get", "create", "list", "decide"),
    "groupcommit": ("create", "decide"),
    "writesalone": ("decide",),
    "canonical": ("create", "decide"),
    "taskpoll": ("task_poll",),
    "hotroutes": ("get", "create", "decide"),
    "writes": ("get", "create", "decide"),
}
# Measured on PostgreSQL; every other replacement on SQLite.
ON_POSTGRES = frozenset({"pgpool", "prepared-pg", "writesalone"})
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
BURST_CONNECTIONS = 32


@dataclass
class Bench:
    """The database, its org's key, and what a run needs to reach it."""

    opts: Options
    workdir: Path
    env: dict[str, str]
    org_id: str
    api_key: str
    ids_file: Path
    pending: list[str]
    next_index: int  # of the next request created (its title and idempotency key)
    create_rps: float = 2_000.0  # the last create run's rate: what a decide run needs
    decide_rps: float = 0.0  # the last decide run's (on PostgreSQL it may outrun creates)


@dataclass(frozen=True)
class Side:
    name: str  # "A" (as shipped) or "B" (the library's behaviour)
    env: dict[str, str]


def sides(bench: Bench, replacement: str) -> tuple[Side, Side]:
    return Side("A", bench.env), Side("B", {**bench.env, SWITCHES[replacement]: "1"})


def announce(
    replacement: str, pair: int, pairs: int, both: tuple[Side, Side], order: tuple[int, int]
) -> None:
    log(f"[{replacement}] pair {pair + 1}/{pairs}: {' then '.join(both[i].name for i in order)}")


def pair_orders(pairs: int) -> Iterator[tuple[int, tuple[int, int]]]:
    """Pair number and which side runs first: A B, then B A, and so on."""
    for pair in range(pairs):
        yield pair, ((0, 1) if pair % 2 == 0 else (1, 0))


# ---- setup ----


def prepare(opts: Options, workdir: Path, database_url: str) -> Bench:
    from signoff.crypto import generate_secret_key

    workdir.mkdir(exist_ok=True)
    env = bench_env(database_url, generate_secret_key())
    signoff_cli(env, workdir, "db", "upgrade")
    org = signoff_cli(env, workdir, "org", "create", "Bench", "--json")
    user = signoff_cli(
        env, workdir, "user", "create", "--org", org["id"], "--email", "bench@example.com",
        "--name", "Bench Admin", "--role", "admin", "--json",
    )  # fmt: skip
    connection = signoff_cli(
        env, workdir, "connection", "create", "--org", org["id"], "--owner", user["id"],
        "--name", "bench", "--rate-limit", str(RATE_LIMIT_CEILING), "--json",
    )  # fmt: skip
    api_key = connection["api_key"]
    server = Server("signoff-seeding", [str(SIGNOFF), "serve"], env, workdir)
    with running(server):
        log(f"seeding {opts.seed:,} requests through POST /api/v1/approvals")
        seeded = create_many(server.url, api_key, 0, opts.seed)
        pending = pending_ids(server.url, api_key)
    ids_file = workdir / "seeded-ids.txt"
    ids_file.write_text("\n".join(seeded) + "\n")
    return Bench(opts, workdir, env, org["id"], api_key, ids_file, pending, opts.seed)


def decide_file(bench: Bench, server: Server, needed: int, name: str) -> Path:
    """Pending ids no decide run has had yet: each call decides a different request."""
    if len(bench.pending) < needed:
        more = needed - len(bench.pending)
        log(f"  topping up the pending requests: {more:,} more")
        bench.pending += create_many(server.url, bench.api_key, bench.next_index, more)
        bench.next_index += more
    taken, bench.pending = bench.pending[:needed], bench.pending[needed:]
    path = bench.workdir / f"decide-{name}.txt"
    path.write_text("\n".join(taken) + "\n")
    return path


# ---- wrk scenarios on two servers ----


def wrk_figure(bench: Bench, server: Server, side: str, scenario: str) -> Figure:
    opts = bench.opts
    auth = [f"Authorization: Bearer {bench.api_key}"]
    args: list[str] = []
    if scenario == "task_poll":
        return measure_polls(opts, bench.workdir, server, side, bench.api_key, bench.ids_file)
    if scenario == "get":
        args = [str(bench.ids_file)]
    elif scenario == "list":
        args = [str(opts.list_pages)]
    elif scenario == "decide":
        # Decide runs about as fast as create; a margin, so that no id repeats (a repeat
        # would show as errors).
        needed = max(2_000, int(2 * max(bench.create_rps, bench.decide_rps) * opts.duration))
        path = decide_file(bench, server, needed, f"{side}-{time.time_ns()}")
        args = [str(path), str(opts.threads)]
    path_ = "/api/v1/approvals"
    figure = measure(opts, bench.workdir, server, side, scenario, path_, scenario, args, auth)
    if scenario == "create":
        bench.create_rps = figure.rps
    elif scenario == "decide":
        bench.decide_rps = figure.rps
    return figure


def bench_wrk(bench: Bench, replacement: str, pairs: int) -> dict[str, Any]:
    scenarios = WRK_SCENARIOS[replacement]
    both = sides(bench, replacement)
    runs: dict[str, list[dict[str, Figure]]] = {s: [] for s in scenarios}
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                running(
                    Server(
                        f"{replacement}-{side.name}",
                        [str(SIGNOFF), "serve"],
                        side.env,
                        bench.workdir,
                    )
                )
            )
            for side in both
        ]
        for pair, order in pair_orders(pairs):
            announce(replacement, pair, pairs, both, order)
            figures: dict[str, dict[str, Figure]] = {s: {} for s in scenarios}
            for index in order:
                for scenario in scenarios:
                    figures[scenario][both[index].name] = wrk_figure(
                        bench, servers[index], both[index].name, scenario
                    )
            for scenario in scenarios:
                runs[scenario].append(figures[scenario])
    return {scenario: summarize_wrk(pairs_) for scenario, pairs_ in runs.items()}


def summarize_wrk(pairs: list[dict[str, Figure]]) -> dict[str, Any]:
    cpu_gain = [100 * (1 - p["A"].cpu_ms_per_request / p["B"].cpu_ms_per_request) for p in pairs]
    rps_gain = [100 * (p["A"].rps / p["B"].rps - 1) for p in pairs]
    return {
        "cpu_gain_percent": gain_summary(cpu_gain),
        "rps_gain_percent": gain_summary(rps_gain),
        "pairs": [{side: asdict(figure) for side, figure in p.items()} for p in pairs],
    }


def gain_summary(gains: list[float]) -> dict[str, Any]:
    summary = mean_with_interval(gains)
    summary["each"] = [round(g, 1) for g in gains]
    summary["min"] = round(min(gains), 1)
    summary["max"] = round(max(gains), 1)
    summary["pairs_at_least_10"] = sum(g >= 10 for g in gains)
    return summary


# ---- offline verification (canonical) ----


def export_chain(bench: Bench) -> tuple[Path, int]:
    """The org's sealed chain as ``signoff audit export`` writes it, and its line count."""
    path = bench.workdir / "audit-export.jsonl"
    signoff_cli(
        bench.env, bench.workdir, "audit", "export", "--org", bench.org_id, "--output", str(path)
    )
    with path.open("rb") as lines:
        return path, sum(1 for _ in lines)


def verify_cpu_ms(bench: Bench, side: Side, export: Path) -> float:
    """CPU milliseconds of one ``signoff audit verify`` of ``export``, start-up included."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    signoff_cli(side.env, bench.workdir, "audit", "verify", str(export))
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    spent = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    return spent * 1000


def bench_verify(bench: Bench, pairs: int) -> dict[str, Any]:
    both = sides(bench, "canonical")
    export, lines = export_chain(bench)
    log(f"[canonical] verifying an export of {lines:,} lines")
    runs: list[dict[str, float]] = []
    for pair, order in pair_orders(pairs):
        announce("canonical", pair, pairs, both, order)
        figures: dict[str, float] = {}
        for index in order:
            name = both[index].name
            figures[name] = verify_cpu_ms(bench, both[index], export)
            log(f"  {name:<10} verify   {figures[name]:.0f} ms CPU")
        runs.append(figures)
    return {
        "cpu_gain_percent": gain_summary([100 * (1 - p["A"] / p["B"]) for p in runs]),
        "export_lines": lines,
        "cpu_ms": [{side: round(ms, 1) for side, ms in p.items()} for p in runs],
    }


# ---- connection bursts ----


async def _one_call(port: int, request: bytes) -> float:
    reader, writer = await asyncio.open_connection(HOST, port)
    try:
        writer.write(request)
        await writer.drain()
        header = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in header.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        return time.perf_counter()
    finally:
        writer.close()


async def _burst(port: int, request: bytes) -> float:
    """Milliseconds from opening ``BURST_CONNECTIONS`` connections at once to the last
    of them being answered (one call each)."""
    started = time.perf_counter()
    answered = await asyncio.gather(*(_one_call(port, request) for _ in range(BURST_CONNECTIONS)))
    return (max(answered) - started) * 1000


def bursts_under_load(bench: Bench, server: Server, count: int) -> list[float]:
    """``count`` bursts, half a second apart, while wrk keeps 32 connections listing."""
    seeded_id = bench.ids_file.read_text().split()[0]
    request = (
        f"GET /api/v1/approvals/{seeded_id} HTTP/1.1\r\nHost: {HOST}\r\n"
        f"Authorization: Bearer {bench.api_key}\r\nConnection: close\r\n\r\n"
    ).encode()
    load_opts = Options(**{**asdict(bench.opts), "duration": max(3, count // 2 + 3)})
    auth = [f"Authorization: Bearer {bench.api_key}"]
    load = threading.Thread(
        target=run_wrk,
        args=(load_opts, bench.workdir, server.url + "/api/v1/approvals", "list"),
        kwargs={"args": [str(bench.opts.list_pages)], "headers": auth},
    )
    load.start()
    try:
        time.sleep(1.0)  # wrk's own connections open and busy first
        times: list[float] = []
        for _ in range(count):
            times.append(asyncio.run(_burst(server.port, request)))
            time.sleep(0.5)
    finally:
        load.join()
    return times


def bench_accept(bench: Bench, pairs: int, bursts: int) -> dict[str, Any]:
    both = sides(bench, "accept")
    burst_pairs: list[dict[str, list[float]]] = []
    get_pairs: list[dict[str, Figure]] = []
    with ExitStack() as stack:
        servers = [
            stack.enter_context(
                running(
                    Server(f"accept-{side.name}", [str(SIGNOFF), "serve"], side.env, bench.workdir)
                )
            )
            for side in both
        ]
        for pair, order in pair_orders(pairs):
            announce("accept", pair, pairs, both, order)
            burst_pair: dict[str, list[float]] = {}
            get_pair: dict[str, Figure] = {}
            for index in order:
                name = both[index].name
                burst_pair[name] = bursts_under_load(bench, servers[index], bursts)
                log(
                    f"  {name:<10} bursts   last of {BURST_CONNECTIONS} answered after "
                    + ", ".join(f"{t:.0f}" for t in burst_pair[name])
                    + " ms"
                )
                get_pair[name] = wrk_figure(bench, servers[index], name, "get")
            burst_pairs.append(burst_pair)
            get_pairs.append(get_pair)
    return {"burst": summarize_bursts(burst_pairs), "get": summarize_wrk(get_pairs)}


# How one run's bursts are summed up: the typical burst, and the tail that lands while
# other connections wait to be accepted (wrk's own 32, opened together a moment earlier).
BURST_STATISTICS: dict[str, Callable[[list[float]], float]] = {
    "median": statistics.median,
    "mean": statistics.fmean,
    "worst": max,
}


def summarize_bursts(pairs: list[dict[str, list[float]]]) -> dict[str, Any]:
    summary: dict[str, Any] = {
        f"last_answer_{name}_gain_percent": gain_summary(
            [100 * (1 - statistic(p["A"]) / statistic(p["B"])) for p in pairs]
        )
        for name, statistic in BURST_STATISTICS.items()
    }
    summary["last_answer_ms"] = [
        {side: [round(t, 1) for t in times] for side, times in p.items()} for p in pairs
    ]
    return summary


# ---- the report ----


def print_summary(results: dict[str, Any]) -> None:
    print()
    print(
        f"signoff replacements, {results['started_at']}, {results['machine']['cpus']} CPUs "
        f"({results['machine']['cpu_model']}), load {results['machine']['load_average_at_start']}"
        f" at start, {results['machine']['load_average_at_end']} at end; SQLite, and"
        f" PostgreSQL for {', '.join(sorted(ON_POSTGRES))}"
    )
    print("gain = what the replacement (A) saves against the library's behaviour (B), per pair")
    header = (
        f"{'replacement':<12}{'path':<16}{'measure':<26}{'mean %':>8}{'95 % interval':>18}"
        "  each pair"
    )
    print(header)
    print("-" * len(header))
    for replacement, measured in results["replacements"].items():
        for path, figures in measured.items():
            for name, summary in figures.items():
                if not name.endswith("_percent"):
                    continue
                interval = summary.get("ci95")
                span = f"{interval[0]:.1f} .. {interval[1]:.1f}" if interval else ""
                each = ", ".join(f"{g:.1f}" for g in summary["each"])
                print(
                    f"{replacement:<12}{path:<16}{name.removesuffix('_percent'):<26}"
                    f"{summary['mean']:>8.1f}{span:>18}  {each}"
                )


def parse_args(argv: list[str] | None) -> tuple[Options, argparse.Namespace]:
    parser = argparse.ArgumentParser(
        prog="make bench-replacements", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument(
        "--only", default=",".join(SWITCHES), help="comma-separated: " + ", ".join(SWITCHES)
    )
    parser.add_argument("--pairs", type=int, default=3, help="A/B pairs per replacement")
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2, help="wrk threads")
    parser.add_argument("--seed", type=int, default=5_000, help="requests seeded first")
    parser.add_argument("--bursts", type=int, default=5, help="accept: bursts per run")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "replacements.json")
    parser.add_argument(
        "--postgres-url",
        default=DEFAULT_POSTGRES_URL,
        help="pgpool: a server where the bench may create (and drop) a database of its own",
    )
    args = parser.parse_args(argv)
    args.only = [name.strip() for name in args.only.split(",") if name.strip()]
    if unknown := set(args.only) - set(SWITCHES):
        parser.error(f"unknown replacement(s): {', '.join(sorted(unknown))}")
    if args.pairs < 3:
        parser.error("at least 3 pairs: fewer tell nothing on a shared machine")
    opts = Options(
        duration=args.duration,
        connections=args.connections,
        threads=args.threads,
        seed=args.seed,
        list_pages=50,
        databases=["sqlite"],
        postgres_url=args.postgres_url,
        output=args.output,
    )
    return opts, args


def main(argv: list[str] | None = None) -> int:
    opts, args = parse_args(argv)
    if shutil.which("wrk") is None:
        log("error: wrk is not installed: install Debian's wrk (sudo apt-get install wrk)")
        return 2
    machine = machine_info()
    results: dict[str, Any] = {
        "started_at": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "make bench-replacements BENCH_ARGS='"
        + " ".join(sys.argv[1:] if argv is None else argv)
        + "'",
        "machine": machine,
        "options": {"pairs": args.pairs, "duration": opts.duration, "seed": opts.seed},
        "switches": {name: SWITCHES[name] for name in args.only},
        "replacements": {},
    }
    try:
        with tempfile.TemporaryDirectory(prefix="signoff-bench-replacements-") as tmp:
            benches: dict[bool, Bench] = {}
            with ExitStack() as databases:
                for replacement in args.only:
                    on_postgres = replacement in ON_POSTGRES
                    if on_postgres not in benches:
                        url = (
                            databases.enter_context(postgres_database(opts.postgres_url))
                            if on_postgres
                            else f"sqlite:///{Path(tmp) / 'sqlite' / 'signoff.db'}"
                        )
                        workdir = Path(tmp) / ("postgresql" if on_postgres else "sqlite")
                        benches[on_postgres] = prepare(opts, workdir, url)
                    bench = benches[on_postgres]
                    if replacement in WRK_SCENARIOS:
                        measured = bench_wrk(bench, replacement, args.pairs)
                        if replacement == "canonical":
                            measured["verify"] = bench_verify(bench, args.pairs)
                    else:
                        measured = bench_accept(bench, args.pairs, args.bursts)
                    results["replacements"][replacement] = measured
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print_summary(results)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwritten to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
