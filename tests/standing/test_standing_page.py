""" "Don't ask again" on a request's page (a plain form, CSRF-checked): offered beside the
approval of requests that may grant one, granted with it, refused with it. Both
databases."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org
from tests.dashboard.support import browser_client, csrf_of, post_form, signed_in
from tests.standing.support import grant, request, standing_list

pytestmark = pytest.mark.anyio


async def test_dont_ask_again_from_the_page(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, client, org.admin)
    critical = await request(client, org.members[0], priority="critical")
    page = await client.get(f"/requests/{critical['id']}")
    assert "Don't ask again" not in page.text, "a critical request never grants one"

    created = await request(client, org.members[0])
    url = f"/requests/{created['id']}"
    page = await client.get(url)
    assert "Don't ask again" in page.text and 'name="standing_for"' in page.text
    decided = await post_form(
        client,
        url,
        f"{url}/decision",
        decision="approve",
        standing_for="3600",
        standing_uses="3",
        standing_same_arguments="1",
    )
    assert decided.status_code == 303, decided.text
    (listed,) = await standing_list(client, org.admin)
    assert listed["max_uses"] == 3 and listed["expires_at"] is not None
    assert listed["arguments"] == {"env": {"eq": "staging"}, "replicas": {"eq": 3}}
    matched = await request(client, org.members[0])
    assert matched["status"] == "approved" and matched["standing_approval_id"] == listed["id"]

    # A refused grant (zero uses) decides nothing.
    other = await request(client, org.members[0], arguments={"env": "staging", "replicas": 4})
    assert other["status"] == "pending"
    url = f"/requests/{other['id']}"
    page_before = await client.get(url)
    assert page_before.status_code == 200
    refused = await post_form(client, url, f"{url}/decision", decision="approve", standing_uses="0")
    assert refused.status_code == 303
    read = await client.get(f"/api/v1/approvals/{other['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"
    # A reject ignores the choice.
    rejected = await post_form(
        client, url, f"{url}/decision", decision="reject", standing_for="3600"
    )
    assert rejected.status_code == 303
    read = await client.get(f"/api/v1/approvals/{other['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "rejected"
    assert len(await standing_list(client, org.admin)) == 1


async def test_the_standing_approvals_page_lists_and_revokes(
    app: Any, client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    grantor, stranger = org.members[1], org.members[2]
    await signed_in(ctx, client, stranger)
    empty = await client.get("/standing-approvals")
    assert empty.status_code == 200 and "Nothing stands" in empty.text
    sid = await grant(client, org.members[0], grantor)
    page = await client.get("/standing-approvals")
    assert "deploy.staging" in page.text and grantor.name in page.text
    assert "conn-1" in page.text and "replicas" in page.text
    assert f"/standing-approvals/{sid}/revoke" not in page.text, "not theirs to revoke"
    forged = await client.post(f"/standing-approvals/{sid}/revoke", data={"csrf_token": "x"})
    assert forged.status_code == 403
    async with browser_client(app) as theirs:
        await signed_in(ctx, theirs, grantor)
        revoked = await post_form(
            theirs, "/standing-approvals", f"/standing-approvals/{sid}/revoke"
        )
        assert revoked.status_code == 303, revoked.text
        assert await standing_list(client, grantor) == []
        after = await theirs.get("/standing-approvals")
        assert "Nothing stands" in after.text


async def test_another_orgs_people_see_and_revoke_nothing(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, other_org: Org
) -> None:
    sid = await grant(client, org.members[0], org.admin)
    await signed_in(ctx, client, other_org.admin)
    page = await client.get("/standing-approvals")
    assert "Nothing stands" in page.text and sid not in page.text
    answer = await client.post(
        f"/standing-approvals/{sid}/revoke", data={"csrf_token": csrf_of(page.text)}
    )
    assert answer.status_code == 404
    assert len(await standing_list(client, org.admin)) == 1
