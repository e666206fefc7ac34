"""Approval receipts end to end over the API, on SQLite and PostgreSQL: the arguments'
checks at create, the receipt an approval issues (verified with joserfc against
/.well-known/jwks.json), who sees it, the callback carrying it, redeeming it once, and
every hostile receipt refused without a 5xx."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import uuid
from datetime import timedelta
from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Receiver
from joserfc import jws
from joserfc.jwk import KeySet
from sqlalchemy import text

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.crypto import SecretBox
from signoff.receipts import endpoints as receipt_endpoints
from signoff.receipts import keys as receipt_keys
from signoff.receipts import service as receipt_service
from signoff.receipts.arguments import arguments_hash
from tests.conftest import Member, Org, assert_error, create_approval
from tests.steps.test_steps import set_chain, vote

ARGS = {"service": "billing", "replicas": 3, "regions": ["eu", "us"]}
SCHEMA = {
    "type": "object",
    "properties": {
        "service": {"type": "string"},
        "replicas": {"type": "integer", "minimum": 1},
        "regions": {"type": "array", "items": {"type": "string"}},
    },
    "required": ["service", "replicas"],
}


async def approve(client: httpx.AsyncClient, who: Member, request_id: str) -> dict[str, Any]:
    response = await client.patch(
        f"/api/v1/approvals/{request_id}", json={"decision": "approve"}, headers=who.headers
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def read(client: httpx.AsyncClient, who: Member, request_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/approvals/{request_id}", headers=who.headers)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def approved_receipt(
    client: httpx.AsyncClient, org: Org, **fields: Any
) -> tuple[dict[str, Any], str]:
    """A request of ``org.member`` approved by the admin, and its receipt."""
    created = await create_approval(client, org.member, **fields)
    await approve(client, org.admin, created["id"])
    body = await read(client, org.member, created["id"])
    assert isinstance(body["receipt"], str)
    return body, body["receipt"]


async def key_set(client: httpx.AsyncClient) -> KeySet:
    response = await client.get("/.well-known/jwks.json")
    assert response.status_code == 200
    return KeySet.import_key_set(response.json())


async def redeem(
    client: httpx.AsyncClient, who: Member, token: str, **extra: Any
) -> httpx.Response:
    return await client.post(
        "/api/v1/receipts/redeem", json={"receipt": token, **extra}, headers=who.headers
    )


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


# ---- the hash rule ----


def test_the_hash_rule_on_a_known_vector() -> None:
    # RFC 8785 sorts keys and writes numbers its way: {"a":1,"b":[true,"x"]}.
    expected = "sha-256:" + b64(hashlib.sha256(b'{"a":1,"b":[true,"x"]}').digest())
    assert arguments_hash({"b": [True, "x"], "a": 1.0}) == expected
    assert (
        arguments_hash(None)
        == arguments_hash({})
        == ("sha-256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o")
    )


# ---- the fields at create ----


async def test_arguments_are_stored_and_hashed(client: httpx.AsyncClient, org: Org) -> None:
    created = await create_approval(client, org.member, arguments=ARGS, arguments_schema=SCHEMA)
    assert created["arguments"] == ARGS
    assert created["arguments_hash"] == arguments_hash(ARGS)
    assert created["arguments_edited"] is False
    plain = await create_approval(client, org.member)
    assert plain["arguments"] == {} and plain["arguments_hash"] == arguments_hash({})
    listed = await client.get("/api/v1/approvals", headers=org.member.headers)
    by_id = {item["id"]: item for item in listed.json()["data"]}
    assert by_id[created["id"]]["arguments_hash"] == created["arguments_hash"]


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"arguments": {"blob": "x" * (64 * 1024)}}, "arguments"),
        ({"arguments": {"n": 2**60}}, "arguments"),
        ({"arguments": "not an object"}, "arguments"),
        ({"arguments_schema": {"type": 12}}, "arguments_schema/type"),
        ({"arguments_schema": {"$ref": "https://example.com/s.json"}}, "arguments_schema/$ref"),
        (
            {"arguments_schema": {"properties": {"a": {"$ref": "other.json#/x"}}}},
            "arguments_schema/properties/a/$ref",
        ),
        ({"arguments_schema": {"$ref": "#"}}, "arguments_schema"),
        (
            {"arguments_schema": {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}},
            "arguments_schema",
        ),
        ({"arguments": {"replicas": 0}, "arguments_schema": SCHEMA}, "arguments/replicas"),
        (
            {
                "arguments": {"service": "x", "replicas": 1, "regions": [1]},
                "arguments_schema": SCHEMA,
            },
            "arguments/regions/0",
        ),
        ({"arguments_schema": SCHEMA}, "arguments"),
        ({"receipt_ttl_seconds": 0}, "receipt_ttl_seconds"),
        ({"receipt_ttl_seconds": 24 * 3600 + 1}, "receipt_ttl_seconds"),
    ],
)
async def test_bad_arguments_answer_400_naming_the_field(
    client: httpx.AsyncClient, org: Org, fields: dict[str, Any], named: str
) -> None:
    body = {"title": "Deploy", "description": "Roll out", "priority": "high", **fields}
    response = await client.post("/api/v1/approvals", json=body, headers=org.member.headers)
    details = assert_error(response, 400, "VALIDATION_ERROR")
    assert named in [f["field"] for f in details["fields"]], details


async def test_deep_arguments_are_refused(client: httpx.AsyncClient, org: Org) -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(40):
        inner["a"] = {}
        inner = inner["a"]
    body = {"title": "Deploy", "description": "Roll out", "priority": "high", "arguments": deep}
    response = await client.post("/api/v1/approvals", json=body, headers=org.member.headers)
    assert_error(response, 400, "VALIDATION_ERROR")


# ---- issuing ----


async def test_an_approval_issues_a_receipt_that_verifies_against_the_jwks(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(
        client, org.member, arguments=ARGS, action_type="deploy.prod", receipt_ttl_seconds=600
    )
    assert (await read(client, org.member, created["id"]))["receipt"] is None
    answer = await approve(client, org.admin, created["id"])
    body = await read(client, org.member, created["id"])
    assert body["receipt_issued"] is True and body["receipt_uses"] == 0
    # The decision's answer says it was issued; the token is signed on read, not there.
    assert answer["receipt"] is None and answer["receipt_issued"] is True
    token = body["receipt"]
    # Signed again on each read, byte for byte the same (Ed25519 is deterministic).
    assert (await read(client, org.member, created["id"]))["receipt"] == token
    assert (await read(client, org.admin, created["id"]))["receipt"] == token
    verified = jws.deserialize_compact(token, await key_set(client), algorithms=["Ed25519"])
    header = verified.headers()
    assert header["alg"] == "Ed25519" and header["typ"] == "signoff-receipt+jwt"
    claims = orjson.loads(verified.payload)
    assert claims["iss"] == "http://127.0.0.1:8000" or claims["iss"].startswith("http")
    assert claims["sub"] == created["id"] and claims["org"] == org.id
    assert claims["action_type"] == "deploy.prod"
    assert claims["arguments_hash"] == arguments_hash(ARGS) == body["arguments_hash"]
    assert claims["decided_by"] == [org.admin.user_id]
    assert claims["max_uses"] == 1 and "preview_hash" not in claims
    assert claims["nbf"] == claims["iat"] and claims["exp"] == claims["iat"] + 600
    assert claims["authorization_details"] == [
        {
            "type": "signoff_action",
            "request_id": created["id"],
            "action_type": "deploy.prod",
            "arguments_hash": claims["arguments_hash"],
            "org": org.id,
        }
    ]


async def test_the_receipt_names_the_preview_the_approvers_saw(
    client: httpx.AsyncClient, org: Org
) -> None:
    preview = {"kind": "sql", "content": "DELETE FROM sessions WHERE expired"}
    created = await create_approval(client, org.member, arguments=ARGS, preview=preview)
    await approve(client, org.admin, created["id"])
    body = await read(client, org.member, created["id"])
    claims = orjson.loads(jws.extract_compact(body["receipt"].encode()).payload)
    assert claims["preview_hash"] == body["preview_hash"]
    assert body["preview_hash"].startswith("sha-256:")


async def test_count_based_receipt_names_every_approver(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member, required_approvals=2)
    await approve(client, org.members[1], created["id"])
    await approve(client, org.members[2], created["id"])
    body = await read(client, org.member, created["id"])
    claims = orjson.loads(jws.extract_compact(body["receipt"].encode()).payload)
    assert sorted(claims["decided_by"]) == sorted([org.members[1].user_id, org.members[2].user_id])


async def test_a_chain_and_an_override_issue_receipts(client: httpx.AsyncClient, org: Org) -> None:
    chained = await create_approval(client, org.member)
    steps = await set_chain(client, org.member, chained["id"], [org.members[1], org.members[2]])
    answers = []
    for step, who in zip(steps, [org.members[1], org.members[2]], strict=True):
        answer = await vote(client, who, chained["id"], step["id"])
        assert answer.status_code == 200
        answers.append(answer.json())
    # Only the deciding vote issues it; no vote's answer shows it (it is signed on read).
    assert [a["receipt_issued"] for a in answers] == [False, True]
    assert [a["receipt"] for a in answers] == [None, None]
    claims = orjson.loads(
        jws.extract_compact(
            (await read(client, org.member, chained["id"]))["receipt"].encode()
        ).payload
    )
    assert claims["decided_by"] == [org.members[1].user_id, org.members[2].user_id]

    overridden = await create_approval(client, org.member)
    await set_chain(client, org.member, overridden["id"], [org.members[1]])
    await approve(client, org.admin, overridden["id"])
    token = (await read(client, org.member, overridden["id"]))["receipt"]
    verified = jws.deserialize_compact(token, await key_set(client), algorithms=["Ed25519"])
    assert orjson.loads(verified.payload)["decided_by"] == [org.admin.user_id]


async def test_only_the_creator_and_admins_see_the_receipt(
    client: httpx.AsyncClient, org: Org
) -> None:
    body, token = await approved_receipt(client, org)
    assert (await read(client, org.admin, body["id"]))["receipt"] == token
    other = await read(client, org.members[1], body["id"])
    assert other["receipt"] is None and other["receipt_issued"] is True
    # A member's deciding vote answers without it.
    voted = await create_approval(client, org.member)
    answer = await approve(client, org.members[1], voted["id"])
    assert answer["receipt"] is None and answer["receipt_issued"] is True
    rejected = await create_approval(client, org.member)
    await client.patch(
        f"/api/v1/approvals/{rejected['id']}",
        json={"decision": "reject"},
        headers=org.admin.headers,
    )
    assert (await read(client, org.member, rejected["id"]))["receipt_issued"] is False


async def test_the_callback_carries_the_receipt_and_the_outbox_does_not(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    async with Receiver() as receiver:
        created = await create_approval(client, org.member, callback_url=receiver.url)
        await approve(client, org.admin, created["id"])
        [request] = await receiver.wait_for(1)
    sent = orjson.loads(request.body)
    token = (await read(client, org.member, created["id"]))["receipt"]
    assert sent["receipt"] == token
    # Signed as sent: the body with the receipt in it.
    expected = hmac.new(org.member.webhook_secret.encode(), request.body, hashlib.sha256)
    assert request.headers["x-service-signature"] == "sha256=" + expected.hexdigest()
    async with ctx.reading() as uow:
        stored = (
            (await uow.session.execute(text("SELECT body FROM webhook_deliveries"))).scalars().all()
        )
        held = (
            (await uow.session.execute(text("SELECT receipt_encrypted FROM webhook_deliveries")))
            .scalars()
            .all()
        )
        kept = (
            await uow.session.execute(text("SELECT count(*) FROM stored_receipt_tokens"))
        ).scalar_one()
    assert all(token.encode() not in bytes(body) for body in stored)
    # Neither the outbox nor the receipts hold the token: it is signed as it is sent.
    assert held == [receipt_service.SIGNED_ON_SEND] and kept == 0


# ---- redeeming ----


async def test_redeem_once_then_409(client: httpx.AsyncClient, org: Org) -> None:
    body, token = await approved_receipt(client, org, arguments=ARGS)
    first = await redeem(
        client,
        org.member,
        token,
        arguments={"regions": ["eu", "us"], "replicas": 3, "service": "billing"},
    )
    assert first.status_code == 200, first.text
    redeemed = first.json()
    assert redeemed["request_id"] == body["id"] and redeemed["uses_left"] == 0
    assert set(redeemed) == {"request_id", "jti", "uses_left", "redeemed_at"}
    assert_error(await redeem(client, org.member, token), 409, "RECEIPT_USED_UP")
    assert (await read(client, org.member, body["id"]))["receipt_uses"] == 1
    events = await client.get(f"/api/v1/approvals/{body['id']}/events", headers=org.member.headers)
    [event] = [e for e in events.json()["data"] if e["type"] == "receipt.redeemed"]
    assert event["actor_id"] == org.member.user_id
    assert event["data"]["redeemed_by"]["connection_id"] == org.member.connection_id


async def test_other_arguments_do_not_redeem(client: httpx.AsyncClient, org: Org) -> None:
    _, token = await approved_receipt(client, org, arguments=ARGS)
    other = await create_approval(client, org.member, arguments={"service": "other"})
    for arguments in ({**ARGS, "replicas": 4}, other["arguments"], {"n": 2**60}):
        assert_error(
            await redeem(client, org.member, token, arguments=arguments), 400, "ARGUMENTS_MISMATCH"
        )
    assert (await redeem(client, org.member, token, arguments=ARGS)).status_code == 200


async def test_an_expired_receipt_answers_410(
    client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, token = await approved_receipt(client, org, receipt_ttl_seconds=60)
    later = utcnow() + timedelta(seconds=61)
    monkeypatch.setattr(receipt_endpoints, "utcnow", lambda: later)
    assert_error(await redeem(client, org.member, token), 410, "RECEIPT_EXPIRED")


async def test_another_orgs_receipt_answers_404(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    _, token = await approved_receipt(client, org)
    assert_error(await redeem(client, other_org.member, token), 404, "NOT_FOUND")
    assert (await redeem(client, org.member, token)).status_code == 200


def _hostile(token: str, public_x: str) -> list[str]:
    header, payload, signature = token.split(".")
    claims = orjson.loads(base64.urlsafe_b64decode(payload + "=="))
    tampered = b64(orjson.dumps({**claims, "max_uses": 5}))
    kid = orjson.loads(base64.urlsafe_b64decode(header + "=="))["kid"]
    none_header = b64(orjson.dumps({"alg": "none", "typ": "signoff-receipt+jwt", "kid": kid}))
    hs_header = b64(orjson.dumps({"alg": "HS256", "typ": "signoff-receipt+jwt", "kid": kid}))
    hs_signature = b64(
        hmac.new(public_x.encode(), f"{hs_header}.{payload}".encode(), hashlib.sha256).digest()
    )
    jwt_header = b64(orjson.dumps({"alg": "Ed25519", "typ": "JWT", "kid": kid}))
    return [
        f"{header}.{tampered}.{signature}",
        f"{header}.{payload}.{signature[:-4]}",
        token[: len(token) // 2],
        f"{none_header}.{payload}.",
        f"{hs_header}.{payload}.{hs_signature}",
        f"{jwt_header}.{payload}.{signature}",
        "garbage",
        "a.b.c",
        "",
    ]


async def test_hostile_receipts_answer_400(client: httpx.AsyncClient, org: Org) -> None:
    _, token = await approved_receipt(client, org)
    public_x = (await client.get("/.well-known/jwks.json")).json()["keys"][0]["x"]
    for hostile in _hostile(token, public_x):
        response = await redeem(client, org.member, hostile)
        assert response.status_code == 400, (hostile, response.text)
        assert response.json()["error"]["code"] in ("RECEIPT_INVALID", "VALIDATION_ERROR")
    assert (await redeem(client, org.member, token)).status_code == 200


async def test_concurrent_redeems_succeed_once(client: httpx.AsyncClient, org: Org) -> None:
    _, token = await approved_receipt(client, org)
    answers = await asyncio.gather(*(redeem(client, org.member, token) for _ in range(100)))
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses.count(200) == 1 and statuses.count(409) == 99, statuses


# ---- keys ----


async def test_jwks_is_public_and_cacheable(client: httpx.AsyncClient) -> None:
    response = await client.get("/.well-known/jwks.json")
    assert response.status_code == 200
    assert "max-age" in response.headers["cache-control"]
    [key] = response.json()["keys"]
    assert {k: key[k] for k in ("kty", "crv", "use", "alg")} == {
        "kty": "OKP",
        "crv": "Ed25519",
        "use": "sig",
        "alg": "Ed25519",
    }
    assert set(key) == {"kty", "crv", "x", "kid", "use", "alg"}


async def test_rotation_keeps_the_old_key_while_its_receipts_live(
    client: httpx.AsyncClient, org: Org, ctx: AppContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    body, token = await approved_receipt(client, org, receipt_ttl_seconds=60)
    [old] = (await client.get("/.well-known/jwks.json")).json()["keys"]
    new_kid = await receipt_keys.rotate(ctx.db, ctx.box, utcnow())
    ctx.keys.forget()
    # Signed on read by the key its kid names, the retired one: the same bytes as before.
    assert (await read(client, org.member, body["id"]))["receipt"] == token
    _, newer = await approved_receipt(client, org)
    assert jws.extract_compact(newer.encode()).headers()["kid"] == new_kid
    listed = [key["kid"] for key in (await client.get("/.well-known/jwks.json")).json()["keys"]]
    assert listed == [new_kid, old["kid"]]
    # Both still verify and redeem.
    keys = await key_set(client)
    for receipt in (token, newer):
        jws.deserialize_compact(receipt, keys, algorithms=["Ed25519"])
        assert (await redeem(client, org.member, receipt)).status_code == 200
    # Once the old key's last receipt has expired, it is no longer listed.
    later = utcnow() + timedelta(seconds=61)
    monkeypatch.setattr(receipt_endpoints, "utcnow", lambda: later)
    listed = [key["kid"] for key in (await client.get("/.well-known/jwks.json")).json()["keys"]]
    assert listed == [new_kid]


async def test_a_key_that_does_not_decrypt_stops_approvals_only(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    await create_approval(client, org.member)  # the key exists
    ctx.keys.box = SecretBox(os.urandom(32))  # as if SIGNOFF_SECRET_KEY had changed
    ctx.keys.forget()
    created = await create_approval(client, org.member)
    rejected = await create_approval(client, org.member)
    response = await client.patch(
        f"/api/v1/approvals/{rejected['id']}",
        json={"decision": "reject"},
        headers=org.admin.headers,
    )
    assert response.status_code == 200
    response = await client.patch(
        f"/api/v1/approvals/{created['id']}",
        json={"decision": "approve"},
        headers=org.admin.headers,
    )
    assert_error(response, 503, "SERVICE_UNAVAILABLE")
    assert (await read(client, org.member, created["id"]))["status"] == "pending"


async def test_a_token_stored_before_0048_is_served_as_stored(
    client: httpx.AsyncClient, org: Org, ctx: AppContext
) -> None:
    """A receipt whose row has no claims (0048 kept its token apart) reads its token."""
    body, _ = await approved_receipt(client, org)
    async with ctx.db.write_transaction() as session:
        jti = (
            await session.execute(
                text("SELECT jti FROM receipts WHERE request_id = :id"),
                {
                    "id": uuid.UUID(body["id"])
                    if ctx.db.dialect != "sqlite"
                    else body["id"].replace("-", "")
                },
            )
        ).scalar_one()
        await session.execute(
            text("UPDATE receipts SET issuer = NULL, decided_by = NULL WHERE jti = :jti"),
            {"jti": jti},
        )
        await session.execute(
            text("INSERT INTO stored_receipt_tokens (jti, token_encrypted) VALUES (:jti, :t)"),
            {"jti": jti, "t": ctx.box.encrypt("stored.before.0048")},
        )
    assert (await read(client, org.member, body["id"]))["receipt"] == "stored.before.0048"
