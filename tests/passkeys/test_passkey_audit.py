"""Passkey-signed votes in the audit chain, on both databases: the assertion goes into
the chain with the key, relying party and origin it was checked against, so that the
offline verifier checks it again with nothing but the export; and an assertion whose
signature was changed, that was made for another origin or relying party, or for
another request, written into an event before it was sealed, is named by the verifier."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, cast

import httpx
import pytest
from sqlalchemy import Table, select, update

from signoff.audit import chain
from signoff.audit.sealing import seal_org_now
from signoff.audit.service import export_records
from signoff.context import AppContext
from signoff.models import AuditChainLink, AuditEvent
from signoff.passkeys.proof import b64url, decision_challenge
from tests.conftest import Org, create_approval
from tests.passkeys.authenticator import SoftAuthenticator
from tests.passkeys.test_passkey_decisions import (
    critical_org,  # noqa: F401 (a fixture)
    decide_signed,
    member_of,
    options_for,
    with_passkey,
)

pytestmark = pytest.mark.anyio

EVENTS = cast(Table, AuditEvent.__table__)
CHAIN = cast(Table, AuditChainLink.__table__)


@pytest.fixture
def client(api_only: httpx.AsyncClient) -> httpx.AsyncClient:
    """The app without its background sealer: these tests change an event before it is
    sealed and then seal it themselves (``seal_org_now``); a sealer of the app's own
    would chain it first whenever the test runs slower than the seal interval."""
    return api_only


async def _signed_vote(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> tuple[dict[str, Any], Any]:
    request = await create_approval(client, org.member, priority="critical")
    device = await with_passkey(ctx, org, org.admin)
    admin = await member_of(ctx, org.admin)
    credential = device.assert_(await options_for(ctx, admin, request["id"], "approve"))
    await decide_signed(ctx, admin, request["id"], "approve", credential)
    return request, device


async def _verified(ctx: AppContext, org: Org) -> chain.VerifyResult:
    await seal_org_now(ctx, uuid.UUID(org.id), checkpoint=True)
    lines = [json.dumps(r) async for r in export_records(ctx.db.read_session, uuid.UUID(org.id), 1)]
    return chain.verify(chain.parse_lines(lines), None)


def _signed(org: Org) -> Any:
    return (EVENTS.c.org_id == uuid.UUID(org.id)) & (EVENTS.c.type == chain.PASSKEY_SIGNED)


async def _tamper(ctx: AppContext, org: Org, **values: Any) -> dict[str, Any]:
    """Change the unsealed passkey event as someone with the database could before the
    sealer chains it; its data before the change."""
    async with ctx.db.write_transaction() as session:
        row = (await session.execute(select(EVENTS).where(_signed(org)))).one()
        link = select(CHAIN).where(CHAIN.c.event_id == row.id)
        assert (await session.execute(link)).first() is None  # not chained yet
        data = dict(row.data)
        changes = values.pop("data", {})
        await session.execute(
            update(EVENTS).where(EVENTS.c.id == row.id).values(data={**data, **changes}, **values)
        )
    return data


async def test_a_signed_vote_is_exported_with_its_assertion_and_verifies(
    ctx: AppContext,
    client: httpx.AsyncClient,
    critical_org: Org,  # noqa: F811
) -> None:
    org = critical_org
    request, _ = await _signed_vote(ctx, client, org)
    await seal_org_now(ctx, uuid.UUID(org.id), checkpoint=True)
    records = [r async for r in export_records(ctx.db.read_session, uuid.UUID(org.id), 1)]
    (event,) = [r for r in records if r.get("type") == chain.PASSKEY_SIGNED]
    assert event["request_id"] == request["id"]
    assert event["actor_id"] == org.admin.user_id
    data = event["data"]
    assert data["decision"] == "approve"
    assert data["arguments_hash"] == request["arguments_hash"]
    for field in ("authenticator_data", "client_data_json", "signature", "credential_id"):
        assert data[field]
    assert (data["rp_id"], data["origin"]) == ("signoff.example.com", "https://signoff.example.com")
    assert data["public_key"]
    result = await _verified(ctx, org)
    assert result.ok, result.problem


@dataclass
class SignedVote:
    org: Org
    request: dict[str, Any]
    device: SoftAuthenticator


@pytest.fixture
async def signed(
    ctx: AppContext,
    client: httpx.AsyncClient,
    critical_org: Org,  # noqa: F811
) -> SignedVote:
    """A vote signed with a passkey, its event not sealed yet."""
    request, device = await _signed_vote(ctx, client, critical_org)
    return SignedVote(critical_org, request, device)


async def _assertion_named(ctx: AppContext, org: Org) -> None:
    result = await _verified(ctx, org)
    assert not result.ok
    seq = result.problem_seq
    assert result.problem == f"event #{seq} has a passkey assertion that does not verify"


async def test_a_tampered_signature_is_named_by_the_verifier(
    ctx: AppContext, signed: SignedVote
) -> None:
    data = await _tamper(ctx, signed.org)
    signature = bytearray(data["signature"].encode())
    signature[12] = ord("A") if signature[12] != ord("A") else ord("B")
    await _tamper(ctx, signed.org, data={"signature": signature.decode()})
    await _assertion_named(ctx, signed.org)


@pytest.mark.parametrize(
    "forgery",
    [{"origin": "https://evil.example"}, {"rp_id": "evil.example"}],
    ids=["origin", "rp_id"],
)
async def test_an_assertion_from_another_origin_or_relying_party_is_named(
    ctx: AppContext, signed: SignedVote, forgery: dict[str, str]
) -> None:
    data = await _tamper(ctx, signed.org)
    # A real signature by the same key, over the same challenge, made for another site.
    options = json.dumps({"challenge": chain_challenge(signed.request["id"], data)})
    response = json.loads(signed.device.assert_(options, **forgery))["response"]
    forged = {
        "authenticator_data": response["authenticatorData"],
        "client_data_json": response["clientDataJSON"],
        "signature": response["signature"],
    }
    await _tamper(ctx, signed.org, data=forged)
    await _assertion_named(ctx, signed.org)


async def test_an_assertion_moved_to_another_request_is_named(
    ctx: AppContext, client: httpx.AsyncClient, signed: SignedVote
) -> None:
    other = await create_approval(client, signed.org.member, priority="critical")
    await _tamper(ctx, signed.org, request_id=uuid.UUID(other["id"]))
    await _assertion_named(ctx, signed.org)


def chain_challenge(request_id: str, data: dict[str, Any]) -> str:
    return b64url(
        decision_challenge(request_id, data["decision"], data["arguments_hash"], data["nonce"])
    )


def _linked(events: list[dict[str, Any]]) -> list[str]:
    """Export lines of ``events`` chained by the hash rule, as a sealer would."""
    lines, prev = [], chain.GENESIS_HASH
    for seq, event in enumerate(events, start=1):
        canonical = chain.canonical_event(seq=seq, prev_hash=prev, **event)
        prev = chain.event_hash(canonical)
        lines.append(json.dumps({"kind": "event", **canonical, "hash": prev}))
    return lines


def test_a_signed_vote_carrying_another_key_than_its_registered_one_is_named() -> None:
    org, user, request = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    common = {"org_id": org, "actor_id": user, "created_at": "2026-11-28T08:00:00.000000Z"}
    registered = {
        **common,
        "id": uuid.uuid4(),
        "request_id": None,
        "type": chain.PASSKEY_REGISTERED,
        "data": {"credential_id": "cred", "public_key": "registered-key"},
    }
    signed = {
        **common,
        "id": uuid.uuid4(),
        "request_id": request,
        "type": chain.PASSKEY_SIGNED,
        "data": {"credential_id": "cred", "public_key": "attacker-key"},
    }
    result = chain.verify(chain.parse_lines(_linked([registered, signed])), None)
    assert (result.ok, result.problem_seq) == (False, 2)
    assert result.problem == "event #2 carries a key its passkey was not registered with"
