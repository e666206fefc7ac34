"""A key's principal remembered between calls on PostgreSQL, confirmed by each call's
first statement (``PrincipalCheck``): a create, a get and a decision read no principal of
their own, and a key revoked (or changed) anywhere is still refused at once, on every
replica, with nothing written."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from signoff.app import create_app
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.context import AppContext
from signoff.models import ApprovalRequest, AuditEvent
from signoff.orgs import repository
from signoff.orgs import service as orgs_service
from signoff.wiring import Wiring
from tests.conftest import Org, approval_body, assert_error, create_approval

Change = Callable[[Any], Awaitable[None]]


@asynccontextmanager
async def replica(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    """Another process serving the same database: an app with a context of its own."""
    other = Wiring.from_settings(settings)
    application = create_app(settings, wiring=other, background=False)
    try:
        async with application.router.lifespan_context(application):
            transport = httpx.ASGITransport(app=application, client=("203.0.113.8", 50000))
            async with httpx.AsyncClient(transport=transport, base_url="http://other.test") as c:
                yield c
    finally:
        await other.close()


async def change_member_connection(settings: Settings, org: Org, change: Change) -> None:
    """``change`` the member's connection as a CLI would: from a process of its own."""
    other = Wiring.from_settings(settings)
    try:
        async with other.ctx.transaction() as uow:
            connection = await orgs_service.get_connection(
                uow.orgs, uuid.UUID(org.id), org.member.connection_id
            )
            await change(connection)
    finally:
        await other.close()


async def revoke(connection: Any) -> None:
    await orgs_service.revoke_connection(connection, utcnow())


async def count_requests(ctx: AppContext, org: Org) -> int:
    async with ctx.reading() as uow:
        counted = await uow.session.scalar(
            select(func.count())
            .select_from(ApprovalRequest)
            .where(ApprovalRequest.org_id == uuid.UUID(org.id))
        )
    return int(counted or 0)


def count_principal_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    reads: list[str] = []
    read_principal = repository.find_principal_by_key_hash

    async def counting(queries: Any, key_hash: str) -> Any:
        reads.append(key_hash)
        return await read_principal(queries, key_hash)

    monkeypatch.setattr(repository, "find_principal_by_key_hash", counting)
    return reads


# SQLite keeps principals between commits (test_auth.py).
@pytest.mark.usefixtures("postgres_only")
async def test_creates_gets_and_decisions_read_no_principal_of_their_own_on_postgresql(
    client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await create_approval(client, org.member)  # the key is read, and remembered
    reads = count_principal_reads(monkeypatch)
    created = await create_approval(client, org.member)
    got = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    decided = await client.patch(
        f"/api/v1/approvals/{first['id']}", json={"decision": "approve"}, headers=org.member.headers
    )
    assert (got.status_code, decided.status_code) == (200, 200)
    assert decided.json()["status"] == "approved"
    assert reads == []
    # Any other call reads it, as before.
    assert (await client.get("/api/v1/me", headers=org.member.headers)).status_code == 200
    assert len(reads) == 1


async def test_a_key_revoked_elsewhere_is_refused_at_once_and_writes_nothing(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, settings: Settings
) -> None:
    created = await create_approval(client, org.member)
    path = f"/api/v1/approvals/{created['id']}"
    assert (await client.get(path, headers=org.member.headers)).status_code == 200
    before = await count_requests(ctx, org)

    await change_member_connection(settings, org, revoke)

    for method, url, body in (
        ("POST", "/api/v1/approvals", approval_body(title="after the revocation")),
        ("GET", path, None),
        ("PATCH", path, {"decision": "approve"}),
        ("GET", f"/api/v1/approvals/{uuid.uuid4()}", None),  # no such request: still 401
        ("GET", "/api/v1/approvals/not-an-id", None),
    ):
        response = await client.request(method, url, json=body, headers=org.member.headers)
        assert_error(response, 401, "UNAUTHORIZED")
    assert await count_requests(ctx, org) == before
    read = await client.get(path, headers=org.admin.headers)
    assert read.json()["status"] == "pending"


async def test_every_replica_refuses_a_revoked_key_at_once(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, settings: Settings
) -> None:
    async with replica(settings) as other:
        replicas = (client, other)
        requests = [await create_approval(c, org.member) for c in replicas]
        for c, request in zip(replicas, requests, strict=True):
            got = await c.get(f"/api/v1/approvals/{request['id']}", headers=org.member.headers)
            assert got.status_code == 200

        await change_member_connection(settings, org, revoke)

        before = await count_requests(ctx, org)
        for c, request in zip(replicas, requests, strict=True):
            path = f"/api/v1/approvals/{request['id']}"
            body = approval_body(title="after the revocation")
            created = await c.post("/api/v1/approvals", json=body, headers=org.member.headers)
            assert_error(created, 401, "UNAUTHORIZED")
            assert_error(await c.get(path, headers=org.member.headers), 401, "UNAUTHORIZED")
            decided = await c.patch(path, json={"decision": "reject"}, headers=org.member.headers)
            assert_error(decided, 401, "UNAUTHORIZED")
        assert await count_requests(ctx, org) == before
        # The other keys of the org go on working on both.
        for c, request in zip(replicas, requests, strict=True):
            path = f"/api/v1/approvals/{request['id']}"
            decided = await c.patch(path, json={"decision": "approve"}, headers=org.admin.headers)
            assert decided.json()["status"] == "approved"


async def test_an_emergency_stop_set_elsewhere_refuses_the_next_create(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, settings: Settings
) -> None:
    await create_approval(client, org.member)
    before = await count_requests(ctx, org)
    other = Wiring.from_settings(settings)
    try:
        async with other.ctx.transaction() as uow:
            await uow.orgs.set_emergency_stop(uuid.UUID(org.id), True, None, utcnow())
    finally:
        await other.close()
    response = await client.post(
        "/api/v1/approvals", json=approval_body(title="during the stop"), headers=org.member.headers
    )
    assert_error(response, 503, "EMERGENCY_STOP")
    assert await count_requests(ctx, org) == before


async def test_a_changed_key_is_answered_afresh_and_counted_once(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, settings: Settings
) -> None:
    await create_approval(client, org.member)

    async def lower_the_limit(connection: Any) -> None:
        orgs_service.set_rate_limit(connection, 50, settings, utcnow())

    await change_member_connection(settings, org, lower_the_limit)
    response = await client.post(
        "/api/v1/approvals",
        json=approval_body(title="with the new limit"),
        headers=org.member.headers,
    )
    assert response.status_code == 201
    assert response.headers["x-ratelimit-limit"] == "50"
    # One request written, one audit event: the call started over wrote nothing twice.
    async with ctx.reading() as uow:
        events = await uow.session.scalar(
            select(func.count())
            .select_from(AuditEvent)
            .where(AuditEvent.request_id == uuid.UUID(response.json()["id"]))
        )
    assert events == 1
    after = await client.get("/api/v1/me", headers=org.member.headers)
    used = 50 - int(after.headers["x-ratelimit-remaining"])
    # The first create, the create started over (counted once) and this call.
    assert used == 3
