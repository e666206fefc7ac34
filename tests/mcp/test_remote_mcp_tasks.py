"""``request_approval`` as an MCP task on ``/mcp``: the SDK's own client at protocol
2025-11-25 creates the task, polls it with ``tasks/get``, reads ``tasks/result`` and
cancels with ``tasks/cancel``; a person decides through the API."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_HANDSHAKE_VERSION, LATEST_PROTOCOL_VERSION
from signoff_client import mcp_tasks

from mcp import Client
from signoff.context import AppContext
from signoff.remote_mcp import task_poll
from signoff.wiring import Wiring
from tests.auth.test_principal_memory import change_member_connection, count_principal_reads, revoke
from tests.conftest import Org
from tests.dashboard.support import post_form, signed_in
from tests.mcp.conftest import Live

pytestmark = pytest.mark.anyio

ASK = {"title": "Drop the old backups", "description": "Disk is full.", "priority": "high"}


async def create_task(mcp: Client, arguments: dict[str, Any]) -> types.Task:
    request = types.CallToolRequest(
        params=types.CallToolRequestParams(
            name="request_approval", arguments=arguments, task=types.TaskMetadata(ttl=60_000)
        )
    )
    created = await mcp.session.send_request(request, types.CreateTaskResult)
    return created.task


async def get_task(mcp: Client, task_id: str) -> types.GetTaskResult:
    request = types.GetTaskRequest(params=types.GetTaskRequestParams(task_id=task_id))
    return await mcp.session.send_request(request, types.GetTaskResult)


async def task_result(mcp: Client, task_id: str) -> types.CallToolResult:
    request = types.GetTaskPayloadRequest(params=types.GetTaskPayloadRequestParams(task_id=task_id))
    return await mcp.session.send_request(request, types.CallToolResult)


async def cancel_task(mcp: Client, task_id: str) -> types.CancelTaskResult:
    request = types.CancelTaskRequest(params=types.CancelTaskRequestParams(task_id=task_id))
    return await mcp.session.send_request(request, types.CancelTaskResult)


async def decide(live: Live, org: Org, approval_id: str, decision: str, comment: str) -> None:
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        answer = await api.patch(
            f"/api/v1/approvals/{approval_id}",
            json={"decision": decision, "comment": comment},
            headers=org.admin.headers,
        )
        assert answer.status_code == 200, answer.text


async def test_a_task_works_until_a_person_approves_then_completes(live: Live, org: Org) -> None:
    arguments = {"paths": ["/backups/2023"]}
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        assert mcp.protocol_version == "2025-11-25"
        assert mcp.server_capabilities.tasks is not None
        assert mcp.server_capabilities.tasks.requests.tools.call is not None  # type: ignore[union-attr]
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        assert tools["request_approval"].execution.task_support == "optional"  # type: ignore[union-attr]
        assert tools["get_approval"].execution is None

        task = await create_task(mcp, {**ASK, "arguments": arguments})
        assert task.status == "working" and task.poll_interval
        polled = await get_task(mcp, task.task_id)
        assert (polled.task_id, polled.status) == (task.task_id, "working")

        await decide(live, org, task.task_id, "approve", "go")
        done = await get_task(mcp, task.task_id)
        assert done.status == "completed"
        result = await task_result(mcp, task.task_id)
    assert not result.is_error
    answer = result.structured_content
    assert (answer["status"], answer["comment"], answer["arguments"]) == (
        "approved",
        "go",
        arguments,
    )
    assert answer["receipt"].count(".") == 2
    assert result.meta == {"io.modelcontextprotocol/related-task": {"taskId": task.task_id}}


async def test_a_rejection_fails_the_task_with_the_reason(live: Live, org: Org) -> None:
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
        await decide(live, org, task.task_id, "reject", "keep them")
        failed = await get_task(mcp, task.task_id)
        result = await task_result(mcp, task.task_id)
    assert failed.status == "failed"
    assert failed.status_message == f"Rejected by {org.admin.name}: keep them"
    assert result.is_error and result.structured_content["status"] == "rejected"


async def test_cancelling_the_task_cancels_the_request(live: Live, org: Org) -> None:
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
        cancelled = await cancel_task(mcp, task.task_id)
        assert (cancelled.status, cancelled.status_message) == ("failed", "Cancelled.")
        again = False
        try:
            await cancel_task(mcp, task.task_id)
        except MCPError as exc:
            again = exc.error.code == types.INVALID_PARAMS
        assert again  # a task already over cannot be cancelled twice
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        read = await api.get(f"/api/v1/approvals/{task.task_id}", headers=org.member.headers)
    assert read.json()["status"] == "cancelled"


async def test_a_task_outlives_the_connection_and_reads_only_for_its_org(
    live: Live, org: Org, other_org: Org
) -> None:
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
    await decide(live, org, task.task_id, "approve", "fine")
    # A new connection (another replica, or after a restart) knows the task: it is the request.
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        assert (await get_task(mcp, task.task_id)).status == "completed"
    async with live.session(other_org.member.api_key, mode="legacy") as mcp:
        unknown = False
        try:
            await get_task(mcp, task.task_id)
        except MCPError as exc:
            unknown = exc.error.code == types.INVALID_PARAMS
    assert unknown


async def test_a_refused_create_makes_no_task(live: Live, org: Org) -> None:
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        request = types.CallToolRequest(
            params=types.CallToolRequestParams(
                name="request_approval",
                arguments={**ASK, "priority": "whenever"},
                task=types.TaskMetadata(ttl=60_000),
            )
        )
        refused = await mcp.session.send_request(request, types.CallToolResult)
    assert refused.is_error


async def test_the_newest_protocol_and_the_one_before_both_work(live: Live, org: Org) -> None:
    """The SDK's newest revision (2026-07-28, negotiated by default) and the handshake
    revision before it; clients that do not ask for a task get the plain tool on both."""
    for mode, version in (("auto", LATEST_PROTOCOL_VERSION), ("legacy", LATEST_HANDSHAKE_VERSION)):
        async with live.session(org.member.api_key, mode=mode) as mcp:
            assert mcp.protocol_version == version
            asked = (await mcp.call_tool("request_approval", ASK)).structured_content
            assert asked["status"] == "pending"
            await decide(live, org, asked["id"], "approve", "ok")
            read = (await mcp.call_tool("get_approval", {"id": asked["id"]})).structured_content
        assert (read["status"], read["comment"]) == ("approved", "ok")


async def list_tasks(mcp: Client, cursor: str | None = None) -> types.ListTasksResult:
    params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
    request = types.ListTasksRequest(params=params)
    return await mcp.session.send_request(request, types.ListTasksResult)


async def test_tasks_list_pages_through_the_orgs_tasks_only(
    live: Live, org: Org, other_org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mcp_tasks, "TASKS_PAGE_SIZE", 2)
    async with live.session(other_org.member.api_key, mode="legacy") as mcp:
        await create_task(mcp, ASK)  # another org's: never listed
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        made = await api.post("/api/v1/approvals", json=ASK, headers=org.member.headers)
        assert made.status_code == 201  # not made over MCP: not a task
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        assert mcp.server_capabilities.tasks.list is not None  # type: ignore[union-attr]
        made_ids = [(await create_task(mcp, ASK)).task_id for _ in range(3)]
        await decide(live, org, made_ids[0], "reject", "no")
        first = await list_tasks(mcp)
        assert first.next_cursor is not None
        second = await list_tasks(mcp, first.next_cursor)
        refused = False
        try:
            await list_tasks(mcp, "not-a-cursor")
        except MCPError as exc:
            refused = exc.error.code == types.INVALID_PARAMS
    assert refused
    assert second.next_cursor is None
    listed = [*first.tasks, *second.tasks]
    assert [task.task_id for task in listed] == made_ids[::-1]  # newest first
    assert [task.status for task in listed] == ["working", "working", "failed"]


def poll_of(task_id: str, org: Org) -> tuple[dict[str, Any], dict[str, str]]:
    """A bare ``tasks/get`` as a client sends it after the handshake, and its headers."""
    poll = {"jsonrpc": "2.0", "id": 7, "method": "tasks/get", "params": {"taskId": task_id}}
    headers = {
        **org.member.headers,
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    return poll, headers


async def test_a_task_poll_counts_against_the_rate_limit_as_an_api_read(
    live: Live, org: Org
) -> None:
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
    poll, headers = poll_of(task.task_id, org)
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        answers = [await api.post("/mcp", json=poll, headers=headers) for _ in range(2)]
        unknown = await api.post(
            "/mcp",
            json={**poll, "params": {"taskId": "01a2212c-3e66-7089-80cb-05dfc479c852"}},
            headers=headers,
        )
    remaining = [int(answer.headers["x-ratelimit-remaining"]) for answer in answers]
    assert remaining[1] == remaining[0] - 1
    assert answers[1].json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {**answers[1].json()["result"], "taskId": task.task_id, "status": "working"},
    }
    assert unknown.json()["error"]["code"] == types.INVALID_PARAMS


async def test_a_task_poll_asks_the_rate_limiter_once(
    live: Live, org: Org, wiring: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
    poll, headers = poll_of(task.task_id, org)
    asked: list[str] = []
    limiter = wiring.limiter
    for name in ("hit", "peek"):
        original = getattr(limiter, name)

        def counting(*args: Any, _original: Any = original, _name: str = name, **kw: Any) -> Any:
            asked.append(_name)
            return _original(*args, **kw)

        monkeypatch.setattr(limiter, name, counting)
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        answered = await api.post("/mcp", json=poll, headers=headers)
    assert answered.json()["result"]["status"] == "working"
    assert asked == ["hit"]


@pytest.mark.usefixtures("postgres_only")
async def test_a_task_poll_reads_no_principal_of_its_own_and_a_revoked_key_is_refused(
    live: Live, org: Org, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As ``GET /api/v1/approvals/:id``: the key's principal remembered from its last
    call is confirmed by the poll's one read, and a key revoked by another process
    is refused at once."""
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
    poll, headers = poll_of(task.task_id, org)
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        await api.post("/mcp", json=poll, headers=headers)
        reads = count_principal_reads(monkeypatch)
        remembered = await api.post("/mcp", json=poll, headers=headers)
        assert (remembered.json()["result"]["status"], reads) == ("working", [])
        await change_member_connection(ctx.settings, org, revoke)
        refused = await api.post("/mcp", json=poll, headers=headers)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"].startswith("Bearer resource_metadata=")


