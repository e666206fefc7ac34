"""docs/architecture.md names modules, folders and the functions of a request's walk: each
must exist, so the page cannot drift from the code unnoticed (a renamed function or a
moved module fails here until the page says where it went)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "architecture.md"
PACKAGE = ROOT / "src" / "signoff"
# `approvals/service.py`, `storage/prepared/`, `tests/conftest.py`, `bench/receiver.py`,
# and `approvals/service.decide` (a module's attribute, named without `.py`).
PATH = re.compile(r"`((?:[a-z_0-9]+/)+(?:[a-z_0-9]+(?:\.py|\.html|\.css|\.js)?/?)?)`")
ATTRIBUTE = re.compile(
    r"`((?:[a-z_0-9]+/)+[a-z_0-9]+)\.(?!(?:py|html|css|js)`)([A-Za-z_][A-Za-z_0-9]*)`"
)
# The walk's own names: `name → name` and the function names it lists.
WALK = re.compile(r"^\s+(?:service|effects)\s+(\S+)\s+(.+)$", re.M)


def _named_paths() -> set[str]:
    return set(PATH.findall(PAGE.read_text()))


def _resolve(name: str) -> Path | None:
    """The file or folder ``name`` means: under the package, the repository, or (for a name
    the page gives relative to the folder it is describing, ``listing/filters.py`` under
    ``approvals/``) the one place in the source trees whose path ends with it."""
    stem = name.rstrip("/")
    for base in (PACKAGE, ROOT):
        candidate = base / stem
        if candidate.exists():
            return candidate
        if not name.endswith(("/", ".py")) and candidate.with_suffix(".py").exists():
            return candidate.with_suffix(".py")
    wanted = [stem] if name.endswith(("/", ".py")) or "." in stem else [stem, stem + ".py"]
    for tree in ("src", "tests", "bench", "clients"):
        for path in sorted((ROOT / tree).rglob("*")):
            if "__pycache__" not in path.parts and any(
                path.as_posix().endswith("/" + w) for w in wanted
            ):
                return path
    return None


def _defines(module: Path, name: str) -> bool:
    files = sorted(module.rglob("*.py")) if module.is_dir() else [module]
    pattern = re.compile(rf"^\s*(?:async def|def|class) {name}\b|^{name}\s*[:=]", re.M)
    return any(pattern.search(path.read_text()) for path in files)


def test_the_page_names_paths() -> None:
    # The pattern itself: a page whose names it missed would pass every test below.
    assert {"approvals/state.py", "storage/prepared/", "approvals/effects.py"} <= _named_paths()


@pytest.mark.parametrize("name", sorted(_named_paths()))
def test_every_named_path_exists(name: str) -> None:
    assert _resolve(name) is not None, f"docs/architecture.md names {name}, which does not exist"


@pytest.mark.parametrize(("module", "attribute"), sorted(set(ATTRIBUTE.findall(PAGE.read_text()))))
def test_every_named_attribute_is_defined(module: str, attribute: str) -> None:
    found = _resolve(module)
    assert found is not None, f"docs/architecture.md names {module}, which does not exist"
    assert _defines(found, attribute), f"{module} defines no {attribute}"


def _walk_names() -> list[tuple[str, str]]:
    named: list[tuple[str, str]] = []
    for module, rest in WALK.findall(PAGE.read_text()):
        for name in re.findall(r"\b(_?[a-z][a-z_]+)\b", rest.split("(")[0]):
            named.append((module, name))
    return named


def test_the_walk_names_what_its_modules_define() -> None:
    names = _walk_names()
    assert ("approvals/service.py", "decide") in names
    missing = [
        f"{module}: {name}"
        for module, name in names
        if (found := _resolve(module)) is not None and not _defines(found, name)
    ]
    assert not missing, f"the walk names functions that do not exist: {missing}"
