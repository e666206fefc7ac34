"""Passkeys registered before registrations were chained get their ``passkey.registered``
event now

Revision ID: 0047
Revises: 0044
Create Date: 2026-11-28

An auditor checks a passkey-signed vote against the public key its passkey was registered
with, read from the chain's ``passkey.registered`` event (docs/audit.md, "Passkey
signatures"). Passkeys registered before those events were written had none, so their
votes could only be checked against the key they carry. Each such passkey gets its event
now, unsealed like any new event (the sealer chains it), by its owner, with
``"backfilled": true`` and the registration's own time as ``registered_at``. Going back
leaves the events: a sealed event cannot leave the chain without breaking it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

from signoff.common.ids import new_id
from signoff.common.time import format_timestamp, utcnow
from signoff.models.base import UTCDateTime

revision = "0047"
down_revision = "0044"
branch_labels = None
depends_on = None

PASSKEY_REGISTERED = "passkey.registered"
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")

passkeys = sa.table(
    "passkeys",
    sa.column("id", sa.Uuid()),
    sa.column("org_id", sa.Uuid()),
    sa.column("user_id", sa.Uuid()),
    sa.column("name", sa.String()),
    sa.column("credential_id", sa.String()),
    sa.column("public_key", sa.Text()),
    sa.column("created_at", UTCDateTime(timezone=True)),
)
audit_events = sa.table(
    "audit_events",
    sa.column("id", sa.Uuid()),
    sa.column("org_id", sa.Uuid()),
    sa.column("request_id", sa.Uuid()),
    sa.column("type", sa.String()),
    sa.column("actor_id", sa.Uuid()),
    sa.column("data", JSON),
    sa.column("created_at", UTCDateTime(timezone=True)),
)


def upgrade() -> None:
    bind = op.get_bind()
    chained = {
        str(data.get("passkey_id"))
        for (data,) in bind.execute(
            sa.select(audit_events.c.data).where(audit_events.c.type == PASSKEY_REGISTERED)
        )
        if isinstance(data, dict)
    }
    now = utcnow()
    missing = [
        {
            "id": new_id(),
            "org_id": key.org_id,
            "request_id": None,
            "type": PASSKEY_REGISTERED,
            "actor_id": key.user_id,
            "data": {
                "passkey_id": str(key.id),
                "name": key.name,
                "credential_id": key.credential_id,
                "public_key": key.public_key,
                "registered_at": format_timestamp(key.created_at),
                "backfilled": True,
            },
            "created_at": now,
        }
        for key in bind.execute(sa.select(passkeys).order_by(passkeys.c.created_at))
        if str(key.id) not in chained
    ]
    if missing:
        op.bulk_insert(audit_events, missing)


def downgrade() -> None:
    """Nothing: the events stay (see above)."""
