"""Which packages may import which: the rules of docs/architecture.md that are imports.

Read with ``ast``, so an import under ``TYPE_CHECKING`` or inside a function counts too: a
lower layer that reaches up, even lazily, is the service locator these rules keep out.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def _module_of(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    return _imports_in(
        path.read_text(encoding="utf-8"), _module_of(path), path.name == "__init__.py"
    )


def _imports_in(source: str, module: str, is_package: bool) -> set[str]:
    """Every module ``source`` imports, by its full name (``from a import b`` counts as
    both ``a`` and ``a.b``: ``b`` may be a module)."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package[: len(package) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _reaches(imported: set[str], forbidden: str) -> list[str]:
    return sorted(
        name for name in imported if name == forbidden or name.startswith(f"{forbidden}.")
    )


def _files(package: str) -> list[Path]:
    root = SRC.joinpath(*package.split("."))
    return sorted(root.rglob("*.py")) if root.is_dir() else [root.with_suffix(".py")]


RULES = [
    # The helpers every domain uses sit below every domain and below the runtime.
    ("signoff.common", "signoff.context"),
    ("signoff.common", "signoff.approvals"),
    ("signoff.auth", "signoff.context"),
    ("signoff.auth", "signoff.approvals"),
    # The runtime is settings, database, secret box and transactions: the services it
    # hands commits to are wired in signoff/wiring.py, not reached through it.
    ("signoff.context", "signoff.notifications"),
    ("signoff.context", "signoff.dashboard"),
    ("signoff.context", "signoff.webhooks.dispatcher"),
    ("signoff.context", "signoff.orgs"),
    ("signoff.context", "signoff.ratelimit"),
    # OpenID CIBA builds on approvals and the callback outbox, never the other way round.
    ("signoff.approvals", "signoff.oauth"),
    ("signoff.webhooks", "signoff.oauth"),
]


@pytest.mark.parametrize(("package", "forbidden"), RULES, ids=[f"{p}-x-{f}" for p, f in RULES])
def test_package_does_not_import(package: str, forbidden: str) -> None:
    files = _files(package)
    assert files, f"{package} names no source file"
    broken = {
        str(path.relative_to(SRC)): reached
        for path in files
        if (reached := _reaches(_imports(path), forbidden))
    }
    assert not broken, f"{package} imports {forbidden}: {broken}"


def test_the_reader_sees_relative_and_lazy_imports() -> None:
    """The rules above are only as good as ``_imports_in``: it must see every form."""
    source = (
        "from typing import TYPE_CHECKING\n"
        "from ..context import AppContext\n"
        "if TYPE_CHECKING:\n    import signoff.approvals.state\n"
        "def later():\n    from signoff.dashboard import live\n"
    )
    imported = _imports_in(source, "signoff.common.example", is_package=False)
    assert "signoff.context.AppContext" in imported
    assert "signoff.approvals.state" in imported
    assert "signoff.dashboard.live" in imported
