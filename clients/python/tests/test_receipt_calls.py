"""The receipt calls and ``@requires_approval``'s receipt checks, against a scripted server
(an ``httpx.MockTransport``): the live server's receipts are tested end to end elsewhere;
here each answer the client must handle is made on purpose."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from signer import current_claims, new_key, public_jwks, sign
from signoff_client import (
    Approval,
    ArgumentsMismatch,
    AsyncSignoffClient,
    Conflict,
    InvalidReceipt,
    NotFound,
    ReceiptExpired,
    ReceiptRefused,
    ReceiptUsedUp,
    Redemption,
    ServerError,
    SignoffClient,
    UnknownReceiptKey,
    arguments_hash,
    requires_approval,
)

KEY = new_key("k1")


def error(status: int, code: str) -> httpx.Response:
    return httpx.Response(status, json={"error": {"code": code, "message": code, "details": {}}})


class FakeSignoff:
    """Answers like a signoff server with receipts: a created request is approved at once
    and carries a receipt for its arguments, unless a test changes what it answers."""

    def __init__(self) -> None:
        self.requests: list[httpx.Request] = []
        self.created: dict[str, Any] = {}
        self.keys = [KEY]
        self.redeem_answer: Callable[[dict[str, Any]], httpx.Response] = self._redeemed
        # Changes a test makes to the approved request (edits, no receipt...).
        self.approved_with: dict[str, Any] = {}
        self.receipt_claims: dict[str, Any] = {}

    def paths(self, method: str | None = None) -> list[str]:
        return [r.url.path for r in self.requests if method in (None, r.method)]

    def body(self, path: str) -> dict[str, Any]:
        (request,) = [r for r in self.requests if r.url.path == path and r.method == "POST"]
        body: dict[str, Any] = json.loads(request.content)
        return body

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        path = request.url.path
        if path == "/.well-known/jwks.json":
            return httpx.Response(200, json=public_jwks(*self.keys))
        if path == "/api/v1/receipts/redeem":
            return self.redeem_answer(json.loads(request.content))
        if path == "/api/v1/approvals" and request.method == "POST":
            self.created = json.loads(request.content)
            return httpx.Response(201, json=self.approval("pending"))
        if path.startswith("/api/v1/approvals/"):
            return httpx.Response(200, json=self.approval("approved"))
        return error(404, "NOT_FOUND")

    def approval(self, status: str) -> dict[str, Any]:
        arguments = self.created.get("arguments")
        data: dict[str, Any] = {
            "id": "req-1",
            "title": self.created.get("title", "t"),
            "status": status,
            "priority": "medium",
            "created_at": "2026-11-28T00:00:00Z",
            "action_type": self.created.get("action_type"),
        }
        if status == "approved":
            approved = self.approved_with.get("arguments", arguments)
            receipt = current_claims(
                **{
                    "arguments": approved,
                    "action_type": self.created.get("action_type"),
                    **self.receipt_claims,
                }
            )
            data |= {
                "arguments": approved,
                "arguments_hash": arguments_hash(approved),
                "arguments_edited": False,
                "receipt": sign(KEY, receipt),
                "receipt_issued": True,
            }
            data |= {k: v for k, v in self.approved_with.items() if k != "arguments"}
        return data

    def _redeemed(self, body: dict[str, Any]) -> httpx.Response:
        return httpx.Response(
            200,
            json={
                "request_id": "req-1",
                "jti": "jti-1",
                "uses_left": 0,
                "redeemed_at": "2026-11-28T00:01:00Z",
            },
        )


@pytest.fixture
def fake() -> FakeSignoff:
    return FakeSignoff()


@pytest.fixture
def client(fake: FakeSignoff) -> SignoffClient:
    http = httpx.Client(transport=httpx.MockTransport(fake.handle))
    return SignoffClient("https://signoff.test", "gk_test", http_client=http, retries=2)


# ---- jwks ----


def test_jwks_is_fetched_once_and_cached(client: SignoffClient, fake: FakeSignoff) -> None:
    keys = client.jwks()
    assert [key.kid for key in keys] == ["k1"]
    assert client.jwks() is keys
    assert fake.paths() == ["/.well-known/jwks.json"]
    client.jwks(refresh=True)
    assert fake.paths() == ["/.well-known/jwks.json"] * 2


def test_a_receipt_from_a_new_key_fetches_the_keys_again(
    client: SignoffClient, fake: FakeSignoff
) -> None:
    client.jwks()
    rotated = new_key("k2")
    fake.keys = [KEY, rotated]
    assert client.verify_receipt(sign(rotated, current_claims())).kid == "k2"
    assert fake.paths() == ["/.well-known/jwks.json"] * 2
    assert (
        client.verify_receipt(sign(KEY, current_claims()), arguments={"path": "/srv/old"}).sub
        == "req-1"
    )
    assert len(fake.paths()) == 2


def test_forged_kids_fetch_the_keys_again_at_most_once_per_interval(
    fake: FakeSignoff, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("signoff_client._client.time.monotonic", lambda: clock[0])
    http = httpx.Client(transport=httpx.MockTransport(fake.handle))
    client = SignoffClient(
        "https://signoff.test", "gk_test", http_client=http, jwks_refetch_interval=60.0
    )
    client.jwks()
    for forged in range(20):
        with pytest.raises(UnknownReceiptKey):
            client.verify_receipt(sign(new_key(f"forged-{forged}"), current_claims()))
    # The first unknown kid fetched the keys again; the other 19 were refused from the cache.
    assert fake.paths() == ["/.well-known/jwks.json"] * 2
    clock[0] += 59.0
    with pytest.raises(UnknownReceiptKey):
        client.verify_receipt(sign(new_key("forged-late"), current_claims()))
    assert len(fake.paths()) == 2
    # Past the interval a real rotation is found again.
    clock[0] += 2.0
    rotated = new_key("k2")
    fake.keys = [KEY, rotated]
    assert client.verify_receipt(sign(rotated, current_claims())).kid == "k2"
    assert len(fake.paths()) == 3


@pytest.mark.anyio
async def test_the_async_client_limits_refetches_too(fake: FakeSignoff) -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))
    async with AsyncSignoffClient("https://signoff.test", "gk_test", http_client=http) as client:
        await client.jwks()
        for forged in range(5):
            with pytest.raises(UnknownReceiptKey):
                await client.verify_receipt(sign(new_key(f"forged-{forged}"), current_claims()))
    assert fake.paths() == ["/.well-known/jwks.json"] * 2


# ---- redeem ----


def test_redeem_sends_the_receipt_and_arguments(client: SignoffClient, fake: FakeSignoff) -> None:
    token = sign(KEY)
    redeemed = client.redeem_receipt(token, arguments={"path": "/srv/old"})
    assert isinstance(redeemed, Redemption)
    assert (redeemed.request_id, redeemed.jti, redeemed.uses_left) == ("req-1", "jti-1", 0)
    assert fake.body("/api/v1/receipts/redeem") == {
        "receipt": token,
        "arguments": {"path": "/srv/old"},
    }
    client.redeem_receipt(token)
    assert json.loads(fake.requests[-1].content) == {"receipt": token}


@pytest.mark.parametrize(
    ("status", "code", "kind"),
    [
        (409, "RECEIPT_USED_UP", ReceiptUsedUp),
        (410, "RECEIPT_EXPIRED", ReceiptExpired),
        (400, "ARGUMENTS_MISMATCH", ArgumentsMismatch),
        (400, "RECEIPT_INVALID", ReceiptRefused),
    ],
)
def test_redeem_refusals_are_receipt_errors(
    client: SignoffClient, fake: FakeSignoff, status: int, code: str, kind: type[Exception]
) -> None:
    fake.redeem_answer = lambda _body: error(status, code)
    with pytest.raises(kind) as caught:
        client.redeem_receipt(sign(KEY))
    assert isinstance(caught.value, InvalidReceipt)
    assert (caught.value.status_code, caught.value.code) == (status, code)  # type: ignore[attr-defined]
    if code == "RECEIPT_USED_UP":
        assert isinstance(caught.value, Conflict)


def test_redeem_other_failures_are_api_errors_and_never_resent(
    client: SignoffClient, fake: FakeSignoff
) -> None:
    fake.redeem_answer = lambda _body: error(404, "NOT_FOUND")
    with pytest.raises(NotFound) as caught:
        client.redeem_receipt(sign(KEY))
    assert not isinstance(caught.value, InvalidReceipt)
    fake.redeem_answer = lambda _body: error(502, "BAD_GATEWAY")
    with pytest.raises(ServerError):
        client.redeem_receipt(sign(KEY))
    # A redeem spends a use: after it may have reached the server, it is not repeated.
    assert fake.paths("POST").count("/api/v1/receipts/redeem") == 2


# ---- create and read ----


def test_create_sends_arguments_schema_preview_and_ttl(
    client: SignoffClient, fake: FakeSignoff
) -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    client.create_approval(
        "Scale",
        "to 3",
        "low",
        arguments={"n": 3},
        arguments_schema=schema,
        preview={"kind": "text", "content": "scale web to 3"},
        receipt_ttl_seconds=120,
    )
    body = fake.body("/api/v1/approvals")
    assert body["arguments"] == {"n": 3} and body["arguments_schema"] == schema
    assert body["preview"] == {"kind": "text", "content": "scale web to 3"}
    assert body["receipt_ttl_seconds"] == 120
    client.create_approval("Plain", "", "low")
    plain = json.loads(fake.requests[-1].content)
    assert not {"arguments", "arguments_schema", "preview", "receipt_ttl_seconds"} & set(plain)


def test_decide_sends_edited_arguments(client: SignoffClient, fake: FakeSignoff) -> None:
    client.decide("req-1", "approve", arguments={"n": 2})
    assert json.loads(fake.requests[-1].content) == {"decision": "approve", "arguments": {"n": 2}}


def test_the_models_read_receipt_fields_and_do_without_them(client: SignoffClient) -> None:
    client.create_approval("x", "", "low", arguments={"path": "/srv/old"})
    decided = client.wait_for_decision("req-1", timeout=5)
    assert decided.receipt and decided.receipt_issued and not decided.arguments_edited
    assert decided.arguments == {"path": "/srv/old"}
    old = Approval.model_validate(
        {"id": "r", "title": "t", "status": "approved", "priority": "low",
         "created_at": "2026-01-01T00:00:00Z"}
    )  # fmt: skip
    assert (old.receipt, old.receipt_issued, old.arguments, old.arguments_edited) == (
        None, False, None, False,
    )  # fmt: skip


# ---- @requires_approval ----


def test_approved_runs_with_the_approved_arguments_after_verify_and_redeem(
    client: SignoffClient, fake: FakeSignoff
) -> None:
    ran: list[tuple[str, int]] = []

    @requires_approval(client, action_type="files.delete")
    def delete(path: str, depth: int = 1) -> str:
        ran.append((path, depth))
        return "done"

    assert delete("/srv/old") == "done"
    assert ran == [("/srv/old", 1)]
    assert fake.body("/api/v1/approvals")["arguments"] == {"path": "/srv/old", "depth": 1}
    assert fake.body("/api/v1/receipts/redeem")["arguments"] == {"path": "/srv/old", "depth": 1}
    assert "/.well-known/jwks.json" in fake.paths()


def test_edited_arguments_are_the_ones_that_run(client: SignoffClient, fake: FakeSignoff) -> None:
    ran: list[tuple[str, int]] = []
    fake.approved_with = {"arguments": {"path": "/srv/old/cache", "depth": 0},
                          "arguments_edited": True}  # fmt: skip

    @requires_approval(client, arguments_schema={"type": "object"})
    def delete(path: str, depth: int = 1) -> None:
        ran.append((path, depth))

    delete("/srv/old", depth=5)
    assert ran == [("/srv/old/cache", 0)]
    assert fake.body("/api/v1/approvals")["arguments_schema"] == {"type": "object"}
    assert fake.body("/api/v1/receipts/redeem")["arguments"] == {
        "path": "/srv/old/cache",
        "depth": 0,
    }


def test_a_receipt_for_other_arguments_stops_the_call(
    client: SignoffClient, fake: FakeSignoff
) -> None:
    ran: list[str] = []
    # The server says nothing was edited, but its receipt approved something else.
    fake.approved_with = {"arguments": {"path": "/"}}

    @requires_approval(client)
    def delete(path: str) -> None:
        ran.append(path)

    with pytest.raises(ArgumentsMismatch):
        delete("/srv/old")
    assert ran == []
    assert "/api/v1/receipts/redeem" not in fake.paths()


@pytest.mark.parametrize(
    "broken",
    [
        {"receipt_claims": {"sub": "req-2"}},
        {"receipt_claims": {"action_type": "files.read"}},
        {"approved_with": {"arguments_edited": True, "arguments": {"other": 1}}},
        {"approved_with": {"receipt": None}},
        {"redeemed": error(409, "RECEIPT_USED_UP")},
    ],
)
def test_any_receipt_problem_stops_the_call(
    client: SignoffClient, fake: FakeSignoff, broken: dict[str, Any]
) -> None:
    ran: list[str] = []
    fake.receipt_claims = broken.get("receipt_claims", {})
    fake.approved_with = broken.get("approved_with", {})
    if "redeemed" in broken:
        fake.redeem_answer = lambda _body: broken["redeemed"]

    @requires_approval(client, action_type="files.delete")
    def delete(path: str) -> None:
        ran.append(path)

    with pytest.raises(InvalidReceipt):
        delete("/srv/old")
    assert ran == []


def test_a_server_without_receipts_runs_the_call_as_before(
    client: SignoffClient, fake: FakeSignoff
) -> None:
    ran: list[str] = []
    fake.approved_with = {"receipt": None, "receipt_issued": False}

    @requires_approval(client)
    def delete(path: str) -> None:
        ran.append(path)

    delete("/srv/old")
    assert ran == ["/srv/old"]
    assert "/api/v1/receipts/redeem" not in fake.paths()

    @requires_approval(client, require_receipt=True)
    def strict(path: str) -> None:
        ran.append(path)

    with pytest.raises(InvalidReceipt, match="without its receipt"):
        strict("/srv/new")
    assert ran == ["/srv/old"]


def test_arguments_json_cannot_carry_are_not_sent(client: SignoffClient, fake: FakeSignoff) -> None:
    ran: list[Any] = []

    @requires_approval(client)
    def run(handle: object) -> None:
        ran.append(handle)

    handle = object()
    run(handle)  # the receipt then approves no arguments ({}), as the request had none
    assert ran == [handle]
    assert "arguments" not in fake.body("/api/v1/approvals")
    assert fake.body("/api/v1/receipts/redeem")["arguments"] == {}

    @requires_approval(client, send_arguments=True)
    def strict(handle: object) -> None:
        ran.append(handle)

    before = len(fake.requests)
    with pytest.raises(TypeError, match="send_arguments=True"):
        strict(object())
    assert len(fake.requests) == before


@pytest.mark.anyio
async def test_the_async_client_and_decorator(fake: FakeSignoff) -> None:
    http = httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))
    async with AsyncSignoffClient("https://signoff.test", "gk_test", http_client=http) as client:
        assert [key.kid for key in await client.jwks()] == ["k1"]
        assert (await client.verify_receipt(sign(KEY, current_claims()))).jti == "jti-1"
        ran: list[tuple[str, ...]] = []
        fake.approved_with = {"arguments": {"names": ["b", "c"]}, "arguments_edited": True}

        @requires_approval(client, arguments_schema={"type": "object"})
        async def greet(*names: str) -> None:
            ran.append(names)

        await greet("a")
        assert ran == [("b", "c")]
        fake.redeem_answer = lambda _body: error(410, "RECEIPT_EXPIRED")
        with pytest.raises(ReceiptExpired):
            await greet("a")
        assert len(ran) == 1


# ---- the MCP tools ----


@pytest.mark.anyio
async def test_mcp_tools_send_arguments_and_return_the_receipt(fake: FakeSignoff) -> None:
    from mcp import Client

    from signoff_client.mcp_server import build_server

    http = httpx.AsyncClient(transport=httpx.MockTransport(fake.handle))
    fake.approved_with = {"arguments": {"replicas": 2}, "arguments_edited": True}
    async with (
        AsyncSignoffClient("https://signoff.test", "gk_test", http_client=http) as client,
        Client(build_server(lambda _ctx: client)) as mcp,
    ):
        tools = {tool.name: tool for tool in (await mcp.list_tools()).tools}
        properties = tools["request_approval"].input_schema["properties"]
        assert {"arguments", "arguments_schema", "preview"} <= set(properties)
        asked = await mcp.call_tool(
            "request_approval",
            {
                "title": "Scale web",
                "description": "Peak hours",
                "priority": "low",
                "arguments": {"replicas": 3},
                "arguments_schema": {"type": "object"},
                "preview": {"kind": "text", "content": "web: 3 replicas"},
            },
        )
        assert not asked.is_error, asked.content
        body = fake.body("/api/v1/approvals")
        assert body["arguments"] == {"replicas": 3}
        assert body["arguments_schema"] == {"type": "object"}
        assert body["preview"] == {"kind": "text", "content": "web: 3 replicas"}
        for tool in ("wait_for_decision", "get_approval"):
            result = await mcp.call_tool(tool, {"id": "req-1"})
            answer = result.structured_content
            assert answer is not None and answer["status"] == "approved", result.content
            assert answer["arguments"] == {"replicas": 2} and answer["arguments_edited"]
            assert answer["receipt"].count(".") == 2
            assert "edited" in answer["next_step"]
            assert (await client.verify_receipt(answer["receipt"])).arguments_hash == (
                arguments_hash({"replicas": 2})
            )
