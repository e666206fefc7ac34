"""Every query on standing approvals (``policies.standing``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Table, bindparam, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.sql.dml import Update

from signoff.models import Organization, StandingApproval
from signoff.storage import PreparedQuery, QueryRunner, execute_in, holds_sqlite_write_lock


class StandingRow(NamedTuple):
    id: uuid.UUID
    org_id: uuid.UUID
    connection_id: uuid.UUID
    action_type: str
    arguments: dict[str, Any]
    expires_at: datetime | None
    max_uses: int | None
    uses: int
    granted_by: uuid.UUID
    granted_by_name: str
    request_id: uuid.UUID
    created_at: datetime
    revoked_at: datetime | None
    revoked_by: uuid.UUID | None


class StandingCandidate(NamedTuple):
    """What a create reads of a standing approval it may match: its constraints, and
    what the decision's event and label name (``standing.Match``), its uses so far."""

    id: uuid.UUID
    arguments: dict[str, Any]
    granted_by: uuid.UUID
    granted_by_name: str
    max_uses: int | None
    uses: int


_TABLE: Table = StandingApproval.__table__  # type: ignore[assignment]
_COLUMNS = [getattr(StandingApproval, name).label(name) for name in StandingRow._fields]
_S = StandingApproval


def _live(now: Any) -> list[Any]:
    """Not revoked (the partial indexes' condition), not expired, not used up."""
    return [
        _S.revoked_at.is_(None),
        or_(_S.expires_at.is_(None), _S.expires_at > now),
        or_(_S.max_uses.is_(None), _S.uses < _S.max_uses),
    ]


# The create's one lookup, on ``ix_standing_approvals_lookup``: the live standing
# approvals of the request's org, connection and action type, oldest first. Only the
# columns a match uses (``StandingCandidate``), not the row's fourteen.
_CANDIDATES = PreparedQuery(
    select(*(getattr(_S, name).label(name) for name in StandingCandidate._fields))
    .where(
        _S.org_id == bindparam("org_id"),
        _S.connection_id == bindparam("connection_id"),
        _S.action_type == bindparam("action_type"),
        *_live(bindparam("now")),
    )
    .order_by(_S.created_at, _S.id),
    row_type=StandingCandidate,
)


def take_use(standing_id: Any, now: Any, *also: Any) -> Update:
    """Take one use, only while it is still live (and ``also`` holds): of concurrent
    creates on any number of replicas, at most ``max_uses`` get a row back. PostgreSQL
    makes a concurrent UPDATE of the row wait for the other's commit and tests the
    condition again on the row as committed; SQLite has one writer at a time. A part of
    the create's own statement on PostgreSQL (``ApprovalRepository.
    insert_unless_key_taken``), a statement of its own after a lost race (``_USE``)."""
    return (
        update(_TABLE)
        .where(_TABLE.c.id == standing_id, *_live(now), *also)
        .values(uses=_TABLE.c.uses + 1)
        .returning(_TABLE.c.uses.label("uses"))
    )


_USE = PreparedQuery(take_use(bindparam("standing_id"), bindparam("now")))


