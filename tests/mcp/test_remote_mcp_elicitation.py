"""Elicitation on ``/mcp``: a client that accepts every elicitation decides nothing.

At the newest revision the tool's answer asks the client to open the request's page
(``input_required`` with a URL-mode elicitation; the SDK's client answers and retries).
The stateless transport has no back-channel at a handshake revision, so it is not asked
there (the stdio server asks: clients/python/tests/test_mcp.py)."""

from __future__ import annotations

from typing import Any

import httpx
import mcp_types as types
import pytest
from mcp_types.version import LATEST_PROTOCOL_VERSION

from tests.conftest import Org
from tests.mcp.conftest import Live, structured

pytestmark = pytest.mark.anyio

ASK = {"title": "Wire the refund", "description": "Order 1182.", "priority": "high"}


def accepting_everything(asked: list[types.ElicitRequestParams]) -> Any:
    """The most eager client there is: "accept" to every question (noted in ``asked``),
    with a form's worth of "yes"."""

    async def accept(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params)
        return types.ElicitResult(action="accept", content={"decision": "approve"})

    return accept


async def test_a_client_that_accepts_every_elicitation_approves_nothing(
    live: Live, org: Org
) -> None:
    asked_to_open: list[types.ElicitRequestParams] = []
    accept_everything = accepting_everything(asked_to_open)

    async with live.session(
        org.member.api_key, mode="legacy", elicitation_callback=accept_everything
    ) as mcp:
        asked = structured(await mcp.call_tool("request_approval", {**ASK, "wait_seconds": 1}))
        waited = structured(
            await mcp.call_tool("wait_for_decision", {"id": asked["id"], "timeout_seconds": 1})
        )
    assert (asked["status"], waited["status"]) == ("pending", "pending")
    # Whatever it was asked (nothing, here), no form was ever put to it.
    assert all(isinstance(p, types.ElicitRequestURLParams) for p in asked_to_open)
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        read = await api.get(f"/api/v1/approvals/{asked['id']}", headers=org.admin.headers)
    assert (read.json()["status"], read.json()["decided_by"]) == ("pending", None)


async def test_the_newest_revision_sends_the_client_to_the_page_and_its_accept_decides_nothing(
    live: Live, org: Org
) -> None:
    asked_to_open: list[types.ElicitRequestParams] = []
    accept_everything = accepting_everything(asked_to_open)

    async with live.session(org.member.api_key, elicitation_callback=accept_everything) as mcp:
        assert mcp.protocol_version == LATEST_PROTOCOL_VERSION
        asked = structured(await mcp.call_tool("request_approval", {**ASK, "wait_seconds": 1}))
    assert asked["status"] == "pending"
    (question,) = asked_to_open
    assert isinstance(question, types.ElicitRequestURLParams)
    assert question.url == f"{live.base_url}/requests/{asked['id']}"
    async with httpx.AsyncClient(base_url=live.base_url) as api:
        listed = await api.get("/api/v1/approvals", headers=org.admin.headers)
    # One request made (the retry read it, made no second), and still undecided.
    assert [(a["id"], a["status"]) for a in listed.json()["data"]] == [(asked["id"], "pending")]


async def test_a_client_without_elicitation_is_not_asked(live: Live, org: Org) -> None:
    for mode in ("auto", "legacy"):
        async with live.session(org.member.api_key, mode=mode) as mcp:
            asked = structured(await mcp.call_tool("request_approval", ASK))
        assert asked["status"] == "pending"
