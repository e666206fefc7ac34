"""Elicitation on ``/mcp``: a client that accepts every elicitation decides nothing.

At the newest revision the tool's answer asks the client to open the request's page
(``input_required`` with a URL-mode elicitation; the SDK's client answers and retries).
The stateless transport has no back-channel at a handshake revision, so it is not asked
there (the stdio server asks: clients/python/tests/test_mcp.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import httpx2
import mcp_types as types
import pytest
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types.version import LATEST_PROTOCOL_VERSION

from mcp import Client
from signoff.wiring import Wiring
from tests.conftest import Org, make_settings
from tests.mcp.conftest import Live, serving, structured

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


class RewritesRetries(httpx2.AsyncBaseTransport):
    """Sends every retry that carries a request state as ``rewrite`` makes it over."""

    def __init__(self, rewrite: Callable[[httpx2.Request, bytes], httpx2.Request]) -> None:
        self.rewrite = rewrite
        self.inner = httpx2.AsyncHTTPTransport()
        self.rewritten = 0

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        body = await request.aread()
        if b'"requestState"' in body:
            self.rewritten += 1
            request = self.rewrite(request, body)
        return await self.inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self.inner.aclose()


def retries_elsewhere(other: str) -> RewritesRetries:
    """A load balancer at its least helpful: every retry carrying a request state goes to
    the other replica."""
    to = httpx2.URL(other)

    def reroute(request: httpx2.Request, body: bytes) -> httpx2.Request:
        url = request.url.copy_with(host=to.host, port=to.port)
        return httpx2.Request(request.method, url, headers=request.headers, content=body)

    return RewritesRetries(reroute)


def retries_as(api_key: str) -> RewritesRetries:
    """Someone who got hold of a request state: the retry that carries it goes out with
    another key."""

    def replay(request: httpx2.Request, body: bytes) -> httpx2.Request:
        headers = {**request.headers, "authorization": f"Bearer {api_key}"}
        return httpx2.Request(request.method, request.url, headers=headers, content=body)

    return RewritesRetries(replay)


async def test_the_retry_after_an_elicitation_may_reach_another_replica(
    live: Live, org: Org, database_url: str
) -> None:
    # A second replica: its own process state, the same database and secret key.
    replica = Wiring.from_settings(make_settings(database_url))
    try:
        async with serving(replica.ctx.settings, replica) as other:
            balancer = retries_elsewhere(other.base_url)
            http = httpx2.AsyncClient(
                headers={"Authorization": f"Bearer {org.member.api_key}"},
                timeout=httpx2.Timeout(30, read=60),
                transport=balancer,
            )
            asked_to_open: list[types.ElicitRequestParams] = []
            async with Client(
                streamable_http_client(live.mcp_url, http_client=http),
                read_timeout_seconds=60,
                elicitation_callback=accepting_everything(asked_to_open),
            ) as mcp:
                result = await mcp.call_tool("request_approval", {**ASK, "wait_seconds": 1})
    finally:
        await replica.close()
    asked = structured(result)
    assert asked["status"] == "pending"
    assert len(asked_to_open) == 1 and balancer.rewritten == 1


@pytest.mark.parametrize("replayer", ["another member", "an admin"])
async def test_a_request_state_replayed_with_another_key_is_refused(
    live: Live, org: Org, replayer: str
) -> None:
    other = org.members[1] if replayer == "another member" else org.admin
    replaying = retries_as(other.api_key)
    http = httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {org.member.api_key}"},
        timeout=httpx2.Timeout(30, read=60),
        transport=replaying,
    )
    async with Client(
        streamable_http_client(live.mcp_url, http_client=http),
        read_timeout_seconds=60,
        elicitation_callback=accepting_everything([]),
    ) as mcp:
        with pytest.raises(MCPError) as refused:
            await mcp.call_tool("request_approval", ASK)
    assert replaying.rewritten == 1
    assert refused.value.error.code == types.INVALID_PARAMS
    assert refused.value.error.message == "Invalid or expired requestState"