class StandingApprovalRepository:
    def __init__(
        self, session: AsyncSession, dialect: str, queries: QueryRunner | None = None
    ) -> None:
        self.session = session
        self.dialect = dialect
        self.queries = queries

    @property
    def use_taken_by_insert(self) -> bool:
        """Whether the request's insert takes the use: on SQLite, always (the trigger of
        migration 0051), and the create reads its candidates in its write transaction,
        which holds the write lock: they are live until it commits, and ``use`` need
        not ask again."""
        return self.dialect == "sqlite"

    async def candidates(
        self, org_id: uuid.UUID, connection_id: uuid.UUID, action_type: str, now: datetime
    ) -> list[StandingCandidate]:
        """The live standing approvals a new request may match (in autocommit where the
        storage allows it: the use, ``use``, is what decides; on SQLite under the write
        lock, ``use_taken_by_insert``)."""
        params = {
            "org_id": org_id,
            "connection_id": connection_id,
            "action_type": action_type,
            "now": now,
        }
        if self.use_taken_by_insert:
            # In the write transaction, which sees the uses taken by the writers before
            # it in its batch (group commit): read elsewhere, or without the write lock,
            # a candidate could be used up before the insert.
            if not holds_sqlite_write_lock(self.session):
                raise RuntimeError("a create on SQLite matches in its write transaction")
        elif self.queries is not None and not self.session.in_transaction():
            return list(await self.queries.all(_CANDIDATES, params))
        return list(await execute_in(self.session, _CANDIDATES, params))

    @property
    def use_taken_by_create(self) -> bool:
        """Whether the create's own statement takes the use, on PostgreSQL: its
        conditional UPDATE is a part of the request's insert, which inserts nothing if
        the use is lost (``ApprovalRepository.insert_unless_key_taken``, ``StandingUse``;
        the create then matches again with ``use``, ``taking=True``)."""
        return self.dialect == "postgresql"

    async def use(
        self, candidate: StandingCandidate, now: datetime, *, taking: bool = False
    ) -> int | None:
        """Take one use of a candidate read in the caller's transaction: the uses now, or
        None when it is no longer live (used up, expired or revoked meanwhile). Where the
        request's insert takes it (``use_taken_by_insert``), or the create's statement
        (``use_taken_by_create``, unless ``taking``), no statement: the candidate's uses
        plus the one the create will add (on PostgreSQL the create answers the uses it
        counted, ``StandingUse``)."""
        if self.use_taken_by_insert or (self.use_taken_by_create and not taking):
            return candidate.uses + 1
        rows = await execute_in(self.session, _USE, {"standing_id": candidate.id, "now": now})
        return int(rows[0].uses) if rows else None

    async def give_back(self, standing_id: uuid.UUID) -> None:
        """Undo ``use`` in the same transaction (a create that turned out a replay). Where
        the insert takes the use, an insert that did not happen took none."""
        if self.use_taken_by_insert:
            return
        await self.session.execute(
            update(_TABLE).where(_TABLE.c.id == standing_id).values(uses=_TABLE.c.uses - 1)
        )

    async def add(self, values: dict[str, Any]) -> None:
        """Store a grant and count it in its org (``standing_approvals_granted``, which
        the org's principals carry: they go stale, and the next create looks)."""
        await self.session.execute(insert(_TABLE), values)
        await self.session.execute(
            update(Organization)
            .where(Organization.id == values["org_id"])
            .values(standing_approvals_granted=Organization.standing_approvals_granted + 1)
        )

    async def caps(self, org_id: uuid.UUID) -> dict[str, Any] | None:
        rows = await self.session.execute(
            select(Organization.standing_approval_caps).where(Organization.id == org_id)
        )
        return rows.scalar_one_or_none()

    async def live(self, org_id: uuid.UUID, now: datetime, limit: int) -> list[StandingRow]:
        """The org's live standing approvals, newest first (``ix_standing_approvals_org_
        created``; those expired or used up are passed over)."""
        rows = await self.session.execute(
            select(*_COLUMNS)
            .where(_S.org_id == org_id, *_live(now))
            .order_by(_S.created_at.desc(), _S.id.desc())
            .limit(limit)
        )
        return [StandingRow(*row) for row in rows]

    async def get(self, org_id: uuid.UUID, standing_id: uuid.UUID) -> StandingRow | None:
        rows = await self.session.execute(
            select(*_COLUMNS).where(_S.org_id == org_id, _S.id == standing_id)
        )
        found = rows.first()
        return StandingRow(*found) if found is not None else None

    async def revoke(self, standing_id: uuid.UUID, by: uuid.UUID | None, now: datetime) -> bool:
        """Revoke it unless it was already: whether this call did."""
        result = await self.session.execute(
            update(_TABLE)
            .where(_TABLE.c.id == standing_id, _TABLE.c.revoked_at.is_(None))
            .values(revoked_at=now, revoked_by=by)
            .returning(_TABLE.c.id)
        )
        return result.first() is not None
