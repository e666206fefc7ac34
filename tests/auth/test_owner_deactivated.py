"""A connection whose owner is deactivated: the integration keeps running, the person's
authority does not (auth/authority.py).

Through such a connection's API key, creating, reading, commenting on and cancelling its
own requests keep working; deciding, voting and every admin act answer 403
OWNER_DEACTIVATED, on every server at once (the principal each process remembers is
checked against the owner's deactivation); reactivating the owner, or transferring the
connection to an active user, gives the key a person's authority again.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from signoff.approvals.state import Cancel, Decide, RequestView, StepView, VoteStep, apply
from signoff.auth.actor import Actor
from signoff.auth.authority import WITHOUT_ACTIVE_OWNER
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.context import AppContext
from signoff.errors import OwnerDeactivated
from signoff.models import Organization
from signoff.orgs import service as orgs_service
from signoff.wiring import Wiring
from tests.auth.test_principal_memory import replica
from tests.auth.test_scope_matrix import (
    BUILDERS,
    PUBLIC,
    SCOPE_TABLE,
    Env,
    _key,
    api_routes,
    receiver,
)
from tests.conftest import Member, Org, assert_error, create_approval
from tests.oauth.support import bearer, grant, register_client

__all__ = ["receiver"]  # a fixture of the scope matrix, used here too


@dataclass
class Setting:
    """``gone``: the admin who is deactivated, with the connection they own; ``keeper``: an
    admin who stays, with a connection of their own."""

    org: Org
    gone: Member
    keeper: Member

    @property
    def keeper_org(self) -> Org:
        """The org as the scope matrix's builders see it: its admin is the keeper."""
        return Org(self.org.id, self.org.name, self.keeper, self.org.members)


async def add_admin(ctx: AppContext, org: Org) -> Member:
    now = utcnow()
    async with ctx.transaction() as uow:
        user = await orgs_service.create_user(
            uow.orgs,
            uuid.UUID(org.id),
            email="keeper@acme.example",
            name="Kim Keeper",
            role="admin",
            password=None,
            now=now,
        )
        issued = await orgs_service.create_connection(
            uow.orgs,
            ctx.box,
            ctx.settings,
            uuid.UUID(org.id),
            owner=user,
            name="keeper-bot",
            rate_limit=None,
            now=now,
        )
    return Member(
        str(user.id),
        user.email,
        user.name,
        "admin",
        str(issued.connection.id),
        issued.api_key,
        issued.webhook_secret,
    )


async def set_active(settings: Settings, org: Org, who: Member, active: bool) -> None:
    """Deactivate (or reactivate) ``who`` from a process of its own, as the CLI or another
    replica's dashboard would: this process's remembered principals are not told."""
    other = Wiring.from_settings(settings)
    try:
        async with other.ctx.transaction() as uow:
            user = await uow.orgs.get_user(uuid.UUID(org.id), uuid.UUID(who.user_id))
            assert user is not None
            if active:
                orgs_service.reactivate_user(user, utcnow())
            else:
                await orgs_service.deactivate_user(uow.oauth, user, utcnow())
    finally:
        await other.close()


@pytest.fixture
async def setting(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, settings: Settings
) -> Setting:
    keeper = await add_admin(ctx, org)
    # The key is used first, so its principal is remembered (PostgreSQL) or cached
    # (SQLite) before the deactivation.
    await create_approval(client, org.admin)
    assert (await client.get("/api/v1/me", headers=org.admin.headers)).status_code == 200
    await set_active(settings, org, org.admin, False)
    return Setting(org, org.admin, keeper)


async def status_of(client: httpx.AsyncClient, who: Member, request_id: str) -> str:
    read = await client.get(f"/api/v1/approvals/{request_id}", headers=who.headers)
    assert read.status_code == 200, read.text
    return str(read.json()["status"])


def assert_owner_deactivated(response: httpx.Response, who: Member) -> None:
    assert_error(response, 403, "OWNER_DEACTIVATED")
    assert response.json()["error"]["details"] == {
        "connection_id": who.connection_id,
        "owner_id": who.user_id,
    }


# ---- what is refused ----


