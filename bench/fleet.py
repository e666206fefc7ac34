"""``make bench-fleet``: 1, then 2 API replicas (``signoff serve --no-worker``) on one
PostgreSQL database, at the same total concurrency, and the ratio.

For each scenario (create, get), wrk runs against the one replica with all connections,
then one wrk per replica, each with half of them, at once; the figures add up. On a
machine with few CPUs, expect parity, not doubling: the replicas share the CPUs with
PostgreSQL and wrk. What the ratio shows is that nothing serializes across replicas (a
lock, a shared counter): two replicas must not do *less* than one. The report ends with
what a larger machine would need (written from the measured CPU per call).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.run import (
    DEFAULT_POSTGRES_URL,
    RATE_LIMIT_CEILING,
    RESULTS_DIR,
    SIGNOFF,
    BenchError,
    Options,
    Server,
    bench_env,
    check_postgres,
    create_many,
    log,
    machine_info,
    postgres_database,
    run_wrk,
    running,
    signoff_cli,
)

SCENARIOS = ("create", "get")


@dataclass
class FleetFigure:
    replicas: int
    scenario: str
    rps: float
    p99_ms: float
    cpu_ms_per_request: float  # all replicas' CPU over all answers
    errors: int


def _measure(
    opts: Options, workdir: Path, servers: list[Server], scenario: str, args: list[str] | None,
    auth: list[str],
) -> FleetFigure:  # fmt: skip
    share = Options(**{**opts.__dict__, "connections": opts.connections // len(servers)})
    cpu_before = sum(server.cpu_seconds() for server in servers)
    with ThreadPoolExecutor(len(servers)) as pool:
        summaries = list(
            pool.map(
                # A directory each: wrk reads the script file run_wrk writes.
                lambda server: run_wrk(
                    share,
                    _own_dir(workdir, server),
                    server.url + "/api/v1/approvals",
                    scenario,
                    args,
                    auth,
                ),
                servers,
            )
        )
    cpu = sum(server.cpu_seconds() for server in servers) - cpu_before
    requests = sum(s["requests"] for s in summaries)
    seconds = max(s["duration_us"] for s in summaries) / 1e6
    errors = sum(
        s.get(k, 0)
        for s in summaries
        for k in ("failures", "status_errors", "connect_errors", "read_errors", "timeouts")
    )
    figure = FleetFigure(
        replicas=len(servers),
        scenario=scenario,
        rps=round(requests / seconds, 1),
        p99_ms=round(max(s["p99_us"] for s in summaries) / 1000, 2),
        cpu_ms_per_request=round(cpu * 1000 / max(1, requests), 3),
        errors=errors,
    )
    log(
        f"  {figure.replicas} replica(s) {scenario:<7} {figure.rps:>8,.0f} req/s  "
        f"p99 {figure.p99_ms:7.2f} ms  CPU {figure.cpu_ms_per_request:5.2f} ms/req"
    )
    return figure


def _own_dir(workdir: Path, server: Server) -> Path:
    path = workdir / f"wrk-{server.name}"
    path.mkdir(exist_ok=True)
    return path


def bench_fleet(opts: Options, workdir: Path) -> list[FleetFigure]:
    from signoff.crypto import generate_secret_key

    figures: list[FleetFigure] = []
    with postgres_database(opts.postgres_url) as url:
        env = bench_env(url, generate_secret_key())
        if redis := os.environ.get("SIGNOFF_BENCH_REDIS_URL"):
            env["SIGNOFF_REDIS_URL"] = redis  # rate limits shared, as a fleet needs
        signoff_cli(env, workdir, "db", "upgrade")
        org = signoff_cli(env, workdir, "org", "create", "Fleet", "--json")
        user = signoff_cli(
            env, workdir, "user", "create", "--org", org["id"], "--email", "f@example.com",
            "--name", "Fleet", "--role", "admin", "--json",
        )  # fmt: skip
        connection = signoff_cli(
            env, workdir, "connection", "create", "--org", org["id"], "--owner", user["id"],
            "--name", "fleet", "--rate-limit", str(RATE_LIMIT_CEILING), "--json",
        )  # fmt: skip
        auth = [f"Authorization: Bearer {connection['api_key']}"]
        argv = [str(SIGNOFF), "serve", "--no-worker"]
        first, second = Server("api-1", argv, env, workdir), Server("api-2", argv, env, workdir)
        with running(first), running(second):
            ids = create_many(first.url, connection["api_key"], 0, opts.seed)
            ids_file = workdir / "ids.txt"
            ids_file.write_text("\n".join(ids) + "\n")
            for scenario in SCENARIOS:
                args = [str(ids_file)] if scenario == "get" else None
                for servers in ([first], [first, second]):
                    figures.append(_measure(opts, workdir, servers, scenario, args, auth))
    return figures


def what_a_larger_machine_needs(figures: list[FleetFigure], cpus: int) -> list[str]:
    """Sizing from the measured CPU per call: the API processes' cores per 1,000 calls a
    second, and what two replicas did against one."""
    lines = []
    for scenario in SCENARIOS:
        one, two = (f for f in figures if f.scenario == scenario)
        ratio = two.rps / max(one.rps, 0.1)
        cores_per_1000 = two.cpu_ms_per_request  # ms of CPU per call = cores per 1,000/s
        lines.append(
            f"{scenario}: 2 replicas / 1 = {ratio:.2f}x on {cpus} CPUs; each 1,000 {scenario}s "
            f"a second need about {cores_per_1000:.1f} cores of API replicas (one replica "
            "uses one core at most), plus PostgreSQL's own"
        )
    lines.append(
        "So: one replica per core available to signoff (leave PostgreSQL its cores, or run "
        "it apart); add replicas until the database's CPU or disk is the limit."
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="make bench-fleet", description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=10)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--threads", type=int, default=1, help="wrk threads per wrk")
    parser.add_argument("--seed", type=int, default=2_000)
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get("SIGNOFF_BENCH_POSTGRES_URL", DEFAULT_POSTGRES_URL),
    )
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "fleet.json")
    args = parser.parse_args(argv)
    opts = Options(
        duration=args.duration, connections=args.connections, threads=args.threads,
        seed=args.seed, list_pages=50, databases=["postgresql"],
        postgres_url=args.postgres_url, output=args.output,
    )  # fmt: skip
    try:
        check_postgres(opts.postgres_url)
        with tempfile.TemporaryDirectory(prefix="signoff-fleet-") as tmp:
            figures = bench_fleet(opts, Path(tmp))
    except BenchError as exc:
        log(f"error: {exc}")
        return 1
    machine = machine_info()
    sizing = what_a_larger_machine_needs(figures, machine["cpus"])
    print(f"\nsignoff fleet bench, {machine['cpus']} CPUs ({machine['cpu_model']})")
    for figure in figures:
        print(
            f"{figure.replicas} replica(s)  {figure.scenario:<7}{figure.rps:>9,.0f} req/s"
            f"{figure.p99_ms:>9.2f} ms p99{figure.cpu_ms_per_request:>8.3f} CPU ms/req"
            f"{figure.errors:>6} errors"
        )
    print("\n" + "\n".join(sizing))
    result: dict[str, Any] = {
        "machine": machine,
        "figures": [f.__dict__ for f in figures],
        "sizing": sizing,
    }
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
