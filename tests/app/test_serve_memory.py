"""What a serving process does not hold: libraries only some routes or tasks need are
imported on first use, and the schema check runs in a child process
(docs/decisions/0043-serve-memory.md)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import python_apart

# Each is imported by the first request (or task) that needs it.
LOADED_ON_FIRST_USE = ("webauthn", "aiohttp", "cel", "prompt_toolkit", "alembic")


def test_opening_the_database_apart_migrates_it_and_loads_no_library(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from signoff.cli.common import open_database\n"
        "from signoff.app import create_app\n"
        "create_app(open_database(apart=True))\n"
        f"print(sorted(m for m in {LOADED_ON_FIRST_USE!r} if m in sys.modules))\n"
    )
    assert python_apart(script, f"sqlite:///{tmp_path / 'signoff.db'}") == "[]"
    check = "from signoff.migrations import is_at_head\n"
    check += f"print(is_at_head('sqlite+aiosqlite:///{tmp_path / 'signoff.db'}'))\n"
    assert python_apart(check, f"sqlite:///{tmp_path / 'signoff.db'}") == "True"