async def test_deciding_is_refused_on_others_and_own_requests(
    client: httpx.AsyncClient, setting: Setting
) -> None:
    gone, keeper = setting.gone, setting.keeper
    theirs = await create_approval(client, keeper)
    own = await create_approval(client, gone)
    for request in (theirs, own):
        path = f"/api/v1/approvals/{request['id']}"
        for decision in ("approve", "reject"):
            answer = await client.patch(path, json={"decision": decision}, headers=gone.headers)
            assert_owner_deactivated(answer, gone)
        assert await status_of(client, keeper, request["id"]) == "pending"


async def test_voting_on_a_step_is_refused(client: httpx.AsyncClient, setting: Setting) -> None:
    gone, keeper = setting.gone, setting.keeper
    request = await create_approval(client, keeper)
    steps = await client.post(
        f"/api/v1/approvals/{request['id']}/steps",
        json={"steps": [{"approver_id": gone.user_id, "step_order": 1}]},
        headers=keeper.headers,
    )
    assert steps.status_code == 201, steps.text
    step_id = steps.json()["data"][0]["id"]
    vote = await client.patch(
        f"/api/v1/approvals/{request['id']}/steps/{step_id}",
        json={"decision": "approve"},
        headers=gone.headers,
    )
    assert_owner_deactivated(vote, gone)
    listed = await client.get(f"/api/v1/approvals/{request['id']}/steps", headers=keeper.headers)
    assert [s["status"] for s in listed.json()["data"]] == ["pending"]


async def test_the_emergency_stop_is_refused(
    client: httpx.AsyncClient, ctx: AppContext, setting: Setting
) -> None:
    gone = setting.gone
    for active in (True, False):
        answer = await client.put(
            "/api/v1/emergency-stop", json={"active": active}, headers=gone.headers
        )
        assert_owner_deactivated(answer, gone)
    async with ctx.reading() as uow:
        stopped = await uow.session.scalar(
            select(Organization.emergency_stop).where(Organization.id == uuid.UUID(setting.org.id))
        )
    assert stopped is False
    # Reading the state is no act of authority.
    assert (await client.get("/api/v1/emergency-stop", headers=gone.headers)).status_code == 200


async def test_oauth_clients_are_refused(client: httpx.AsyncClient, setting: Setting) -> None:
    gone = setting.gone
    created = await client.post(
        "/api/v1/oauth-clients",
        json={"name": "Rogue", "redirect_uris": ["https://rogue.example/cb"]},
        headers=gone.headers,
    )
    assert_owner_deactivated(created, gone)
    assert_owner_deactivated(await client.get("/api/v1/oauth-clients", headers=gone.headers), gone)


async def test_routing_is_refused(client: httpx.AsyncClient, setting: Setting) -> None:
    gone = setting.gone
    assert_owner_deactivated(await client.get("/api/v1/routing", headers=gone.headers), gone)
    written = await client.put(
        "/api/v1/routing", json={"channels": {}, "rules": []}, headers=gone.headers
    )
    assert_owner_deactivated(written, gone)


async def test_handing_connections_to_users_is_refused(
    client: httpx.AsyncClient, setting: Setting
) -> None:
    """The API's one act on users: which person a connection's key acts as. A deactivated
    admin's key can neither take another connection nor give its own away."""
    gone, keeper = setting.gone, setting.keeper
    for connection, owner in ((keeper.connection_id, gone), (gone.connection_id, keeper)):
        answer = await client.post(
            f"/api/v1/connections/{connection}/transfer",
            json={"owner_id": owner.user_id},
            headers=gone.headers,
        )
        assert_owner_deactivated(answer, gone)
    # The org's directory is still readable: integrations fill approver pickers from it.
    members = await client.get("/api/v1/team/members", headers=gone.headers)
    assert members.status_code == 200


async def test_retrying_a_delivery_is_refused(
    client: httpx.AsyncClient, setting: Setting, receiver: str
) -> None:
    gone, keeper = setting.gone, setting.keeper
    created = await create_approval(client, keeper, callback_url=receiver)
    decided = await client.patch(
        f"/api/v1/approvals/{created['id']}", json={"decision": "approve"}, headers=keeper.headers
    )
    assert decided.status_code == 200, decided.text
    log = await client.get(
        "/api/v1/webhooks", params={"request_id": created["id"]}, headers=keeper.headers
    )
    delivery_id = log.json()["data"][0]["delivery_id"]
    retried = await client.post(f"/api/v1/webhooks/{delivery_id}/retry", headers=gone.headers)
    assert_owner_deactivated(retried, gone)


