"""Migration 0057 on SQLite: the requests table rebuilt with its idempotency keys' unique
index holding keyed requests only, and back. Every row keeps its values and its rowid
(the search index's queue names requests by rowid); every other index and trigger is as
it was. ``test_migrations.py`` compares the migrated schema with the models."""

from __future__ import annotations

import sqlite3
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from alembic import command

from signoff.approvals.search_index import SQLITE_CATCH_UP
from signoff.migrations import alembic_config, upgrade_to_head

_INDEX = "uq_approval_requests_org_id_idempotency_key"
_KEY_AUTOINDEX = "sqlite_autoindex_approval_requests_2"


def _insert(db: sqlite3.Connection, org_id: str, number: int, key: str | None) -> None:
    db.execute(
        "INSERT INTO approval_requests (id, org_id, connection_id, title, description, "
        "status, priority, metadata, required_approvals, current_approvals, is_sequential, "
        "idempotency_key, created_at, updated_at, comments_count, number) VALUES (?, ?, ?, "
        "?, 'd', 'pending', 'low', '{}', 1, 0, 0, ?, '2026-01-01 00:00:00', "
        "'2026-01-01 00:00:00', 0, ?)",
        (uuid.uuid4().hex, org_id, uuid.uuid4().hex, f"Rotate key {number}", key, number),
    )


def _state(path: str) -> dict[str, Any]:
    with closing(sqlite3.connect(path)) as db:
        return {
            "rows": db.execute("SELECT rowid, * FROM approval_requests ORDER BY rowid").fetchall(),
            "queued": db.execute("SELECT * FROM approval_requests_fts_pending").fetchall(),
            "objects": set(
                db.execute(
                    "SELECT type, name, sql FROM sqlite_master "
                    "WHERE tbl_name = 'approval_requests' AND type IN ('index', 'trigger')"
                )
            ),
            "table": db.execute(
                "SELECT sql FROM sqlite_master WHERE name = 'approval_requests'"
            ).fetchone()[0],
        }


def _changes(before: dict[str, Any], after: dict[str, Any]) -> tuple[set[Any], set[Any]]:
    assert after["rows"] == before["rows"] and after["queued"] == before["queued"]
    return before["objects"] - after["objects"], after["objects"] - before["objects"]


def test_the_rebuild_keeps_every_row_index_and_trigger(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'keys.db'}"
    path = str(tmp_path / "keys.db")
    command.upgrade(alembic_config(url), "0056")
    org_id = uuid.uuid4().hex
    with closing(sqlite3.connect(path)) as db, db:
        for number, key in enumerate(["gone", "a", None, "b", None], start=1):
            _insert(db, org_id, number, key)
        # A gap in the rowids, which a copy without them would close.
        db.execute("DELETE FROM approval_requests WHERE idempotency_key = 'gone'")
    before = _state(path)
    assert len(before["rows"]) == 4 and before["rows"][0][0] == 2
    assert len(before["queued"]) == 4  # written by another program: not yet searchable

    upgrade_to_head(url)
    upgraded = _state(path)
    assert _changes(before, upgraded) == (
        {("index", _KEY_AUTOINDEX, None)},
        {
            (
                "index",
                _INDEX,
                f"CREATE UNIQUE INDEX {_INDEX} ON approval_requests (org_id, idempotency_key) "
                "WHERE idempotency_key IS NOT NULL",
            )
        },
    )
    assert "UNIQUE" not in upgraded["table"]
    with closing(sqlite3.connect(path)) as db, db:
        for statement in SQLITE_CATCH_UP:  # the queue still names the requests
            db.execute(statement)
        searched = db.execute(
            "SELECT count(*) FROM approval_requests_fts WHERE approval_requests_fts MATCH 'rotate'"
        ).fetchone()
        assert searched == (4,)
        _insert(db, org_id, 6, None)
        with pytest.raises(sqlite3.IntegrityError, match="idempotency_key"):
            _insert(db, org_id, 7, "a")
    after_use = _state(path)

    command.downgrade(alembic_config(url), "0056")
    downgraded = _state(path)
    assert _changes(after_use, downgraded) == (
        set(upgraded["objects"] - before["objects"]),
        {("index", _KEY_AUTOINDEX, None)},
    )
    assert "CONSTRAINT uq_approval_requests_org_id_idempotency_key UNIQUE" in downgraded["table"]
    with closing(sqlite3.connect(path)) as db, db, pytest.raises(sqlite3.IntegrityError):
        _insert(db, org_id, 8, "b")
