"""OpenID CIBA (docs/ciba.md): discovery, registration, /oauth/bc-authorize and the CIBA grant
of /oauth/token, in poll and ping modes, following the examples of CIBA core sections 7 to
11 with httpx, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta
from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Receiver
from sqlalchemy import select, update

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.errors import ValidationFailed
from signoff.models import ApprovalRequest, OAuthClient
from signoff.oauth import ciba as ciba_service
from signoff.oauth.service import NO_CIBA
from signoff.orgs import service as orgs_service
from signoff.webhooks.urlpolicy import AddressPolicy
from tests.conftest import Member, Org, assert_error, make_settings
from tests.dashboard.support import post_form, signed_in
from tests.oauth.support import Client, bearer, grant, register_client

GRANT = "urn:openid:params:grant-type:ciba"
DETAILS = [{"type": "payment_initiation", "amount": {"currency": "EUR", "value": "123.50"}}]


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    # No wait between polls unless a test asks for one (slow_down has its own test).
    return {"ciba_interval_seconds": 0, "delivery_retry_delays_seconds": [0.2, 0.3]}


async def register(
    ctx: AppContext,
    owner: Member,
    *,
    mode: str | None = "poll",
    endpoint: str | None = None,
    public: bool = False,
) -> Client:
    registration = await ciba_service.check_registration(
        AddressPolicy.from_settings(ctx.settings), mode is not None, mode, endpoint
    )
    return await register_client(
        ctx, owner, public=public, name="Agent Smith", ciba=NO_CIBA if public else registration
    )


def auth(client: Client) -> httpx.BasicAuth:
    return httpx.BasicAuth(client.client_id, client.client_secret or "")


async def bc_authorize(
    http: httpx.AsyncClient, client: Client, person: Member, **extra: str
) -> httpx.Response:
    data = {
        "scope": "openid approvals:read",
        "login_hint": person.email,
        "binding_message": "W4SCT",
        "authorization_details": orjson.dumps(DETAILS).decode(),
        **extra,
    }
    data = {k: v for k, v in data.items() if v != "-"}
    return await http.post("/oauth/bc-authorize", data=data, auth=auth(client))


async def poll(http: httpx.AsyncClient, client: Client, auth_req_id: str) -> httpx.Response:
    return await http.post(
        "/oauth/token",
        data={"grant_type": GRANT, "auth_req_id": auth_req_id},
        auth=auth(client),
    )


def assert_oauth_error(response: httpx.Response, status: int, error: str) -> None:
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error, body
    assert set(body) == {"error", "error_description"}
    assert response.headers["cache-control"] == "no-store"


async def decide(http: httpx.AsyncClient, who: Member, request_id: str, decision: str) -> None:
    """The person votes on their step, the request's only one."""
    steps = await http.get(f"/api/v1/approvals/{request_id}/steps", headers=who.headers)
    (step,) = steps.json()["data"]
    response = await http.patch(
        f"/api/v1/approvals/{request_id}/steps/{step['id']}",
        json={"decision": decision},
        headers=who.headers,
    )
    assert response.status_code == 200, response.text


async def expire(ctx: AppContext, auth_req_id: str) -> None:
    """The request's deadline a second ago, with nobody having decided."""
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == uuid.UUID(auth_req_id))
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )


@pytest.fixture
async def poller(ctx: AppContext, org: Org) -> Client:
    return await register(ctx, org.member)


def person(org: Org) -> Member:
    """Whom the agent asks: not the owner of the client's connection."""
    return next(m for m in org.members if m.user_id != org.member.user_id)


# ---- discovery and registration ----


async def test_metadata_lists_ciba(client: httpx.AsyncClient) -> None:
    body = (await client.get("/.well-known/oauth-authorization-server")).json()
    assert body["backchannel_authentication_endpoint"].endswith("/oauth/bc-authorize")
    assert body["backchannel_token_delivery_modes_supported"] == ["poll", "ping"]
    assert GRANT in body["grant_types_supported"]
    assert body["backchannel_user_code_parameter_supported"] is False


