"""The five calls the API guard hands straight to their handlers (hot_routes.py) against
the app's own routing (what ``SIGNOFF_STOCK_HOT_ROUTES=1`` serves): the same status,
headers (all but the date, the request id and the allowance left) and body bytes, for
answers and refusals, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from signoff import hot_routes
from signoff.app import create_app
from signoff.approvals import service
from signoff.config import Settings
from signoff.hot_routes import HotRoutes
from signoff.middleware import ApiGuard
from signoff.wiring import Wiring
from tests.conftest import Org, approval_body, create_approval, make_settings
from tests.steps.test_steps import set_chain, vote

pytestmark = pytest.mark.anyio

Call = Callable[[], Awaitable[httpx.Response]]
# What differs between two answers to the same call, whichever path serves them.
VARYING = {b"date", b"x-request-id", b"x-ratelimit-remaining"}


class Paths:
    """Sends a call by the guard's direct dispatch and by the app's routing, and checks
    which of them served it."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.direct = 0
        call = HotRoutes.call

        async def counted(self_: HotRoutes, *args: Any) -> None:
            self.direct += 1
            await call(self_, *args)

        monkeypatch.setattr(HotRoutes, "call", counted)

    async def fast(self, call: Call, *, dispatched: bool = True) -> httpx.Response:
        before = self.direct
        response = await call()
        assert self.direct == before + dispatched, "dispatched" if not dispatched else "routed"
        return response

    async def stock(self, call: Call) -> httpx.Response:
        with self.monkeypatch.context() as patch:
            patch.setattr(HotRoutes, "find", lambda self_, scope: None)
            before = self.direct
            response = await call()
            assert self.direct == before
            return response

    async def both(
        self, call: Call, *, dispatched: bool = True
    ) -> tuple[httpx.Response, httpx.Response]:
        return await self.fast(call, dispatched=dispatched), await self.stock(call)


@pytest.fixture
def paths(monkeypatch: pytest.MonkeyPatch) -> Paths:
    return Paths(monkeypatch)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {"max_body_bytes": 2048}


def raw(response: httpx.Response) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    headers = [(k.lower(), v) for k, v in response.headers.raw if k.lower() not in VARYING]
    return response.status_code, headers, response.content


def assert_same(fast: httpx.Response, stock: httpx.Response, status: int) -> None:
    assert raw(fast) == raw(stock), (fast.text, stock.text)
    assert fast.status_code == status, fast.text
    if "x-ratelimit-remaining" in fast.headers:
        left = int(fast.headers["x-ratelimit-remaining"])
        assert int(stock.headers["x-ratelimit-remaining"]) == left - 1  # one more call counted
    assert fast.headers["x-request-id"]


def assert_alike(fast: httpx.Response, stock: httpx.Response, status: int, *own: str) -> None:
    """Two answers that each name what the call made (``own``: its id, its times)."""
    assert fast.status_code == stock.status_code == status, (fast.text, stock.text)
    names = [k for k, _ in raw(fast)[1] if k != b"content-length"]
    assert names == [k for k, _ in raw(stock)[1] if k != b"content-length"]
    mine, theirs = fast.json(), stock.json()
    assert list(mine) == list(theirs)
    for key in own:
        mine.pop(key), theirs.pop(key)
    assert mine == theirs


def posting(client: httpx.AsyncClient, org: Org, **body: Any) -> Call:
    def call() -> Awaitable[httpx.Response]:
        return client.post("/api/v1/approvals", json=body, headers=org.member.headers)

    return call


async def test_create_answers_and_refusals(
    client: httpx.AsyncClient, org: Org, paths: Paths
) -> None:
    fast, stock = await paths.both(posting(client, org, **approval_body()))
    assert_alike(fast, stock, 201, "id", "created_at", "updated_at", "number")
    assert_same(*await paths.both(posting(client, org, priority="high")), 400)
    assert_same(*await paths.both(posting(client, org, **approval_body(priority="no"))), 400)

    def not_json() -> Awaitable[httpx.Response]:
        headers = {**org.member.headers, "content-type": "application/json"}
        return client.post("/api/v1/approvals", content=b"{nope", headers=headers)

    assert_same(*await paths.both(not_json), 400)
    keyed = posting(client, org, **approval_body(idempotency_key="deploy-7"))
    first = await paths.fast(keyed)
    assert first.status_code == 201
    fast, stock = await paths.both(keyed)
    assert_same(fast, stock, 200)
    assert fast.headers["idempotent-replayed"] == "true"


async def test_get_decide_and_their_refusals(
    client: httpx.AsyncClient, org: Org, paths: Paths
) -> None:
    made = await create_approval(client, org.member)
    where = f"/api/v1/approvals/{made['id']}"
    reader = org.members[1].headers

    def get(path: str = where) -> Call:
        return lambda: client.get(path, headers=reader)

    assert_same(*await paths.both(get()), 200)
    assert_same(*await paths.both(get(where + "/")), 200)  # the trailing slash goes
    assert_same(*await paths.both(get(f"/api/v1/approvals/{uuid.uuid4()}")), 404)
    assert_same(*await paths.both(get("/api/v1/approvals/nonsense")), 404)

    def decide(decision: Any) -> Call:
        body = {"decision": decision}
        return lambda: client.patch(where, json=body, headers=org.admin.headers)

    assert_same(*await paths.both(decide("maybe")), 400)
    approved = await paths.fast(decide("approve"))
    assert approved.status_code == 200, approved.text
    assert_same(*await paths.both(decide("reject")), 409)
    assert_same(*await paths.both(get()), 200)  # approved: its receipt, steps and votes
    put = lambda: client.put(where, json={}, headers=reader)  # noqa: E731
    assert_same(*await paths.both(put, dispatched=False), 405)


