"""Every query on policy documents, budget counters, and the history a dry run replays."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import (
    Table,
    Text,
    bindparam,
    cast,
    delete,
    func,
    literal_column,
    null,
    select,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models import (
    ApprovalRequest,
    Connection,
    Group,
    Organization,
    PolicyBudgetUsage,
    PolicyDocument,
)
from signoff.storage import PreparedQuery, QueryRunner, execute_in

# The newest version (saves and the API's reads; a create reads the principal's
# ``org_policy_version`` instead), on the unique (org_id, version) index.
_CURRENT_VERSION = PreparedQuery(
    select(func.max(PolicyDocument.version).label("version")).where(
        PolicyDocument.org_id == bindparam("org_id")
    )
)
_RULES_OF_VERSION = PreparedQuery(
    select(PolicyDocument.rules.label("rules")).where(
        PolicyDocument.org_id == bindparam("org_id"),
        PolicyDocument.version == bindparam("version"),
    )
)
_USAGE: Table = PolicyBudgetUsage.__table__  # type: ignore[assignment]


def _spend(dialect: str) -> PreparedQuery:
    """Spend one approval (and ``amount``) of a budget window, only while it stays within
    its caps: an upsert whose update is conditional, so of concurrent spenders on any
    number of replicas exactly as many as the caps allow get a row back. PostgreSQL
    makes a conflicting insert wait for the other's commit and re-checks the condition
    on the row as committed; SQLite has one writer at a time."""
    insert = (postgresql.insert if dialect == "postgresql" else sqlite.insert)(_USAGE)
    c = _USAGE.c
    upsert = insert.values(
        org_id=bindparam("org_id"),
        rule=bindparam("rule"),
        scope_key=bindparam("scope_key"),
        window_start=bindparam("window_start"),
        count=literal_column("1"),
        total=bindparam("amount"),
    ).on_conflict_do_update(
        index_elements=["org_id", "rule", "scope_key", "window_start"],
        set_={"count": c.count + 1, "total": c.total + insert.excluded.total},
        where=(c.count + 1 <= bindparam("max_count"))
        & (c.total + insert.excluded.total <= bindparam("max_sum")),
    )
    return PreparedQuery(upsert.returning(c.count))


_SPEND = {dialect: _spend(dialect) for dialect in ("sqlite", "postgresql")}


@dataclass(frozen=True)
class VersionRow:
    version: int
    rules: list[Any]
    author_id: uuid.UUID | None
    author_name: str | None
    restored_from: int | None
    created_at: datetime


@dataclass(frozen=True, slots=True)
class PastRequest:
    """A decided request, as a dry run replays it. ``id_text`` is the id as the database
    gives it as text (with or without dashes): ``id`` parses it."""

    id_text: str
    number: int | None
    title: str
    status: str
    priority: str
    action_type: str | None
    source: str | None
    metadata: dict[str, Any]
    arguments: dict[str, Any] | None
    connection_id: uuid.UUID | None
    created_at: datetime
    auto_approved: bool

    @property
    def id(self) -> uuid.UUID:
        return uuid.UUID(self.id_text)


def _past_request(row: Sequence[Any], connections: _UuidsByText) -> PastRequest:
    """A row of ``decided_since``'s select: id to source as they are, the two JSON texts
    decoded, the connection id parsed, then created_at and auto_approved."""
    id_text, number, title, status, priority, action_type, source = row[:7]
    metadata, arguments, connection_id, created_at, auto_approved = row[7:]
    return PastRequest(
        id_text=id_text,
        number=number,
        title=title,
        status=status,
        priority=priority,
        action_type=action_type,
        source=source,
        metadata=_json_or_none(metadata),
        arguments=_json_or_none(arguments),
        connection_id=connections[connection_id],
        created_at=created_at,
        auto_approved=bool(auto_approved),
    )


def _json_or_none(text: str | None) -> Any:
    return None if text is None else orjson.loads(text)


class _UuidsByText(dict[str | None, uuid.UUID | None]):
    """Connection ids parsed once each: a history names few connections many times."""

    def __missing__(self, text: str | None) -> uuid.UUID | None:
        parsed = None if text is None else uuid.UUID(text)
        self[text] = parsed
        return parsed


# A group a ``require`` rule names, by name ignoring case.
_GROUP_BY_NAME = PreparedQuery(
    select(Group.id).where(
        Group.org_id == bindparam("org_id"), func.lower(Group.name) == bindparam("name")
    )
)


class PolicyRepository:
    def __init__(
        self, session: AsyncSession, dialect: str, queries: QueryRunner | None = None
    ) -> None:
        self.session = session
        self.dialect = dialect
        self.queries = queries

    async def group_ids(self, org_id: uuid.UUID, names: Sequence[str]) -> dict[str, uuid.UUID]:
        """The org's groups named ``names`` (ignoring case), keyed by the lowered name; on
        the index of ``org_id, lower(name)``."""
        found = {}
        for name in names:
            params = {"org_id": org_id, "name": name.lower()}
            for row in await execute_in(self.session, _GROUP_BY_NAME, params):
                found[name.lower()] = row.id
        return found

    async def current_version(self, org_id: uuid.UUID) -> int | None:
        """The newest version, or None when the org never saved a document (in
        autocommit where the storage allows it)."""
        params = {"org_id": org_id}
        if self.queries is not None and not self.session.in_transaction():
            row = await self.queries.one(_CURRENT_VERSION, params)
        else:
            rows = await execute_in(self.session, _CURRENT_VERSION, params)
            row = rows[0] if rows else None
        return row.version if row is not None else None

    async def put_in_force(self, org_id: uuid.UUID, version: int) -> None:
        """Make ``version`` the org's document in force (``organizations.policy_version``,
        which every principal of the org carries), in the save's transaction."""
        await self.session.execute(
            update(Organization).where(Organization.id == org_id).values(policy_version=version)
        )

    async def begin(self) -> None:
        """Make the create one transaction with what a policy writes (its budget, its
        decision), rather than the storage's one-statement write (``execute_alone``)."""
        await self.session.connection()

    async def rules_of(self, org_id: uuid.UUID, version: int) -> list[Any] | None:
        params = {"org_id": org_id, "version": version}
        if self.queries is not None and not self.session.in_transaction():
            row = await self.queries.one(_RULES_OF_VERSION, params)
        else:
            rows = await execute_in(self.session, _RULES_OF_VERSION, params)
            row = rows[0] if rows else None
        return list(row.rules) if row is not None else None

    async def add_version(
        self,
        org_id: uuid.UUID,
        version: int,
        rules: list[dict[str, Any]],
        author_id: uuid.UUID | None,
        author_name: str | None,
        now: datetime,
        restored_from: int | None = None,
    ) -> None:
        """Store a new version; two saves racing for one number meet the unique
        (org_id, version) constraint, and the loser's transaction fails."""
        self.session.add(
            PolicyDocument(
                org_id=org_id,
                version=version,
                rules=rules,
                author_id=author_id,
                author_name=author_name,
                restored_from=restored_from,
                created_at=now,
            )
        )
        await self.session.flush()

    async def versions(self, org_id: uuid.UUID, limit: int = 100) -> list[VersionRow]:
        rows = await self.session.execute(
            select(
                PolicyDocument.version,
                PolicyDocument.rules,
                PolicyDocument.author_id,
                PolicyDocument.author_name,
                PolicyDocument.restored_from,
                PolicyDocument.created_at,
            )
            .where(PolicyDocument.org_id == org_id)
            .order_by(PolicyDocument.version.desc())
            .limit(limit)
        )
        return [VersionRow(*row) for row in rows]

    async def version(self, org_id: uuid.UUID, version: int) -> VersionRow | None:
        rows = await self.session.execute(
            select(
                PolicyDocument.version,
                PolicyDocument.rules,
                PolicyDocument.author_id,
                PolicyDocument.author_name,
                PolicyDocument.restored_from,
                PolicyDocument.created_at,
            ).where(PolicyDocument.org_id == org_id, PolicyDocument.version == version)
        )
        found = rows.first()
        return VersionRow(*found) if found is not None else None

    async def spend(
        self,
        org_id: uuid.UUID,
        rule: str,
        scope_key: str,
        window_start: datetime,
        amount: float,
        max_count: int,
        max_sum: float,
    ) -> bool:
        """Spend one approval and ``amount`` of the window; False when that would pass a
        cap (nothing is spent then)."""
        params = {
            "org_id": org_id,
            "rule": rule,
            "scope_key": scope_key,
            "window_start": window_start,
            "amount": amount,
            "max_count": max_count,
            "max_sum": max_sum,
        }
        return bool(await execute_in(self.session, _SPEND[self.dialect], params))

    async def purge_spent_windows(self, before: datetime) -> int:
        """Delete the budget windows that started before ``before``: no create spends in
        them any more. A background sweep of a small table (no request waits on it)."""
        result = await self.session.execute(delete(_USAGE).where(_USAGE.c.window_start < before))
        return int(getattr(result, "rowcount", 0) or 0)

    async def decided_since(
        self,
        org_id: uuid.UUID,
        since: datetime,
        *,
        with_metadata: bool = True,
        with_arguments: bool = True,
    ) -> list[PastRequest]:
        """The org's requests created since ``since`` that a person or a policy decided
        (approved or rejected), oldest first; on the (org_id, created_at) index. The JSON
        columns only when asked for, read as text and decoded by orjson, and ids kept as
        the database's text (a request's id is parsed only if the dry run lists it): on a
        long history, decoding is most of the reading, more than the query."""
        r = ApprovalRequest
        connection = await self.session.connection()
        rows = await connection.execute(
            select(
                cast(r.id, Text),
                r.number,
                r.title,
                r.status,
                r.priority,
                r.action_type,
                r.source,
                cast(r.metadata_, Text) if with_metadata else null(),
                cast(r.arguments, Text) if with_arguments else null(),
                cast(r.connection_id, Text),
                r.created_at,
                r.auto_approved,
            )
            .where(
                r.org_id == org_id,
                r.created_at >= since,
                r.status.in_(("approved", "rejected")),
            )
            .order_by(r.created_at, r.id)
        )
        connections = _UuidsByText()
        return [_past_request(row, connections) for row in rows]

    async def connection_names(self, org_id: uuid.UUID) -> dict[uuid.UUID, str]:
        rows = await self.session.execute(
            select(Connection.id, Connection.name).where(Connection.org_id == org_id)
        )
        return {cid: name for cid, name in rows}