# ---- what goes on ----


async def test_the_integration_keeps_creating_reading_commenting_and_cancelling(
    client: httpx.AsyncClient, setting: Setting
) -> None:
    gone, keeper = setting.gone, setting.keeper
    me = await client.get("/api/v1/me", headers=gone.headers)
    assert me.json()["connection"]["owner_deactivated"] is True

    created = await create_approval(client, gone, title="Nightly backup restore test")
    path = f"/api/v1/approvals/{created['id']}"
    assert (await client.get(path, headers=gone.headers)).json()["title"] == (
        "Nightly backup restore test"
    )
    listed = await client.get("/api/v1/approvals", headers=gone.headers)
    assert created["id"] in [r["id"] for r in listed.json()["data"]]
    commented = await client.post(
        f"{path}/comments", json={"body": "Restore window is 02:00 UTC."}, headers=gone.headers
    )
    assert commented.status_code == 201, commented.text
    comments = await client.get(f"{path}/comments", headers=gone.headers)
    assert [c["body"] for c in comments.json()["data"]] == ["Restore window is 02:00 UTC."]
    assert (await client.get(f"{path}/events", headers=gone.headers)).status_code == 200
    cancelled = await client.delete(path, headers=gone.headers)
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"

    # Someone else's request: read it, yes; comment on it or cancel it, no.
    theirs = await create_approval(client, keeper)
    their_path = f"/api/v1/approvals/{theirs['id']}"
    assert (await client.get(their_path, headers=gone.headers)).status_code == 200
    comment = await client.post(
        f"{their_path}/comments", json={"body": "Ship it."}, headers=gone.headers
    )
    assert_owner_deactivated(comment, gone)
    assert_owner_deactivated(await client.delete(their_path, headers=gone.headers), gone)
    assert await status_of(client, keeper, theirs["id"]) == "pending"


async def test_reactivation_restores_the_owners_authority(
    client: httpx.AsyncClient, setting: Setting, settings: Settings
) -> None:
    gone, keeper = setting.gone, setting.keeper
    request = await create_approval(client, keeper)
    path = f"/api/v1/approvals/{request['id']}"
    assert_owner_deactivated(
        await client.patch(path, json={"decision": "approve"}, headers=gone.headers), gone
    )

    await set_active(settings, setting.org, gone, True)

    decided = await client.patch(path, json={"decision": "approve"}, headers=gone.headers)
    assert decided.status_code == 200, decided.text
    assert decided.json()["decided_by"] == gone.user_id
    assert (await client.get("/api/v1/routing", headers=gone.headers)).status_code == 200
    stop = await client.put("/api/v1/emergency-stop", json={"active": False}, headers=gone.headers)
    assert stop.status_code == 200, stop.text
    me = await client.get("/api/v1/me", headers=gone.headers)
    assert me.json()["connection"]["owner_deactivated"] is False


async def test_every_replica_sees_the_deactivation_at_once(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, settings: Settings
) -> None:
    keeper = await add_admin(ctx, org)
    async with replica(settings) as other:
        replicas = (client, other)
        requests = [await create_approval(c, keeper) for c in replicas]
        # Each replica reads, and remembers, the admin's key before the deactivation.
        for c, request in zip(replicas, requests, strict=True):
            got = await c.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
            assert got.status_code == 200

        await set_active(settings, org, org.admin, False)

        for c, request in zip(replicas, requests, strict=True):
            path = f"/api/v1/approvals/{request['id']}"
            decided = await c.patch(path, json={"decision": "approve"}, headers=org.admin.headers)
            assert_owner_deactivated(decided, org.admin)
            assert await status_of(c, keeper, request["id"]) == "pending"

        await set_active(settings, org, org.admin, True)

        for c, request in zip(replicas, requests, strict=True):
            path = f"/api/v1/approvals/{request['id']}"
            decided = await c.patch(path, json={"decision": "approve"}, headers=org.admin.headers)
            assert decided.status_code == 200, decided.text
            assert decided.json()["decided_by"] == org.admin.user_id