async def approved_on_the_page(
    mcp: Client, live: Live, ctx: AppContext, org: Org, task_id: str
) -> dict[str, Any]:
    """A person signed in to the dashboard approves request ``task_id`` with its page's
    form; then the task is complete, and this is its result."""
    async with httpx.AsyncClient(base_url=live.base_url) as browser:
        await signed_in(ctx, browser, org.admin)
        page = f"/requests/{task_id}"
        decided = await post_form(
            browser, page, f"{page}/decision", decision="approve", comment="from the page"
        )
        assert decided.status_code == 303, decided.text
    assert (await get_task(mcp, task_id)).status == "completed"
    answer: dict[str, Any] = (await task_result(mcp, task_id)).structured_content
    assert (answer["status"], answer["comment"], answer["decided_by"]) == (
        "approved",
        "from the page",
        org.admin.name,
    )
    return answer


async def test_a_person_deciding_in_the_browser_completes_the_task(
    live: Live, org: Org, ctx: AppContext
) -> None:
    """End to end: the SDK's client makes the task, a person signed in to the dashboard
    approves it with the request page's form, and the task completes with that decision."""
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, {**ASK, "arguments": {"paths": ["/b"]}})
        answer = await approved_on_the_page(mcp, live, ctx, org, task.task_id)
    assert answer["arguments"] == {"paths": ["/b"]}


