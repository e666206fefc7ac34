"""Organization names are unique per installation, ignoring case, on SQLite and
PostgreSQL: the service refuses a taken name, the database refuses one that slips past
it (a concurrent create), names resolve ignoring case, and deleting an org with
requests takes an explicit ``with_data``."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.errors import AppError, Conflict, NotFound
from signoff.models import ApprovalRequest, AuditEvent, Connection, Organization, User
from signoff.orgs import service as orgs_service
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.oauth.support import grant, register_client


async def _create(ctx: AppContext, name: str) -> Organization:
    async with ctx.transaction() as uow:
        return await orgs_service.create_org(uow.orgs, name, utcnow())


async def _names(ctx: AppContext) -> list[str]:
    async with ctx.reading() as uow:
        return [org.name for org in await uow.orgs.list_orgs()]


async def test_a_taken_name_is_refused_whatever_its_case(ctx: AppContext) -> None:
    await _create(ctx, "Acme")
    for taken in ("Acme", "acme", "ACME", "  aCmE "):
        with pytest.raises(Conflict, match="exists already"):
            await _create(ctx, taken)
    await _create(ctx, "Acme Corp")
    assert await _names(ctx) == ["Acme", "Acme Corp"]


async def test_the_database_refuses_a_duplicate_the_service_did_not_see(
    ctx: AppContext,
) -> None:
    await _create(ctx, "Acme")
    with pytest.raises(IntegrityError):
        async with ctx.transaction() as uow, uow.session.begin_nested():
            uow.session.add(Organization(id=uuid.uuid4(), name="ACME", created_at=utcnow()))
            await uow.session.flush()
    assert await _names(ctx) == ["Acme"]


async def test_creates_of_one_name_at_the_same_moment_make_one_org(ctx: AppContext) -> None:
    # A second context: engines of its own, as a second process on the same database.
    other = Wiring.from_settings(ctx.settings)
    try:

        async def create(context: AppContext, name: str) -> str:
            try:
                await _create(context, name)
            except AppError as exc:
                return type(exc).__name__
            return "created"

        outcomes = await asyncio.gather(
            *(create(c, n) for c in (ctx, other.ctx) for n in ("Acme", "acme", "ACME"))
        )
    finally:
        await other.close()
    assert sorted(outcomes) == ["Conflict"] * 5 + ["created"], outcomes
    assert len(await _names(ctx)) == 1


async def test_rename(ctx: AppContext, org: Org, other_org: Org) -> None:
    async with ctx.transaction() as uow:
        acme = await orgs_service.resolve_org(uow.orgs, "ACME")  # by name, any case
        assert str(acme.id) == org.id
        await orgs_service.rename_org(uow.orgs, acme, "ACME")  # its own name, new case
    with pytest.raises(Conflict, match="exists already"):
        async with ctx.transaction() as uow:
            acme = await orgs_service.resolve_org(uow.orgs, org.id)
            await orgs_service.rename_org(uow.orgs, acme, other_org.name.upper())
    async with ctx.transaction() as uow:
        acme = await orgs_service.resolve_org(uow.orgs, org.id)
        await orgs_service.rename_org(uow.orgs, acme, "Acme Industries")
    assert await _names(ctx) == ["Acme Industries", other_org.name]
    async with ctx.reading() as uow:
        with pytest.raises(NotFound):
            await orgs_service.resolve_org(uow.orgs, "Acme")


async def _rows_of(ctx: AppContext, org_id: str) -> dict[str, int]:
    counted = {}
    async with ctx.reading() as uow:
        for model in (Organization, User, Connection, ApprovalRequest, AuditEvent):
            column = model.id if model is Organization else model.org_id
            found = await uow.session.scalar(
                select(func.count()).select_from(model).where(column == uuid.UUID(org_id))
            )
            counted[model.__name__] = int(found or 0)
    return counted


async def test_delete_an_org_with_requests_only_with_its_data(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    # A request with everything that points at the org's users and connections: a
    # comment, a vote and decision, a callback, an approval chain.
    decided = await create_approval(
        client, org.member, callback_url="http://127.0.0.1:9/hook", required_approvals=2
    )
    for person in (org.admin, org.members[1]):
        voted = await client.patch(
            f"/api/v1/approvals/{decided['id']}",
            json={"decision": "approve", "comment": "fine"},
            headers=person.headers,
        )
        assert voted.status_code == 200, voted.text
    chain = await create_approval(client, org.member)
    steps = await client.post(
        f"/api/v1/approvals/{chain['id']}/steps",
        json={"steps": [{"approver_id": org.admin.user_id, "step_order": 1}]},
        headers=org.member.headers,
    )
    assert steps.status_code == 201, steps.text
    commented = await client.post(
        f"/api/v1/approvals/{chain['id']}/comments",
        json={"body": "looks right"},
        headers=org.admin.headers,
    )
    assert commented.status_code == 201, commented.text
    # An OAuth client with tokens, and a routing document with a channel.
    await grant(ctx, await register_client(ctx, org.admin), org.member)
    routing = await client.put(
        "/api/v1/routing",
        json={
            "channels": {"mail": {"type": "email"}},
            "rules": [{"name": "all", "channels": ["mail"]}],
        },
        headers=org.admin.headers,
    )
    assert routing.status_code == 200, routing.text
    await create_approval(client, other_org.member)
    with pytest.raises(Conflict, match="has approval requests"):
        async with ctx.transaction() as uow:
            acme = await orgs_service.resolve_org(uow.orgs, org.id)
            await orgs_service.delete_org(uow.orgs, acme, with_data=False)
    assert (await _rows_of(ctx, org.id))["ApprovalRequest"] == 2

    async with ctx.transaction() as uow:
        acme = await orgs_service.resolve_org(uow.orgs, org.id)
        await orgs_service.delete_org(uow.orgs, acme, with_data=True)
    assert set((await _rows_of(ctx, org.id)).values()) == {0}
    # The other org is untouched, and its key still works; Acme's is refused.
    assert (await _rows_of(ctx, other_org.id))["ApprovalRequest"] == 1
    mine = await client.get("/api/v1/approvals", headers=other_org.member.headers)
    assert mine.status_code == 200 and mine.json()["total"] == 1
    gone = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert gone.status_code == 401
    # Its name is free again.
    await _create(ctx, org.name)