async def test_an_oauth_token_acts_as_its_own_active_user(
    client: httpx.AsyncClient, ctx: AppContext, setting: Setting
) -> None:
    """A token acts as the person who granted it (decisions.md section 1), not as the
    connection's owner: a token of an active admin, through a client of the connection
    whose owner left, keeps that admin's authority. The deactivated person's own tokens
    were revoked with them."""
    gone, keeper = setting.gone, setting.keeper
    registered = await register_client(ctx, gone)
    tokens = await grant(ctx, registered, keeper)
    request = await create_approval(client, setting.org.member)
    decided = await client.patch(
        f"/api/v1/approvals/{request['id']}",
        json={"decision": "approve"},
        headers=bearer(tokens["access_token"]),
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["decided_by"] == keeper.user_id


# ---- the table, walked ----


async def test_every_endpoint_answers_as_the_table_says(
    app: Any, client: httpx.AsyncClient, setting: Setting, receiver: str
) -> None:
    """Each ``/api/v1`` endpoint called with the deactivated owner's key, on things made by
    the keeper: 403 OWNER_DEACTIVATED unless ``WITHOUT_ACTIVE_OWNER`` lets it through."""
    env = Env(client, setting.keeper_org, receiver)
    gone = setting.gone
    # What a member's key answers there: a chain is configured by its creator or an admin.
    as_member = {("POST", "/api/v1/approvals/{request_id}/steps"): (403, "FORBIDDEN")}
    problems: list[str] = []
    for method, path, _ in api_routes(app):
        key = _key(method, path)
        if SCOPE_TABLE.get(key) in (None, PUBLIC):
            continue  # the scope matrix fails on a missing line
        builder = BUILDERS.get(key)
        if builder is None:
            problems.append(f"{method} {path}: no request builder in BUILDERS")
            continue
        verb, url, body = await builder(env)
        answer = await client.request(verb, url, headers=gone.headers, json=body)
        reach = WITHOUT_ACTIVE_OWNER.get((method, path))
        code = answer.json().get("error", {}).get("code") if answer.status_code >= 400 else None
        if (method, path) in as_member:
            expected: tuple[int, str | None] = as_member[(method, path)]
            ok = (answer.status_code, code) == expected
        elif reach == "all":
            expected = (200, None)
            ok = 200 <= answer.status_code < 300
        else:  # nothing, or only on its own requests: these are the keeper's
            expected = (403, "OWNER_DEACTIVATED")
            ok = (answer.status_code, code) == expected
        if not ok:
            problems.append(f"{verb} {url}: expected {expected}, got {answer.status_code} {code}")
    assert not problems, "\n".join(problems)


async def test_the_table_names_real_routes_and_the_document_says_it(app: Any) -> None:
    routes = {(method, path) for method, path, _ in api_routes(app)}
    assert set(WITHOUT_ACTIVE_OWNER) <= routes | {
        ("GET", "/api/v1/teams"),  # served only with SIGNOFF_COMPAT_LEGACY_CLIENTS on
        ("GET", "/api/v1/templates"),
    }
    document = (await _openapi(app))["paths"]
    for method, path in routes:
        if SCOPE_TABLE.get(_key(method, path)) == PUBLIC:
            continue
        codes = document[path][method.lower()]["responses"].get("403", {}).get("x-error-codes")
        documented = "OWNER_DEACTIVATED" in (codes or [])
        assert documented == (WITHOUT_ACTIVE_OWNER.get((method, path)) != "all"), (method, path)


async def _openapi(app: Any) -> dict[str, Any]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
        document: dict[str, Any] = (await c.get("/api/v1/openapi.json")).json()
    return document


# ---- the state machine's part ----


def test_the_state_machine_refuses_decisions_and_others_cancellations() -> None:
    connection, other_connection = uuid.uuid4(), uuid.uuid4()
    gone = Actor(uuid.uuid4(), connection_id=connection, owner_deactivated=True)
    step = StepView(uuid.uuid4(), 1, gone.user_id, "pending")
    own = RequestView("pending", 1, connection_id=connection)
    theirs = RequestView("pending", 1, connection_id=other_connection)
    with_step = RequestView("pending", 1, steps=(step,), connection_id=connection)
    now = utcnow()
    for request, action in (
        (own, Decide(gone, "approve")),
        (theirs, Decide(gone, "reject")),
        (with_step, VoteStep(gone, step.id, "approve")),
        (theirs, Cancel(gone)),
    ):
        with pytest.raises(OwnerDeactivated):
            apply(request, action, now)
    assert apply(own, Cancel(gone), now).status == "cancelled"


# ---- transferring a connection ----


async def test_an_admin_transfers_the_connection_and_its_key_acts_as_the_new_owner(
    client: httpx.AsyncClient, setting: Setting
) -> None:
    gone, keeper = setting.gone, setting.keeper
    path = f"/api/v1/connections/{gone.connection_id}/transfer"
    transferred = await client.post(path, json={"owner_id": keeper.email}, headers=keeper.headers)
    assert transferred.status_code == 200, transferred.text
    body = transferred.json()
    assert (body["id"], body["owner_id"]) == (gone.connection_id, keeper.user_id)
    assert "api_key" not in body and "webhook_secret" not in body

    request = await create_approval(client, setting.org.member)
    decided = await client.patch(
        f"/api/v1/approvals/{request['id']}", json={"decision": "approve"}, headers=gone.headers
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["decided_by"] == keeper.user_id
    me = await client.get("/api/v1/me", headers=gone.headers)
    assert me.json()["user"]["id"] == keeper.user_id
    assert me.json()["connection"]["owner_deactivated"] is False


async def test_a_transfer_refuses_what_it_cannot_do(
    client: httpx.AsyncClient, ctx: AppContext, setting: Setting
) -> None:
    gone, keeper, member = setting.gone, setting.keeper, setting.org.member
    path = f"/api/v1/connections/{gone.connection_id}/transfer"
    for owner in (gone.user_id, str(uuid.uuid4()), "nobody@acme.example"):
        answer = await client.post(path, json={"owner_id": owner}, headers=keeper.headers)
        assert_error(answer, 400, "VALIDATION_ERROR")
        assert answer.json()["error"]["details"]["fields"][0]["field"] == "owner_id"
    assert_error(await client.post(path, json={}, headers=keeper.headers), 400, "VALIDATION_ERROR")
    unknown = f"/api/v1/connections/{uuid.uuid4()}/transfer"
    answer = await client.post(unknown, json={"owner_id": keeper.user_id}, headers=keeper.headers)
    assert_error(answer, 404, "NOT_FOUND")
    # Members, and admins' OAuth tokens, may not hand keys around.
    answer = await client.post(path, json={"owner_id": member.user_id}, headers=member.headers)
    assert_error(answer, 403, "FORBIDDEN")
    tokens = await grant(ctx, await register_client(ctx, keeper), keeper)
    answer = await client.post(
        path, json={"owner_id": keeper.user_id}, headers=bearer(tokens["access_token"])
    )
    assert_error(answer, 403, "FORBIDDEN")
    # A revoked connection stays as it was: the record of who it acted as.
    async with ctx.transaction() as uow:
        connection = await orgs_service.get_connection(
            uow.orgs, uuid.UUID(setting.org.id), member.connection_id
        )
        await orgs_service.revoke_connection(connection, utcnow())
    revoked = f"/api/v1/connections/{member.connection_id}/transfer"
    answer = await client.post(revoked, json={"owner_id": keeper.user_id}, headers=keeper.headers)
    assert_error(answer, 409, "CONFLICT")


async def test_another_orgs_connection_is_not_found(
    client: httpx.AsyncClient, setting: Setting, other_org: Org
) -> None:
    answer = await client.post(
        f"/api/v1/connections/{other_org.member.connection_id}/transfer",
        json={"owner_id": setting.keeper.user_id},
        headers=setting.keeper.headers,
    )
    assert_error(answer, 404, "NOT_FOUND")
    # Nor can a user of another org be made an owner.
    answer = await client.post(
        f"/api/v1/connections/{setting.gone.connection_id}/transfer",
        json={"owner_id": other_org.member.user_id},
        headers=setting.keeper.headers,
    )
    assert_error(answer, 400, "VALIDATION_ERROR")
