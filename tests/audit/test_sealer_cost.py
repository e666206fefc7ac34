"""What sealing and re-checking a burst of events costs the database, in statements, on
both databases (decisions 0039, 0054): the waiting list is read once a wake-up and
taken off in one statement a batch (SQLite: the events past the mark, decision 0049);
the re-check hashes a page a read and stores its mark once for the burst."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, cast

import httpx
import pytest
from bench.seal_cost import executions
from sqlalchemy import Table, insert, select, text

from signoff.audit import chain, repository, service
from signoff.audit.sealing import checkpoint_policy, seal_once, seal_org_now, verify_once
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import AuditChainHead, AuditEvent
from tests.audit.support import event_rows
from tests.audit.test_chain import _export, _verify, chain_seqs, requests_only
from tests.conftest import create_approval, create_org

EVENTS = cast(Table, AuditEvent.__table__)
HEADS = cast(Table, AuditChainHead.__table__)
BURST = 1200


async def _burst(ctx: AppContext, client: httpx.AsyncClient, burst: int = BURST) -> uuid.UUID:
    """An org whose chain is sealed to its first request, then ``burst`` events waiting."""
    org = await requests_only(ctx, await create_org(ctx, "Burst", members=1))
    request = await create_approval(client, org.admin, title="Busy")
    org_id = uuid.UUID(org.id)
    await seal_org_now(ctx, org_id, checkpoint=False)
    now = utcnow()
    rows = _comments(org_id, request["id"], [now + timedelta(microseconds=n) for n in range(burst)])
    async with ctx.db.write_transaction() as session:
        await session.execute(insert(EVENTS), rows)
    return org_id


def _comments(org_id: uuid.UUID, request_id: str, times: list[datetime]) -> list[dict[str, Any]]:
    """Event rows of the request, one at each of ``times``, as a busy request's comments."""
    return event_rows(
        org_id,
        times,
        request_id=uuid.UUID(request_id),
        type="comment.created",
        data=lambda n: {"n": n, "text": f"comment {n}"},
    )


@pytest.mark.parametrize("burst", [BURST, 2 * BURST + 150])
async def test_a_burst_is_sealed_in_a_few_statements_a_batch_and_still_verifies(
    api_only: httpx.AsyncClient, ctx: AppContext, backend: str, burst: int
) -> None:
    """A batch's links go in one statement (PostgreSQL) or one for each power of two in
    the batch's size (SQLite), not one a link; with the batch's other statements, a few a
    batch whatever its size. ``api_only``: no background loop of the app (the expiry
    sweep, its own sealer) runs a statement among those counted."""
    org_id = await _burst(ctx, api_only, burst)
    with executions(ctx) as seen:
        assert await seal_once(ctx, verify=False) == burst
    batches = len([s for s in seen if s.startswith("UPDATE audit_chain_heads")])
    assert batches == _batches(burst, backend)
    links = [s for s in seen if s.startswith("INSERT INTO audit_chain ")]
    signed = [s for s in seen if s.startswith("INSERT INTO audit_checkpoints")]
    if backend == "sqlite":
        # A batch: its events past the mark, the mark moved, the head locked and
        # moved, the savepoint that keeps one org's failure from the others (two), the
        # next batch's mark read (and the wake-up's first); its links in at most as
        # many statements as a batch's size has binary digits.
        assert len(seen) - len(links) - len(signed) == 7 * batches + 1
        assert batches <= len(links) <= batches * service.MAX_SEAL_BATCH.bit_length()
    else:
        # The wake-up's orgs and ids; a batch: its ids off the list, its events read, the
        # head locked and moved, its links.
        assert len(seen) - len(links) - len(signed) == 4 * batches + 2
        assert len(links) == batches
    assert await chain_seqs(ctx, org_id) == list(range(1, burst + 2))
    await seal_org_now(ctx, org_id, checkpoint=True)
    org = type("O", (), {"id": str(org_id)})
    result = await _verify(ctx, api_only, cast(Any, org))
    assert (result.ok, result.last_seq) == (True, burst + 1), result.problem


