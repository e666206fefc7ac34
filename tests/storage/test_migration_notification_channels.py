"""0021 on SQLite and PostgreSQL: the notifications stored before it get their channel's
name and type from the routing of the moment, keep their attempts, and from then on
outlive their channel; going back drops the rows whose channel is gone, as the earlier
schema had them dropped."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

from alembic import command
from sqlalchemy import text
from sqlalchemy.engine import Connection

from signoff.migrations import alembic_config, run_on, upgrade_to_head
from tests.storage.test_migrations import empty_database

__all__ = ["empty_database"]

NOW = datetime(2026, 11, 1, tzinfo=UTC)


def _ids(connection: Connection) -> dict[str, Any]:
    """Ids in the form each database stores them (SQLite: 32 hex digits)."""
    ids = {name: uuid.uuid4() for name in ("org", "channel", "request", "sent", "attempt")}
    if connection.dialect.name == "sqlite":
        return {name: value.hex for name, value in ids.items()}
    return ids


def _without_foreign_keys(connection: Connection) -> None:
    """Only the notification tables matter: the org and request rows are left out."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET session_replication_role = replica"))


def _with_foreign_keys(connection: Connection) -> None:
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET session_replication_role = origin"))
    else:
        connection.exec_driver_sql("PRAGMA foreign_keys = ON")


def _insert_as_0020(connection: Connection, ids: dict[str, Any]) -> None:
    _without_foreign_keys(connection)
    at = {"now": NOW}
    connection.execute(
        text(
            "INSERT INTO notification_channels (id, org_id, name, type, config_encrypted, "
            "created_at, updated_at) VALUES (:channel, :org, 'oncall', 'email', 'x', :now, :now)"
        ),
        ids | at,
    )
    connection.execute(
        text(
            "INSERT INTO notifications (id, org_id, request_id, channel_id, kind, recipient, "
            "require_sign_in, status, attempts, due_at, created_at, updated_at, sent_at) "
            "VALUES (:sent, :org, :request, :channel, 'created', 'ada@acme.example', "
            ":no, 'sent', 1, :now, :now, :now, :now)"
        ),
        ids | at | {"no": False},
    )
    connection.execute(
        text(
            "INSERT INTO notification_attempts (id, notification_id, request_id, attempt, "
            "success, status_code, duration_ms, created_at) "
            "VALUES (:attempt, :sent, :request, 1, :yes, 250, 3, :now)"
        ),
        ids | at | {"yes": True},
    )
    connection.commit()


def _rows(connection: Connection) -> list[tuple[Any, ...]]:
    return [
        tuple(row)
        for row in connection.execute(
            text(
                "SELECT channel_name, channel_type, channel_id IS NULL, status, "
                "(SELECT count(*) FROM notification_attempts a "
                "WHERE a.notification_id = notifications.id) FROM notifications"
            )
        )
    ]


def test_0021_fills_the_channel_of_stored_rows_which_then_outlive_it(
    empty_database: str,
) -> None:
    url = empty_database
    command.upgrade(alembic_config(url), "0020")

    def insert(connection: Connection) -> dict[str, Any]:
        ids = _ids(connection)
        _insert_as_0020(connection, ids)
        return ids

    ids = asyncio.run(run_on(url, insert))
    upgrade_to_head(url)
    assert asyncio.run(run_on(url, _rows)) == [("oncall", "email", False, "sent", 1)]

    def remove_channel(connection: Connection) -> list[tuple[Any, ...]]:
        _with_foreign_keys(connection)
        connection.execute(text("DELETE FROM notification_channels WHERE id = :channel"), ids)
        connection.commit()
        return _rows(connection)

    assert asyncio.run(run_on(url, remove_channel)) == [("oncall", "email", True, "sent", 1)]

    command.downgrade(alembic_config(url), "0020")

    def left(connection: Connection) -> tuple[int, int]:
        counts = [
            connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
            for table in ("notifications", "notification_attempts")
        ]
        return counts[0], counts[1]

    assert asyncio.run(run_on(url, left)) == (0, 0)
