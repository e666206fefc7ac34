"""Builds of signoff to bench: this checkout as it is, or a commit built in a temporary git
worktree with a virtualenv of its own (``make bench-compare``)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
# The checkout's own interpreter: `python -m venv` from it makes a venv of the same Python.
PYTHON = Path(sys.executable)


class BuildError(RuntimeError):
    """A build could not be made (an unknown commit, a failed install)."""


@dataclass(frozen=True)
class Build:
    """One build of signoff: where its ``signoff`` command is and which source it runs."""

    label: str  # what was asked for: a commit, a branch, or HEAD (this checkout)
    commit: str  # the full hash
    dirty: bool  # uncommitted changes to tracked files are part of it
    binary: Path

    @property
    def short(self) -> str:
        return self.commit[:7] + ("-dirty" if self.dirty else "")

    def describe(self) -> dict[str, object]:
        return {
            "label": self.label,
            "commit": self.commit,
            "dirty": self.dirty,
            "binary": str(self.binary),
        }


def git(*args: str, cwd: Path = REPO_DIR) -> str:
    result = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise BuildError(f"git {' '.join(args)}: {result.stderr.strip()}")
    return result.stdout.strip()


def resolve(ref: str) -> str:
    """The full hash of a commit-ish (a hash, a branch, a tag, HEAD~3)."""
    return git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")


def checkout_source(path: Path = REPO_DIR) -> dict[str, object]:
    """The commit a checkout is at, and whether tracked files differ from it."""
    try:
        commit = git("rev-parse", "HEAD", cwd=path)
    except (BuildError, OSError):  # an unpacked tarball, or no git installed
        return {"commit": None, "short": "unknown", "dirty": None}
    dirty = bool(git("status", "--porcelain", "--untracked-files=no", cwd=path))
    return {"commit": commit, "short": commit[:7] + ("-dirty" if dirty else ""), "dirty": dirty}


def this_checkout(binary: Path) -> Build:
    """HEAD as it is on disk, uncommitted changes included, served by this venv's signoff."""
    source = checkout_source()
    return Build("HEAD", str(source["commit"]), bool(source["dirty"]), binary)


def install_command(tree: Path) -> list[str]:
    """What a commit's tree needs to serve: the package pinned by its own constraints file,
    and the Python client its server depends on where the tree has one."""
    command = [str(tree / ".venv" / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    if (tree / "constraints.txt").exists():
        command += ["-c", "constraints.txt"]
    command += ["-e", "."]
    if (tree / "clients" / "python" / "pyproject.toml").exists():
        command += ["-e", "./clients/python[mcp]"]
    return command


@contextmanager
def built(ref: str, log: Callable[[str], None] = print) -> Iterator[Build]:
    """``ref`` checked out in a temporary git worktree with a venv of its own (pip's cache
    makes the install quick after the first time); removed on exit."""
    commit = resolve(ref)
    with tempfile.TemporaryDirectory(prefix=f"signoff-build-{commit[:7]}-") as tmp:
        tree = Path(tmp) / "tree"
        git("worktree", "add", "--detach", "--quiet", str(tree), commit)
        try:
            log(f"[build {commit[:7]}] installing into a venv of its own")
            subprocess.run([str(PYTHON), "-m", "venv", str(tree / ".venv")], check=True)
            installed = subprocess.run(
                install_command(tree), cwd=tree, capture_output=True, text=True, check=False
            )
            if installed.returncode != 0:
                raise BuildError(f"installing {commit[:7]} failed:\n{installed.stderr[-3000:]}")
            binary = tree / ".venv" / "bin" / "signoff"
            check_imports_from(tree, binary)
            yield Build(ref, commit, False, binary)
        finally:
            git("worktree", "remove", "--force", str(tree))


def check_imports_from(tree: Path, binary: Path) -> None:
    """The build serves its own source, not another checkout's (a stray PYTHONPATH)."""
    python = binary.parent / "python"
    result = subprocess.run(
        [str(python), "-c", "import signoff; print(signoff.__file__)"],
        capture_output=True,
        text=True,
        check=False,
    )
    location = Path(result.stdout.strip() or "/")
    if not location.is_relative_to(tree):
        raise BuildError(f"the build at {tree} imports signoff from {location}")
