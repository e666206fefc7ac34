"""Migration 0047 on a database holding passkeys registered before registrations were
chained: each gets one ``passkey.registered`` event with its key, a passkey that has one
gets no second, and going down and up again adds nothing; on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime
from typing import Any

from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import insert, select
from sqlalchemy.engine import Connection

from signoff.migrations import alembic_config, run_on, upgrade_to_head
from signoff.models import AuditEvent, Organization, Passkey, User
from tests.storage.test_request_numbers_migration import database  # noqa: F401 (a fixture)

BACKFILL = "0047"
REGISTERED_AT = datetime(2026, 11, 20, 9, 30, tzinfo=UTC)


def _before_backfill(url: str) -> str:
    revision = ScriptDirectory.from_config(alembic_config(url)).get_revision(BACKFILL)
    assert revision is not None and isinstance(revision.down_revision, str)
    return revision.down_revision


def _passkey(org_id: uuid.UUID, user_id: uuid.UUID, name: str) -> dict[str, Any]:
    return {
        "id": uuid.uuid4(),
        "org_id": org_id,
        "user_id": user_id,
        "name": name,
        "credential_id": uuid.uuid4().hex,
        "public_key": f"pQECAyYgASFY-{name}",
        "sign_count": 0,
        "transports": [],
        "created_at": REGISTERED_AT,
    }


def _store(connection: Connection, org_id: uuid.UUID, user_id: uuid.UUID) -> list[dict[str, Any]]:
    """Two passkeys of one user: the first registered before registrations were
    chained (no event), the second with its event."""
    connection.execute(insert(Organization.__table__), {"id": org_id, "name": "Acme"})
    connection.execute(
        insert(User.__table__),
        {"id": user_id, "org_id": org_id, "email": "ann@acme.example", "name": "Ann"},
    )
    old, chained = _passkey(org_id, user_id, "old"), _passkey(org_id, user_id, "chained")
    connection.execute(insert(Passkey.__table__), [old, chained])
    connection.execute(
        insert(AuditEvent.__table__),
        {
            "id": uuid.uuid4(),
            "org_id": org_id,
            "request_id": None,
            "type": "passkey.registered",
            "actor_id": user_id,
            "data": {"passkey_id": str(chained["id"]), "name": "chained"},
            "created_at": REGISTERED_AT,
        },
    )
    connection.commit()
    return [old, chained]


def _registrations(connection: Connection) -> list[tuple[Any, Any, dict[str, Any]]]:
    events = AuditEvent.__table__
    rows = connection.execute(
        select(events.c.org_id, events.c.actor_id, events.c.data).where(
            events.c.type == "passkey.registered"
        )
    )
    return [(org_id, actor_id, data) for org_id, actor_id, data in rows]


def test_passkeys_without_a_registration_event_get_one(
    database: str,  # noqa: F811 (the imported fixture)
) -> None:
    org_id, user_id = uuid.uuid4(), uuid.uuid4()
    command.upgrade(alembic_config(database), _before_backfill(database))
    old, chained = asyncio.run(run_on(database, lambda c: _store(c, org_id, user_id)))
    upgrade_to_head(database)

    registrations = asyncio.run(run_on(database, _registrations))
    by_passkey = {data["passkey_id"]: (org, actor, data) for org, actor, data in registrations}
    assert len(registrations) == 2 and set(by_passkey) == {str(old["id"]), str(chained["id"])}
    org, actor, data = by_passkey[str(old["id"])]
    assert (uuid.UUID(str(org)), uuid.UUID(str(actor))) == (org_id, user_id)
    assert data == {
        "passkey_id": str(old["id"]),
        "name": "old",
        "credential_id": old["credential_id"],
        "public_key": old["public_key"],
        "registered_at": "2026-11-20T09:30:00.000Z",
        "backfilled": True,
    }
    assert "backfilled" not in by_passkey[str(chained["id"])][2]

    command.downgrade(alembic_config(database), _before_backfill(database))
    upgrade_to_head(database)
    assert len(asyncio.run(run_on(database, _registrations))) == 2
