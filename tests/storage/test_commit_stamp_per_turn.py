"""SQLite's commit stamp (``QueryRunner.commit_stamp``, what the principal cache keys on)
is read once per turn of the event loop: the calls of one turn share one
``PRAGMA data_version``, a commit by another connection shows from the next turn on, and
a commit by this process at once."""

from __future__ import annotations

import asyncio
import sqlite3
from typing import Any

import pytest

from signoff.context import AppContext
from signoff.storage import sqlite_driver
from signoff.storage.prepared import QueryRunner
from tests.conftest import create_org

pytestmark = pytest.mark.anyio


class _Counted:
    """The runner's connection, counting the statements it runs."""

    def __init__(self, connection: sqlite3.Connection) -> None:
        self.connection = connection
        self.statements = 0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        self.statements += 1
        return self.connection.execute(sql, *args)


def _counted(queries: QueryRunner, monkeypatch: pytest.MonkeyPatch) -> _Counted:
    counted = _Counted(queries._sqlite_connection())
    monkeypatch.setattr(queries, "_sqlite_connection", lambda: counted)
    return counted


def _other_connection_commits(path: str) -> None:
    other = sqlite3.connect(path)
    other.execute("CREATE TABLE IF NOT EXISTS stamp_probe (x INTEGER)")
    other.execute("INSERT INTO stamp_probe VALUES (1)")
    other.commit()
    other.close()


async def test_one_read_per_turn_and_a_commit_elsewhere_seen_the_next_turn(
    ctx: AppContext, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite only: PostgreSQL has no stamp")
    queries = ctx.db.queries
    counted = _counted(queries, monkeypatch)
    first = queries.commit_stamp()
    assert [queries.commit_stamp() for _ in range(20)] == [first] * 20
    assert counted.statements == 1

    _other_connection_commits(ctx.settings.database_url.split("///", 1)[1])
    assert queries.commit_stamp() == first  # the same turn: no call of it saw the commit
    await asyncio.sleep(0)
    assert queries.commit_stamp() != first
    assert counted.statements == 2


async def test_a_commit_of_this_process_is_seen_in_the_same_turn(
    ctx: AppContext, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if backend != "sqlite":
        pytest.skip("SQLite only: PostgreSQL has no stamp")
    made = sqlite_driver.commits_made()
    await create_org(ctx, "Committed", members=0)  # commits through this process's writer
    assert sqlite_driver.commits_made() > made

    queries = ctx.db.queries
    counted = _counted(queries, monkeypatch)
    first = queries.commit_stamp()
    # Within one turn: a commit elsewhere (unseen), then one this process counts.
    _other_connection_commits(ctx.settings.database_url.split("///", 1)[1])
    monkeypatch.setattr(sqlite_driver, "_COMMITS", [sqlite_driver.commits_made() + 1])
    assert queries.commit_stamp() != first
    assert counted.statements == 2
