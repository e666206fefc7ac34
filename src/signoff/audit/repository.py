"""Every query of the audit chain."""

from __future__ import annotations

import uuid
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any, cast

import orjson
from sqlalchemy import (
    Row,
    String,
    Table,
    Uuid,
    bindparam,
    delete,
    insert,
    select,
    text,
    true,
    type_coerce,
    update,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import TypeDecorator

from signoff.audit.chain import GENESIS_HASH, chain_timestamp
from signoff.models import (
    AuditChainHead,
    AuditChainLink,
    AuditCheckpoint,
    AuditEvent,
    AuditUnsealed,
)
from signoff.storage import insert_ignoring_conflicts, not_among

_EVENTS = cast(Table, AuditEvent.__table__)
_HEADS = cast(Table, AuditChainHead.__table__)
_CHECKPOINTS = cast(Table, AuditCheckpoint.__table__)
_CHAIN = cast(Table, AuditChainLink.__table__)
_UNSEALED = cast(Table, AuditUnsealed.__table__)


class _UuidText(TypeDecorator[str]):
    """A UUID column read as its canonical text (lowercase, dashed), the form the chain
    hashes: from the 32 hex digits SQLite stores (SQLAlchemy's ``Uuid``), or from
    PostgreSQL's uuid. Reading ``uuid.UUID`` objects and turning them back into text cost
    the sealer and the re-check more than hashing the event does (decision 0028)."""

    impl = String
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> str | None:
        return uuid_text(value)


def uuid_text(value: Any) -> str | None:
    """A UUID as stored (``_UuidText``) as the chain's text."""
    if value is None:
        return None
    if type(value) is str and len(value) == 32:
        value = value.lower()
        return f"{value[:8]}-{value[8:12]}-{value[12:16]}-{value[16:20]}-{value[20:]}"
    if isinstance(value, uuid.UUID):  # asyncpg's own, whose text is already the form
        return str(value)
    return str(uuid.UUID(str(value)))  # any other form, as ``uuid.UUID`` reads it


class _ChainTime(TypeDecorator[str]):
    """``created_at`` read as the text the chain hashes (``chain.chain_timestamp``). On
    SQLite from the stored text itself: ``YYYY-MM-DD HH:MM:SS.ffffff`` (naive UTC,
    ``models.base``) becomes ``YYYY-MM-DDTHH:MM:SS.ffffffZ`` by moving two characters,
    where parsing it into a datetime and formatting that again cost the sealer and the
    re-check several µs an event. Any other text (a year before 1000, no fraction), and
    PostgreSQL's datetimes, go through ``chain_timestamp`` as before."""

    impl = String
    cache_ok = True

    def process_result_value(self, value: Any, dialect: Any) -> str | None:
        return chain_time_text(value)


def chain_time_text(value: Any) -> str | None:
    """``created_at`` as stored (``_ChainTime``) as the chain's text."""
    if value is None:
        return None
    if type(value) is str:
        if len(value) == 26 and value[0] != "0" and value[10] == " " and value[19] == ".":
            return f"{value[:10]}T{value[11:]}Z"
        value = datetime.fromisoformat(value)  # naive: UTC, as chain_timestamp takes it
    return chain_timestamp(value)


class _StoredKey(TypeDecorator[Any]):
    """An event's id read and bound as the driver holds it (SQLite's 32 hex digits,
    asyncpg's uuid), never made a ``uuid.UUID`` and back: the sealer only reads waiting
    ids to bind them again (taking them off the list, reading the events, linking them),
    and each conversion cost it more than hashing the event does."""

    impl = Uuid
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def result_processor(self, dialect: Dialect, coltype: object) -> None:
        return None


def _hashed(*, event_id: bool = False) -> list[Any]:
    """The columns an event's hash covers, in ``service._canonical``'s order, UUIDs and
    the time as text; ``event_id``: with the row's id as stored too (``_StoredKey``: the
    sealer's insert binds it)."""
    texts = [type_coerce(_EVENTS.c[name], _UuidText()).label(name) for name in _UUID_COLUMNS]
    plain = [_EVENTS.c.type, _EVENTS.c.data]
    created_at = type_coerce(_EVENTS.c.created_at, _ChainTime()).label("created_at")
    stored = [type_coerce(_EVENTS.c.id, _StoredKey()).label("event_id")] if event_id else []
    return [*texts, *plain, created_at, *stored]


# A chained event: the event joined to its row of ``audit_chain``.
_CHAINED = _CHAIN.join(_EVENTS, _EVENTS.c.id == _CHAIN.c.event_id)


_UUID_COLUMNS = ("id", "org_id", "request_id", "actor_id")


async def orgs_with_unsealed(
    session: AsyncSession, limit: int, skip: Collection[uuid.UUID] = ()
) -> Sequence[uuid.UUID]:
    """Orgs that have events not yet in their chain (``audit_unsealed``'s key), but those
    of ``skip`` (held back: one of their events could not be sealed)."""
    statement = select(_UNSEALED.c.org_id).where(*not_among(_UNSEALED.c.org_id, skip))
    rows = await session.execute(statement.distinct().limit(limit))
    return [row.org_id for row in rows]


async def lock_head(session: AsyncSession, dialect: str, org_id: uuid.UUID) -> Row[Any]:
    """The org's head row, created at genesis if missing, locked until the transaction
    ends (PostgreSQL ``FOR UPDATE``; SQLite's write transaction holds the file's lock)."""
    statement = select(_HEADS).where(_HEADS.c.org_id == org_id).with_for_update()
    row = (await session.execute(statement)).first()
    if row is not None:
        return row
    genesis = {
        "org_id": org_id,
        "seq": 0,
        "hash": GENESIS_HASH,
        "checkpoint_seq": 0,
        "verified_seq": 0,
        "verified_hash": GENESIS_HASH,
    }
    await session.execute(insert_ignoring_conflicts(dialect, _HEADS, ("org_id",)), genesis)
    return (await session.execute(statement)).one()


async def unsealed_events(
    session: AsyncSession, org_id: uuid.UUID, limit: int
) -> Sequence[Row[Any]]:
    """The org's events not yet in its chain, oldest first: the hashed columns and the
    event's id (``audit_unsealed``'s key, then each event by its own)."""
    waiting = _UNSEALED.join(_EVENTS, _EVENTS.c.id == _UNSEALED.c.event_id)
    return (
        await session.execute(
            select(*_hashed(event_id=True))
            .select_from(waiting)
            .where(_UNSEALED.c.org_id == org_id)
            .order_by(_EVENTS.c.created_at, _EVENTS.c.id)
            .limit(limit)
        )
    ).all()


async def waiting_ids(session: AsyncSession, org_id: uuid.UUID, limit: int) -> list[Any]:
    """The ids of the org's events not yet in its chain, oldest first (by the events'
    (created_at, id)), as stored (``_StoredKey``): one sort a wake-up, nothing to convert."""
    waiting = _UNSEALED.join(_EVENTS, _EVENTS.c.id == _UNSEALED.c.event_id)
    rows = await session.execute(
        select(type_coerce(_UNSEALED.c.event_id, _StoredKey()).label("event_id"))
        .select_from(waiting)
        .where(_UNSEALED.c.org_id == org_id)
        .order_by(_EVENTS.c.created_at, _EVENTS.c.id)
        .limit(limit)
    )
    return [row.event_id for row in rows]


async def events_by_id(session: AsyncSession, ids: Sequence[Any]) -> Sequence[Row[Any]]:
    """These events (ids as ``waiting_ids`` reads them): their hashed columns and id
    (``event_id``, as stored), in no particular order."""
    statement = select(*_hashed(event_id=True)).where(
        type_coerce(_EVENTS.c.id, _StoredKey()).in_(list(ids))
    )
    return (await session.execute(statement)).all()


# Where a sealed row's own id and rowid sit in a row the sealer reads (``events_after``,
# ``unsealed_events``, ``events_by_id``): after the hashed columns.
EVENT_ID = 7
POSITION = 8

# A batch's links in one statement, not one a link: PostgreSQL takes them as arrays; SQLite
# as a VALUES list of rows, in pieces of a power of two (at most ``_PIECES`` statements
# a batch, and as many statement texts for SQLite to keep compiled, whatever the size).
_POSTGRES_LINKS = (
    "INSERT INTO audit_chain (org_id, seq, event_id, prev_hash, hash) SELECT $1::uuid, * "
    "FROM unnest($2::bigint[], $3::uuid[], $4::text[], $5::text[])"
)
_PIECES = 9
_SQLITE_ROW = "(?, ?, ?, ?, ?)"
_SQLITE_LINKS = [
    "INSERT INTO audit_chain (org_id, seq, event_id, prev_hash, hash) VALUES "  # noqa: S608
    + ", ".join([_SQLITE_ROW] * (1 << power))
    for power in range(_PIECES)
]


async def append_links(
    session: AsyncSession, dialect: str, org_id: uuid.UUID, links: Sequence[tuple[Any, ...]]
) -> None:
    """Append the org's chain: each link ``(seq, event_id, prev_hash, hash)``, its event's
    id as the sealer read it (``EVENT_ID``). No event is rewritten (``take_unsealed``
    clears the waiting list)."""
    if not links:
        return
    connection = await session.connection()
    if dialect != "sqlite":
        columns = list(zip(*links, strict=True))
        await connection.exec_driver_sql(_POSTGRES_LINKS, (org_id, *map(list, columns)))
        return
    org = org_id.hex
    start = 0
    for power in reversed(range(_PIECES)):
        size = 1 << power
        while len(links) - start >= size:
            piece = links[start : start + size]
            await connection.exec_driver_sql(
                _SQLITE_LINKS[power], tuple(v for link in piece for v in (org, *link))
            )
            start += size


async def list_unsealed(
    session: AsyncSession, dialect: str, org_id: uuid.UUID, event_ids: Sequence[Any]
) -> None:
    """List these events of the org (ids as ``events_after`` read them) in
    ``audit_unsealed``, unless they are listed already: kept back from the SQLite
    sealer's range past the mark, to be chained from the list."""
    if event_ids:
        statement = insert_ignoring_conflicts(dialect, _UNSEALED, ("org_id", "event_id"))
        # ``event_id`` bound as the events were read (``_StoredKey``).
        statement = statement.values(event_id=bindparam("event_id", type_=_StoredKey()))
        await session.execute(statement, [{"org_id": org_id, "event_id": e} for e in event_ids])


async def take_unsealed(session: AsyncSession, org_id: uuid.UUID, event_ids: Sequence[Any]) -> int:
    """Take these events off the org's waiting list, in one statement; how many of them
    were still on it (fewer: another sealer chained some since they were read)."""
    if not event_ids:
        return 0
    result = await session.execute(
        delete(_UNSEALED).where(
            _UNSEALED.c.org_id == org_id,
            type_coerce(_UNSEALED.c.event_id, _StoredKey()).in_(list(event_ids)),
        ),
        execution_options={"synchronize_session": False},
    )
    return int(getattr(result, "rowcount", 0))


# ---- SQLite: events found by their rowid past the sealed mark ----
#
# Under SQLite's one writer an event's rowid is its commit order: a row committed later
# has a higher rowid, unless the highest rows were deleted (retention, an org deleted) and
# their rowids taken again, or VACUUM renumbered them. ``audit_seal_mark`` (migration 0055,
# one row) holds the rowid of the last event chained and that event's id: when the id is
# no longer at that rowid, the mark is found again below it (``last_chained_at_or_below``).
# Every event at or below the mark is chained or listed (kept back: an org whose event
# could not be sealed, ``service.seal_in_commit_order``); every event above it is neither.

_READ_MARK = text(
    "SELECT m.event_rowid AS position, m.event_id AS event_id, "
    "e.id IS m.event_id AS held, (SELECT max(rowid) FROM audit_events) AS top, "
    "EXISTS (SELECT 1 FROM audit_unsealed AS u JOIN audit_events AS l ON l.id = u.event_id) "
    "AS listed "
    "FROM audit_seal_mark AS m LEFT JOIN audit_events AS e ON e.rowid = m.event_rowid"
)
_LAST_CHAINED = text(
    "SELECT e.rowid AS position, e.id AS event_id FROM audit_events AS e "
    "WHERE e.rowid <= :position "
    "AND (EXISTS (SELECT 1 FROM audit_chain AS c WHERE c.event_id = e.id) "
    "OR EXISTS (SELECT 1 FROM audit_unsealed AS u WHERE u.org_id = e.org_id "
    "AND u.event_id = e.id)) "
    "ORDER BY e.rowid DESC LIMIT 1"
)
_MOVE_MARK = text(
    "UPDATE audit_seal_mark SET event_rowid = :to_position, event_id = :to_event "
    "WHERE event_rowid = :position AND event_id IS :event_id"
)


async def seal_mark(session: AsyncSession) -> Row[Any]:
    """SQLite: the mark (``position``, ``event_id`` as stored), whether that event is still
    at that rowid (``held``), the highest rowid of the events (``top``), and whether any
    event is still listed in ``audit_unsealed`` (``listed``: written before 0055, and
    still there)."""
    return (await session.execute(_READ_MARK)).one()


async def an_org_listed(
    session: AsyncSession, skip: Collection[uuid.UUID] = ()
) -> uuid.UUID | None:
    """SQLite: an org with an event still listed in ``audit_unsealed`` (``seal_mark``'s
    ``listed``), but those of ``skip``, or None; a row whose event is gone (deleted with
    foreign keys off) is passed over."""
    waiting = _UNSEALED.join(_EVENTS, _EVENTS.c.id == _UNSEALED.c.event_id)
    statement = select(_UNSEALED.c.org_id).select_from(waiting)
    statement = statement.where(*not_among(_UNSEALED.c.org_id, skip)).limit(1)
    return cast("uuid.UUID | None", (await session.execute(statement)).scalar())


async def last_chained_at_or_below(session: AsyncSession, position: int) -> tuple[int, Any]:
    """SQLite: the highest rowid at or below ``position`` of an event in a chain (or
    listed, kept back), and its id, or (0, None): where the mark belongs when its event
    is no longer at its rowid. Walks down from ``position`` over the rows that took
    rowids again (unchained)."""
    row = (await session.execute(_LAST_CHAINED, {"position": position})).first()
    return (int(row.position), row.event_id) if row is not None else (0, None)


# The columns an event's hash covers, in ``service._canonical``'s order, then its id as
# stored and its rowid, read without SQLAlchemy's statement or result layers
# (``chain_forms``).
_EVENTS_AFTER = (
    "SELECT id, org_id, request_id, actor_id, type, data, created_at, id, rowid "
    "FROM audit_events WHERE rowid > ? ORDER BY rowid LIMIT ?"
)


def chain_forms(rows: Sequence[Sequence[Any]]) -> list[tuple[Any, ...]]:
    """Driver rows that start with the hashed columns as stored (``_hashed``'s order) as
    ``_hashed`` reads them: UUIDs and the time as the chain's text (``uuid_text``,
    ``chain_time_text``), ``data`` decoded; the columns after those passed on as read.
    The sealer and the re-check read their events so, where building a result row and
    running five type processors an event cost each more than hashing the event does."""
    return [
        (
            uuid_text(row[0]),
            uuid_text(row[1]),
            uuid_text(row[2]),
            uuid_text(row[3]),
            row[4],
            None if row[5] is None else orjson.loads(row[5]),
            chain_time_text(row[6]),
            *row[7:],
        )
        for row in rows
    ]


async def events_after(session: AsyncSession, position: int, limit: int) -> list[tuple[Any, ...]]:
    """SQLite: the events past rowid ``position``, in rowid order (commit order): the hashed
    columns as ``_hashed`` reads them, the id as stored and the rowid (``EVENT_ID``,
    ``POSITION``). A range read of the table's own b-tree: no index."""
    connection = await session.connection()
    result = await connection.exec_driver_sql(_EVENTS_AFTER, (position, limit))
    return chain_forms(cast("list[tuple[Any, ...]]", result.all()))


async def move_mark(session: AsyncSession, read: tuple[int, Any], to: tuple[int, Any]) -> bool:
    """SQLite: move the mark from ``read`` (rowid, event id) to ``to``, only if it is still
    at ``read``; whether it moved (not: another sealer chained those events)."""
    result = await session.execute(
        _MOVE_MARK,
        {"position": read[0], "event_id": read[1], "to_position": to[0], "to_event": to[1]},
    )
    return bool(getattr(result, "rowcount", 0))


async def update_head(session: AsyncSession, org_id: uuid.UUID, **values: Any) -> None:
    await session.execute(update(_HEADS).where(_HEADS.c.org_id == org_id).values(**values))


async def add_checkpoint(session: AsyncSession, row: dict[str, Any]) -> None:
    await session.execute(insert(_CHECKPOINTS), row)


async def orgs_verified_behind(session: AsyncSession, limit: int) -> Sequence[uuid.UUID]:
    """Orgs whose chain has sealed events the verifier has not re-checked yet (the heads
    are one row an org)."""
    rows = await session.execute(
        select(_HEADS.c.org_id)
        .where(_HEADS.c.verified_seq < _HEADS.c.seq, _HEADS.c.verify_failed_seq.is_(None))
        .limit(limit)
    )
    return [row.org_id for row in rows]


async def set_verified(
    session: AsyncSession, org_id: uuid.UUID, *, from_seq: int, **values: Any
) -> bool:
    """Move the verified mark from ``from_seq``, only if it is still there."""
    result = await session.execute(
        update(_HEADS)
        .where(_HEADS.c.org_id == org_id, _HEADS.c.verified_seq == from_seq)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    return bool(getattr(result, "rowcount", 0))


async def head(session: AsyncSession, org_id: uuid.UUID) -> Row[Any] | None:
    return (await session.execute(select(_HEADS).where(_HEADS.c.org_id == org_id))).first()


async def head_and_last_pruned(session: AsyncSession, org_id: uuid.UUID) -> Row[Any] | None:
    """The org's head (``seq``, ``verified_seq``, ``verified_hash``, ``verify_failed_seq``)
    and its last ``pruned`` checkpoint's ``pruned_seq`` and ``pruned_hash`` (None when
    none), in one statement: the re-check reads both before each page."""
    pruned = (
        select(_CHECKPOINTS.c.seq.label("pruned_seq"), _CHECKPOINTS.c.hash.label("pruned_hash"))
        .where(_CHECKPOINTS.c.org_id == org_id, _CHECKPOINTS.c.kind == "pruned")
        .order_by(_CHECKPOINTS.c.seq.desc())
        .limit(1)
        .subquery()
    )
    statement = (
        select(
            _HEADS.c.seq,
            _HEADS.c.verified_seq,
            _HEADS.c.verified_hash,
            _HEADS.c.verify_failed_seq,
            pruned.c.pruned_seq,
            pruned.c.pruned_hash,
        )
        .select_from(_HEADS.outerjoin(pruned, true()))
        .where(_HEADS.c.org_id == org_id)
    )
    return cast("Row[Any] | None", (await session.execute(statement)).first())


async def events_page(
    session: AsyncSession, org_id: uuid.UUID, after_seq: int, limit: int
) -> Sequence[Row[Any]]:
    """Sealed events after ``after_seq``, by seq: the hashed columns and the chain's
    (``audit_chain``'s key, then each event by its own)."""
    chained = [_CHAIN.c.seq, _CHAIN.c.prev_hash, _CHAIN.c.hash]
    return (
        await session.execute(
            select(*_hashed(), *chained)
            .select_from(_CHAINED)
            .where(_CHAIN.c.org_id == org_id, _CHAIN.c.seq > after_seq)
            .order_by(_CHAIN.c.seq)
            .limit(limit)
        )
    ).all()


# A sealed event's hashed columns, then its link's seq, prev_hash and hash (``LINK_SEQ``,
# ``LINK_PREV``, ``LINK_HASH``), by seq: ``events_page``'s read through the driver.
# PostgreSQL's ``data`` read as its text: a connection's codec may decode JSON already
# (``storage.asyncpg_connections``), and ``chain_forms`` decodes it once, either way.
_CHAINED_AFTER = (
    "SELECT e.id, e.org_id, e.request_id, e.actor_id, e.type, e.data{}, e.created_at, "
    "c.seq, c.prev_hash, c.hash FROM audit_chain AS c JOIN audit_events AS e "
    "ON e.id = c.event_id WHERE c.org_id = {} AND c.seq > {} ORDER BY c.seq LIMIT {}"
)
_CHAINED_AFTER_SQLITE = _CHAINED_AFTER.format("", "?", "?", "?")
_CHAINED_AFTER_POSTGRES = _CHAINED_AFTER.format("::text", "$1", "$2", "$3")
LINK_SEQ = 7
LINK_PREV = 8
LINK_HASH = 9


async def links_after(
    session: AsyncSession, org_id: uuid.UUID, after_seq: int, limit: int
) -> list[tuple[Any, ...]]:
    """The re-check's page: what ``events_page`` reads, as tuples (``chain_forms``)."""
    connection = await session.connection()
    org: str | uuid.UUID = org_id
    statement = _CHAINED_AFTER_POSTGRES
    if connection.dialect.name == "sqlite":
        statement, org = _CHAINED_AFTER_SQLITE, org_id.hex  # as ``Uuid`` stores it
    result = await connection.exec_driver_sql(statement, (org, after_seq, limit))
    return chain_forms(cast("list[tuple[Any, ...]]", result.all()))


async def checkpoints_between(
    session: AsyncSession, org_id: uuid.UUID, after_seq: int, up_to: int | None
) -> Sequence[Row[Any]]:
    statement = select(_CHECKPOINTS).where(
        _CHECKPOINTS.c.org_id == org_id, _CHECKPOINTS.c.seq > after_seq
    )
    if up_to is not None:
        statement = statement.where(_CHECKPOINTS.c.seq <= up_to)
    return (
        await session.execute(statement.order_by(_CHECKPOINTS.c.seq, _CHECKPOINTS.c.created_at))
    ).all()


async def last_pruned(session: AsyncSession, org_id: uuid.UUID) -> Row[Any] | None:
    return (
        await session.execute(
            select(_CHECKPOINTS)
            .where(_CHECKPOINTS.c.org_id == org_id, _CHECKPOINTS.c.kind == "pruned")
            .order_by(_CHECKPOINTS.c.seq.desc())
            .limit(1)
        )
    ).first()


async def last_event_of(
    session: AsyncSession, org_id: uuid.UUID, request_ids: Sequence[uuid.UUID]
) -> Any:
    """The sealed event with the highest seq among these requests' (seq and hash)."""
    return (
        await session.execute(
            select(_CHAIN.c.seq, _CHAIN.c.hash)
            .select_from(_CHAINED)
            .where(_EVENTS.c.org_id == org_id, _EVENTS.c.request_id.in_(request_ids))
            .order_by(_CHAIN.c.seq.desc())
            .limit(1)
        )
    ).first()
