"""Prepared queries (``storage/prepared/``): the hot path's reads and writes outside the ORM.

They must read and write exactly what the ORM does, on both databases, or a get would
answer differently from a list, and a create differently from a replay.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import pytest
from sqlalchemy import bindparam, insert, select

from signoff.approvals.json_answers import request_to_dict
from signoff.approvals.repository import ApprovalReads
from signoff.approvals.typed_rows import RequestRecord
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import ApprovalRequest, AuditEvent
from signoff.storage.prepared import PreparedQuery, entity_columns, execute_in
from tests.conftest import Org, create_approval


async def test_a_prepared_read_equals_the_orm_read(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    expires = (utcnow() + timedelta(hours=2)).isoformat()
    created = await create_approval(
        client,
        org.member,
        metadata={"ticket": "OPS-1", "nested": {"n": [1, 2.5, None, "ü"]}},
        expires_at=expires,
        action_type="deploy",
        source="ci",
        required_approvals=2,
        idempotency_key="key-1",
    )
    await client.patch(
        f"/api/v1/approvals/{created['id']}",
        json={"decision": "approve", "comment": "looks fine"},
        headers=org.admin.headers,
    )
    request_id, org_id = uuid.UUID(created["id"]), uuid.UUID(org.id)
    now = utcnow()

    prepared = await ApprovalReads(ctx.db.queries).get(org_id, request_id)
    async with ctx.reading() as uow:
        # The ORM's own read, apart from every prepared statement.
        entity = await uow.session.get(ApprovalRequest, request_id)
        assert entity is not None
        votes = await uow.approvals.list_votes(request_id)

    assert prepared is not None
    for key in prepared._fields:
        assert getattr(prepared, key) == getattr(entity, key), key
    assert isinstance(prepared.id, uuid.UUID) and prepared.created_at.tzinfo is not None
    orm_record = RequestRecord(*(getattr(entity, name) for name in RequestRecord._fields))
    assert request_to_dict(prepared, now) == request_to_dict(orm_record, now)
    prepared_votes = await ApprovalReads(ctx.db.queries).list_votes(request_id)
    assert [(v.id, v.user_id, v.decision, v.comment) for v in prepared_votes] == [
        (v.id, v.user_id, v.decision, v.comment) for v in votes
    ]


async def test_a_prepared_read_is_scoped_by_its_parameters(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    created = await create_approval(client, org.member)
    reads = ApprovalReads(ctx.db.queries)
    request_id = uuid.UUID(created["id"])
    assert await reads.get(uuid.UUID(other_org.id), request_id) is None
    assert await reads.get(uuid.UUID(org.id), uuid.uuid4()) is None


async def test_a_prepared_read_sees_a_commit_at_once(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    request_id, org_id = uuid.UUID(created["id"]), uuid.UUID(org.id)
    reads = ApprovalReads(ctx.db.queries)
    before = await reads.get(org_id, request_id)
    assert before is not None and before.status == "pending"
    response = await client.delete(f"/api/v1/approvals/{request_id}", headers=org.member.headers)
    assert response.status_code == 200
    after = await reads.get(org_id, request_id)
    assert after is not None and after.status == "cancelled"


async def test_a_prepared_write_commits_or_rolls_back_with_its_transaction(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    event = PreparedQuery(
        insert(AuditEvent),
        column_keys=("id", "org_id", "request_id", "type", "actor_id", "data", "created_at"),
    )
    values = {
        "org_id": uuid.UUID(org.id),
        "request_id": uuid.UUID(created["id"]),
        "type": "test.event",
        "actor_id": None,
        "data": {"a": 1},
        "created_at": utcnow(),
    }
    rolled_back, committed = uuid.uuid4(), uuid.uuid4()
    with pytest.raises(RuntimeError):
        async with ctx.transaction() as uow:
            await execute_in(uow.session, event, {**values, "id": rolled_back})
            raise RuntimeError("the use case failed after the insert")
    async with ctx.transaction() as uow:
        await execute_in(uow.session, event, {**values, "id": committed})
    async with ctx.reading() as uow:
        ids = set((await uow.session.scalars(select(AuditEvent.id))).all())
    assert committed in ids and rolled_back not in ids


async def test_a_write_that_would_skip_a_column_default_is_refused(ctx: AppContext) -> None:
    # ApprovalRequest.id and created_at have defaults computed per row by SQLAlchemy:
    # a prepared insert that leaves them out must fail loudly, not insert NULLs.
    incomplete = PreparedQuery(
        insert(ApprovalRequest).returning(*entity_columns(ApprovalRequest)),
        column_keys=("org_id", "title"),
    )
    with pytest.raises(TypeError, match="every column with a default"):
        incomplete.for_sqlite(ctx.db.read_engine.dialect)


async def test_rows_are_named_by_the_entity_attributes(ctx: AppContext) -> None:
    query = PreparedQuery(
        select(*entity_columns(ApprovalRequest)).where(
            ApprovalRequest.id == bindparam("request_id")
        )
    )
    assert "metadata_" in query.keys and "metadata" not in query.keys
    assert await ctx.db.queries.all(query, {"request_id": uuid.uuid4()}) == []


async def test_a_create_answers_what_a_get_then_reads(client: httpx.AsyncClient, org: Org) -> None:
    # The create's answer is built from the values written (no RETURNING): it must equal
    # the stored row as every later read shows it, offsets and JSON included.
    created = await create_approval(
        client,
        org.member,
        expires_at="2099-01-02T03:04:05.678+02:00",
        metadata={"float": 2.5, "list": [1, "two", None], "unicode": "ü"},
        callback_url="https://example.com/hook",
        callback_headers={"X-Token": "secret"},
        idempotency_key="create-vs-get",
    )
    read = (
        await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    ).json()
    read_only = ("steps", "votes", "receipt", "receipt_issued", "receipt_uses")
    assert {k: v for k, v in read.items() if k not in read_only} == created
    assert created["expires_at"] == "2099-01-02T01:04:05.678Z"
    assert "callback_headers" not in created
