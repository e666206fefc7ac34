"""The Connections page and a deactivated owner, over HTTP, on SQLite and PostgreSQL:
deactivating a user says which connections lost their authority; the page marks them
"Owner deactivated" and offers **Transfer…** to an active user (a POST with the CSRF
token); after the transfer the key acts as its new owner. Also: one way to create a
connection, with every owner's address shown whole."""

from __future__ import annotations

import html
import re
from typing import Any

import httpx

from signoff.context import AppContext
from tests.conftest import Org, create_approval
from tests.dashboard.support import browser_client, post_form, signed_in
from tests.oauth.support import forms_of


def row_of(page: str, name: str) -> str:
    """The table row of the connection named ``name``."""
    return next(r for r in re.findall(r"<tr[^>]*>.*?</tr>", page, re.S) if f">{name}<" in r)


async def decide(client: httpx.AsyncClient, org: Org, key_headers: dict[str, str]) -> Any:
    request = await create_approval(client, org.members[1])
    return await client.patch(
        f"/api/v1/approvals/{request['id']}", json={"decision": "approve"}, headers=key_headers
    )


async def test_a_deactivated_owners_connection_is_marked_and_transferred(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    member = org.member  # owns conn-1
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        page = (await admin.get("/admin/connections")).text
        assert "Owner deactivated" not in page
        assert f"/admin/connections/{member.connection_id}/transfer" not in page

        deactivated = await post_form(
            admin, "/admin/users", f"/admin/users/{member.user_id}/deactivate"
        )
        assert deactivated.status_code == 303
        said = (await admin.get(deactivated.headers["location"])).text
        assert "conn-1" in html.unescape(said)
        assert "keep working without their authority" in html.unescape(said)
        assert (await decide(client, org, member.headers)).status_code == 403

        page = (await admin.get("/admin/connections")).text
        row = row_of(page, "conn-1")
        assert "Owner deactivated" in row and "Transfer…" in row
        assert "Owner deactivated" not in row_of(page, "conn-2")
        action = f"/admin/connections/{member.connection_id}/transfer"
        transfer = next(f for f in forms_of(page) if f["action"] == action)
        assert transfer["fields"]["csrf_token"]
        # The new owner is picked from the active users only.
        assert f'value="{member.user_id}"' not in row

        # Without the CSRF token nothing happens; to a deactivated user neither.
        forged = await admin.post(action, data={"owner_id": org.admin.user_id})
        assert forged.status_code == 403
        refused = await post_form(admin, "/admin/connections", action, owner_id=member.user_id)
        assert refused.status_code == 303
        assert "deactivated" in (await admin.get(refused.headers["location"])).text
        assert (await decide(client, org, member.headers)).status_code == 403

        moved = await post_form(admin, "/admin/connections", action, owner_id=org.admin.user_id)
        assert moved.status_code == 303
        said = html.unescape((await admin.get(moved.headers["location"])).text)
        assert "conn-1 now acts as Admin 0" in said

        decided = await decide(client, org, member.headers)
        assert decided.status_code == 200, decided.text
        assert decided.json()["decided_by"] == org.admin.user_id
        row = row_of((await admin.get("/admin/connections")).text, "conn-1")
        assert "Owner deactivated" not in row and "Admin 0" in row


async def test_one_way_to_create_a_connection_with_every_address_whole(
    ctx: AppContext, app: Any, org: Org
) -> None:
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        page = (await admin.get("/admin/connections")).text
        # No "New connection" button that opens a disclosure: the form is the one way.
        assert "New connection" not in page
        holder = re.search(r'<(\w+)[^>]*id="new-connection"', page)
        assert holder and holder.group(1) == "section"
        form = page.split('action="/admin/connections"', 1)[1].split("</form>", 1)[0]
        assert "<select" not in form
        for person in (org.admin, *org.members):
            assert f">{person.email}<" in form
            assert f'value="{person.user_id}"' in form
        # The admin is the owner unless another is picked.
        assert re.search(rf'value="{org.admin.user_id}" required checked', form)

        created = await post_form(
            admin,
            "/admin/connections",
            "/admin/connections",
            name="billing-bot",
            owner_id=org.members[2].user_id,
        )
        assert created.status_code == 200, created.text
        row = row_of((await admin.get("/admin/connections")).text, "billing-bot")
        assert org.members[2].name in row and org.members[2].email in row