async def test_list_pages_and_their_refusals(
    client: httpx.AsyncClient, org: Org, paths: Paths
) -> None:
    for _ in range(3):
        await create_approval(client, org.member)
    reader = org.members[1].headers

    def listing(query: str) -> Call:
        return lambda: client.get("/api/v1/approvals" + query, headers=reader)

    first, _ = await paths.both(listing("?page_size=2"))
    cursor = first.json()["next_cursor"]
    answered = ["", "?page_size=2", "?page=2&page_size=2", f"?cursor={cursor}&page_size=2"]
    answered += ["?status=pending&priority=high", "?search=deploy"]
    for query in answered:
        assert_same(*await paths.both(listing(query)), 200)
    for query in ["?page_size=0", "?cursor=nonsense", "?status=maybe"]:
        assert_same(*await paths.both(listing(query)), 400)
    assert_same(*await paths.both(listing("/")), 200)  # the trailing slash goes


async def test_a_decision_each_way(client: httpx.AsyncClient, org: Org, paths: Paths) -> None:
    answers = []
    body = {"decision": "approve", "comment": "fine"}
    for send_by in (paths.fast, paths.stock):
        made = await create_approval(client, org.member)
        path = f"/api/v1/approvals/{made['id']}"

        def decide(path: str = path) -> Awaitable[httpx.Response]:
            return client.patch(path, json=body, headers=org.admin.headers)

        answers.append(await send_by(decide))
    assert_alike(
        answers[0], answers[1], 200, "id", "created_at", "updated_at", "decided_at", "number"
    )


async def test_votes(client: httpx.AsyncClient, org: Org, paths: Paths) -> None:
    a, b = org.members[1], org.members[2]
    answers = []
    for send_by in (paths.fast, paths.stock):
        made = await create_approval(client, org.member)
        steps = await set_chain(client, org.admin, made["id"], [a, b])
        answers.append(await send_by(lambda: vote(client, a, made["id"], steps[0]["id"])))  # noqa: B023
    assert_alike(answers[0], answers[1], 200, "id", "approval_request_id", "decided_at")
    again = lambda: vote(client, a, made["id"], steps[0]["id"])  # noqa: E731
    assert_same(*await paths.both(again), 409)
    nowhere = lambda: vote(client, a, made["id"], str(uuid.uuid4()))  # noqa: E731
    assert_same(*await paths.both(nowhere), 404)
    wrong = lambda: vote(client, b, made["id"], steps[1]["id"], "perhaps")  # noqa: E731
    assert_same(*await paths.both(wrong), 400)


async def test_refused_before_the_handler(
    client: httpx.AsyncClient, org: Org, paths: Paths
) -> None:
    def anonymous() -> Awaitable[httpx.Response]:
        return client.post("/api/v1/approvals", json=approval_body())

    assert_same(*await paths.both(anonymous, dispatched=False), 401)

    def declared_too_large() -> Awaitable[httpx.Response]:
        body = approval_body(description="x" * 4000)
        return client.post("/api/v1/approvals", json=body, headers=org.member.headers)

    assert_same(*await paths.both(declared_too_large, dispatched=False), 413)


async def test_a_body_found_too_large_while_read(
    client: httpx.AsyncClient, org: Org, paths: Paths
) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"title": "'
        yield b"x" * 4000
        yield b'"}'

    def streamed() -> Awaitable[httpx.Response]:
        headers = {**org.member.headers, "content-type": "application/json"}
        return client.post("/api/v1/approvals", content=chunks(), headers=headers)

    assert_same(*await paths.both(streamed), 413)


async def test_an_unexpected_error_is_the_500_envelope(
    client: httpx.AsyncClient,
    org: Org,
    paths: Paths,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a secret stack trace")

    monkeypatch.setattr(service, "create_request", broken)
    fast, stock = await paths.both(posting(client, org, **approval_body()))
    assert_same(fast, stock, 500)
    assert "secret" not in fast.text
    logged = [r for r in caplog.records if r.exc_info and "secret" in str(r.exc_info[1])]
    assert len(logged) == 2  # one each way


def guard_of(settings: Settings, wiring: Wiring) -> ApiGuard:
    app = create_app(settings, wiring=wiring, background=False)
    stack: Any = app.build_middleware_stack()
    while not isinstance(stack, ApiGuard):
        stack = stack.app
    return stack


async def test_the_switch_and_the_legacy_envelope_turn_it_off(
    settings: Settings, wiring: Wiring, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert guard_of(settings, wiring).hot is not None
    legacy = make_settings(settings.database_url, compat_legacy_clients=True)
    assert guard_of(legacy, wiring).hot is None
    monkeypatch.setenv(hot_routes.STOCK_SWITCH, "1")
    assert guard_of(settings, wiring).hot is None


async def test_the_table_names_the_routes_the_router_would_take(app: Any) -> None:
    table = HotRoutes(app.router.routes)
    for method, path in [
        ("POST", "/api/v1/approvals"),
        ("GET", "/api/v1/approvals"),
        ("GET", "/api/v1/approvals/abc"),
        ("PATCH", "/api/v1/approvals/abc"),
        ("PATCH", "/api/v1/approvals/abc/steps/def"),
    ]:
        scope = {"type": "http", "method": method, "path": path, "root_path": ""}
        found = table.find(scope)
        assert found is not None, (method, path)
        routed = next(r for r in app.router.routes if r.matches(scope)[0].name == "FULL")
        assert found[0].route is routed
    for method, path in [("GET", "/api/v1/approval"), ("DELETE", "/api/v1/approvals/abc")]:
        assert table.find({"type": "http", "method": method, "path": path}) is None
