"""``signoff --help`` and the README's "Command line" list describe the same commands."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from signoff.cli import app

README = Path(__file__).resolve().parents[2] / "README.md"
TOP_LEVEL = (
    "serve",
    "worker",
    "secret-key",
    "version",
    "emergency-stop",
    "purge",
    "audit",
    "db",
    "org",
    "user",
    "connection",
    "oauth-client",
    "delivery",
    "routing",
    "policy",
    "group",
    "standing",
    "keys",
)


def readme_command_lines() -> list[str]:
    """The lines of the README's "Command line" block, comments and alternatives split."""
    section = README.read_text().split("## Command line", 1)[1]
    block = section.split("```", 2)[1]
    lines = []
    for raw in block.splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line.startswith("signoff "):
            continue
        # "org create NAME [--json] | org list" names two commands.
        first, *others = line.removeprefix("signoff ").split(" | ")
        lines.append(first)
        lines.extend(o for o in others if not o.startswith("-"))
    return lines


def subcommands(command: Any) -> dict[str, Any]:
    """A group's commands by name; none for a command (Typer vendors Click's classes)."""
    return dict(getattr(command, "commands", {}))


def resolve(words: list[str]) -> tuple[list[str], Any]:
    """The longest command path of ``words`` in the app, and its command."""
    command = typer.main.get_command(app)
    path: list[str] = []
    for word in words:
        if word not in subcommands(command):
            break
        command = subcommands(command)[word]
        path.append(word)
    return path, command


def test_help_lists_every_command() -> None:
    result = CliRunner().invoke(app, prog_name="signoff", args=["--help"])
    assert result.exit_code == 0, result.output
    assert "ask a human before automations and AI agents act" in result.output
    listed = re.findall(r"^│ ([a-z][a-z-]*) ", result.output, re.MULTILINE)
    assert listed == list(TOP_LEVEL)


def test_no_arguments_prints_help_and_exits_2() -> None:
    result = CliRunner().invoke(app, prog_name="signoff", args=[])
    assert result.exit_code == 2
    assert "Usage: signoff [OPTIONS] COMMAND [ARGS]..." in result.output


@pytest.mark.parametrize("line", readme_command_lines())
def test_every_readme_command_exists_with_its_options(line: str) -> None:
    words = line.split()
    path, command = resolve(words)
    assert path and not subcommands(command), f"no command {line!r}"
    documented = {w.strip("[]").split("=")[0] for w in words if w.strip("[]").startswith("--")}
    accepted = {opt for param in command.params for opt in param.opts}
    assert documented <= accepted, f"{line!r}: {documented - accepted} not accepted"
    result = CliRunner().invoke(app, prog_name="signoff", args=[*path, "--help"])
    assert result.exit_code == 0, result.output


def test_readme_lists_every_command() -> None:
    documented = {" ".join(resolve(line.split())[0]) for line in readme_command_lines()}
    commands = set()
    for name, command in subcommands(typer.main.get_command(app)).items():
        commands.update([f"{name} {sub}" for sub in subcommands(command)] or [name])
    # `signoff version` is the one command the list leaves out: it prints a version.
    assert commands - documented == {"version"}


def test_the_module_runs_as_the_signoff_command() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "signoff.cli", "version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert re.fullmatch(r"\d+\.\d+\.\d+\S*\n", result.stdout)
