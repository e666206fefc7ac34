"""`make bench` reports the issues' targets (printed and in latest.json): SQLite against
the baselines, PostgreSQL against SQLite's figures of the same run."""

from __future__ import annotations

import pytest
from bench.run import SCENARIOS, Figure, check_targets, parse_args


def figure(
    target: str,
    scenario: str,
    *,
    ratio: float | None,
    p99_ms: float,
    rps: float = 100.0,
    cpu_ms: float = 1.0,
) -> Figure:
    return Figure(
        target=target,
        scenario=scenario,
        requests=1000,
        seconds=10.0,
        rps=rps,
        p50_ms=p99_ms / 2,
        p90_ms=p99_ms,
        p99_ms=p99_ms,
        max_ms=p99_ms,
        errors=0,
        cpu_ms_per_request=cpu_ms,
        peak_rss_mb=120.0,
        load_before=0.5,
        load_after=0.5,
        baseline="echo" if scenario == "create" else "constant",
        ratio=ratio,
    )


def slow_run(target: str) -> list[Figure]:
    """Create below 30 % of the echo, get above 40 % of the constant, list's p99 at 80 ms."""
    return [
        figure(target, "create", ratio=0.10, p99_ms=20.0),
        figure(target, "get", ratio=0.45, p99_ms=10.0),
        figure(target, "list", ratio=0.20, p99_ms=80.0),
    ]


def verdicts(target: str) -> dict[str, str]:
    checks = check_targets(slow_run(target), target)
    return {check["check"]: check["verdict"] for check in checks}


def test_a_miss_on_sqlite_is_a_missed_target() -> None:
    assert verdicts("sqlite") == {
        "create >= 30% of echo": "MISSED",
        "get >= 40% of constant": "met",
        "p99 < 50 ms on every endpoint": "MISSED",
        "peak RSS < 150 MB": "met",
        "no failed calls": "met",
    }


def test_postgresql_is_held_to_its_own_targets_against_sqlite_in_the_same_run() -> None:
    sqlite = [
        figure("sqlite", "create", ratio=0.4, p99_ms=20.0, rps=2000.0, cpu_ms=0.40),
        figure("sqlite", "get", ratio=0.6, p99_ms=10.0, rps=5000.0, cpu_ms=0.20),
        figure("sqlite", "list", ratio=0.3, p99_ms=20.0, rps=2000.0, cpu_ms=0.50),
        figure("sqlite", "decide", ratio=0.3, p99_ms=20.0, rps=1800.0, cpu_ms=0.50),
    ]
    postgres = [
        figure("postgresql", "create", ratio=0.2, p99_ms=30.0, rps=1100.0, cpu_ms=0.55),
        figure("postgresql", "get", ratio=0.4, p99_ms=20.0, rps=2500.0, cpu_ms=0.35),
        figure("postgresql", "list", ratio=0.2, p99_ms=60.0, rps=1200.0, cpu_ms=0.70),
        figure("postgresql", "decide", ratio=0.2, p99_ms=40.0, rps=900.0, cpu_ms=0.80),
    ]
    checks = check_targets(sqlite + postgres, "postgresql")
    assert {check["check"]: check["verdict"] for check in checks} == {
        "create >= 50% of SQLite's": "met",
        "get >= 60% of SQLite's": "MISSED",  # 50 %
        "list >= 50% of SQLite's": "met",
        "decide >= 50% of SQLite's": "met",
        "create CPU/call <= 1.5x SQLite's": "met",
        "get CPU/call <= 1.5x SQLite's": "MISSED",  # 1.75x
        "list CPU/call <= 1.5x SQLite's": "met",
        "decide CPU/call <= 1.5x SQLite's": "MISSED",  # 1.6x
        "p99 < 50 ms on every endpoint": "MISSED",
        "peak RSS < 150 MB": "met",
        "no failed calls": "met",
    }


def test_postgresql_alone_reports_what_needs_sqlite_as_not_checked() -> None:
    verdicts_alone = {
        check["check"]: check["verdict"]
        for check in check_targets(slow_run("postgresql"), "postgresql")
    }
    assert verdicts_alone["create >= 50% of SQLite's"] == "not checked"
    assert verdicts_alone["get CPU/call <= 1.5x SQLite's"] == "not checked"
    assert verdicts_alone["p99 < 50 ms on every endpoint"] == "MISSED"
    assert "below (target is for SQLite)" not in verdicts_alone.values()


def test_a_run_of_the_chain_alone_checks_the_chain_only() -> None:
    """``--scenarios chain``: no share or baseline check of a scenario that did not run."""
    run = [
        figure("sqlite", "chain", ratio=None, p99_ms=40.0, rps=1000.0, cpu_ms=0.90),
        figure("postgresql", "chain", ratio=None, p99_ms=60.0, rps=900.0, cpu_ms=0.99),
    ]
    assert {c["check"]: c["verdict"] for c in check_targets(run, "sqlite")} == {
        "p99 < 50 ms on every endpoint": "met",
        "peak RSS < 150 MB": "met",
        "no failed calls": "met",
    }
    assert {c["check"]: c["verdict"] for c in check_targets(run, "postgresql")} == {
        "chain CPU/call <= 1.5x SQLite's": "met",  # 1.1x
        "p99 < 50 ms on every endpoint": "MISSED",
        "peak RSS < 150 MB": "met",
        "no failed calls": "met",
    }


def test_the_scenarios_named_run_in_the_bench_s_order() -> None:
    assert parse_args(["--scenarios", "chain,get"]).scenarios == ("get", "chain")
    assert parse_args([]).scenarios == SCENARIOS
    with pytest.raises(SystemExit):
        parse_args(["--scenarios", "chain,bogus"])
