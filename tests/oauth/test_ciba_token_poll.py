"""The CIBA poll the API guard answers itself (oauth/token_poll.py) against the token
endpoint's own path (``SIGNOFF_STOCK_CIBA_POLL=1``): the same status, headers and body
bytes for every answer, and the same pace, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest
from starlette.types import Receive, Scope, Send

from signoff.context import AppContext
from signoff.oauth import token_poll
from tests.conftest import Org
from tests.oauth.support import Client
from tests.oauth.test_ciba import (
    GRANT,
    auth,
    bc_authorize,
    decide,
    expire,
    person,
    register,
)

pytestmark = pytest.mark.anyio

Send_ = Callable[[], Awaitable[httpx.Response]]


class Paths:
    """Sends the same call by the fast path and by the stock one, and says which answered."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.fast_answers = 0
        answer = token_poll.answer

        async def counted(scope: Scope, receive: Receive, send: Send) -> None:
            self.fast_answers += 1
            await answer(scope, receive, send)

        monkeypatch.setattr(token_poll, "answer", counted)

    async def fast(self, call: Send_) -> httpx.Response:
        before = self.fast_answers
        response = await call()
        assert self.fast_answers == before + 1, "the guard did not answer it"
        return response

    async def stock(self, call: Send_) -> httpx.Response:
        self.monkeypatch.setattr(token_poll, "ENABLED", False)
        try:
            before = self.fast_answers
            response = await call()
            assert self.fast_answers == before
            return response
        finally:
            self.monkeypatch.setattr(token_poll, "ENABLED", True)

    async def both(self, call: Send_) -> tuple[httpx.Response, httpx.Response]:
        return await self.fast(call), await self.stock(call)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"ciba_interval_seconds": 0}


@pytest.fixture
async def poller(ctx: AppContext, org: Org) -> Client:
    return await register(ctx, org.member)


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> Paths:
    return Paths(monkeypatch)


# Set by the request's own time: the two paths' requests may fall either side of a second.
_TIMED = (b"x-request-id", b"x-ratelimit-reset")


def raw(response: httpx.Response) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """What must be the same on both paths: all but the request id and the time the rate
    limit's window resets (compared apart, ``assert_same``)."""
    headers = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in _TIMED]
    return response.status_code, headers, response.content


def assert_same(fast: httpx.Response, stock: httpx.Response, status: int, error: str) -> None:
    assert raw(fast) == raw(stock)
    resets = [r.headers.get("x-ratelimit-reset") for r in (fast, stock)]
    assert (resets[0] is None) == (resets[1] is None), resets
    if resets[0] is not None:
        assert abs(int(resets[0]) - int(resets[1])) <= 1, resets
    assert fast.status_code == status, fast.text
    assert fast.json()["error"] == error
    assert fast.headers["cache-control"] == "no-store"
    assert fast.headers["pragma"] == "no-cache"


def polling(
    http: httpx.AsyncClient,
    client: Client,
    auth_req_id: str | None,
    path: str = "/oauth/token",
    **extra: str,
) -> Send_:
    data = {"grant_type": GRANT, **extra}
    if auth_req_id is not None:
        data["auth_req_id"] = auth_req_id

    def call() -> Awaitable[httpx.Response]:
        return http.post(path, data=data, auth=auth(client))

    return call


@pytest.mark.parametrize("path", ["/oauth/token", "/api/v1/oauth/token"])
async def test_pending_and_refusals_of_the_request(
    client: httpx.AsyncClient, org: Org, poller: Client, paths: Paths, path: str
) -> None:
    who = person(org)
    pending = (await bc_authorize(client, poller, who)).json()["auth_req_id"]
    fast, stock = await paths.both(polling(client, poller, pending, path))
    assert_same(fast, stock, 400, "authorization_pending")
    if path.startswith("/api/v1"):
        assert "x-ratelimit-limit" in fast.headers  # as every /api/v1 answer
    await decide(client, who, pending, "reject")
    assert_same(*await paths.both(polling(client, poller, pending, path)), 400, "access_denied")
    for unknown in (str(uuid.uuid4()), "nonsense"):
        fast, stock = await paths.both(polling(client, poller, unknown, path))
        assert_same(fast, stock, 400, "invalid_grant")
    fast, stock = await paths.both(polling(client, poller, None, path))
    assert_same(fast, stock, 400, "invalid_request")


async def test_expired_and_cancelled(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client, paths: Paths
) -> None:
    expired = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    await expire(ctx, expired)
    assert_same(*await paths.both(polling(client, poller, expired)), 400, "expired_token")
    cancelled = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    response = await client.delete(f"/api/v1/approvals/{cancelled}", headers=org.member.headers)
    assert response.status_code == 200, response.text
    assert_same(*await paths.both(polling(client, poller, cancelled)), 400, "access_denied")


