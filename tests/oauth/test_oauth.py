"""OAuth 2.0 with PKCE (interface.md section 5; decisions.md sections 1, 11, 13).

The pages and endpoints driven in-process; tests/e2e drives the same flow over a socket
with a real OAuth client library and in headless Chromium.
"""

from __future__ import annotations

import hashlib
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from authlib.oauth2.rfc8414 import AuthorizationServerMetadata
from sqlalchemy import select, update

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import OAuthAuthorizationCode, OAuthClient, OAuthToken
from signoff.orgs import service as orgs_service
from tests.conftest import Org, assert_error, create_approval
from tests.oauth.support import (
    PASSWORD,
    REDIRECT_URI,
    Browser,
    Client,
    authorize_params,
    bearer,
    give_password,
    grant,
    pkce_pair,
    query_of,
    register_client,
    token_request,
)

ISSUER = "http://127.0.0.1:8000"


@pytest.fixture
async def confidential(ctx: AppContext, org: Org) -> Client:
    await give_password(ctx, org.member)
    return await register_client(ctx, org.member)


@pytest.fixture
async def public(ctx: AppContext, org: Org) -> Client:
    await give_password(ctx, org.member)
    return await register_client(
        ctx, org.member, public=True, redirect_uris=["http://127.0.0.1:5173/cb"], name="CLI"
    )


@pytest.fixture
def browser(client: httpx.AsyncClient) -> Browser:
    return Browser(client)