async def test_a_person_deciding_in_the_browser_completes_a_stdio_task(
    live: Live, org: Org, ctx: AppContext
) -> None:
    """End to end over stdio: ``signoff-mcp`` run as an MCP client runs it makes the
    task, a person signed in to the dashboard approves it with the request page's form,
    and the task completes with that decision."""
    command = Path(sys.executable).with_name("signoff-mcp")
    stdio = StdioServerParameters(
        command=str(command),
        env={"SIGNOFF_URL": live.base_url, "SIGNOFF_API_KEY": org.member.api_key},
    )
    async with Client(stdio, read_timeout_seconds=60, mode="legacy") as mcp:
        assert mcp.server_capabilities.tasks is not None
        task = await create_task(mcp, {**ASK, "arguments": {"kid": "2026"}})
        assert (await get_task(mcp, task.task_id)).status == "working"
        answer = await approved_on_the_page(mcp, live, ctx, org, task.task_id)
    assert answer["arguments"] == {"kid": "2026"}


@pytest.mark.parametrize("fast_poll", [True, False])
async def test_a_connections_tasks_are_its_own_and_an_admins_to_see(
    live: Live, org: Org, fast_poll: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another member's key neither lists, polls, cancels nor reads the result of a task
    made with this member's key (it is unknown, as one that does not exist); an admin's
    key sees every task of the org. On both ``tasks/get`` paths (``task_poll.ENABLED``)."""
    monkeypatch.setattr(task_poll, "ENABLED", fast_poll)
    owner, stranger = org.members[0], org.members[1]
    async with live.session(owner.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
    async with live.session(stranger.api_key, mode="legacy") as mcp:
        own = await create_task(mcp, ASK)
        assert [t.task_id for t in (await list_tasks(mcp)).tasks] == [own.task_id]
        for call in (get_task, cancel_task, task_result):
            with pytest.raises(MCPError) as refused:
                await call(mcp, task.task_id)
            assert refused.value.error.code == types.INVALID_PARAMS
            assert refused.value.error.message == mcp_tasks.UNKNOWN_TASK
    async with live.session(org.admin.api_key, mode="legacy") as mcp:
        listed = [t.task_id for t in (await list_tasks(mcp)).tasks]
        assert listed == [own.task_id, task.task_id]
        assert (await get_task(mcp, task.task_id)).status == "working"
    async with live.session(owner.api_key, mode="legacy") as mcp:
        assert [t.task_id for t in (await list_tasks(mcp)).tasks] == [task.task_id]
        assert (await get_task(mcp, task.task_id)).status == "working"  # not cancelled
