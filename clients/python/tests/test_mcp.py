"""``signoff-mcp`` as an MCP client runs it: a subprocess over stdio, driven by the SDK's
own client, against the live server."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from conftest import LiveServer, _script
from signoff_client import AsyncSignoffClient, SignoffClient, __version__

pytestmark = pytest.mark.anyio

TOOLS = {
    "request_approval",
    "get_approval",
    "wait_for_decision",
    "list_approvals",
    "cancel_approval",
    "add_comment",
}


def stdio_server(live: LiveServer, **env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=_script("signoff-mcp"),
        env={"SIGNOFF_URL": live.base_url, "SIGNOFF_API_KEY": live.admin.api_key, **env},
    )


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    data: dict[str, Any] = result.structured_content
    assert json.loads(result.content[0].text) == data  # the same answer for text-only hosts
    return data


async def test_request_decide_and_read_back(live: LiveServer, member: SignoffClient) -> None:
    async with Client(stdio_server(live), read_timeout_seconds=60) as mcp:
        assert mcp.server_info is not None
        assert (mcp.server_info.name, mcp.server_info.version) == ("signoff", __version__)
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        assert set(tools) == TOOLS
        schema = tools["request_approval"].input_schema
        assert set(schema["required"]) == {"title", "description", "priority"}
        assert schema["properties"]["priority"]["enum"] == ["low", "medium", "high", "critical"]
        assert all(tool.description for tool in tools.values())

        asked = structured(
            await mcp.call_tool(
                "request_approval",
                {
                    "title": "Restart the payment workers",
                    "description": "They leak memory since 14:00.",
                    "priority": "high",
                    "action_type": "ops.restart",
                    "metadata": {"service": "payments"},
                },
            )
        )
        assert (asked["status"], asked["decided"]) == ("pending", False)
        assert "wait_for_decision" in asked["next_step"]

        member.decide(asked["id"], "approve", "go ahead")  # a human, through the API
        read = structured(await mcp.call_tool("get_approval", {"id": asked["id"]}))
        assert (read["status"], read["decided"], read["comment"], read["decided_by"]) == (
            "approved",
            True,
            "go ahead",
            "Bob",
        )
        waited = structured(await mcp.call_tool("wait_for_decision", {"id": asked["id"]}))
        assert waited["status"] == "approved"

        listed = structured(await mcp.call_tool("list_approvals", {"search": "payment workers"}))
        assert asked["id"] in [item["id"] for item in listed["approvals"]]
        approved = structured(await mcp.call_tool("list_approvals", {"status": "approved"}))
        assert all(item["status"] == "approved" for item in approved["approvals"])

    request = member.get_approval(asked["id"])
    assert request.source == "mcp" and request.metadata == {"service": "payments"}
    assert request.connection_id == live.admin.connection_id


async def test_waiting_reports_progress(live: LiveServer, member: SignoffClient) -> None:
    progress: list[tuple[float, float | None, str | None]] = []
    decided = asyncio.Event()

    async with AsyncSignoffClient(live.base_url, live.member.api_key) as human:

        async def on_progress(value: float, total: float | None, message: str | None) -> None:
            progress.append((value, total, message))
            if not decided.is_set():
                # The tool is waiting (it says so): now a human decides.
                decided.set()
                pending = [
                    a async for a in human.list_approvals(search="Rotate TLS", status="pending")
                ]
                await human.decide(pending[0].id, "reject", "wait for the window")

        async with Client(stdio_server(live), read_timeout_seconds=60) as mcp:
            result = structured(
                await mcp.call_tool(
                    "request_approval",
                    {
                        "title": f"Rotate TLS certificates {uuid.uuid4().hex[:6]}",
                        "description": "On every edge node.",
                        "priority": "critical",
                        "wait_seconds": 30,
                    },
                    progress_callback=on_progress,
                )
            )
    assert (result["status"], result["comment"], result["decided_by"]) == (
        "rejected",
        "wait for the window",
        "Bob",
    )
    assert progress and progress[0][1] == 30 and "waiting" in (progress[0][2] or "")


async def test_api_errors_are_tool_errors(live: LiveServer, admin: SignoffClient) -> None:
    async with Client(stdio_server(live), read_timeout_seconds=60) as mcp:
        missing = await mcp.call_tool("get_approval", {"id": str(uuid.uuid4())})
        assert missing.is_error
        assert "NOT_FOUND: No approval request" in missing.content[0].text

        invalid = await mcp.call_tool(
            "request_approval", {"title": "x", "description": "y", "priority": "low",
                                 "action_type": "Not A Label"}
        )  # fmt: skip
        assert invalid.is_error and "VALIDATION_ERROR" in invalid.content[0].text

        created = admin.create_approval("Cancel me", "d", "low")
        cancelled = structured(await mcp.call_tool("cancel_approval", {"id": created.id}))
        assert cancelled["status"] == "cancelled"
        again = await mcp.call_tool("cancel_approval", {"id": created.id})
        assert again.is_error and "REQUEST_NOT_PENDING" in again.content[0].text

        # The server is still serving after the errors.
        noted = structured(await mcp.call_tool("add_comment", {"id": created.id, "body": "why"}))
        assert noted["body"] == "why"
        assert [c.body for c in admin.list_comments(created.id)] == ["why"]


async def test_a_bad_key_is_a_tool_error_too(live: LiveServer) -> None:
    params = stdio_server(live, SIGNOFF_API_KEY="gk_" + "0" * 64)
    async with Client(params, read_timeout_seconds=60) as mcp:
        result = await mcp.call_tool("list_approvals", {})
        assert result.is_error and "UNAUTHORIZED: " in result.content[0].text


async def test_request_approval_as_a_task_until_a_person_decides(
    live: LiveServer, member: SignoffClient
) -> None:
    """The stdio server serves the task too (protocol 2025-11-25, the SDK's client)."""
    import mcp_types as types

    ask = {"title": "Rotate the keys", "description": "Yearly.", "priority": "low"}
    async with Client(stdio_server(live), read_timeout_seconds=60, mode="legacy") as mcp:
        assert mcp.server_capabilities.tasks is not None
        call = types.CallToolRequestParams(
            name="request_approval",
            arguments={**ask, "arguments": {"kid": "2026"}},
            task=types.TaskMetadata(ttl=60_000),
        )
        created = await mcp.session.send_request(
            types.CallToolRequest(params=call), types.CreateTaskResult
        )
        task_id = created.task.task_id
        poll = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
        assert (await mcp.session.send_request(poll, types.GetTaskResult)).status == "working"

        member.decide(task_id, "approve", "ok")  # a human, through the API
        assert (await mcp.session.send_request(poll, types.GetTaskResult)).status == "completed"
        payload = types.GetTaskPayloadRequest(
            params=types.GetTaskPayloadRequestParams(task_id=task_id)
        )
        result = await mcp.session.send_request(payload, types.CallToolResult)
    assert result.structured_content["status"] == "approved"
    assert result.structured_content["arguments"] == {"kid": "2026"}
    assert result.structured_content["receipt"]


async def test_a_client_that_accepts_every_elicitation_is_sent_to_the_page_and_decides_nothing(
    live: LiveServer, member: SignoffClient
) -> None:
    import mcp_types as types

    asked: list[types.ElicitRequestParams] = []

    async def accept_everything(
        context: object, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    # The 2025-11-25 handshake asks by a request to the client; 2026-07-28 (the SDK's
    # newest, negotiated by default) inside the tool's answer, and the client retries.
    for mode, version in (("legacy", "2025-11-25"), ("auto", "2026-07-28")):
        asked.clear()
        async with Client(
            stdio_server(live),
            read_timeout_seconds=60,
            mode=mode,
            elicitation_callback=accept_everything,
        ) as mcp:
            assert mcp.protocol_version == version
            ask = {"title": "Refund 1182", "description": "Damaged.", "priority": "high"}
            answer = structured(await mcp.call_tool("request_approval", {**ask, "wait_seconds": 1}))
        assert answer["status"] == "pending"
        assert len(asked) == 1 and isinstance(asked[0], types.ElicitRequestURLParams)
        assert asked[0].url == f"{live.base_url}/requests/{answer['id']}"
        assert member.get_approval(answer["id"]).status == "pending"


async def test_tasks_list_on_stdio_pages_the_tasks(live: LiveServer, member: SignoffClient) -> None:
    import mcp_types as types

    ask = {"title": "Rotate the keys", "description": "Yearly.", "priority": "low"}
    async with Client(stdio_server(live), read_timeout_seconds=60, mode="legacy") as mcp:
        call = types.CallToolRequestParams(
            name="request_approval", arguments=ask, task=types.TaskMetadata(ttl=60_000)
        )
        created = await mcp.session.send_request(
            types.CallToolRequest(params=call), types.CreateTaskResult
        )
        listed = await mcp.session.send_request(types.ListTasksRequest(), types.ListTasksResult)
    assert listed.tasks[0].task_id == created.task.task_id
    assert listed.tasks[0].status == "working"