async def test_registration_over_the_api(client: httpx.AsyncClient, org: Org) -> None:
    response = await client.post(
        "/api/v1/oauth-clients",
        json={
            "name": "Agent",
            "ciba": True,
            "backchannel_token_delivery_mode": "ping",
            "backchannel_client_notification_endpoint": "http://127.0.0.1:9/ping",
        },
        headers=org.admin.headers,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["ciba"] is True
    assert body["backchannel_token_delivery_mode"] == "ping"
    assert body["redirect_uris"] == []
    missing = await client.post(
        "/api/v1/oauth-clients",
        json={"name": "Agent", "ciba": True, "backchannel_token_delivery_mode": "ping"},
        headers=org.admin.headers,
    )
    assert_error(missing, 400, "VALIDATION_ERROR")
    public = await client.post(
        "/api/v1/oauth-clients",
        json={"name": "Agent", "ciba": True, "public": True},
        headers=org.admin.headers,
    )
    assert_error(public, 400, "VALIDATION_ERROR")


async def test_registration_on_the_dashboard(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await signed_in(ctx, client, org.admin)
    answer = await post_form(
        client,
        "/admin/oauth-clients",
        "/admin/oauth-clients",
        name="Dashboard agent",
        connection_id=org.admin.connection_id,
        redirect_uris="",
        kind="ciba-ping",
        notification_endpoint="http://127.0.0.1:9/ping",
    )
    assert answer.status_code == 200, answer.text
    async with ctx.reading() as uow:
        row = await uow.session.scalar(
            select(OAuthClient).where(OAuthClient.name == "Dashboard agent")
        )
    assert row is not None and row.ciba_enabled and row.ciba_delivery_mode == "ping"
    assert row.ciba_notification_endpoint == "http://127.0.0.1:9/ping"
    listed = await client.get("/admin/oauth-clients")
    assert "OpenID CIBA, ping" in listed.text


async def test_notification_endpoint_is_ssrf_checked(database_url: str) -> None:
    production = AddressPolicy.from_settings(make_settings(database_url, env="production"))
    with pytest.raises(ValidationFailed) as refused:
        await ciba_service.check_registration(production, True, "ping", "https://127.0.0.1/ping")
    assert "backchannel_client_notification_endpoint" in str(refused.value.details)


async def test_openapi_declares_every_status_of_bc_authorize(client: httpx.AsyncClient) -> None:
    document = (await client.get("/api/v1/openapi.json")).json()
    operation = document["paths"]["/oauth/bc-authorize"]["post"]
    assert set(operation["responses"]) == {"200", "400", "401", "403"}
    for error in (
        "invalid_request",
        "invalid_scope",
        "unknown_user_id",
        "unauthorized_client",
        "invalid_binding_message",
        "invalid_authorization_details",
    ):
        assert error in operation["responses"]["400"]["description"]
    assert "application/x-www-form-urlencoded" in operation["requestBody"]["content"]


# ---- poll mode ----


async def test_poll_mode_approved(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    who = person(org)
    started = await bc_authorize(client, poller, who, requested_expiry="120")
    assert started.status_code == 200, started.text
    body = started.json()
    assert set(body) == {"auth_req_id", "expires_in", "interval"}
    assert body["expires_in"] == 120
    auth_req_id = body["auth_req_id"]
    assert_oauth_error(await poll(client, poller, auth_req_id), 400, "authorization_pending")
    # The request is the person's: assigned to them, the binding message its title.
    request = await client.get(f"/api/v1/approvals/{auth_req_id}", headers=who.headers)
    assert request.json()["title"] == "W4SCT"
    assert request.json()["arguments"] == {"authorization_details": DETAILS}
    steps = await client.get(f"/api/v1/approvals/{auth_req_id}/steps", headers=who.headers)
    assert [s["approver_id"] for s in steps.json()["data"]] == [who.user_id]
    await decide(client, who, auth_req_id, "approve")
    answer = await poll(client, poller, auth_req_id)
    assert answer.status_code == 200, answer.text
    tokens = answer.json()
    assert tokens["token_type"] == "Bearer"
    assert tokens["scope"] == "approvals:read"
    assert tokens["authorization_details"] == DETAILS
    assert tokens["receipt"].count(".") == 2  # a JWS
    assert tokens["user_email"] == who.email
    me = await client.get("/api/v1/approvals", headers=bearer(tokens["access_token"]))
    assert me.status_code == 200
    # Once per auth_req_id.
    assert_oauth_error(await poll(client, poller, auth_req_id), 400, "invalid_grant")
    # Introspection names what was approved (RFC 9396 section 9.2), for the access token
    # and the refresh token of the same grant.
    for token in (tokens["access_token"], tokens["refresh_token"]):
        seen = await client.post("/oauth/introspect", data={"token": token}, auth=auth(poller))
        assert seen.json()["active"] is True
        assert seen.json()["authorization_details"] == DETAILS


async def test_tokens_of_other_grants_introspect_without_authorization_details(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    tokens = await grant(ctx, poller, org.member, ("approvals:read",))
    seen = await client.post(
        "/oauth/introspect", data={"token": tokens["access_token"]}, auth=auth(poller)
    )
    assert seen.json()["active"] is True
    assert "authorization_details" not in seen.json()


async def test_rejected_and_cancelled_are_access_denied(
    client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    who = person(org)
    rejected = (await bc_authorize(client, poller, who)).json()["auth_req_id"]
    await decide(client, who, rejected, "reject")
    assert_oauth_error(await poll(client, poller, rejected), 400, "access_denied")
    cancelled = (await bc_authorize(client, poller, who)).json()["auth_req_id"]
    response = await client.delete(f"/api/v1/approvals/{cancelled}", headers=org.member.headers)
    assert response.status_code == 200, response.text
    assert_oauth_error(await poll(client, poller, cancelled), 400, "access_denied")


async def test_expired_token(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    auth_req_id = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    await expire(ctx, auth_req_id)
    assert_oauth_error(await poll(client, poller, auth_req_id), 400, "expired_token")


async def test_a_poll_sooner_than_the_interval_is_slow_down_until_it_passes(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    ctx.settings.ciba_interval_seconds = 1  # type: ignore[misc]
    started = (await bc_authorize(client, poller, person(org))).json()
    assert started["interval"] == 1
    auth_req_id = started["auth_req_id"]
    assert_oauth_error(await poll(client, poller, auth_req_id), 400, "authorization_pending")
    assert_oauth_error(await poll(client, poller, auth_req_id), 400, "slow_down")
    # A refused poll does not push the window on: the next one after it is answered.
    await asyncio.sleep(1.1)
    assert_oauth_error(await poll(client, poller, auth_req_id), 400, "authorization_pending")


async def test_the_pace_is_per_request(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    ctx.settings.ciba_interval_seconds = 30  # type: ignore[misc]
    first = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    second = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    assert_oauth_error(await poll(client, poller, first), 400, "authorization_pending")
    assert_oauth_error(await poll(client, poller, second), 400, "authorization_pending")
    assert_oauth_error(await poll(client, poller, first), 400, "slow_down")


async def test_unknown_or_foreign_auth_req_id(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    other = await register(ctx, org.member)
    auth_req_id = (await bc_authorize(client, poller, person(org))).json()["auth_req_id"]
    assert_oauth_error(await poll(client, other, auth_req_id), 400, "invalid_grant")
    assert_oauth_error(await poll(client, poller, str(uuid.uuid4())), 400, "invalid_grant")
    assert_oauth_error(await poll(client, poller, "nonsense"), 400, "invalid_grant")
    missing = await client.post("/oauth/token", data={"grant_type": GRANT}, auth=auth(poller))
    assert_oauth_error(missing, 400, "invalid_request")


# ---- refusals of /oauth/bc-authorize (CIBA core section 13) ----


async def test_client_refusals(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    who = person(org)
    wrong = Client(poller.client_id, "wrong", "", poller.connection_id)
    assert_oauth_error(await bc_authorize(client, wrong, who), 401, "invalid_client")
    plain = await register(ctx, org.member, mode=None)
    assert_oauth_error(await bc_authorize(client, plain, who), 400, "unauthorized_client")
    public = await register(ctx, org.member, public=True)
    response = await client.post(
        "/oauth/bc-authorize",
        data={"client_id": public.client_id, "scope": "openid", "login_hint": who.email},
    )
    assert_oauth_error(response, 400, "unauthorized_client")
    assert_oauth_error(await poll(client, plain, str(uuid.uuid4())), 400, "unauthorized_client")


@pytest.mark.parametrize(
    ("extra", "status", "error"),
    [
        ({"scope": "-"}, 400, "invalid_request"),
        ({"login_hint": "-"}, 400, "invalid_request"),
        ({"login_hint_token": "abc"}, 400, "invalid_request"),
        ({"requested_expiry": "0"}, 400, "invalid_request"),
        ({"requested_expiry": "soon"}, 400, "invalid_request"),
        ({"scope": "openid payments"}, 400, "invalid_scope"),
        ({"login_hint": "nobody@example.com"}, 400, "unknown_user_id"),
        ({"binding_message": "-"}, 400, "invalid_binding_message"),
        ({"binding_message": "x" * 101}, 400, "invalid_binding_message"),
        ({"binding_message": "two\nlines"}, 400, "invalid_binding_message"),
        ({"authorization_details": "{"}, 400, "invalid_authorization_details"),
        ({"authorization_details": '{"type": "x"}'}, 400, "invalid_authorization_details"),
        ({"authorization_details": '[{"amount": 1}]'}, 400, "invalid_authorization_details"),
    ],
)
async def test_request_refusals(
    client: httpx.AsyncClient,
    org: Org,
    poller: Client,
    extra: dict[str, str],
    status: int,
    error: str,
) -> None:
    response = await bc_authorize(client, poller, person(org), **extra)
    assert_oauth_error(response, status, error)


async def test_deactivated_user_is_access_denied(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    who = person(org)
    async with ctx.transaction() as uow:
        user = await uow.orgs.get_user(uuid.UUID(org.id), uuid.UUID(who.user_id))
        assert user is not None
        await orgs_service.deactivate_user(uow.oauth, user, utcnow())
    assert_oauth_error(await bc_authorize(client, poller, who), 403, "access_denied")


async def test_ping_mode_requires_a_notification_token(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    pinged = await register(ctx, org.member, mode="ping", endpoint="http://127.0.0.1:9/cb")
    response = await bc_authorize(client, pinged, person(org))
    assert_oauth_error(response, 400, "invalid_request")


# ---- ping mode, and a person deciding on the request's page ----


async def test_ping_mode_after_a_decision_on_the_page(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    who = person(org)
    token = "8d67dc78-7faa-4d41-aabd-67707b374255"
    async with Receiver() as receiver:
        pinged = await register(ctx, org.member, mode="ping", endpoint=receiver.url + "/cb")
        started = await bc_authorize(client, pinged, who, client_notification_token=token)
        assert started.status_code == 200, started.text
        auth_req_id = started.json()["auth_req_id"]
        await signed_in(ctx, client, who)
        decided = await post_form(
            client,
            f"/requests/{auth_req_id}",
            f"/requests/{auth_req_id}/decision",
            decision="approve",
        )
        assert decided.status_code == 303, decided.text
        (ping,) = await receiver.wait_for(1)
    assert ping.method == "POST" and ping.path.endswith("/cb")
    assert orjson.loads(ping.body) == {"auth_req_id": auth_req_id}
    assert ping.headers["authorization"] == f"Bearer {token}"
    assert "webhook-signature" in ping.headers
    answer = await poll(client, pinged, auth_req_id)
    assert answer.status_code == 200, answer.text
    assert answer.json()["authorization_details"] == DETAILS
    # The token is stored encrypted only.
    async with ctx.reading() as uow:
        stored = await uow.session.scalar(
            select(ApprovalRequest.callback_headers_encrypted).where(
                ApprovalRequest.id == uuid.UUID(auth_req_id)
            )
        )
    assert stored is not None and token not in stored


async def test_poll_mode_after_a_decision_on_the_page(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, poller: Client
) -> None:
    who = person(org)
    auth_req_id = (await bc_authorize(client, poller, who)).json()["auth_req_id"]
    await signed_in(ctx, client, who)
    decided = await post_form(
        client, f"/requests/{auth_req_id}", f"/requests/{auth_req_id}/decision", decision="reject"
    )
    assert decided.status_code == 303, decided.text
    assert_oauth_error(await poll(client, poller, auth_req_id), 400, "access_denied")


async def test_client_row_keeps_the_registration(ctx: AppContext, org: Org) -> None:
    pinged = await register(ctx, org.member, mode="ping", endpoint="http://127.0.0.1:9/cb")
    async with ctx.reading() as uow:
        row = await uow.session.scalar(
            select(OAuthClient).where(OAuthClient.client_id == pinged.client_id)
        )
    assert row is not None
    assert (row.ciba_enabled, row.ciba_delivery_mode) == (True, "ping")
    assert row.ciba_notification_endpoint == "http://127.0.0.1:9/cb"


async def test_an_api_create_may_not_claim_the_ciba_source(
    client: httpx.AsyncClient, org: Org
) -> None:
    """The source that makes a decision's callback a CIBA ping is the CIBA endpoint's
    alone: an API caller naming it is refused, so it cannot turn its callbacks into pings
    without a receipt."""
    body = {
        "title": "Pay the invoice",
        "description": "Order 1182.",
        "priority": "high",
        "source": "openid-ciba",
        "callback_url": "https://agent.example/hook",
    }
    refused = await client.post("/api/v1/approvals", json=body, headers=org.member.headers)
    assert_error(refused, 400, "VALIDATION_ERROR")
    assert refused.json()["error"]["details"]["fields"] == [
        {"field": "source", "message": "'openid-ciba' is reserved for /oauth/bc-authorize"}
    ]
    made = await client.post(
        "/api/v1/approvals", json={**body, "source": "openid-ciba-ish"}, headers=org.member.headers
    )
    assert made.status_code == 201, made.text
