"""The dashboard's way in: a person deciding "my step" through approvals.service grants
a standing approval as the API does; a refused grant rolls the decision back. Both
databases."""

from __future__ import annotations

import uuid

import httpx
import pytest

from signoff.approvals import service as approvals
from signoff.approvals.schemas import DecideApprovalRequest
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.errors import ValidationFailed
from tests.conftest import Org
from tests.passkeys.test_passkey_decisions import member_of
from tests.standing.support import request, standing_list

pytestmark = pytest.mark.anyio


async def test_a_page_decision_grants_and_a_refused_one_decides_nothing(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    member = await member_of(ctx, org.members[1])
    refused = await request(client, org.members[0])
    payload = DecideApprovalRequest.model_validate(
        {"decision": "approve", "standing": {"max_uses": 1, "arguments": {"nope": {"eq": 1}}}}
    )
    with pytest.raises(ValidationFailed):
        async with ctx.transaction() as uow:
            await approvals.decide(
                uow, member, uuid.UUID(refused["id"]), payload, utcnow(), on="my_step"
            )
    read = await client.get(f"/api/v1/approvals/{refused['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"

    created = await request(client, org.members[0])
    payload = DecideApprovalRequest.model_validate(
        {"decision": "approve", "standing": {"max_uses": 1}}
    )
    async with ctx.transaction() as uow:
        result = await approvals.decide(
            uow, member, uuid.UUID(created["id"]), payload, utcnow(), on="my_step"
        )
    assert result.request.status == "approved"
    (listed,) = await standing_list(client, org.admin)
    assert listed["granted_by"]["id"] == org.members[1].user_id
    assert listed["request_id"] == created["id"]
    # The grantor, a member, may revoke it; another member may not.
    other = await client.delete(
        f"/api/v1/standing-approvals/{listed['id']}", headers=org.members[2].headers
    )
    assert other.status_code == 403
    own = await client.delete(
        f"/api/v1/standing-approvals/{listed['id']}", headers=org.members[1].headers
    )
    assert own.status_code == 200
