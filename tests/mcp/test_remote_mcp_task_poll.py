"""The task poll ``/mcp`` answers itself (remote_mcp/task_poll.py) against the SDK's own
path (``SIGNOFF_STOCK_TASK_POLL=1``): the same JSON-RPC answers, byte for byte."""

from __future__ import annotations

import httpx
import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError

from signoff.remote_mcp import task_poll
from tests.conftest import Org
from tests.mcp.conftest import Live
from tests.mcp.test_remote_mcp_tasks import ASK, create_task, decide, get_task, poll_of

pytestmark = pytest.mark.anyio

UNKNOWN = "01a2212c-3e66-7089-80cb-05dfc479c852"


def rpc_bytes(answer: httpx.Response) -> bytes:
    """The JSON-RPC message of an answer: its JSON body, or the data of its one SSE event."""
    assert answer.status_code == 200, answer.text
    if answer.headers["content-type"].startswith("text/event-stream"):
        data = [line for line in answer.content.splitlines() if line.startswith(b"data: ")]
        assert len(data) == 1, answer.text
        return data[0].removeprefix(b"data: ")
    assert answer.headers["content-type"] == "application/json"
    return answer.content


async def both_paths(
    live: Live, org: Org, task_id: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[bytes, bytes]:
    poll, headers = poll_of(task_id, org)
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        # The first call loads the SDK; the fast path answers once it is loaded.
        await api.post("/mcp", json=poll, headers=headers)
        fast = await api.post("/mcp", json=poll, headers=headers)
        monkeypatch.setattr(task_poll, "ENABLED", False)
        stock = await api.post("/mcp", json=poll, headers=headers)
        monkeypatch.setattr(task_poll, "ENABLED", True)
    assert fast.headers["content-type"] == "application/json"
    assert stock.headers["content-type"].startswith("text/event-stream")
    return rpc_bytes(fast), rpc_bytes(stock)


@pytest.mark.parametrize("outcome", ["pending", "approve", "reject", "cancel", "unknown"])
async def test_the_fast_path_answers_what_the_sdk_answers(
    live: Live, org: Org, outcome: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
    task_id = UNKNOWN if outcome == "unknown" else task.task_id
    if outcome in ("approve", "reject"):
        await decide(live, org, task_id, outcome, "because")
    elif outcome == "cancel":
        async with httpx.AsyncClient(base_url=live.base_url) as api:
            cancelled = await api.delete(f"/api/v1/approvals/{task_id}", headers=org.member.headers)
            assert cancelled.status_code == 200, cancelled.text
    fast, stock = await both_paths(live, org, task_id, monkeypatch)
    assert fast == stock


@pytest.mark.parametrize("enabled", [True, False])
async def test_the_sdk_client_reads_the_same_task_on_either_path(
    live: Live, org: Org, enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(task_poll, "ENABLED", enabled)
    async with live.session(org.member.api_key, mode="legacy") as mcp:
        task = await create_task(mcp, ASK)
        await decide(live, org, task.task_id, "reject", "not today")
        read = await get_task(mcp, task.task_id)
        with pytest.raises(MCPError) as unknown:
            await get_task(mcp, UNKNOWN)
    assert (read.status, read.status_message) == ("failed", "Rejected by Admin 0: not today")
    assert unknown.value.error.code == types.INVALID_PARAMS
