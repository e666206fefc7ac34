"""The admin audit page: how far the worker verified the chain, and the export button."""

from __future__ import annotations

from typing import Any

import httpx

from signoff.audit import chain
from signoff.audit.sealing import seal_once
from signoff.context import AppContext
from tests.audit.test_chain import requests_only
from tests.conftest import Org, create_approval
from tests.dashboard.support import browser_client, signed_in


async def test_the_audit_page_shows_the_verified_chain_and_exports_it(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    await requests_only(ctx, org)
    for index in range(3):
        await create_approval(client, org.member, title=f"Audited {index}")
    await seal_once(ctx)  # seals and verifies, as the worker does each round
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        page = (await admin.get("/admin/audit")).text
        assert "Chain verified" in page and "up to #3 at" in page
        assert 'href="/admin/audit/export"' in page
        download = await admin.get("/admin/audit/export")
        assert download.status_code == 200
        assert "attachment" in download.headers["content-disposition"]
        result = chain.verify(chain.parse_lines(download.text.splitlines()), None)
        assert (result.ok, result.last_seq) == (True, 3), result.problem


async def test_the_export_button_is_for_admins_only(ctx: AppContext, app: Any, org: Org) -> None:
    async with browser_client(app) as member:
        await signed_in(ctx, member, org.member)
        answer = await member.get("/admin/audit/export")
        assert answer.status_code in (303, 403, 404)