def assert_oauth_error(response: httpx.Response, status: int, error: str) -> None:
    """RFC 6749 section 5.2: ``error`` and ``error_description``, never the API envelope."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error, body
    assert isinstance(body["error_description"], str)
    assert set(body) == {"error", "error_description"}
    assert response.headers["cache-control"] == "no-store"


async def exchange(
    http: httpx.AsyncClient, client: Client, code: str, verifier: str | None
) -> httpx.Response:
    data = {"grant_type": "authorization_code", "code": code, "redirect_uri": client.redirect_uri}
    if verifier is not None:
        data["code_verifier"] = verifier
    return await token_request(http, client, data)


# ---- the whole flow ----


async def test_authorization_code_flow_with_pkce(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org
) -> None:
    verifier, challenge = pkce_pair()
    params = authorize_params(confidential, challenge)
    page = await browser.open(params)
    assert page.status_code == 200
    assert "Zap Studio" in page.text and 'name="csrf_token"' in page.text
    assert page.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in page.headers["content-security-policy"]

    signed_in = await browser.sign_in(page, org.member.email)
    assert signed_in.status_code == 303
    consent = await client.get(signed_in.headers["location"])
    assert consent.status_code == 200
    # The consent page names the client and each requested scope, with Allow and Deny.
    assert "Zap Studio" in consent.text
    assert "Read approval requests and their status" in consent.text
    assert "Create, approve, reject and cancel approval requests" in consent.text
    assert "Add comments" not in consent.text
    assert 'value="allow"' in consent.text and 'value="deny"' in consent.text

    answer = await browser.decide(consent, "allow")
    assert answer.status_code == 303
    location = answer.headers["location"]
    assert location.startswith(REDIRECT_URI + "?")
    query = query_of(location)
    assert query["state"] == params["state"]
    assert query["iss"] == ISSUER

    tokens = await exchange(client, confidential, query["code"], verifier)
    assert tokens.status_code == 200, tokens.text
    assert tokens.headers["cache-control"] == "no-store"
    body = tokens.json()
    assert body["token_type"] == "Bearer"
    assert body["expires_in"] == 3600
    assert body["scope"] == "approvals:read approvals:write"
    assert body["user_email"] == org.member.email and body["org_name"] == "Acme"
    assert body["access_token"].startswith("oat_") and body["refresh_token"].startswith("ort_")

    me = await client.get("/api/v1/me", headers=bearer(body["access_token"]))
    assert me.status_code == 200, me.text
    who = me.json()
    assert who["auth_method"] == "oauth"
    assert who["scopes"] == ["approvals:read", "approvals:write"]
    assert who["user"]["id"] == org.member.user_id
    assert who["connection"]["id"] == confidential.connection_id

    created = await client.post(
        "/api/v1/approvals",
        headers=bearer(body["access_token"]),
        json={"title": "Ship it", "description": "Via Zap Studio.", "priority": "low"},
    )
    assert created.status_code == 201, created.text
    assert created.json()["connection_id"] == confidential.connection_id


async def test_deny_redirects_with_access_denied(
    browser: Browser, confidential: Client, org: Org
) -> None:
    params = authorize_params(confidential, None)
    query = await browser.authorize(params, org.member.email, decision="deny")
    assert query == {
        "error": "access_denied",
        "error_description": "The user denied access.",
        "state": params["state"],
        "iss": ISSUER,
    }


async def test_signed_in_session_goes_straight_to_consent(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org
) -> None:
    await browser.authorize(authorize_params(confidential, None), org.member.email)
    page = await browser.open(authorize_params(confidential, None))
    assert 'action="/oauth/authorize"' in page.text
    assert 'action="/oauth/login"' not in page.text


# ---- PKCE (decisions.md sections 11 and 13) ----


async def test_public_clients_must_use_pkce(
    client: httpx.AsyncClient, browser: Browser, public: Client, org: Org
) -> None:
    refused = await browser.open(authorize_params(public, None))
    assert refused.status_code == 303
    query = query_of(refused.headers["location"])
    assert query["error"] == "invalid_request" and "PKCE" in query["error_description"]
    assert query["iss"] == ISSUER

    verifier, challenge = pkce_pair()
    query = await browser.authorize(authorize_params(public, challenge), org.member.email)
    assert public.client_secret is None
    assert_oauth_error(await exchange(client, public, query["code"], None), 400, "invalid_grant")
    wrong, _ = pkce_pair()
    assert_oauth_error(await exchange(client, public, query["code"], wrong), 400, "invalid_grant")
    tokens = await exchange(client, public, query["code"], verifier)
    assert tokens.status_code == 200, tokens.text


async def test_only_s256_is_accepted(browser: Browser, confidential: Client) -> None:
    _, challenge = pkce_pair()
    for method in ("plain", "", "s256", "S512"):
        params = authorize_params(confidential, challenge)
        params["code_challenge_method"] = method
        refused = await browser.open(params)
        assert refused.status_code == 303, method
        query = query_of(refused.headers["location"])
        assert query["error"] == "invalid_request"
        assert "S256" in query["error_description"]
        assert query["state"] == params["state"]


async def test_confidential_clients_may_omit_pkce_but_a_sent_challenge_is_verified(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org
) -> None:
    without = await browser.authorize(authorize_params(confidential, None), org.member.email)
    # A verifier for a code issued without a challenge is refused too.
    stray, _ = pkce_pair()
    assert_oauth_error(
        await exchange(client, confidential, without["code"], stray), 400, "invalid_grant"
    )
    assert (await exchange(client, confidential, without["code"], None)).status_code == 200

    verifier, challenge = pkce_pair()
    withpkce = await browser.authorize(authorize_params(confidential, challenge), org.member.email)
    assert_oauth_error(
        await exchange(client, confidential, withpkce["code"], None), 400, "invalid_grant"
    )
    assert (await exchange(client, confidential, withpkce["code"], verifier)).status_code == 200


# ---- redirect URIs and unknown clients ----


async def test_unknown_client_or_redirect_uri_shows_an_error_page(
    browser: Browser, confidential: Client
) -> None:
    for change in (
        {"client_id": "oc_000000000000000000000000"},
        {"client_id": ""},
        {"redirect_uri": "https://evil.example/callback"},
        {"redirect_uri": REDIRECT_URI + "/"},
        {"redirect_uri": REDIRECT_URI + "?x=1"},
        {"redirect_uri": REDIRECT_URI.upper()},
        {"redirect_uri": "https://integration.example/callback#frag"},
    ):
        params = authorize_params(confidential, None)
        params.update(change)
        page = await browser.open(params)
        assert page.status_code == 400, change
        assert "location" not in page.headers
        assert page.headers["content-type"].startswith("text/html")
        assert "<h1>" in page.text


async def test_repeated_client_id_is_an_error_page(
    client: httpx.AsyncClient, confidential: Client
) -> None:
    page = await client.get(
        "/oauth/authorize",
        params=[
            ("response_type", "code"),
            ("client_id", confidential.client_id),
            ("client_id", confidential.client_id),
            ("redirect_uri", confidential.redirect_uri),
        ],
    )
    assert page.status_code == 400 and "location" not in page.headers


async def test_bad_parameters_of_a_known_client_go_back_to_it(
    browser: Browser, confidential: Client
) -> None:
    for change, error in (
        ({"response_type": "token"}, "unsupported_response_type"),
        ({"scope": "approvals:read admin"}, "invalid_scope"),
    ):
        params = authorize_params(confidential, None)
        params.update(change)
        answer = await browser.open(params)
        assert answer.status_code == 303
        assert answer.headers["location"].startswith(REDIRECT_URI + "?")
        assert query_of(answer.headers["location"])["error"] == error


async def test_missing_scope_means_every_scope_shown_on_consent(
    browser: Browser, confidential: Client, org: Org
) -> None:
    params = authorize_params(confidential, None)
    del params["scope"]
    page = await browser.open(params)
    consent = await browser.http.get(
        (await browser.sign_in(page, org.member.email)).headers["location"]
    )
    for text in ("approvals:read", "approvals:write", "comments:write"):
        assert text in consent.text


# ---- sign-in, CSRF, the session cookie ----


async def test_wrong_password_and_unknown_users_are_refused_alike(
    browser: Browser, confidential: Client, org: Org, other_org: Org, ctx: AppContext
) -> None:
    await give_password(ctx, other_org.admin)
    page = await browser.open(authorize_params(confidential, None))
    for email, password in (
        (org.member.email, "wrong password!"),
        ("nobody@acme.example", PASSWORD),
        # Right password, but a user of another org: the client is registered in Acme.
        (other_org.admin.email, PASSWORD),
        # A user without a password cannot sign in.
        (org.members[1].email, PASSWORD),
    ):
        refused = await browser.sign_in(page, email, password)
        assert refused.status_code == 401
        assert "Wrong e-mail or password." in refused.text
        assert "set-cookie" not in refused.headers


async def test_session_cookie_is_httponly_lax_and_renewed_on_sign_in(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org
) -> None:
    page = await browser.open(authorize_params(confidential, None))
    anonymous = page.headers["set-cookie"]
    assert "signoff_session=" in anonymous
    lowered = anonymous.lower()
    assert "httponly" in lowered and "samesite=lax" in lowered and "path=/" in lowered
    assert "secure" not in lowered  # development over http; production below
    signed_in = await browser.sign_in(page, org.member.email)
    renewed = signed_in.headers["set-cookie"]
    assert renewed.split(";")[0] != anonymous.split(";")[0]  # no session fixation


@pytest.mark.parametrize(
    "settings_overrides", [{"env": "production", "public_url": "https://signoff.example"}]
)
async def test_session_cookie_is_secure_in_production(
    browser: Browser, confidential: Client
) -> None:
    page = await browser.open(authorize_params(confidential, None))
    assert "secure" in page.headers["set-cookie"].lower()


async def test_forms_without_the_sessions_csrf_token_are_refused(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org, ctx: AppContext
) -> None:
    params = authorize_params(confidential, None)
    page = await browser.open(params)
    forged = await client.post(
        "/oauth/login",
        data={**params, "csrf_token": "forged", "email": org.member.email, "password": PASSWORD},
    )
    assert forged.status_code == 403 and "location" not in forged.headers

    consent = await client.get((await browser.sign_in(page, org.member.email)).headers["location"])
    for token in ("forged", ""):
        refused = await client.post(
            "/oauth/authorize", data={**params, "csrf_token": token, "decision": "allow"}
        )
        assert refused.status_code == 403 and "location" not in refused.headers
    async with ctx.reading() as uow:
        codes = (await uow.session.scalars(select(OAuthAuthorizationCode))).all()
    assert codes == []
    assert (await browser.decide(consent, "allow")).status_code == 303


@pytest.mark.parametrize("settings_overrides", [{"login_attempts_per_hour": 2}])
async def test_sign_in_attempts_are_rate_limited(
    browser: Browser, confidential: Client, org: Org
) -> None:
    page = await browser.open(authorize_params(confidential, None))
    for _ in range(2):
        assert (await browser.sign_in(page, org.member.email, "nope nope")).status_code == 401
    limited = await browser.sign_in(page, org.member.email)
    assert limited.status_code == 429 and "Too many" in limited.text


# ---- codes ----


async def test_codes_are_single_use_and_a_replay_revokes_their_tokens(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org
) -> None:
    query = await browser.authorize(authorize_params(confidential, None), org.member.email)
    first = await exchange(client, confidential, query["code"], None)
    assert first.status_code == 200
    tokens = first.json()
    assert (
        await client.get("/api/v1/me", headers=bearer(tokens["access_token"]))
    ).status_code == 200

    assert_oauth_error(
        await exchange(client, confidential, query["code"], None), 400, "invalid_grant"
    )
    assert (
        await client.get("/api/v1/me", headers=bearer(tokens["access_token"]))
    ).status_code == 401
    refreshed = await token_request(
        client,
        confidential,
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
    )
    assert_oauth_error(refreshed, 400, "invalid_grant")


async def test_codes_expire_within_ten_minutes(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org, ctx: AppContext
) -> None:
    query = await browser.authorize(authorize_params(confidential, None), org.member.email)
    async with ctx.transaction() as uow:
        row = (await uow.session.scalars(select(OAuthAuthorizationCode))).one()
        assert row.expires_at - row.created_at <= timedelta(minutes=10)
        await uow.session.execute(
            update(OAuthAuthorizationCode).values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert_oauth_error(
        await exchange(client, confidential, query["code"], None), 400, "invalid_grant"
    )


async def test_codes_are_bound_to_their_client_and_redirect_uri(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org, ctx: AppContext
) -> None:
    second_uri = "https://integration.example/other"
    other = await register_client(ctx, org.member, redirect_uris=[REDIRECT_URI, second_uri])
    query = await browser.authorize(authorize_params(confidential, None), org.member.email)
    assert_oauth_error(await exchange(client, other, query["code"], None), 400, "invalid_grant")
    moved = Client(confidential.client_id, confidential.client_secret, second_uri, "")
    assert_oauth_error(await exchange(client, moved, query["code"], None), 400, "invalid_grant")
    missing = await token_request(
        client, confidential, {"grant_type": "authorization_code", "code": query["code"]}
    )
    assert_oauth_error(missing, 400, "invalid_grant")
    assert (await exchange(client, confidential, query["code"], None)).status_code == 200


# ---- refresh tokens ----


async def test_refresh_rotates_and_a_replayed_refresh_token_ends_the_grant(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org
) -> None:
    first = await grant(ctx, confidential, org.member)
    refreshed = await token_request(
        client,
        confidential,
        {"grant_type": "refresh_token", "refresh_token": first["refresh_token"]},
    )
    assert refreshed.status_code == 200, refreshed.text
    second = refreshed.json()
    assert second["refresh_token"] != first["refresh_token"]
    assert second["access_token"] != first["access_token"]
    assert (
        await client.get("/api/v1/me", headers=bearer(second["access_token"]))
    ).status_code == 200

    replay = await token_request(
        client,
        confidential,
        {"grant_type": "refresh_token", "refresh_token": first["refresh_token"]},
    )
    assert_oauth_error(replay, 400, "invalid_grant")
    for token in (first["access_token"], second["access_token"]):
        assert (await client.get("/api/v1/me", headers=bearer(token))).status_code == 401
    after = await token_request(
        client,
        confidential,
        {"grant_type": "refresh_token", "refresh_token": second["refresh_token"]},
    )
    assert_oauth_error(after, 400, "invalid_grant")


async def test_refresh_may_narrow_but_not_widen_scopes(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org
) -> None:
    tokens = await grant(ctx, confidential, org.member, ("approvals:read", "comments:write"))
    wider = await token_request(
        client,
        confidential,
        {
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "scope": "approvals:write",
        },
    )
    assert_oauth_error(wider, 400, "invalid_scope")
    narrower = await token_request(
        client,
        confidential,
        {
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "scope": "approvals:read",
        },
    )
    assert narrower.status_code == 200 and narrower.json()["scope"] == "approvals:read"


# ---- storage and lifetime ----


async def test_tokens_codes_and_secrets_are_stored_hashed(
    client: httpx.AsyncClient, browser: Browser, confidential: Client, org: Org, ctx: AppContext
) -> None:
    query = await browser.authorize(authorize_params(confidential, None), org.member.email)
    tokens = (await exchange(client, confidential, query["code"], None)).json()

    def sha256(value: str) -> str:
        return hashlib.sha256(value.encode()).hexdigest()

    assert confidential.client_secret is not None
    async with ctx.reading() as uow:
        stored_client = (await uow.session.scalars(select(OAuthClient))).one()
        stored_code = (await uow.session.scalars(select(OAuthAuthorizationCode))).one()
        hashes = {
            t.kind: t.token_hash for t in (await uow.session.scalars(select(OAuthToken))).all()
        }
        everything = repr(
            [
                (await uow.session.execute(select(table))).all()
                for table in (OAuthClient, OAuthAuthorizationCode, OAuthToken)
            ]
        )
    assert stored_client.secret_hash == sha256(confidential.client_secret)
    assert stored_code.code_hash == sha256(query["code"])
    assert hashes == {
        "access": sha256(tokens["access_token"]),
        "refresh": sha256(tokens["refresh_token"]),
    }
    for secret in (
        confidential.client_secret,
        query["code"],
        tokens["access_token"],
        tokens["refresh_token"],
    ):
        assert secret not in everything


async def test_access_tokens_expire(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org
) -> None:
    tokens = await grant(ctx, confidential, org.member)
    assert tokens["expires_in"] == 3600
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(OAuthToken)
            .where(OAuthToken.kind == "access")
            .values(expires_at=utcnow() - timedelta(seconds=1))
        )
    assert_error(
        await client.get("/api/v1/me", headers=bearer(tokens["access_token"])), 401, "UNAUTHORIZED"
    )


@pytest.mark.parametrize("settings_overrides", [{"oauth_access_token_ttl_seconds": 120}])
async def test_access_token_lifetime_is_configurable(
    ctx: AppContext, confidential: Client, org: Org
) -> None:
    assert (await grant(ctx, confidential, org.member))["expires_in"] == 120


async def test_revoking_the_connection_invalidates_its_tokens_at_once(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org
) -> None:
    tokens = await grant(ctx, confidential, org.member)
    assert (
        await client.get("/api/v1/me", headers=bearer(tokens["access_token"]))
    ).status_code == 200
    async with ctx.transaction() as uow:
        connection = await uow.orgs.get_connection(
            uuid.UUID(org.id), uuid.UUID(confidential.connection_id)
        )
        assert connection is not None
        await orgs_service.revoke_connection(connection, utcnow())
    assert_error(
        await client.get("/api/v1/me", headers=bearer(tokens["access_token"])), 401, "UNAUTHORIZED"
    )
    refreshed = await token_request(
        client,
        confidential,
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
    )
    assert_oauth_error(refreshed, 401, "invalid_client")


async def test_deleting_the_client_invalidates_its_tokens_at_once(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    # The admin registers a client on their own connection, then a member authorizes it.
    registered = await register_client(ctx, org.admin)
    tokens = await grant(ctx, registered, org.member)
    assert (
        await client.get("/api/v1/me", headers=bearer(tokens["access_token"]))
    ).status_code == 200
    deleted = await client.delete(
        f"/api/v1/oauth-clients/{registered.client_id}", headers=org.admin.headers
    )
    assert deleted.status_code == 200, deleted.text
    assert deleted.json()["deleted_at"] is not None
    assert_error(
        await client.get("/api/v1/me", headers=bearer(tokens["access_token"])), 401, "UNAUTHORIZED"
    )
    assert_error(
        await client.get(
            f"/api/v1/oauth-clients/{registered.client_id}", headers=org.admin.headers
        ),
        404,
        "NOT_FOUND",
    )


# ---- revocation and introspection ----


async def test_revocation_rfc7009(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org
) -> None:
    assert confidential.client_secret is not None
    auth = (confidential.client_id, confidential.client_secret)
    tokens = await grant(ctx, confidential, org.member)
    revoked = await client.post("/oauth/revoke", data={"token": tokens["access_token"]}, auth=auth)
    assert revoked.status_code == 200
    assert (
        await client.get("/api/v1/me", headers=bearer(tokens["access_token"]))
    ).status_code == 401
    # Unknown tokens are fine; the refresh token still works after its access token went.
    assert (
        await client.post("/oauth/revoke", data={"token": "oat_nope"}, auth=auth)
    ).status_code == 200
    refreshed = await token_request(
        client,
        confidential,
        {"grant_type": "refresh_token", "refresh_token": tokens["refresh_token"]},
    )
    assert refreshed.status_code == 200
    newer = refreshed.json()
    # Revoking a refresh token ends the grant: its access tokens go too (JSON body here).
    revoked = await client.post(
        "/oauth/revoke",
        json={"token": newer["refresh_token"], "token_type_hint": "refresh_token"},
        auth=auth,
    )
    assert revoked.status_code == 200
    assert (
        await client.get("/api/v1/me", headers=bearer(newer["access_token"]))
    ).status_code == 401

    bad = await client.post(
        "/oauth/revoke",
        data={"token": newer["access_token"]},
        auth=(confidential.client_id, "cs_wrong"),
    )
    assert_oauth_error(bad, 401, "invalid_client")
    assert bad.headers["www-authenticate"].startswith("Basic")
    other = await register_client(ctx, org.member)
    mine = await grant(ctx, confidential, org.member)
    assert other.client_secret is not None
    foreign = await client.post(
        "/oauth/revoke",
        data={"token": mine["access_token"]},
        auth=(other.client_id, other.client_secret),
    )
    assert_oauth_error(foreign, 400, "invalid_grant")
    assert (await client.get("/api/v1/me", headers=bearer(mine["access_token"]))).status_code == 200


async def test_introspection_rfc7662(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org
) -> None:
    assert confidential.client_secret is not None
    auth = (confidential.client_id, confidential.client_secret)
    tokens = await grant(ctx, confidential, org.member, ("approvals:read",))
    active = (
        await client.post("/oauth/introspect", data={"token": tokens["access_token"]}, auth=auth)
    ).json()
    assert active["active"] is True
    assert active["scope"] == "approvals:read"
    assert active["client_id"] == confidential.client_id
    assert active["username"] == org.member.email and active["sub"] == org.member.user_id
    assert active["token_type"] == "Bearer" and active["iss"] == ISSUER
    assert active["exp"] - active["iat"] == 3600
    other = await register_client(ctx, org.member)
    assert other.client_secret is not None
    foreign = await client.post(
        "/oauth/introspect",
        data={"token": tokens["access_token"]},
        auth=(other.client_id, other.client_secret),
    )
    assert foreign.json() == {"active": False}
    await client.post("/oauth/revoke", data={"token": tokens["access_token"]}, auth=auth)
    gone = await client.post("/oauth/introspect", data={"token": tokens["access_token"]}, auth=auth)
    assert gone.json() == {"active": False}


# ---- the token endpoint's shapes ----


async def test_token_endpoint_accepts_json_and_the_api_alias(
    client: httpx.AsyncClient, browser: Browser, public: Client, confidential: Client, org: Org
) -> None:
    verifier, challenge = pkce_pair()
    query = await browser.authorize(authorize_params(public, challenge), org.member.email)
    answer = await client.post(
        "/api/v1/oauth/token",
        json={
            "grant_type": "authorization_code",
            "code": query["code"],
            "redirect_uri": public.redirect_uri,
            "client_id": public.client_id,
            "code_verifier": verifier,
        },
    )
    assert answer.status_code == 200, answer.text
    assert confidential.client_secret is not None
    posted = await client.post(
        "/api/v1/oauth/token",
        json={
            "grant_type": "refresh_token",
            "refresh_token": answer.json()["refresh_token"],
            "client_id": public.client_id,
        },
    )
    assert posted.status_code == 200, posted.text
    # client_secret_post, form-encoded, on the alias.
    query = await browser.authorize(authorize_params(confidential, None), org.member.email)
    form = await client.post(
        "/api/v1/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": query["code"],
            "redirect_uri": confidential.redirect_uri,
            "client_id": confidential.client_id,
            "client_secret": confidential.client_secret,
        },
    )
    assert form.status_code == 200, form.text


async def test_token_errors_use_the_rfc6749_shape(
    client: httpx.AsyncClient, confidential: Client, public: Client
) -> None:
    for path in ("/oauth/token", "/api/v1/oauth/token"):
        await _assert_token_errors(client, confidential, public, path)


async def _assert_token_errors(
    client: httpx.AsyncClient, confidential: Client, public: Client, path: str
) -> None:
    assert confidential.client_secret is not None
    auth = (confidential.client_id, confidential.client_secret)
    assert_oauth_error(await client.post(path, data={}, auth=auth), 400, "invalid_request")
    assert_oauth_error(
        await client.post(path, data={"grant_type": "password"}, auth=auth),
        400,
        "unsupported_grant_type",
    )
    assert_oauth_error(
        await client.post(
            path, data={"grant_type": "authorization_code", "code": "nope"}, auth=auth
        ),
        400,
        "invalid_grant",
    )
    assert_oauth_error(
        await client.post(path, content=b"{not json", headers={"content-type": "application/json"}),
        400,
        "invalid_request",
    )
    for credentials in ((confidential.client_id, "cs_wrong"), ("oc_unknown", "x")):
        assert_oauth_error(
            await client.post(
                path, data={"grant_type": "authorization_code", "code": "x"}, auth=credentials
            ),
            401,
            "invalid_client",
        )
    # A confidential client without its secret, and a public client with one.
    assert_oauth_error(
        await client.post(
            path,
            data={
                "grant_type": "authorization_code",
                "code": "x",
                "client_id": confidential.client_id,
            },
        ),
        401,
        "invalid_client",
    )
    assert_oauth_error(
        await client.post(
            path,
            data={
                "grant_type": "authorization_code",
                "code": "x",
                "client_id": public.client_id,
                "client_secret": "s",
            },
        ),
        401,
        "invalid_client",
    )


async def test_api_errors_keep_the_envelope_for_oauth_tokens(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org
) -> None:
    tokens = await grant(ctx, confidential, org.member, ("approvals:read",))
    details = assert_error(
        await client.post("/api/v1/approvals", headers=bearer(tokens["access_token"]), json={}),
        403,
        "INSUFFICIENT_SCOPE",
    )
    assert details == {"required_scope": "approvals:write"}
    assert_error(
        await client.get("/api/v1/me", headers=bearer("oat_" + "x" * 43)), 401, "UNAUTHORIZED"
    )


# ---- metadata ----


@pytest.mark.parametrize("settings_overrides", [{"public_url": "https://signoff.example/"}])
async def test_authorization_server_metadata_rfc8414(client: httpx.AsyncClient) -> None:
    answer = await client.get("/.well-known/oauth-authorization-server")
    assert answer.status_code == 200
    document: dict[str, Any] = answer.json()
    AuthorizationServerMetadata(document).validate()  # Authlib's RFC 8414 checks
    assert document["issuer"] == "https://signoff.example"
    assert document["token_endpoint"] == "https://signoff.example/oauth/token"
    assert document["code_challenge_methods_supported"] == ["S256"]
    assert document["scopes_supported"] == ["approvals:read", "approvals:write", "comments:write"]
    assert document["grant_types_supported"] == [
        "authorization_code",
        "refresh_token",
        "urn:openid:params:grant-type:ciba",
    ]
    assert document["authorization_response_iss_parameter_supported"] is True


# ---- rate limits ----


async def test_oauth_calls_count_against_the_owning_connection(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org
) -> None:
    async with ctx.transaction() as uow:
        connection = await uow.orgs.get_connection(
            uuid.UUID(org.id), uuid.UUID(confidential.connection_id)
        )
        assert connection is not None
        orgs_service.set_rate_limit(connection, 3, ctx.settings, utcnow())
    # Another user authorizes the client: their calls still count against its connection.
    tokens = await grant(ctx, confidential, org.members[1])
    by_key = await client.get("/api/v1/me", headers=org.member.headers)
    assert by_key.headers["x-ratelimit-limit"] == "3"
    assert by_key.headers["x-ratelimit-remaining"] == "2"
    by_token = await client.get("/api/v1/me", headers=bearer(tokens["access_token"]))
    assert by_token.json()["user"]["id"] == org.members[1].user_id
    assert by_token.headers["x-ratelimit-remaining"] == "1"
    await client.get("/api/v1/me", headers=bearer(tokens["access_token"]))
    limited = await client.get("/api/v1/me", headers=bearer(tokens["access_token"]))
    assert_error(limited, 429, "RATE_LIMITED")
    assert "retry-after" in limited.headers


# ---- /api/v1/oauth-clients ----


async def test_admins_manage_clients_with_an_api_key(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    created = await client.post(
        "/api/v1/oauth-clients",
        headers=org.admin.headers,
        json={"name": "Make", "redirect_uris": ["https://make.example/oauth/cb"]},
    )
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["client_secret"].startswith("cs_")
    assert body["connection_id"] == org.admin.connection_id
    assert body["public"] is False and body["client_id"].startswith("oc_")

    public = await client.post(
        "/api/v1/oauth-clients",
        headers=org.admin.headers,
        json={
            "name": "Desktop",
            "redirect_uris": ["http://127.0.0.1:7777/cb", "com.example.desktop:/cb"],
            "public": True,
            "connection_id": org.member.connection_id,
        },
    )
    assert public.status_code == 201, public.text
    assert public.json()["client_secret"] is None
    assert public.json()["connection_id"] == org.member.connection_id

    listed = await client.get("/api/v1/oauth-clients", headers=org.admin.headers)
    assert [c["name"] for c in listed.json()["data"]] == ["Make", "Desktop"]
    assert body["client_secret"] not in listed.text
    one = await client.get(f"/api/v1/oauth-clients/{body['client_id']}", headers=org.admin.headers)
    assert one.status_code == 200 and "client_secret" not in one.json()

    for bad in (["javascript:alert(1)"], ["https://x.example/cb#f"], [], ["/relative"]):
        refused = await client.post(
            "/api/v1/oauth-clients",
            headers=org.admin.headers,
            json={"name": "Bad", "redirect_uris": bad},
        )
        assert_error(refused, 400, "VALIDATION_ERROR")


async def test_only_admins_with_an_api_key_manage_clients(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    body = {"name": "Zap", "redirect_uris": ["https://zap.example/cb"]}
    assert_error(
        await client.post("/api/v1/oauth-clients", headers=org.member.headers, json=body),
        403,
        "FORBIDDEN",
    )
    assert_error(
        await client.get("/api/v1/oauth-clients", headers=org.member.headers), 403, "FORBIDDEN"
    )
    admins_client = await register_client(ctx, org.admin)
    tokens = await grant(ctx, admins_client, org.admin)
    assert_error(
        await client.post(
            "/api/v1/oauth-clients", headers=bearer(tokens["access_token"]), json=body
        ),
        403,
        "FORBIDDEN",
    )


async def test_oauth_tokens_act_within_the_consenting_users_org(
    client: httpx.AsyncClient, ctx: AppContext, confidential: Client, org: Org, other_org: Org
) -> None:
    theirs = await create_approval(client, other_org.admin)
    tokens = await grant(ctx, confidential, org.member)
    assert_error(
        await client.get(
            f"/api/v1/approvals/{theirs['id']}", headers=bearer(tokens["access_token"])
        ),
        404,
        "NOT_FOUND",
    )
