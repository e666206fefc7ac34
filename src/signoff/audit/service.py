"""Sealing events into their org's chain, signing checkpoints, and the export's records.

Events are written by their use cases as before. On PostgreSQL a trigger lists each in
``audit_unsealed`` (migration 0044) and ``seal_org`` chains an org's in their written
order (``created_at``, ``id``); on SQLite nothing is listed (migration 0055) and
``seal_in_commit_order`` chains the events past a mark on their rowid, in commit order.
Either numbers and hashes them and appends them to ``audit_chain``, under the org's head
row lock, in one transaction (an org one of whose events cannot be sealed is held back,
``Unsealable``, and the others sealed):
concurrent sealers (two workers, an export, a purge) wait on each other, so the chain
never forks or skips, and a killed sealer commits nothing. No event row is rewritten.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Collection, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import Row
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.audit import repository
from signoff.audit.chain import (
    CHECKPOINT_TYPE,
    chain_timestamp,
    checkpoint_payload,
    event_hash,
)
from signoff.common.ids import new_id
from signoff.common.poison import PoisonedRows
from signoff.storage import savepoint

# Sealing holds the org's head lock (on SQLite, the one writer) while it reads and hashes
# a batch: a smaller batch keeps that pause short for the requests waiting to write. Under
# load the sealer takes bigger ones (``sealing.batch_size``), up to ``MAX_SEAL_BATCH``.
SEAL_BATCH = 200
MAX_SEAL_BATCH = 400
EXPORT_PAGE = 500
# The re-check hashes a page (``EXPORT_PAGE``) a read, and stores its mark once this
# many events held (or at the end, or at a failure), not once a page.
VERIFY_MARK_EVERY = 5000

Signer = Callable[[bytes, str], str]


@dataclass(frozen=True)
class CheckpointPolicy:
    every_events: int
    every_seconds: float


@dataclass(frozen=True)
class Sealed:
    org_id: uuid.UUID
    events: int
    head_seq: int
    checkpointed: bool


SEAL_JOB = "audit_seal"


class Unsealable(Exception):
    """An org's event could not be sealed (its data cannot be canonicalised, or sealing
    the org failed otherwise): the org is held back (parked, ``common.poison``) with its
    events unsealed, while the other orgs' chains go on, and tried again later. The text
    names the org, the event when known, and the error's kind, never the error's own
    text: that may quote the event's data or a statement's values."""

    def __init__(self, org_id: uuid.UUID, event_id: object, kind: str) -> None:
        event = "an event" if event_id is None else f"event {event_id}"
        super().__init__(f"{event} of org {org_id} could not be sealed ({kind})")


def held_back(org_id: uuid.UUID, error: Exception) -> Unsealable:
    """``error`` as what is logged of it: an ``Unsealable``, with the error's frames."""
    if isinstance(error, Unsealable):
        return error
    return Unsealable(org_id, None, type(error).__name__).with_traceback(error.__traceback__)


class StaleBatch(Exception):
    """Some of the events read for a batch were chained by another sealer meanwhile (or,
    on SQLite, the sealed mark moved): the batch's transaction is rolled back and what
    waits is read again."""


async def seal_org(
    session: AsyncSession,
    dialect: str,
    org_id: uuid.UUID,
    sign: Signer | None,
    policy: CheckpointPolicy,
    now: datetime,
    *,
    force_checkpoint: bool = False,
    waiting: Sequence[Any] | None = None,
) -> Sealed:
    """Seal the org's events listed in ``audit_unsealed`` (PostgreSQL; on SQLite those
    written before migration 0055): ``waiting`` (their ids, in the chain's order, read
    before this transaction by ``repository.waiting_ids``), or up to ``SEAL_BATCH`` of
    them read here, then sign the head if the policy says it is time (or
    ``force_checkpoint``). Raises ``StaleBatch`` when some of ``waiting`` are no longer
    waiting (another sealer chained them): nothing is then chained."""
    head = await repository.lock_head(session, dialect, org_id)
    if waiting is None:
        rows = await repository.unsealed_events(session, org_id, SEAL_BATCH)
        ids = [row.event_id for row in rows]
    else:
        ids = list(waiting)
    if ids and await repository.take_unsealed(session, org_id, ids) != len(ids):
        raise StaleBatch(org_id)
    if waiting is not None:
        rows = await _in_order(session, ids)
    return await _append(session, dialect, org_id, head, rows, sign, policy, now, force_checkpoint)


