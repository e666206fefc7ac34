"""Decisions that need a passkey, on both databases: the API refuses them (403
PASSKEY_REQUIRED with the page's URL), a signed decision is made and its assertion kept
and verifiable later, and a replayed assertion, one made for another request, from
another origin or for another relying party are refused. A software authenticator
(``authenticator.py``) answers the challenges."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from signoff.approvals.schemas import DecideApprovalRequest
from signoff.auth.principal import OrgMember
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.errors import PasskeyRequired, ValidationFailed
from signoff.passkeys import service
from signoff.passkeys.service import PasskeyRefused, RelyingParty
from tests.conftest import Member, Org, assert_error, create_approval
from tests.passkeys.authenticator import SoftAuthenticator

pytestmark = pytest.mark.anyio

RP = RelyingParty.of("https://signoff.example.com")


async def set_passkey_for(ctx: AppContext, org: Org, value: str) -> None:
    async with ctx.transaction() as uow:
        await service.set_passkey_for(uow.passkeys, uuid.UUID(org.id), value)


async def member_of(ctx: AppContext, who: Member) -> OrgMember:
    async with ctx.reading() as uow:
        user = await uow.orgs.find_user(uuid.UUID(who.user_id))
        assert user is not None
        org = await uow.orgs.get_org(user.org_id)
        assert org is not None
        return OrgMember.of(user, org)


async def with_passkey(ctx: AppContext, org: Org, who: Member) -> SoftAuthenticator:
    device = SoftAuthenticator(RP.rp_id, RP.origin)
    async with ctx.transaction() as uow:
        await uow.passkeys.add(
            device.passkey_row(uuid.UUID(org.id), uuid.UUID(who.user_id), utcnow())
        )
    return device


async def options_for(ctx: AppContext, member: OrgMember, rid: str, decision: str) -> str:
    async with ctx.transaction() as uow:
        return await service.decision_options(
            uow.passkeys, member, RP, uuid.UUID(rid), decision, utcnow()
        )


async def decide_signed(
    ctx: AppContext, member: OrgMember, rid: str, decision: str, credential: str
) -> Any:
    payload = DecideApprovalRequest.model_validate({"decision": decision, "source": "dashboard"})
    async with ctx.transaction() as uow:
        return await service.decide_signed(
            uow, member, RP, uuid.UUID(rid), payload, credential, utcnow()
        )


@pytest.fixture
async def critical_org(ctx: AppContext, org: Org) -> Org:
    await set_passkey_for(ctx, org, "critical")
    return org


# ---- the API and the setting ----


async def test_api_key_cannot_decide_a_request_that_needs_a_passkey(
    client: httpx.AsyncClient, critical_org: Org
) -> None:
    org = critical_org
    critical = await create_approval(client, org.member, priority="critical")
    answer = await client.patch(
        f"/api/v1/approvals/{critical['id']}",
        json={"decision": "approve"},
        headers=org.admin.headers,
    )
    details = assert_error(answer, 403, "PASSKEY_REQUIRED")
    assert details["url"].endswith(f"/requests/{critical['id']}")
    assert details["request_id"] == critical["id"]
    after = await client.get(f"/api/v1/approvals/{critical['id']}", headers=org.admin.headers)
    assert after.json()["status"] == "pending"
    # Another priority is decided as ever under "critical".
    high = await create_approval(client, org.member, priority="high")
    answer = await client.patch(
        f"/api/v1/approvals/{high['id']}", json={"decision": "approve"}, headers=org.admin.headers
    )
    assert answer.status_code == 200, answer.text


async def test_all_needs_a_passkey_for_every_request_and_every_step(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await set_passkey_for(ctx, org, "all")
    low = await create_approval(client, org.member, priority="low")
    steps = await client.post(
        f"/api/v1/approvals/{low['id']}/steps",
        json={"steps": [{"approver_id": org.admin.user_id, "step_order": 1}]},
        headers=org.admin.headers,
    )
    assert steps.status_code in (200, 201), steps.text
    step_id = steps.json()["data"][0]["id"]
    answer = await client.patch(
        f"/api/v1/approvals/{low['id']}/steps/{step_id}",
        json={"decision": "reject"},
        headers=org.admin.headers,
    )
    assert_error(answer, 403, "PASSKEY_REQUIRED")
    # Off again: decided as before.
    await set_passkey_for(ctx, org, "off")
    answer = await client.patch(
        f"/api/v1/approvals/{low['id']}/steps/{step_id}",
        json={"decision": "reject"},
        headers=org.admin.headers,
    )
    assert answer.status_code == 200, answer.text


async def test_another_orgs_request_is_still_404(
    client: httpx.AsyncClient, critical_org: Org, other_org: Org
) -> None:
    critical = await create_approval(client, critical_org.member, priority="critical")
    answer = await client.patch(
        f"/api/v1/approvals/{critical['id']}",
        json={"decision": "approve"},
        headers=other_org.admin.headers,
    )
    assert_error(answer, 404, "NOT_FOUND")


async def test_the_setting_takes_only_its_three_values(ctx: AppContext, org: Org) -> None:
    async with ctx.transaction() as uow:
        assert await service.get_passkey_for(uow.passkeys, uuid.UUID(org.id)) == "off"
        with pytest.raises(ValidationFailed):
            await service.set_passkey_for(uow.passkeys, uuid.UUID(org.id), "sometimes")
        assert await service.set_passkey_for(uow.passkeys, uuid.UUID(org.id), "all") == "all"
        assert await service.get_passkey_for(uow.passkeys, uuid.UUID(org.id)) == "all"


# ---- signed decisions ----


async def test_a_signed_approval_is_made_kept_and_verifiable_later(
    ctx: AppContext, client: httpx.AsyncClient, critical_org: Org
) -> None:
    org = critical_org
    request = await create_approval(
        client, org.member, priority="critical", arguments={"amount": 1200}
    )
    device = await with_passkey(ctx, org, org.admin)
    admin = await member_of(ctx, org.admin)
    # Without the proof, the dashboard's own path is refused too.
    with pytest.raises(PasskeyRequired):
        async with ctx.transaction() as uow:
            from signoff.approvals import service as approvals

            await approvals.decide(
                uow,
                admin,
                uuid.UUID(request["id"]),
                DecideApprovalRequest.model_validate({"decision": "approve"}),
                utcnow(),
                on="my_step",
            )
    credential = device.assert_(await options_for(ctx, admin, request["id"], "approve"))
    result = await decide_signed(ctx, admin, request["id"], "approve", credential)
    assert result.request.status == "approved"
    async with ctx.reading() as uow:
        (kept,) = await uow.passkeys.assertions_of(uuid.UUID(request["id"]))
        (key,) = await uow.passkeys.list_for_user(uuid.UUID(org.admin.user_id))
    stored = kept.as_export()
    assert stored["arguments_hash"] == request["arguments_hash"]
    assert stored["decision"] == "approve"
    assert key.last_used_at is not None and key.sign_count == 1
    service.verify_stored_assertion(stored, key.public_key)
    # What was signed is pinned: another decision, other arguments, another key fail.
    for changed in (
        {"decision": "reject"},
        {"arguments_hash": "sha-256:" + "A" * 43},
        {"request_id": str(uuid.uuid4())},
        {"public_key": service.b64url(SoftAuthenticator(RP.rp_id, RP.origin).cose_public_key())},
    ):
        with pytest.raises(PasskeyRefused):
            service.verify_stored_assertion({**stored, **changed})
    with pytest.raises(PasskeyRefused):
        service.verify_stored_assertion(stored, rp_id="evil.example")


async def test_a_replayed_assertion_is_refused(
    ctx: AppContext, client: httpx.AsyncClient, critical_org: Org
) -> None:
    org = critical_org
    request = await create_approval(client, org.member, priority="critical", required_approvals=2)
    device = await with_passkey(ctx, org, org.admin)
    admin = await member_of(ctx, org.admin)
    credential = device.assert_(await options_for(ctx, admin, request["id"], "approve"))
    first = await decide_signed(ctx, admin, request["id"], "approve", credential)
    assert first.request.current_approvals == 1
    with pytest.raises(PasskeyRefused):
        await decide_signed(ctx, admin, request["id"], "approve", credential)


async def test_an_assertion_made_for_another_request_or_decision_is_refused(
    ctx: AppContext, client: httpx.AsyncClient, critical_org: Org
) -> None:
    org = critical_org
    one = await create_approval(client, org.member, priority="critical")
    two = await create_approval(client, org.member, priority="critical")
    device = await with_passkey(ctx, org, org.admin)
    admin = await member_of(ctx, org.admin)
    for_one = device.assert_(await options_for(ctx, admin, one["id"], "approve"))
    with pytest.raises(PasskeyRefused):
        await decide_signed(ctx, admin, two["id"], "approve", for_one)
    reject_one = device.assert_(await options_for(ctx, admin, one["id"], "reject"))
    with pytest.raises(PasskeyRefused):
        await decide_signed(ctx, admin, one["id"], "approve", reject_one)
    # Someone else's passkey cannot sign for the admin.
    other = await member_of(ctx, org.members[1])
    with pytest.raises(PasskeyRefused):
        await decide_signed(ctx, other, one["id"], "approve", reject_one)
    assert (await client.get(f"/api/v1/approvals/{one['id']}", headers=org.admin.headers)).json()[
        "status"
    ] == "pending"


@pytest.mark.parametrize(
    "forgery",
    [
        {"origin": "https://evil.example"},
        {"rp_id": "evil.example"},
        {"challenge": b"\x00" * 32},
    ],
    ids=["origin", "rp_id", "challenge"],
)
async def test_an_assertion_from_another_origin_or_relying_party_is_refused(
    ctx: AppContext, client: httpx.AsyncClient, critical_org: Org, forgery: dict[str, Any]
) -> None:
    org = critical_org
    request = await create_approval(client, org.member, priority="critical")
    device = await with_passkey(ctx, org, org.admin)
    admin = await member_of(ctx, org.admin)
    options = await options_for(ctx, admin, request["id"], "approve")
    forged = device.assert_(options, **forgery)
    if "challenge" in forgery:
        # A challenge the server never gave names no stored challenge.
        with pytest.raises(PasskeyRefused):
            await decide_signed(ctx, admin, request["id"], "approve", forged)
        return
    with pytest.raises(PasskeyRefused):
        await decide_signed(ctx, admin, request["id"], "approve", forged)


async def test_an_edit_of_the_arguments_after_the_challenge_fails_the_signature(
    ctx: AppContext, client: httpx.AsyncClient, critical_org: Org
) -> None:
    """The challenge is recomputed from the request as it is when the decision lands."""
    from sqlalchemy import update

    from signoff.models import ApprovalRequest

    org = critical_org
    request = await create_approval(client, org.member, priority="critical")
    device = await with_passkey(ctx, org, org.admin)
    admin = await member_of(ctx, org.admin)
    credential = device.assert_(await options_for(ctx, admin, request["id"], "approve"))
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == uuid.UUID(request["id"]))
            .values(arguments_hash="sha-256:" + "B" * 43)
        )
    with pytest.raises(PasskeyRefused):
        await decide_signed(ctx, admin, request["id"], "approve", credential)


async def test_hostile_credentials_are_refused_not_crashed(
    ctx: AppContext, client: httpx.AsyncClient, critical_org: Org
) -> None:
    org = critical_org
    request = await create_approval(client, org.member, priority="critical")
    admin = await member_of(ctx, org.admin)
    for junk in ("", "{", "[]", '{"response": 1}', "x" * 20000, '{"id": 1, "response": {}}'):
        with pytest.raises(PasskeyRefused):
            await decide_signed(ctx, admin, request["id"], "approve", junk)
