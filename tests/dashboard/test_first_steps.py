"""An admin's empty inbox before the organization's first request points to the next
steps: create a connection, then a copyable curl for a first request with its key."""

from __future__ import annotations

import html
import re
import uuid
from typing import Any

import pytest
from sqlalchemy import update

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import Connection
from tests.conftest import Org, create_approval
from tests.dashboard.support import browser_client, signed_in
from tests.helpers import NO_SWEEP

# http: an https address would make the session cookie Secure, which this client drops.
PUBLIC_URL = "http://signoff.acme.example:8080"
CURL = re.compile(r'<pre data-testid="first-curl" tabindex="0"><code>(.*?)</code></pre>', re.S)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {**NO_SWEEP, "public_url": PUBLIC_URL}


async def revoke_all(ctx: AppContext, org: Org) -> None:
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(Connection)
            .where(Connection.org_id == uuid.UUID(org.id))
            .values(revoked_at=utcnow())
        )


def curl_of(page: str) -> str:
    found = CURL.search(page)
    assert found, "no curl on the page"
    return html.unescape(found.group(1))


async def test_a_new_admin_is_sent_to_create_a_connection_then_to_curl(
    ctx: AppContext, app: Any, org: Org
) -> None:
    await revoke_all(ctx, org)
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        page = (await admin.get("/")).text
        assert "Send your first request" in page and "all caught up" not in page
        assert (
            '<a class="btn btn-primary" href="/admin/connections">Create a connection</a>' in page
        )
        curl = curl_of(page)
        assert f"curl -sS -X POST {PUBLIC_URL}/api/v1/approvals" in curl
        assert '-H "Authorization: Bearer $SIGNOFF_API_KEY"' in curl
        assert '"title": "My first request"' in curl
        # The live list is read again by the script: it shows the same steps.
        assert curl_of((await admin.get("/inbox/rows")).text) == curl

        async with ctx.transaction() as uow:
            await uow.session.execute(
                update(Connection)
                .where(Connection.id == uuid.UUID(org.admin.connection_id))
                .values(revoked_at=None)
            )
        page = (await admin.get("/")).text
        assert "Done: conn-0." in page and "Create a connection</a>" not in page
        assert curl_of(page) == curl


async def test_the_steps_are_for_admins_of_an_org_without_requests(
    ctx: AppContext, app: Any, org: Org
) -> None:
    async with browser_client(app) as member:
        await signed_in(ctx, member, org.member)
        page = (await member.get("/")).text
        assert "all caught up" in page and "first-curl" not in page
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        filtered = (await admin.get("/", params={"priority": "low"})).text
        assert "Nothing matches these filters" in filtered and "first-curl" not in filtered

        request = await create_approval(admin, org.member)
        page = (await admin.get("/")).text
        assert "first-curl" not in page and request["title"] in page
        decided = await admin.patch(
            f"/api/v1/approvals/{request['id']}",
            json={"decision": "approve"},
            headers=org.admin.headers,
        )
        assert decided.status_code == 200, decided.text
        page = (await admin.get("/")).text
        assert "all caught up" in page and "first-curl" not in page
