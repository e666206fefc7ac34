"""``make bench-compare BASE=<commit>``: two builds of signoff, interleaved in one run.

A is ``BASE``, built in a temporary git worktree with a venv of its own; B is this checkout
as it is (uncommitted changes included), or ``HEAD=<commit>`` built the same way. Each
round, for each database, both builds get a fresh database seeded as ``make bench`` seeds
it (``bench.run.deployed``), then each scenario runs on one build and straight after on the
other (A then B in odd rounds, B then A in even ones), so that a slow phase of the machine
hits both. Printed per scenario: the ratios B/A of req/s, p99 and server CPU per call, each
the median of the rounds with its spread (min-max), and in how many rounds B served at
least as many req/s as A. Everything is written to
``bench/results/compare-<date>-<A>-<B>.json``; nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.builds import Build, BuildError, built, this_checkout
from bench.run import (
    RESULTS_DIR,
    SIGNOFF,
    BenchError,
    Figure,
    Options,
    add_bench_arguments,
    bench_options,
    check_postgres,
    deployed,
    log,
    machine_info,
    run_scenario,
)

SIDES = ("A", "B")
# The ratios printed, B over A: above 1 is faster for req/s, slower for the other two.
METRICS = ("rps", "p99_ms", "cpu_ms_per_request")


@dataclass
class CompareOptions:
    base: str
    head: str | None  # None: this checkout, as it is on disk
    rounds: int
    bench: Options
    output: Path | None  # None: bench/results/compare-<date>-<A>-<B>.json


def parse_args(argv: list[str] | None) -> CompareOptions:
    parser = argparse.ArgumentParser(
        prog="make bench-compare", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--base", required=True, help="A: a commit, branch or tag (BASE=)")
    parser.add_argument(
        "--head",
        default=None,
        help="B: a commit, branch or tag (HEAD=); without it, this checkout as it is on disk",
    )
    parser.add_argument("--rounds", type=int, default=5, help="rounds, each A and B once")
    parser.add_argument("--output", type=Path, default=None, help="the JSON file written")
    add_bench_arguments(parser)
    args = parser.parse_args(argv)
    if not args.base.strip():
        parser.error("a base commit is required: make bench-compare BASE=<commit>")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    head = args.head.strip() if args.head and args.head.strip() not in ("", "HEAD") else None
    return CompareOptions(
        base=args.base.strip(),
        head=head,
        rounds=args.rounds,
        bench=bench_options(parser, args, args.output or RESULTS_DIR),
        output=args.output,
    )


# ---- the pure part: ratios and their spread ----


def spread(values: list[float]) -> dict[str, Any]:
    """Median, min, max and quartiles of the rounds' values (quartiles inclusive of the
    extremes, so that one round gives one number everywhere)."""
    ordered = sorted(values)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    return {
        "median": round(statistics.median(ordered), 3),
        "min": round(ordered[0], 3),
        "max": round(ordered[-1], 3),
        "q1": round(q1, 3),
        "q3": round(q3, 3),
        "values": [round(v, 3) for v in values],
    }


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per database and scenario, in the order they ran: each side's median
    figures, and each metric's ratio B/A over the rounds where both sides ran."""
    keys = list(dict.fromkeys((row["database"], row["scenario"]) for row in rows))
    summary: list[dict[str, Any]] = []
    for database, scenario in keys:
        pairs: dict[int, dict[str, dict[str, Any]]] = {}
        for row in rows:
            if (row["database"], row["scenario"]) == (database, scenario):
                pairs.setdefault(row["round"], {})[row["side"]] = row
        complete = [pair for _, pair in sorted(pairs.items()) if set(pair) == set(SIDES)]
        if not complete:
            continue
        entry: dict[str, Any] = {
            "database": database,
            "scenario": scenario,
            "rounds": len(complete),
            "b_at_least_a": sum(p["B"]["rps"] >= p["A"]["rps"] for p in complete),
            "errors": {side: sum(p[side]["errors"] for p in complete) for side in SIDES},
        }
        for side in SIDES:
            entry[side] = {
                metric: round(statistics.median(p[side][metric] for p in complete), 3)
                for metric in METRICS
            }
        entry["ratios"] = {
            metric: spread([p["B"][metric] / p["A"][metric] for p in complete])
            for metric in METRICS
            if all(p["A"][metric] > 0 for p in complete)
        }
        summary.append(entry)
    return summary


def result_name(started: datetime, a: Build, b: Build) -> str:
    return f"compare-{started:%Y%m%d-%H%M}-{a.short}-{b.short}.json"


