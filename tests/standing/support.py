"""Helpers of the standing-approval tests: a request, its approval with a grant, and the
org's audit events."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
from sqlalchemy import select

from signoff.context import AppContext
from signoff.models import AuditEvent
from tests.conftest import Member, create_approval

DEPLOY = {"action_type": "deploy.staging", "arguments": {"env": "staging", "replicas": 3}}
GRANT: dict[str, Any] = {
    "ttl_seconds": 3600,
    "arguments": {"env": {"eq": "staging"}, "replicas": {"max": 5}},
}


async def request(client: httpx.AsyncClient, who: Member, **overrides: Any) -> dict[str, Any]:
    return await create_approval(client, who, **{**DEPLOY, **overrides})


async def decide(
    client: httpx.AsyncClient, who: Member, request_id: str, **body: Any
) -> httpx.Response:
    body.setdefault("decision", "approve")
    return await client.patch(f"/api/v1/approvals/{request_id}", json=body, headers=who.headers)


async def grant(
    client: httpx.AsyncClient,
    requester: Member,
    approver: Member,
    standing: dict[str, Any] | None = None,
    **overrides: Any,
) -> str:
    """A request of ``requester``'s approved by ``approver`` with a grant: its id."""
    created = await request(client, requester, **overrides)
    answer = await decide(client, approver, created["id"], standing=standing or GRANT)
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "approved"
    listed = await standing_list(client, approver)
    (mine,) = [s for s in listed if s["request_id"] == created["id"]]
    return str(mine["id"])


async def standing_list(client: httpx.AsyncClient, who: Member) -> list[dict[str, Any]]:
    answer = await client.get("/api/v1/standing-approvals", headers=who.headers)
    assert answer.status_code == 200, answer.text
    data: list[dict[str, Any]] = answer.json()["data"]
    return data


async def org_events(ctx: AppContext, org_id: str, kind: str) -> list[AuditEvent]:
    async with ctx.reading() as uow:
        rows = await uow.session.scalars(
            select(AuditEvent)
            .where(AuditEvent.org_id == uuid.UUID(org_id), AuditEvent.type == kind)
            .order_by(AuditEvent.created_at)
        )
        return list(rows)
