"""The first-run setup page offers four-eyes, ticked (issue 36)."""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from signoff.context import AppContext
from signoff.models import Organization
from tests.dashboard.test_setup_link import _form, _issue
from tests.helpers import NO_SWEEP


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


def _box(html: str) -> str:
    """The four-eyes checkbox's tag."""
    found = re.search(r'<input type="checkbox" name="self_approval" value="forbid"[^>]*>', html)
    assert found, "no four-eyes box on the page"
    return found.group(0)


async def _setting(ctx: AppContext) -> str:
    async with ctx.reading() as uow:
        value = await uow.session.scalar(select(Organization.self_approval))
    assert value is not None
    return str(value)


async def test_the_box_is_ticked_and_a_browser_sends_forbid(
    ctx: AppContext, client: httpx.AsyncClient
) -> None:
    token = await _issue(ctx)
    page = await client.get(f"/setup/{token}")
    assert _box(page.text).endswith("checked>")
    done = await client.post(f"/setup/{token}", data={**_form("Acme"), "self_approval": "forbid"})
    assert done.status_code == 303
    assert await _setting(ctx) == "forbid"


async def test_unticked_means_allow(ctx: AppContext, client: httpx.AsyncClient) -> None:
    token = await _issue(ctx)
    done = await client.post(f"/setup/{token}", data=_form("Acme"))
    assert done.status_code == 303
    assert await _setting(ctx) == "allow"


async def test_a_refused_form_keeps_the_choice(ctx: AppContext, client: httpx.AsyncClient) -> None:
    token = await _issue(ctx)
    refused = await client.post(f"/setup/{token}", data={**_form("Acme"), "password": "short"})
    assert refused.status_code == 400
    assert not _box(refused.text).endswith("checked>")  # left unticked, shown unticked
