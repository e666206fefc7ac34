"""The admins' standing-approval caps on the dashboard's settings page: a plain form
(CSRF-checked, no script) that writes what ``PATCH /api/v1/org/settings`` writes, by the
same rules. Both databases."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org
from tests.dashboard.support import browser_client, csrf_of, post_form, signed_in

pytestmark = pytest.mark.anyio

PAGE = "/admin/settings"
FORM = "/admin/settings/standing-approvals"
NO_CAPS = {"max_ttl_seconds": None, "max_uses": None, "forbidden_action_types": []}


async def caps(client: httpx.AsyncClient, org: Org) -> dict[str, Any]:
    read = await client.get("/api/v1/org/settings", headers=org.member.headers)
    assert read.status_code == 200, read.text
    found: dict[str, Any] = read.json()["standing_approvals"]
    return found


async def test_saving_the_caps_on_the_page_changes_what_the_api_answers(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, client, org.admin)
    page = await client.get(PAGE)
    assert page.status_code == 200 and "Standing approvals" in page.text
    saved = await post_form(
        client, PAGE, FORM,
        max_ttl_seconds="86400", max_uses=" 50 ",
        forbidden_action_types="db.drop\r\n\r\n payment.send \r\ndb.drop\r\n",
    )  # fmt: skip
    assert saved.status_code == 303, saved.text
    assert saved.headers["location"] == "/admin/settings#standing"
    assert await caps(client, org) == {
        "max_ttl_seconds": 86400,
        "max_uses": 50,
        "forbidden_action_types": ["db.drop", "payment.send"],
    }
    # The page shows what is stored, and says it was saved.
    page = await client.get(PAGE)
    assert "Standing-approval caps saved." in page.text
    assert (
        'name="max_ttl_seconds" type="text" inputmode="numeric" autocomplete="off" '
        'value="86400"' in page.text
    )
    assert "db.drop\npayment.send</textarea>" in page.text
    # Empty fields lift the caps.
    lifted = await post_form(
        client, PAGE, FORM, max_ttl_seconds="", max_uses="", forbidden_action_types=""
    )
    assert lifted.status_code == 303
    assert await caps(client, org) == NO_CAPS


@pytest.mark.parametrize(
    ("fields", "shown"),
    [
        ({"max_ttl_seconds": "0"}, "Longest a grant stands (seconds): an integer 1 to"),
        ({"max_ttl_seconds": "an hour"}, "Longest a grant stands (seconds): an integer 1 to"),
        ({"max_uses": "2.5"}, "Most requests a grant approves: an integer 1 to 1000000"),
        ({"max_uses": "99999999999"}, "Most requests a grant approves: an integer 1 to"),
        ({"forbidden_action_types": "x" * 101}, "Action types: a list of at most 100"),
    ],
)
async def test_bad_input_shows_the_error_and_stores_nothing(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, fields: dict[str, str], shown: str
) -> None:
    await signed_in(ctx, client, org.admin)
    good = {"max_ttl_seconds": "3600", "max_uses": "10", "forbidden_action_types": "db.drop"}
    assert (await post_form(client, PAGE, FORM, **good)).status_code == 303
    before = await caps(client, org)

    refused = await post_form(client, PAGE, FORM, **{**good, **fields})
    assert refused.status_code == 400
    assert "Nothing was saved" in refused.text and shown in refused.text
    assert 'aria-invalid="true"' in refused.text
    # What was typed is shown again, to be corrected.
    typed = next(iter(fields.values()))
    assert f'value="{typed}"' in refused.text or f">{typed}</textarea>" in refused.text
    assert await caps(client, org) == before


async def test_only_admins_and_only_with_the_form_token(
    client: httpx.AsyncClient, app: Any, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, client, org.member)
    refused = await client.post(FORM, data={"max_uses": "1"})
    assert refused.status_code in (403, 404)
    assert await caps(client, org) == NO_CAPS

    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        page = await admin.get(PAGE)
        assert csrf_of(page.text)
        forged = await admin.post(FORM, data={"max_uses": "1", "csrf_token": "forged"})
        assert forged.status_code == 403
        missing = await admin.post(FORM, data={"max_uses": "1"})
        assert missing.status_code == 403
    assert await caps(client, org) == NO_CAPS
