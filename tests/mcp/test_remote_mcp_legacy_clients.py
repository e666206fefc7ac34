"""/mcp while SIGNOFF_COMPAT_LEGACY_CLIENTS is on: the tools read the API's answers with
their extra ``data`` envelope and behave as usual."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Org
from tests.mcp.conftest import Live, structured

pytestmark = pytest.mark.anyio


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"compat_legacy_clients": True}


async def test_the_tools_work_with_the_data_envelope_on(live: Live, org: Org) -> None:
    async with live.session(org.member.api_key) as mcp:
        asked = structured(
            await mcp.call_tool(
                "request_approval",
                {"title": "Purge the CDN", "description": "Stale assets.", "priority": "low"},
            )
        )
        async with httpx.AsyncClient(base_url=live.base_url) as api:
            decided = await api.patch(
                f"/api/v1/approvals/{asked['id']}",
                json={"decision": "approve"},
                headers=org.admin.headers,
            )
            assert decided.json()["data"]["status"] == "approved"  # the setting is on
        read = structured(await mcp.call_tool("get_approval", {"id": asked["id"]}))
    assert (read["status"], read["decided"]) == ("approved", True)
    assert "data" not in read
