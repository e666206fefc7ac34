"""`make bench-compare`: its options, the ratios B/A with their spread, and the JSON rows
and summary it writes (the runs themselves need wrk and two builds: not tested here)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bench import compare
from bench.builds import Build, install_command
from bench.compare import (
    compare_report,
    parse_args,
    render,
    result_name,
    spread,
    summarize,
)
from bench.run import SCENARIOS, BenchError, reference_path
from bench.run import parse_args as bench_parse_args


def row(
    round_no: int, side: str, rps: float, p99_ms: float, cpu: float, scenario: str = "create"
) -> dict[str, object]:
    return {
        "round": round_no,
        "database": "sqlite",
        "side": side,
        "scenario": scenario,
        "rps": rps,
        "p99_ms": p99_ms,
        "cpu_ms_per_request": cpu,
        "errors": 0,
    }


def test_the_base_is_required_and_the_other_side_defaults_to_this_checkout() -> None:
    options = parse_args(["--base", "7fd4f54"])
    assert (options.base, options.head, options.rounds) == ("7fd4f54", None, 5)
    assert options.bench.scenarios == SCENARIOS
    assert options.bench.databases == ["sqlite", "postgresql"]
    assert parse_args(["--base", "7fd4f54", "--head", "HEAD"]).head is None
    assert parse_args(["--base", "7fd4f54", "--head", ""]).head is None  # make's HEAD unset
    with pytest.raises(SystemExit):
        parse_args([])
    with pytest.raises(SystemExit):
        parse_args(["--base", ""])  # make bench-compare without BASE=


def test_the_options_of_make_bench_are_shared() -> None:
    options = parse_args(
        ["--base", "main~3", "--head", "main", "--rounds", "3", "--duration", "2",
         "--scenarios", "decide,create", "--databases", "sqlite"]
    )  # fmt: skip
    assert (options.head, options.rounds, options.bench.duration) == ("main", 3, 2)
    assert options.bench.scenarios == ("create", "decide")  # the bench's order
    assert options.bench.databases == ["sqlite"]
    with pytest.raises(SystemExit):
        parse_args(["--base", "x", "--databases", "mysql"])
    with pytest.raises(SystemExit):
        parse_args(["--base", "x", "--rounds", "0"])


def test_spread_of_one_round_is_that_round() -> None:
    assert spread([0.8]) == {
        "median": 0.8, "min": 0.8, "max": 0.8, "q1": 0.8, "q3": 0.8, "values": [0.8]
    }  # fmt: skip


def test_spread_gives_median_range_and_quartiles() -> None:
    result = spread([1.2, 0.8, 1.0, 0.9, 1.1])
    assert (result["median"], result["min"], result["max"]) == (1.0, 0.8, 1.2)
    assert (result["q1"], result["q3"]) == (0.9, 1.1)
    assert result["values"] == [1.2, 0.8, 1.0, 0.9, 1.1]  # in the rounds' order


def test_ratios_are_b_over_a_round_by_round() -> None:
    rows = [
        row(1, "A", 2000.0, 20.0, 0.50),
        row(1, "B", 1500.0, 25.0, 0.60),
        row(2, "B", 2100.0, 20.0, 0.50),  # B first in even rounds
        row(2, "A", 2000.0, 20.0, 0.50),
        row(3, "A", 1000.0, 40.0, 1.00),
        row(3, "B", 1000.0, 44.0, 1.10),
    ]
    [entry] = summarize(rows)
    assert (entry["database"], entry["scenario"], entry["rounds"]) == ("sqlite", "create", 3)
    assert entry["ratios"]["rps"]["values"] == [0.75, 1.05, 1.0]
    assert (entry["ratios"]["rps"]["median"], entry["ratios"]["rps"]["min"]) == (1.0, 0.75)
    assert entry["ratios"]["p99_ms"]["values"] == [1.25, 1.0, 1.1]
    assert entry["ratios"]["cpu_ms_per_request"]["values"] == [1.2, 1.0, 1.1]
    assert entry["b_at_least_a"] == 2  # rounds 2 and 3 (a tie counts)
    assert entry["A"] == {"rps": 2000.0, "p99_ms": 20.0, "cpu_ms_per_request": 0.5}
    assert entry["B"] == {"rps": 1500.0, "p99_ms": 25.0, "cpu_ms_per_request": 0.6}
    assert entry["errors"] == {"A": 0, "B": 0}


def test_a_round_with_one_side_missing_is_left_out_and_scenarios_keep_their_order() -> None:
    rows = [
        row(1, "A", 100.0, 10.0, 1.0, "get"),
        row(1, "B", 200.0, 10.0, 1.0, "get"),
        row(1, "A", 100.0, 10.0, 1.0),
        row(1, "B", 50.0, 10.0, 1.0),
        row(2, "A", 100.0, 10.0, 1.0),  # B failed to run in round 2
    ]
    summary = summarize(rows)
    assert [(e["scenario"], e["rounds"]) for e in summary] == [("get", 1), ("create", 1)]
    assert summary[1]["ratios"]["rps"]["values"] == [0.5]


def test_the_printed_table_has_one_line_per_scenario_with_the_ratio_and_its_spread() -> None:
    rows = [
        row(1, "A", 2000.0, 20.0, 0.5),
        row(1, "B", 1500.0, 25.0, 0.6),
        row(2, "A", 2000.0, 20.0, 0.5),
        row(2, "B", 1700.0, 22.0, 0.55),
    ]
    text = render(summarize(rows), "header")
    line = next(line for line in text.splitlines() if line.startswith("sqlite"))
    assert "0.80 (0.75-0.85)" in line  # req/s
    assert "1.18 (1.10-1.25)" in line  # p99
    assert "0/2" in line  # B >= A in no round


def test_files_are_named_by_date_and_commit_pair() -> None:
    a = Build("7fd4f54", "7fd4f54" + "0" * 33, False, Path("/a/signoff"))
    b = Build("HEAD", "605a276" + "1" * 33, True, Path("/b/signoff"))
    started = datetime(2026, 11, 27, 21, 30, tzinfo=UTC)
    assert result_name(started, a, b) == "compare-20261127-2130-7fd4f54-605a276-dirty.json"
    assert b.describe()["dirty"] is True


def test_make_bench_keeps_a_reference_only_when_asked() -> None:
    assert bench_parse_args([]).save_reference is False
    assert bench_parse_args(["--save-reference"]).save_reference is True
    source = {"commit": "605a276" + "1" * 33, "short": "605a276", "dirty": False}
    assert reference_path(source).name == "reference-605a276.json"
    assert reference_path(source).parent.name == "results"


def test_a_base_is_installed_with_its_own_constraints_and_client(tmp_path: Path) -> None:
    (tmp_path / "constraints.txt").write_text("")
    assert install_command(tmp_path)[-4:] == ["-c", "constraints.txt", "-e", "."]
    (tmp_path / "clients" / "python").mkdir(parents=True)
    (tmp_path / "clients" / "python" / "pyproject.toml").write_text("")
    assert install_command(tmp_path)[-2:] == ["-e", "./clients/python[mcp]"]


def test_the_json_holds_the_builds_options_summary_and_every_figure() -> None:
    options = parse_args(["--base", "7fd4f54", "--rounds", "1", "--databases", "sqlite"])
    sides = {
        "A": Build("7fd4f54", "7fd4f54" + "0" * 33, False, Path("/a/signoff")),
        "B": Build("HEAD", "605a276" + "1" * 33, False, Path("/b/signoff")),
    }
    rows = [row(1, "A", 100.0, 10.0, 1.0), row(1, "B", 90.0, 11.0, 1.1)]
    summary = summarize(rows)
    started = datetime(2026, 11, 27, 21, 30, tzinfo=UTC)
    output = Path("bench/results/x.json")
    report = compare_report(started, ["--base", "7fd4f54"], {"cpus": 2}, options, sides,
                            rows, summary, output)  # fmt: skip
    decoded = json.loads(json.dumps(report))  # plain JSON: no Path or datetime left
    assert set(decoded) == {
        "kind", "started_at", "finished_at", "argv", "machine", "options", "sides",
        "summary", "figures",
    }  # fmt: skip
    assert decoded["kind"] == "bench-compare"
    assert decoded["options"]["rounds"] == 1
    assert decoded["options"]["databases"] == ["sqlite"]
    assert decoded["options"]["output"] == "bench/results/x.json"
    assert decoded["sides"]["A"]["commit"].startswith("7fd4f54")
    assert decoded["sides"]["B"]["label"] == "HEAD"
    assert decoded["summary"][0]["ratios"]["rps"]["median"] == 0.9
    assert len(decoded["figures"]) == 2


def test_rounds_run_before_a_failure_are_still_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long run that fails in its last round keeps the rounds it had, marked incomplete."""
    sides = {
        "A": Build("7fd4f54", "7fd4f54" + "0" * 33, False, Path("/a/signoff")),
        "B": Build("HEAD", "605a276" + "1" * 33, False, Path("/b/signoff")),
    }

    @contextmanager
    def fake_builds(options: object) -> Iterator[dict[str, Build]]:
        yield sides

    def failing_rounds(options: object, sides: object, workdir: Path, rows: list) -> None:  # type: ignore[type-arg]
        rows += [row(1, "A", 100.0, 10.0, 1.0), row(1, "B", 110.0, 9.0, 0.9)]
        raise BenchError("signoff-sqlite-B exited at start")

    monkeypatch.setattr(compare, "builds", fake_builds)
    monkeypatch.setattr(compare, "run_rounds", failing_rounds)
    monkeypatch.setattr(
        compare, "machine_info", lambda: {"cpus": 2, "load_average_at_start": [1.0]}
    )
    monkeypatch.setattr(compare.shutil, "which", lambda name: "/usr/bin/wrk")
    output = tmp_path / "run.json"
    argv = ["--base", "7fd4f54", "--databases", "sqlite", "--output", str(output)]
    assert compare.main(argv) == 1
    written = json.loads(output.read_text())
    assert written["incomplete"] == "signoff-sqlite-B exited at start"
    assert written["summary"][0]["ratios"]["rps"]["median"] == 1.1
