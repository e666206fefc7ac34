"""API-key authentication: every refusal is a 401 envelope with rate-limit headers; /me."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.context import AppContext
from signoff.orgs import repository
from signoff.orgs import service as orgs_service
from signoff.wiring import Wiring
from tests.conftest import Member, Org, assert_error, create_approval

RATE_HEADERS = ("x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset")


def _assert_unauthorized(response: httpx.Response) -> None:
    assert_error(response, 401, "UNAUTHORIZED")
    for header in RATE_HEADERS:
        assert response.headers[header].isdigit(), header
    # Unauthenticated calls count against the per-address limit.
    assert response.headers["x-ratelimit-limit"] == "100"


BAD_AUTHORIZATIONS = [
    None,
    "",
    "Bearer",
    "Bearer ",
    "Basic dXNlcjpwYXNz",
    "gk_" + "0" * 64,  # no scheme
    "Token gk_" + "0" * 64,
    "Bearer gk_" + "0" * 63,
    "Bearer gk_" + "0" * 65,
    "Bearer gk_" + "G" * 64,
    "Bearer sk_" + "0" * 64,
    "Bearer " + "gk_" + secrets.token_hex(32),  # well-formed, unknown
]


async def test_missing_malformed_or_unknown_keys_are_401(
    client: httpx.AsyncClient, org: Org
) -> None:
    for authorization in BAD_AUTHORIZATIONS:
        headers = {} if authorization is None else {"Authorization": authorization}
        for method, path in (
            ("GET", "/api/v1/approvals"),
            ("POST", "/api/v1/approvals"),
            ("GET", "/api/v1/me"),
            ("GET", "/api/v1/no-such-thing"),
        ):
            _assert_unauthorized(await client.request(method, path, headers=headers))


async def test_a_key_in_upper_case_is_not_the_key(client: httpx.AsyncClient, org: Org) -> None:
    token = org.member.api_key
    shouted = "gk_" + token[3:].upper()
    response = await client.get("/api/v1/me", headers={"Authorization": f"Bearer {shouted}"})
    _assert_unauthorized(response)


async def test_scheme_is_case_insensitive(client: httpx.AsyncClient, org: Org) -> None:
    for scheme in ("Bearer", "bearer", "BEARER"):
        response = await client.get(
            "/api/v1/me", headers={"Authorization": f"{scheme} {org.member.api_key}"}
        )
        assert response.status_code == 200, scheme


async def test_revoked_key_is_401_at_once(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    created = await create_approval(client, org.member)
    assert (await client.get("/api/v1/me", headers=org.member.headers)).status_code == 200
    async with ctx.transaction() as uow:
        connection = await orgs_service.get_connection(
            uow.orgs, uuid.UUID(org.id), org.member.connection_id
        )
        await orgs_service.revoke_connection(connection, utcnow())
    for method, path in (
        ("GET", "/api/v1/me"),
        ("GET", f"/api/v1/approvals/{created['id']}"),
        ("DELETE", f"/api/v1/approvals/{created['id']}"),
    ):
        _assert_unauthorized(await client.request(method, path, headers=org.member.headers))
    # Other connections of the org are untouched, and so is what the revoked one created.
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"


async def test_me(client: httpx.AsyncClient, org: Org) -> None:
    response = await client.get("/api/v1/me", headers=org.member.headers)
    assert response.status_code == 200
    body = response.json()
    assert body["org"] == {"id": org.id, "name": "Acme", "emergency_stop": False}
    assert body["connection"] == {
        "id": org.member.connection_id,
        "name": "conn-1",
        "owner_deactivated": False,
    }
    assert body["user"] == {
        "id": org.member.user_id,
        "email": org.member.email,
        "name": org.member.name,
        "role": "member",
    }
    assert set(body["scopes"]) == {"approvals:read", "approvals:write", "comments:write"}
    assert body["auth_method"] == "api_key"
    assert body["rate_limit"]["limit"] == int(response.headers["x-ratelimit-limit"])
    assert body["rate_limit"]["window_seconds"] == 3600
    assert body["rate_limit"]["scope"] == "all"


async def test_me_shows_each_keys_own_identity(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    people: list[tuple[Member, str, str]] = [
        (org.admin, org.id, "admin"),
        (org.members[2], org.id, "member"),
        (other_org.member, other_org.id, "member"),
    ]
    for who, org_id, role in people:
        body = (await client.get("/api/v1/me", headers=who.headers)).json()
        assert body["org"]["id"] == org_id
        assert body["user"]["id"] == who.user_id
        assert body["user"]["role"] == role
        assert body["connection"]["id"] == who.connection_id


async def _in_another_process(settings: Settings, org: Org, change: Callable[..., Any]) -> None:
    """``change`` the member's connection through connections of its own, as a CLI or
    another replica would: nothing of the app's own process takes part."""
    other = Wiring.from_settings(settings)
    try:
        async with other.ctx.transaction() as uow:
            connection = await orgs_service.get_connection(
                uow.orgs, uuid.UUID(org.id), org.member.connection_id
            )
            await change(connection)
    finally:
        await other.close()


async def test_what_another_process_changes_about_a_key_bites_at_once(
    client: httpx.AsyncClient, org: Org, settings: Settings
) -> None:
    me = "/api/v1/me"
    assert (await client.get(me, headers=org.member.headers)).status_code == 200

    async def lower_the_limit(connection: Any) -> None:
        orgs_service.set_rate_limit(connection, 7, settings, utcnow())

    await _in_another_process(settings, org, lower_the_limit)
    response = await client.get(me, headers=org.member.headers)
    assert response.json()["rate_limit"]["limit"] == 7
    assert response.headers["x-ratelimit-limit"] == "7"

    async def revoke(connection: Any) -> None:
        await orgs_service.revoke_connection(connection, utcnow())

    await _in_another_process(settings, org, revoke)
    _assert_unauthorized(await client.get(me, headers=org.member.headers))
    assert (await client.get(me, headers=org.admin.headers)).status_code == 200


async def test_a_key_is_read_once_until_anything_is_committed(
    client: httpx.AsyncClient, org: Org, backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: list[str] = []
    read_principal = repository.find_principal_by_key_hash

    async def counting(queries: Any, key_hash: str, *args: Any) -> Any:
        reads.append(key_hash)
        return await read_principal(queries, key_hash, *args)

    monkeypatch.setattr(repository, "find_principal_by_key_hash", counting)
    for _ in range(3):
        assert (await client.get("/api/v1/me", headers=org.member.headers)).status_code == 200
    # SQLite tells at once whether anything was committed since (PRAGMA data_version);
    # PostgreSQL has no such stamp, so every call reads.
    assert len(reads) == (1 if backend == "sqlite" else 3)
    await create_approval(client, org.admin)  # a commit: every key is read afresh
    reads.clear()
    assert (await client.get("/api/v1/me", headers=org.member.headers)).status_code == 200
    assert len(reads) == 1
