"""Migration 0048 on a database holding receipts stored with their token: each token is
kept in ``stored_receipt_tokens`` (a migration has no secret key to open it and read its
claims), ``receipts.token_encrypted`` goes, and going down puts the tokens back (a receipt
signed on read, with no token to put back, goes); on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from alembic import command
from sqlalchemy import inspect, text
from sqlalchemy.engine import Connection

from signoff.migrations import alembic_config, run_on, upgrade_to_head
from tests.storage.test_request_numbers_migration import database  # noqa: F401 (a fixture)

SIGNED_ON_READ = "0048"
BEFORE = "0047"


def _unchecked(connection: Connection) -> None:
    """The org and request rows do not matter here."""
    if connection.dialect.name == "postgresql":
        connection.execute(text("SET session_replication_role = replica"))
    else:
        connection.execute(text("PRAGMA foreign_keys = OFF"))


def _receipt(connection: Connection, jti: uuid.UUID) -> dict[str, Any]:
    """A receipt's values as the raw driver takes them (SQLite: hex ids, naive UTC)."""
    issued = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)
    values: dict[str, Any] = {
        "jti": jti,
        "request_id": uuid.uuid4(),
        "org_id": uuid.uuid4(),
        "kid": "k1",
        "issued_at": issued,
        "expires_at": issued + timedelta(minutes=15),
    }
    if connection.dialect.name == "sqlite":
        return {
            name: value.hex
            if isinstance(value, uuid.UUID)
            else value.replace(tzinfo=None).isoformat(sep=" ")
            if isinstance(value, datetime)
            else value
            for name, value in values.items()
        }
    return values


def _store_with_token(connection: Connection, jti: uuid.UUID) -> None:
    _unchecked(connection)
    connection.execute(
        text(
            "INSERT INTO receipts (jti, request_id, org_id, kid, token_encrypted, issued_at, "
            "expires_at, max_uses, uses) VALUES (:jti, :request_id, :org_id, :kid, "
            "'sealed-token', :issued_at, :expires_at, 1, 1)"
        ),
        _receipt(connection, jti),
    )
    connection.commit()


def _store_claims(connection: Connection, jti: uuid.UUID) -> None:
    _unchecked(connection)
    connection.execute(
        text(
            "INSERT INTO receipts (jti, request_id, org_id, kid, issuer, action_type, "
            "arguments_hash, decided_by, issued_at, expires_at, max_uses, uses) VALUES "
            "(:jti, :request_id, :org_id, :kid, 'https://signoff.example', 'deploy', "
            "'sha-256:x', '[\"u1\"]', :issued_at, :expires_at, 1, 0)"
        ),
        _receipt(connection, jti),
    )
    connection.commit()


def _rows(connection: Connection, query: str) -> list[tuple[Any, ...]]:
    return [tuple(row) for row in connection.execute(text(query))]


def _columns(connection: Connection) -> set[str]:
    return {column["name"] for column in inspect(connection).get_columns("receipts")}


def test_stored_tokens_are_kept_apart_and_come_back_down(
    database: str,  # noqa: F811 (the imported fixture)
) -> None:
    stored, on_read = uuid.uuid4(), uuid.uuid4()
    config = alembic_config(database)
    command.upgrade(config, BEFORE)
    asyncio.run(run_on(database, lambda c: _store_with_token(c, stored)))
    upgrade_to_head(database)

    columns = asyncio.run(run_on(database, _columns))
    assert "token_encrypted" not in columns and {"issuer", "decided_by"} <= columns
    kept = asyncio.run(
        run_on(
            database, lambda c: _rows(c, "SELECT jti, token_encrypted FROM stored_receipt_tokens")
        )
    )
    assert [(uuid.UUID(str(jti)), token) for jti, token in kept] == [(stored, "sealed-token")]
    # Its claims cannot be read without the secret key: they stay null, its count stays.
    [(issuer, uses)] = asyncio.run(
        run_on(database, lambda c: _rows(c, "SELECT issuer, uses FROM receipts"))
    )
    assert issuer is None and uses == 1
    asyncio.run(run_on(database, lambda c: _store_claims(c, on_read)))

    command.downgrade(config, BEFORE)
    back = asyncio.run(
        run_on(database, lambda c: _rows(c, "SELECT jti, token_encrypted, uses FROM receipts"))
    )
    assert [(uuid.UUID(str(jti)), token, uses) for jti, token, uses in back] == [
        (stored, "sealed-token", 1)
    ]
    upgrade_to_head(database)
    kept = asyncio.run(
        run_on(database, lambda c: _rows(c, "SELECT token_encrypted FROM stored_receipt_tokens"))
    )
    assert kept == [("sealed-token",)]