@dataclass(frozen=True)
class Batch:
    """What one ``seal_in_commit_order`` transaction chained, and whether more may wait."""

    events: int
    more: bool


# Orgs and their events of a batch (those of one org in order).
Held = list[tuple[uuid.UUID, list[tuple[Any, ...]]]]


def batch_size(waiting: int) -> int:
    """Events sealed a transaction when ``waiting`` wait: ``SEAL_BATCH`` when few wait, an
    eighth of them under load (fewer transactions, locks and head updates a wake-up),
    never more than ``MAX_SEAL_BATCH`` (the writers' pause stays short)."""
    return min(MAX_SEAL_BATCH, max(SEAL_BATCH, waiting // 8))


async def seal_in_commit_order(
    session: AsyncSession,
    dialect: str,
    sign: Signer | None,
    policy: CheckpointPolicy,
    now: datetime,
    *,
    poisoned: PoisonedRows,
    force_checkpoint: bool = False,
    read: tuple[int, Any] | None = None,
) -> Batch:
    """SQLite: chain the events past the sealed mark, every org's, in rowid order (commit
    order under one writer), each org's after its head, and move the mark past them in
    this transaction, from where it was read (``read``, or here): a compare-and-set, so
    two sealers never chain an event twice (``StaleBatch`` if the mark moved). Events
    listed in ``audit_unsealed`` (written before migration 0055, or kept back) go first,
    in the list's order, before any event past the mark.

    An org one of whose events cannot be sealed is parked in ``poisoned`` (``SEAL_JOB``)
    and its events in the batch kept back: listed, so that the mark still moves past
    them and the other orgs' chains go on. While it has events listed its later ones are
    listed behind them (its chain keeps their order); they are chained from the list
    once it is tried again and its events can be sealed. The caller keeps ``poisoned``
    across its batches: a parked org is not tried again within them."""
    mark = await repository.seal_mark(session)
    parked = poisoned.parked(SEAL_JOB)
    if mark.listed:
        org_id = await repository.an_org_listed(session, parked)
        if org_id is not None:
            try:
                async with savepoint(session):
                    drained = await seal_org(
                        session,
                        dialect,
                        org_id,
                        sign,
                        policy,
                        now,
                        force_checkpoint=force_checkpoint,
                    )
            except Exception as error:  # the org's listed events stay listed
                poisoned.park(SEAL_JOB, org_id, held_back(org_id, error))
                return Batch(0, True)
            return Batch(drained.events, True)
    stored = (int(mark.position), mark.event_id)
    start = stored if mark.held else await repository.last_chained_at_or_below(session, stored[0])
    limit = batch_size(int(mark.top or 0) - start[0])
    rows = await repository.events_after(session, start[0], limit)
    last = rows[-1] if rows else None
    end = (int(last[repository.POSITION]), last[repository.EVENT_ID]) if last else start
    origin = stored if read is None else read
    if end != origin and not await repository.move_mark(session, origin, end):
        raise StaleBatch(None)
    orgs: dict[str, list[tuple[Any, ...]]] = {}
    for row in rows:
        orgs.setdefault(row[1], []).append(row)
    batch = [(uuid.UUID(org_text), events) for org_text, events in orgs.items()]
    # Only a parked org can have events listed here: the listed ones of the others are
    # chained above first.
    behind = [(org_id, events) for org_id, events in batch if mark.listed and org_id in parked]
    if behind:
        batch = [(org_id, events) for org_id, events in batch if org_id not in parked]

    async def chain(some: Held) -> None:
        for org_id, events in some:
            head = await repository.lock_head(session, dialect, org_id)
            await _append(
                session, dialect, org_id, head, events, sign, policy, now, force_checkpoint
            )

    behind += await _seal_each(session, batch, chain, poisoned)
    for org_id, events in behind:
        ids = [row[repository.EVENT_ID] for row in events]
        await repository.list_unsealed(session, dialect, org_id, ids)
    kept = sum(len(events) for _, events in behind)
    return Batch(len(rows) - kept, end[0] < int(mark.top or 0))


async def _seal_each(
    session: AsyncSession,
    orgs: Held,
    chain: Callable[[Held], Awaitable[None]],
    poisoned: PoisonedRows,
) -> Held:
    """``chain`` the orgs' events, all in one savepoint; should that fail, each org's in
    a savepoint of its own, and an org that fails alone is parked. The orgs left
    unchained, with their events."""
    if not orgs:
        return []
    with contextlib.suppress(Exception):  # undone: each org alone, so the others are chained
        async with savepoint(session):
            await chain(orgs)
        return []
    failed = []
    for org in orgs:
        try:
            async with savepoint(session):
                await chain([org])
        except Exception as error:  # one org's bad event must not hold every other chain
            poisoned.park(SEAL_JOB, org[0], held_back(org[0], error))
            failed.append(org)
    return failed


async def anything_to_seal(session: AsyncSession, parked: Collection[uuid.UUID] = ()) -> bool:
    """SQLite: whether ``seal_in_commit_order`` has anything to do (an event past the
    mark, one still listed of an org not ``parked``, or a mark whose event is no longer
    at its rowid)."""
    mark = await repository.seal_mark(session)
    if not mark.held or int(mark.top or 0) > int(mark.position):
        return True
    return bool(mark.listed) and await repository.an_org_listed(session, parked) is not None


async def _append(
    session: AsyncSession,
    dialect: str,
    org_id: uuid.UUID,
    head: Row[Any],
    rows: Sequence[Sequence[Any]],
    sign: Signer | None,
    policy: CheckpointPolicy,
    now: datetime,
    force_checkpoint: bool,
) -> Sealed:
    """Chain ``rows`` (the org's next events, in order) after its locked ``head``, then
    sign the head if the policy says it is time (or ``force_checkpoint``)."""
    seq, prev = int(head.seq), str(head.hash)
    links = []
    for row in rows:
        seq += 1
        try:
            digest = event_hash(_canonical(row, seq, prev))
        except Exception as error:  # its data: no part of it goes to the log
            raise Unsealable(org_id, row[0], type(error).__name__) from None
        links.append((seq, row[repository.EVENT_ID], prev, digest))
        prev = digest
    await repository.append_links(session, dialect, org_id, links)
    values: dict[str, Any] = {"seq": seq, "hash": prev}
    due = seq > head.checkpoint_seq and (
        force_checkpoint
        or seq - head.checkpoint_seq >= policy.every_events
        or head.checkpoint_at is None
        or (now - head.checkpoint_at).total_seconds() >= policy.every_seconds
    )
    if due and sign is not None:
        await _add_checkpoint(session, org_id, "head", seq, prev, sign, now)
        values |= {"checkpoint_seq": seq, "checkpoint_at": now}
    if links or "checkpoint_seq" in values:
        await repository.update_head(session, org_id, **values)
    return Sealed(org_id, len(links), seq, "checkpoint_seq" in values)


async def _in_order(session: AsyncSession, ids: list[Any]) -> list[Row[Any]]:
    """The events of ``ids`` (all still there: they were waiting), in that order."""
    if not ids:
        return []
    by_id = {row.event_id: row for row in await repository.events_by_id(session, ids)}
    return [by_id[event_id] for event_id in ids]


async def _add_checkpoint(
    session: AsyncSession,
    org_id: uuid.UUID,
    kind: str,
    seq: int,
    head_hash: str,
    sign: Signer,
    now: datetime,
) -> None:
    token = sign(checkpoint_payload(org_id, kind, seq, head_hash, now), CHECKPOINT_TYPE)
    await repository.add_checkpoint(
        session,
        {
            "id": new_id(),
            "org_id": org_id,
            "kind": kind,
            "seq": seq,
            "hash": head_hash,
            "jws": token,
            "created_at": now,
        },
    )


def _canonical(row: Sequence[Any], seq: int, prev: str) -> dict[str, Any]:
    """``chain.canonical_event`` of a row that starts with ``repository._hashed``'s
    columns (UUIDs and the time already the chain's text), built from the tuple itself:
    the sealer, the re-check and the export make one an event."""
    fields = cast("tuple[Any, ...]", row)
    data = fields[5]
    return {
        "seq": seq,
        "id": fields[0],
        "org_id": fields[1],
        "request_id": fields[2],
        "type": fields[4],
        "actor_id": fields[3],
        "data": data if data is not None else {},
        "created_at": fields[6],
        "prev_hash": prev,
    }


# ---- export ----


def event_record(row: Row[Any]) -> dict[str, Any]:
    """An event as exported: its canonical form (without prev_hash's place changing)
    plus ``hash``; ``kind`` tells it from a checkpoint."""
    record = _canonical(row, int(row.seq), str(row.prev_hash))
    return {"kind": "event", **record, "hash": row.hash}


def checkpoint_record(row: Row[Any]) -> dict[str, Any]:
    return {
        "kind": "checkpoint",
        "checkpoint": row.kind,
        "org_id": str(row.org_id),
        "seq": int(row.seq),
        "hash": row.hash,
        "created_at": chain_timestamp(row.created_at),
        "jws": row.jws,
    }


async def export_records(
    reading: Callable[[], AbstractAsyncContextManager[AsyncSession]],
    org_id: uuid.UUID,
    since_seq: int,
) -> AsyncIterator[dict[str, Any]]:
    """The org's sealed events from ``since_seq`` by seq, each signed checkpoint right
    after the event it signs; one short read per page, so memory stays flat however
    long the chain. Starts with the last ``pruned`` checkpoint when the purge removed
    the events before ``since_seq`` (verification begins there)."""
    after = max(since_seq, 1) - 1
    async with reading() as session:
        pruned = await repository.last_pruned(session, org_id)
    if pruned is not None and pruned.seq >= after:
        yield checkpoint_record(pruned)
        after = int(pruned.seq)
    while True:
        async with reading() as session:
            page = await repository.events_page(session, org_id, after, EXPORT_PAGE)
            last = int(page[-1].seq) if page else None
            marks = await repository.checkpoints_between(session, org_id, after, last)
        if not page:
            for mark in marks:
                if mark.kind != "pruned":
                    yield checkpoint_record(mark)
            return
        by_seq: dict[int, list[Row[Any]]] = {}
        for mark in marks:
            if mark.kind != "pruned":
                by_seq.setdefault(int(mark.seq), []).append(mark)
        for row in page:
            yield event_record(row)
            for mark in by_seq.get(int(row.seq), ()):
                yield checkpoint_record(mark)
        after = int(page[-1].seq)


def cloudevent(record: dict[str, Any], source: str) -> dict[str, Any]:
    """A record as a CloudEvents 1.0 JSON event; its data is the record unchanged."""
    is_event = record["kind"] == "event"
    return {
        "specversion": "1.0",
        "id": record["id"] if is_event else f"checkpoint-{record['org_id']}-{record['seq']}",
        "source": source,
        "type": f"dev.signoff.audit.{record['type']}"
        if is_event
        else "dev.signoff.audit.checkpoint",
        "subject": f"{record['org_id']}/{record['seq']}",
        "time": record["created_at"],
        "datacontenttype": "application/json",
        "data": record,
    }


# ---- retention ----


async def hold_for_purge(session: AsyncSession, dialect: str, org_id: uuid.UUID) -> None:
    """Before a purge that signs no checkpoint deletes some of the org's events (in this
    transaction): lock the org's head, as a sealer does before it takes events off the
    waiting list (``prune_for_purge`` locks it by sealing). Without it, a sealer chaining
    one of those events would deadlock with the purge: the purge's delete waits on the
    event's waiting-list row the sealer took, the sealer's link on the deleted event.
    SQLite's write transaction is that lock already."""
    if dialect != "sqlite":
        await repository.lock_head(session, dialect, org_id)


async def prune_for_purge(
    session: AsyncSession,
    dialect: str,
    org_id: uuid.UUID,
    request_ids: list[uuid.UUID],
    sign: Signer,
    policy: CheckpointPolicy,
    now: datetime,
) -> int | None:
    """Before a purge deletes ``request_ids`` (in this transaction): seal the org's
    waiting events, then sign "pruned up to seq N, head hash H" where N is the last
    event of those requests. Exports start there (docs/audit.md, "Retention"), so the
    holes the purge makes lie before the chain's verified start. The seq pruned to, or
    None when those requests have no sealed event past the last pruning."""
    if dialect == "sqlite":
        poisoned = PoisonedRows()
        while (
            await seal_in_commit_order(session, dialect, None, policy, now, poisoned=poisoned)
        ).more:
            pass
    else:
        while (await seal_org(session, dialect, org_id, None, policy, now)).events == SEAL_BATCH:
            pass
    last = await repository.last_event_of(session, org_id, request_ids)
    pruned = await repository.last_pruned(session, org_id)
    if last is None or (pruned is not None and pruned.seq >= last.seq):
        return None
    await _add_checkpoint(session, org_id, "pruned", int(last.seq), str(last.hash), sign, now)
    return int(last.seq)


# ---- the worker's own check ----


@dataclass(frozen=True)
class Verified:
    """How far a stored chain held when re-hashed: from ``from_seq`` up to ``seq`` (whose
    hash is ``hash``), and the first seq that did not hold, if any."""

    from_seq: int
    seq: int
    hash: str
    failed_seq: int | None


async def orgs_to_verify(session: AsyncSession, limit: int) -> Sequence[uuid.UUID]:
    return await repository.orgs_verified_behind(session, limit)


async def check_stored(
    session: AsyncSession,
    org_id: uuid.UUID,
    limit: int = EXPORT_PAGE,
    *,
    after: Verified | None = None,
) -> Verified | None:
    """Recompute up to ``limit`` of the org's stored events after the last verified one
    (or after ``after``, a page checked but not stored yet, whose ``from_seq`` is kept),
    from its hash, in a read: the writers are not held while it hashes. None when there
    is nothing to check (no chain yet, nothing new, or a failure already recorded)."""
    head = await repository.head_and_last_pruned(session, org_id)
    if head is None or head.verify_failed_seq is not None:
        return None
    if after is None:
        start = int(head.verified_seq)
        seq, prev = start, str(head.verified_hash)
    else:
        start, seq, prev = after.from_seq, after.seq, after.hash
    if seq >= head.seq:
        return None
    if head.pruned_seq is not None and head.pruned_seq > seq:
        seq, prev = int(head.pruned_seq), str(head.pruned_hash)
    failed = None
    for row in await repository.links_after(session, org_id, seq, limit):
        digest = event_hash(_canonical(row, seq + 1, prev))
        if (
            row[repository.LINK_SEQ] != seq + 1
            or row[repository.LINK_PREV] != prev
            or row[repository.LINK_HASH] != digest
        ):
            failed = seq + 1
            break
        seq, prev = seq + 1, digest
    return Verified(start, seq, prev, failed)


async def record_verified(
    session: AsyncSession, org_id: uuid.UUID, verified: Verified, now: datetime
) -> bool:
    """Store how far the chain held, unless another verifier moved the mark meanwhile
    (then its answer stands). Whether it was stored."""
    return await repository.set_verified(
        session,
        org_id,
        from_seq=verified.from_seq,
        verified_seq=verified.seq,
        verified_hash=verified.hash,
        verified_at=now,
        verify_failed_seq=verified.failed_seq,
    )