async def test_another_clients_request_and_client_refusals(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client, paths: Paths
) -> None:
    mine = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    other = await register(ctx, org.member)
    assert_same(*await paths.both(polling(client, other, mine)), 400, "invalid_grant")
    plain = await register(ctx, org.member, mode=None)
    fast, stock = await paths.both(polling(client, plain, mine))
    assert_same(fast, stock, 400, "unauthorized_client")
    for wrong in (
        Client(poller.client_id, "wrong", "", poller.connection_id),
        Client("soc_unknown", "wrong", "", poller.connection_id),
    ):
        fast, stock = await paths.both(polling(client, wrong, mine))
        assert_same(fast, stock, 401, "invalid_client")
        assert fast.headers["www-authenticate"] == 'Basic realm="signoff"'
    form = {"grant_type": GRANT, "auth_req_id": mine}

    def malformed() -> Awaitable[httpx.Response]:
        basic = {"Authorization": "Basic " + base64.b64encode(b"no-colon").decode()}
        return client.post("/oauth/token", data=form, headers=basic)

    assert_same(*await paths.both(malformed), 401, "invalid_client")

    def twice() -> Awaitable[httpx.Response]:
        return client.post("/oauth/token", data={**form, "client_secret": "x"}, auth=auth(poller))

    assert_same(*await paths.both(twice), 400, "invalid_request")

    def in_the_body() -> Awaitable[httpx.Response]:
        secret = poller.client_secret or ""
        data = {**form, "client_id": poller.client_id, "client_secret": secret}
        return client.post("/oauth/token", data=data)

    assert_same(*await paths.both(in_the_body), 400, "authorization_pending")

    def nobody() -> Awaitable[httpx.Response]:
        return client.post("/oauth/token", data=form)

    assert_same(*await paths.both(nobody), 401, "invalid_client")


async def test_the_success_answer_and_its_one_use(
    client: httpx.AsyncClient, org: Org, poller: Client, paths: Paths
) -> None:
    who = person(org)
    answers = []
    for send_by in (paths.fast, paths.stock):
        auth_req_id = (await bc_authorize(client, poller, who)).json()["auth_req_id"]
        await decide(client, who, auth_req_id, "approve")
        answers.append(await send_by(polling(client, poller, auth_req_id)))
        again = await paths.both(polling(client, poller, auth_req_id))
        assert_same(*again, 400, "invalid_grant")
    fast, stock = answers
    assert fast.status_code == stock.status_code == 200, fast.text
    # Tokens and receipts are each request's own; all else is the same, in the same order.
    assert [k for k, _ in fast.headers.raw if k != b"x-request-id"] == [
        k for k, _ in stock.headers.raw if k != b"x-request-id"
    ]
    assert fast.headers["cache-control"] == "no-store"
    assert fast.headers["content-type"] == stock.headers["content-type"]
    unique = ("access_token", "refresh_token", "receipt")
    assert list(fast.json()) == list(stock.json())
    assert {k: v for k, v in fast.json().items() if k not in unique} == {
        k: v for k, v in stock.json().items() if k not in unique
    }
    assert fast.json()["receipt"].count(".") == 2
    me = await client.get("/api/v1/approvals", headers=token_header(fast))
    assert me.status_code == 200


def token_header(answer: httpx.Response) -> dict[str, str]:
    return {"Authorization": f"Bearer {answer.json()['access_token']}"}


async def test_the_pace_is_shared_by_both_paths(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client, paths: Paths
) -> None:
    ctx.settings.ciba_interval_seconds = 30  # type: ignore[misc]
    first = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    call = polling(client, poller, first)
    # The fast path's poll is counted where the stock path looks, and the other way round.
    pending = await paths.fast(call)
    assert pending.json()["error"] == "authorization_pending"
    assert_same(*await paths.both(call), 400, "slow_down")
    second = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    call = polling(client, poller, second)
    assert (await paths.stock(call)).json()["error"] == "authorization_pending"
    assert (await paths.fast(call)).json()["error"] == "slow_down"


async def test_what_is_no_ciba_poll_goes_to_the_token_endpoint(
    client: httpx.AsyncClient, poller: Client, paths: Paths
) -> None:
    form = {"grant_type": GRANT, "auth_req_id": str(uuid.uuid4())}
    calls = [
        client.post("/oauth/token", json=form, auth=auth(poller)),
        client.post(
            "/oauth/token",
            content=f"grant_type={GRANT}&grant_type={GRANT}",
            auth=auth(poller),
            headers={"content-type": "application/x-www-form-urlencoded"},
        ),
        client.post("/oauth/token", data={"grant_type": "refresh_token"}, auth=auth(poller)),
        client.post(
            "/oauth/token",
            content=b"grant_type=\xff",
            auth=auth(poller),
            headers={"content-type": "application/x-www-form-urlencoded"},
        ),
    ]
    for call in calls:
        answer = await call
        assert answer.status_code in (400, 401), answer.text
        assert answer.json()["error"] != "authorization_pending"
    assert paths.fast_answers == 0


def test_the_switch_turns_the_fast_path_off() -> None:
    code = "from signoff.oauth import token_poll; print(token_poll.ENABLED)"
    for value, expected in (("1", "False"), ("0", "True")):
        env = {**os.environ, token_poll.STOCK_SWITCH: value}
        out = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
        )
        assert out.stdout.strip() == expected