def _batches(burst: int, backend: str) -> int:
    """Batches for a burst: PostgreSQL sizes them once a wake-up, SQLite each by what is
    left past the mark."""
    if backend == "postgres":
        return -(-burst // service.batch_size(burst))
    batches = 0
    while burst > 0:
        burst -= service.batch_size(burst)
        batches += 1
    return batches


async def test_waiting_ids_go_back_to_the_database_as_they_were_read(
    api_only: httpx.AsyncClient, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sealer binds the waiting events' ids as it read them (taking them off the
    list, reading the events, linking them): no ``uuid.UUID`` made for an event, and
    the chain still verifies."""
    org_id = await _burst(ctx, api_only)
    made = 0
    plain_init = uuid.UUID.__init__

    def counted(self: uuid.UUID, *args: Any, **kwargs: Any) -> None:
        nonlocal made
        made += 1
        plain_init(self, *args, **kwargs)

    monkeypatch.setattr(uuid.UUID, "__init__", counted)
    assert await seal_org_now(ctx, org_id, checkpoint=False) == BURST
    monkeypatch.undo()
    assert made < 20, made
    async with ctx.db.read_session() as session:
        page = await service.check_stored(session, org_id, BURST + 1)
    assert page is not None and (page.seq, page.failed_seq) == (BURST + 1, None)


async def test_the_re_check_stores_its_mark_once_for_a_burst(
    api_only: httpx.AsyncClient, ctx: AppContext
) -> None:
    org_id = await _burst(ctx, api_only)
    await seal_once(ctx, verify=False)
    with executions(ctx) as seen:
        assert await verify_once(ctx) >= BURST + 1
    marks = [s for s in seen if s.startswith("UPDATE audit_chain_heads")]
    assert len(marks) == 1
    # Hashed a page a read (the event loop given back between them), not all at once.
    pages = [s for s in seen if s.startswith("SELECT") and "JOIN audit_events" in s]
    assert len(pages) == -(-(BURST + 1) // service.EXPORT_PAGE)
    # Before each page, and once more to find nothing left: the head and the last pruned
    # checkpoint in one read; and the orgs behind once.
    reads = [s for s in seen if s.startswith("SELECT")]
    assert len(reads) == 1 + (len(pages) + 1) + len(pages), reads
    async with ctx.db.read_session() as session:
        head = (await session.execute(select(HEADS).where(HEADS.c.org_id == org_id))).one()
    assert (head.verified_seq, head.verify_failed_seq) == (BURST + 1, None)
    assert head.verified_hash == head.hash != chain.GENESIS_HASH


async def test_the_re_check_converts_each_stored_value_once_and_builds_no_result_rows(
    api_only: httpx.AsyncClient, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The re-check reads its pages as the sealer reads its batches (the driver's own
    statement, ``repository.chain_forms``): each event's four UUIDs and its time turned
    into the chain's text once, by no result processor, and the chain still holds."""
    await _burst(ctx, api_only)
    await seal_once(ctx, verify=False)
    calls: Counter[str] = Counter()

    def counting(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def counted(*args: Any) -> Any:
            calls[name] += 1
            return function(*args)

        return counted

    for name in ("uuid_text", "chain_time_text"):
        monkeypatch.setattr(repository, name, counting(name, getattr(repository, name)))
    for decorator in (repository._UuidText, repository._ChainTime):
        processor = counting("processor", decorator.process_result_value)
        monkeypatch.setattr(decorator, "process_result_value", processor)
    assert await verify_once(ctx) == BURST + 1
    monkeypatch.undo()
    events = BURST + 1
    assert dict(calls) == {"uuid_text": 4 * events, "chain_time_text": events}


async def test_a_batch_read_before_another_sealer_took_it_is_not_chained_twice(
    api_only: httpx.AsyncClient, ctx: AppContext, backend: str
) -> None:
    """The waiting list is read outside the sealing transaction: a batch another sealer
    chained meanwhile is refused whole (rolled back), and the chain keeps one link each.
    (SQLite: tests/audit/test_commit_order.py, the mark's compare-and-set.)"""
    if backend == "sqlite":
        pytest.skip("SQLite lists no waiting events (migration 0055)")
    org_id = await _burst(ctx, api_only)
    async with ctx.db.read_session() as session:
        stale = await repository.waiting_ids(session, org_id, 50)
    assert await seal_org_now(ctx, org_id, checkpoint=False) == BURST
    with pytest.raises(service.StaleBatch):
        async with ctx.db.write_transaction() as session:
            await service.seal_org(
                session, ctx.db.dialect, org_id, None, checkpoint_policy(ctx), utcnow(),
                waiting=stale,
            )  # fmt: skip
    assert await chain_seqs(ctx, org_id) == list(range(1, BURST + 2))
    assert await seal_org_now(ctx, org_id, checkpoint=False) == 0


async def test_times_read_as_text_hash_as_the_orm_reads_them(
    client: httpx.AsyncClient, ctx: AppContext, backend: str
) -> None:
    """The sealer reads ``created_at`` as the chain's text without a datetime in between
    (SQLite's stored text moved into place): each hash is still over ``chain_timestamp``
    of the time the ORM reads, for stored texts of every shape (a year before 1000, no
    fraction of a second, written by hand), and the chain verifies."""
    org = await requests_only(ctx, await create_org(ctx, "Times", members=1))
    request = await create_approval(client, org.admin, title="Timed")
    org_id = uuid.UUID(org.id)
    times = [
        utcnow(),
        utcnow().replace(microsecond=0),
        utcnow().replace(year=999, microsecond=5),
        utcnow().replace(year=1, month=1, day=1, hour=0, minute=0, second=0, microsecond=0),
    ]
    rows = _comments(org_id, request["id"], times)
    async with ctx.db.write_transaction() as session:
        await session.execute(insert(EVENTS), rows)
        if backend == "sqlite":  # a text without the fraction, as a hand-written row has
            await session.execute(
                text("UPDATE audit_events SET created_at = '2026-01-02 03:04:05' WHERE id = :id"),
                {"id": rows[1]["id"].hex},
            )
    async with ctx.db.read_session() as session:
        if backend == "sqlite":
            waiting = await repository.events_after(session, 0, 100)
        else:
            waiting = await repository.unsealed_events(session, org_id, 10)
    assert {type(row[6]) for row in waiting} == {str}  # created_at: no datetime made
    await seal_org_now(ctx, org_id, checkpoint=True)
    async with ctx.db.read_session() as session:
        stored = (
            await session.execute(select(AuditEvent).where(AuditEvent.org_id == org_id))
        ).scalars()
        expected = {event.id: chain.chain_timestamp(event.created_at) for event in stored}
    exported = [r for r in await _export(ctx, org.id) if r["kind"] == "event"]
    assert {uuid.UUID(r["id"]): r["created_at"] for r in exported} == expected
    if backend == "sqlite":
        assert expected[rows[1]["id"]] == "2026-01-02T03:04:05.000000Z"
        assert expected[rows[2]["id"]].startswith("999-")
    result = await _verify(ctx, client, org)
    assert (result.ok, result.last_seq) == (True, 5), result.problem
