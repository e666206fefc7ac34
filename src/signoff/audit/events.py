"""Recording a change to the org itself (not to one request) as an audit event, in the
caller's transaction, so that the sealer chains it like any other (docs/audit.md,
"What is recorded")."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Protocol, cast

from sqlalchemy import Table, insert
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import object_session

from signoff.common.ids import new_id
from signoff.models import AuditEvent

_EVENTS = cast(Table, AuditEvent.__table__)


async def record(
    session: AsyncSession,
    org_id: uuid.UUID,
    event_type: str,
    actor_id: uuid.UUID | None,
    data: dict[str, Any],
    now: datetime,
) -> None:
    """Write one org event (no request); ``actor_id`` None: the operator (CLI) or the
    service itself."""
    await session.execute(
        insert(_EVENTS),
        {
            "id": new_id(),
            "org_id": org_id,
            "request_id": None,
            "type": event_type,
            "actor_id": actor_id,
            "data": data,
            "created_at": now,
        },
    )


# The event types of org changes (docs/audit.md, "What is recorded").
SETTINGS_EVENT = "org.settings_changed"


class _OfAnOrg(Protocol):
    org_id: uuid.UUID


def note(
    entity: _OfAnOrg,
    event_type: str,
    actor_id: uuid.UUID | None,
    data: dict[str, Any],
    now: datetime,
) -> None:
    """``record`` for a change made to a loaded row (a connection, a user): the event
    joins the row's own session, so it is written with the change, at the next flush."""
    session = object_session(entity)
    assert session is not None  # the row was loaded or added in this transaction
    session.add(
        AuditEvent(
            id=new_id(),
            org_id=entity.org_id,
            request_id=None,
            type=event_type,
            actor_id=actor_id,
            data=data,
            created_at=now,
        )
    )
