"""``/mcp`` as remote MCP clients use it: the SDK's own streamable-HTTP client against the
app served by uvicorn on a loopback port, with the API keys and OAuth tokens of /api/v1."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from mcp.shared.exceptions import MCPError
from signoff_client import mcp_server

import signoff
from signoff.context import AppContext
from tests.conftest import Org
from tests.mcp.conftest import Live, structured, tool_error
from tests.oauth.support import grant, register_client

pytestmark = pytest.mark.anyio

TOOLS = {
    "request_approval",
    "get_approval",
    "wait_for_decision",
    "list_approvals",
    "cancel_approval",
    "add_comment",
}


async def test_tools_request_decide_and_read_back(live: Live, org: Org) -> None:
    async with live.session(org.member.api_key) as mcp:
        assert mcp.server_info is not None
        assert (mcp.server_info.name, mcp.server_info.version) == ("signoff", signoff.__version__)
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        assert set(tools) == TOOLS
        assert set(tools["request_approval"].input_schema["required"]) == {
            "title",
            "description",
            "priority",
        }
        asked = structured(
            await mcp.call_tool(
                "request_approval",
                {
                    "title": "Rotate the database password",
                    "description": "The old one was pasted in a chat.",
                    "priority": "critical",
                    "action_type": "ops.rotate",
                },
            )
        )
        assert (asked["status"], asked["decided"]) == ("pending", False)

        async with httpx.AsyncClient(base_url=live.base_url) as api:
            decided = await api.patch(
                f"/api/v1/approvals/{asked['id']}",
                json={"decision": "approve", "comment": "do it now"},
                headers=org.admin.headers,
            )
            assert decided.status_code == 200, decided.text
            created = (
                await api.get(f"/api/v1/approvals/{asked['id']}", headers=org.admin.headers)
            ).json()
        # Made as the caller: their connection, their org, labelled as coming from MCP.
        assert (created["action_type"], created["source"]) == ("ops.rotate", "mcp")

        read = structured(await mcp.call_tool("get_approval", {"id": asked["id"]}))
        assert (read["status"], read["comment"], read["decided_by"]) == (
            "approved",
            "do it now",
            org.admin.name,
        )
        listed = structured(await mcp.call_tool("list_approvals", {"status": "approved"}))
        assert [item["id"] for item in listed["approvals"]] == [asked["id"]]


async def test_waiting_reports_progress_and_holds_one_long_poll(
    live: Live, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Reports every 0.1 s: several of them must fit inside one long poll.
    monkeypatch.setattr(mcp_server, "PROGRESS_INTERVAL_SECONDS", 0.1)
    progress: list[float] = []
    reported_thrice = asyncio.Event()

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(value)
        if len(progress) == 3:
            reported_thrice.set()

    async with (
        live.session(org.member.api_key) as mcp,
        httpx.AsyncClient(base_url=live.base_url) as api,
    ):
        asked = structured(
            await mcp.call_tool(
                "request_approval",
                {"title": "Drop the staging table", "description": "Unused.", "priority": "low"},
            )
        )
        before = await api.get(f"/api/v1/approvals/{asked['id']}", headers=org.member.headers)

        async def decide_once_waiting() -> None:
            await reported_thrice.wait()
            answer = await api.patch(
                f"/api/v1/approvals/{asked['id']}",
                json={"decision": "reject", "comment": "keep it"},
                headers=org.admin.headers,
            )
            assert answer.status_code == 200, answer.text

        deciding = asyncio.create_task(decide_once_waiting())
        waited = structured(
            await mcp.call_tool(
                "wait_for_decision",
                {"id": asked["id"], "timeout_seconds": 30},
                progress_callback=on_progress,
            )
        )
        await deciding
        after = await api.get(f"/api/v1/approvals/{asked['id']}", headers=org.member.headers)
    assert (waited["status"], waited["comment"]) == ("rejected", "keep it")
    assert len(progress) >= 3 and progress == sorted(progress)
    # The member's calls between the two reads: the wait's one long poll, and the read.
    remaining = "X-RateLimit-Remaining"
    assert int(before.headers[remaining]) - int(after.headers[remaining]) == 2


async def test_an_unknown_key_gets_401_naming_the_resource_metadata(live: Live) -> None:
    async with httpx.AsyncClient(base_url=live.base_url) as http:
        refused = await http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Authorization": "Bearer gk_not_a_key", "Accept": "application/json"},
        )
        assert refused.status_code == 401
        assert refused.json()["error"]["code"] == "UNAUTHORIZED"
        metadata_url = f"{live.base_url}/.well-known/oauth-protected-resource/mcp"
        assert refused.headers["www-authenticate"] == f'Bearer resource_metadata="{metadata_url}"'

        for url in (metadata_url, f"{live.base_url}/.well-known/oauth-protected-resource"):
            metadata = (await http.get(url)).json()
            assert metadata["resource"] == f"{live.base_url}/mcp"
            assert metadata["authorization_servers"] == [live.base_url]
            assert "approvals:write" in metadata["scopes_supported"]
        # ... and the authorization server named there serves its own metadata.
        server = (await http.get(f"{live.base_url}/.well-known/oauth-authorization-server")).json()
        assert server["issuer"] == live.base_url

    # The SDK's own client is refused too: it cannot even initialize.
    refused = False
    try:
        async with live.session("gk_not_a_key") as mcp:
            await mcp.list_tools()
    except* MCPError:
        refused = True
    assert refused


async def test_a_token_without_approvals_write_gets_a_tool_error(
    live: Live, ctx: AppContext, org: Org
) -> None:
    client = await register_client(ctx, org.admin)
    tokens = await grant(ctx, client, org.member, ("approvals:read",))
    async with live.session(tokens["access_token"]) as mcp:
        assert {tool.name for tool in (await mcp.list_tools()).tools} == TOOLS
        refused = await mcp.call_tool(
            "request_approval", {"title": "Scale up", "description": "Load.", "priority": "low"}
        )
        assert tool_error(refused).startswith("INSUFFICIENT_SCOPE:")
        # Reading is within its scopes.
        assert structured(await mcp.call_tool("list_approvals", {}))["count"] == 0


async def test_the_emergency_stop_refuses_writes_and_lets_reads_through(
    live: Live, ctx: AppContext, org: Org
) -> None:
    ctx.settings.emergency_stop = True
    async with live.session(org.member.api_key) as mcp:
        refused = await mcp.call_tool(
            "request_approval", {"title": "Deploy", "description": "Now.", "priority": "high"}
        )
        assert tool_error(refused).startswith("EMERGENCY_STOP")
        assert structured(await mcp.call_tool("list_approvals", {}))["count"] == 0


async def test_an_unknown_id_is_a_tool_error_not_a_crash(live: Live, org: Org) -> None:
    async with live.session(org.member.api_key) as mcp:
        missing = await mcp.call_tool("get_approval", {"id": "not-an-id"})
        assert tool_error(missing).startswith("NOT_FOUND:")
        assert {tool.name for tool in (await mcp.list_tools()).tools} == TOOLS


async def test_tool_calls_count_as_the_api_calls_they_make(
    live: Live, ctx: AppContext, org: Org
) -> None:
    ctx.settings.rate_limit_ceiling = 2  # the connection's hourly calls, capped
    body = {"title": "Deploy", "description": "Now.", "priority": "high"}
    async with live.session(org.member.api_key) as mcp:
        # Connecting and listing the tools are not API calls; each create is one.
        assert {tool.name for tool in (await mcp.list_tools()).tools} == TOOLS
        for _ in range(2):
            structured(await mcp.call_tool("request_approval", body))
        limited = await mcp.call_tool("request_approval", body)
        assert tool_error(limited).startswith("RATE_LIMITED:")


async def test_calls_without_credentials_count_against_the_address(
    live: Live, ctx: AppContext
) -> None:
    ctx.settings.rate_limit_unauthenticated = 2
    async with httpx.AsyncClient(base_url=live.base_url) as http:
        statuses = [
            (
                await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
            ).status_code
            for _ in range(3)
        ]
    assert statuses == [401, 401, 429]


async def test_arguments_and_preview_go_in_and_the_receipt_comes_back(live: Live, org: Org) -> None:
    arguments = {"table": "staging_events", "keep_days": 30}
    schema = {
        "type": "object",
        "properties": {"table": {"type": "string"}, "keep_days": {"type": "integer"}},
        "required": ["table"],
    }
    async with live.session(org.member.api_key) as mcp:
        asked = structured(
            await mcp.call_tool(
                "request_approval",
                {
                    "title": "Trim the staging events",
                    "description": "Disk at 90 %.",
                    "priority": "medium",
                    "arguments": arguments,
                    "arguments_schema": schema,
                    "preview": {"kind": "sql", "content": "DELETE FROM staging_events"},
                },
            )
        )
        assert asked["arguments"] == arguments and asked["arguments_edited"] is False
        async with httpx.AsyncClient(base_url=live.base_url) as api:
            created = (
                await api.get(f"/api/v1/approvals/{asked['id']}", headers=org.member.headers)
            ).json()
            assert created["preview"]["kind"] == "sql"
            decided = await api.patch(
                f"/api/v1/approvals/{asked['id']}",
                json={"decision": "approve"},
                headers=org.admin.headers,
            )
            assert decided.status_code == 200, decided.text
            # The creating connection reads the receipt, as GET /api/v1/approvals/:id shows it.
            read_back = (
                await api.get(f"/api/v1/approvals/{asked['id']}", headers=org.member.headers)
            ).json()
        waited = structured(
            await mcp.call_tool("wait_for_decision", {"id": asked["id"], "timeout_seconds": 5})
        )
        read = structured(await mcp.call_tool("get_approval", {"id": asked["id"]}))
    for answer in (waited, read):
        assert answer["status"] == "approved"
        assert (answer["arguments"], answer["arguments_edited"]) == (arguments, False)
        assert answer["arguments_hash"] == read_back["arguments_hash"]
        assert answer["receipt"] == read_back["receipt"] and answer["receipt"].count(".") == 2