def render(summary: list[dict[str, Any]], header: str) -> str:
    """The printed table: medians of the rounds, ratios B/A with their min-max."""

    def ratio(entry: dict[str, Any], metric: str) -> str:
        r = entry["ratios"].get(metric)
        return f"{r['median']:.2f} ({r['min']:.2f}-{r['max']:.2f})" if r else "-"

    lines = [header]
    columns = (
        f"{'database':<11}{'scenario':<9}{'A req/s':>9}{'B req/s':>9}  {'B/A req/s':<18}"
        f"{'B>=A':>5}  {'B/A p99':<18}{'B/A CPU/call':<18}{'errors A/B':>10}"
    )
    lines += [columns, "-" * len(columns)]
    for e in summary:
        lines.append(
            f"{e['database']:<11}{e['scenario']:<9}{e['A']['rps']:>9,.0f}{e['B']['rps']:>9,.0f}"
            f"  {ratio(e, 'rps'):<18}{e['b_at_least_a']:>3}/{e['rounds']:<1}  "
            f"{ratio(e, 'p99_ms'):<18}{ratio(e, 'cpu_ms_per_request'):<18}"
            f"{e['errors']['A']:>5}/{e['errors']['B']}"
        )
    lines.append(
        "B/A: median of the rounds (min-max). req/s above 1: B is faster; p99 and CPU per "
        "call below 1: B is better. B>=A: rounds where B served at least A's req/s."
    )
    return "\n".join(lines)


def compare_report(
    started: datetime,
    argv: list[str],
    machine: dict[str, Any],
    options: CompareOptions,
    sides: dict[str, Build],
    rows: list[dict[str, Any]],
    summary: list[dict[str, Any]],
    output: Path,
) -> dict[str, Any]:
    """The JSON file of a run: what ran (builds, options, machine), the summary printed,
    and every figure of every round."""
    bench = {k: str(v) if isinstance(v, Path) else v for k, v in asdict(options.bench).items()}
    return {
        "kind": "bench-compare",
        "started_at": f"{started:%Y-%m-%d %H:%M:%S} UTC",
        "finished_at": f"{datetime.now(UTC):%Y-%m-%d %H:%M:%S} UTC",
        "argv": argv,
        "machine": machine,
        "options": {"rounds": options.rounds, **bench, "output": str(output)},
        "sides": {side: build.describe() for side, build in sides.items()},
        "summary": summary,
        "figures": rows,
    }


# ---- running ----


@contextmanager
def builds(options: CompareOptions) -> Iterator[dict[str, Build]]:
    with ExitStack() as stack:
        a = stack.enter_context(built(options.base, log))
        b = stack.enter_context(
            built(options.head, log) if options.head else nullcontext(this_checkout(SIGNOFF))
        )
        yield {"A": a, "B": b}


def run_rounds(
    options: CompareOptions,
    sides: dict[str, Build],
    workdir: Path,
    rows: list[dict[str, Any]],
) -> None:
    """Every round, each figure appended to ``rows`` as it comes (kept if a later round
    fails)."""
    opts = options.bench
    for round_no in range(1, options.rounds + 1):
        order = SIDES if round_no % 2 else SIDES[::-1]
        for database in opts.databases:
            log(f"[round {round_no}/{options.rounds}, {database}] order {' then '.join(order)}")
            with ExitStack() as stack:
                deployments = {
                    side: stack.enter_context(
                        deployed(
                            database,
                            opts,
                            workdir / f"round{round_no}-{database}-{side}",
                            binary=sides[side].binary,
                            name=f"{database}-{side}",
                        )
                    )
                    for side in order
                }
                for scenario in opts.scenarios:
                    for side in order:
                        log(f"  {side} ({sides[side].short})")
                        figure: Figure = run_scenario(opts, deployments[side], scenario)
                        rows.append(
                            {"round": round_no, "database": database, "side": side} | asdict(figure)
                        )


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    if shutil.which("wrk") is None:
        log("error: wrk is not installed: install Debian's wrk (sudo apt-get install wrk)")
        return 2
    started = datetime.now(UTC)
    machine = machine_info()
    rows: list[dict[str, Any]] = []
    sides: dict[str, Build] = {}
    failed: str | None = None
    try:
        if "postgresql" in options.bench.databases:
            check_postgres(options.bench.postgres_url)
        with (
            builds(options) as built_sides,
            tempfile.TemporaryDirectory(prefix="signoff-compare-") as tmp,
        ):
            sides = built_sides
            run_rounds(options, sides, Path(tmp), rows)
    except (BenchError, BuildError) as exc:
        log(f"error: {exc}")
        if not rows:
            return 1
        failed = str(exc)  # the rounds that ran are still reported, marked incomplete
    machine["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    summary = summarize(rows)
    opts = options.bench
    header = (
        f"bench-compare {started:%Y-%m-%d %H:%M} UTC: A = {sides['A'].short} "
        f"({sides['A'].label}), B = {sides['B'].short} ({sides['B'].label}); "
        f"{options.rounds} round(s), {opts.duration} s per scenario, {opts.seed:,} seeded, "
        f"{opts.connections} connections, {opts.threads} wrk threads, "
        f"{machine['cpus']} CPUs, load {machine['load_average_at_start'][0]} at start"
    )
    print(render(summary, header))
    output = options.output or RESULTS_DIR / result_name(started, sides["A"], sides["B"])
    argv = argv if argv is not None else sys.argv[1:]
    report = compare_report(started, argv, machine, options, sides, rows, summary, output)
    if failed:
        report["incomplete"] = failed
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten to {output}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
