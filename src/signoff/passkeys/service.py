"""Passkey ceremonies: register, sign in, sign a decision; and the check of an
assertion kept with a vote, which an auditor can run again later.

Services never commit. Every challenge is stored (``passkey_challenges``) and used once:
the use that checks it deletes it in the caller's transaction, so a replayed assertion
finds nothing, on whichever replica it lands.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import urlsplit

import orjson

from signoff.approvals import service as approvals
from signoff.approvals.repository import NewEvent
from signoff.approvals.schemas import DecideApprovalRequest
from signoff.audit.chain import PASSKEY_REGISTERED, PASSKEY_SIGNED
from signoff.auth.principal import OrgMember
from signoff.common.time import utcnow
from signoff.errors import NotFound, ValidationFailed
from signoff.models import Passkey
from signoff.passkeys.proof import (
    PasskeyRefused,
    b64url,
    decision_challenge,
    unb64url,
    verify_stored_assertion,
)
from signoff.passkeys.repository import PasskeyRepository
from signoff.passkeys.rule import PASSKEY_FOR_VALUES, PasskeyProof

if TYPE_CHECKING:
    from signoff.passkeys.webauthn_calls import Credential

# ``webauthn`` is reached through ``webauthn_calls``, imported in each ceremony, not
# here: only passkey routes need it (docs/decisions/0043-serve-memory.md).

# The offline check lives in ``proof`` (the audit verifier runs it); callers of the
# service keep finding it here.
__all__ = ["PasskeyRefused", "b64url", "unb64url", "verify_stored_assertion"]

# A ceremony is a person at their device: a few minutes is plenty, and a leaked
# challenge is worth nothing soon after.
CHALLENGE_SECONDS = 300
NAME_MAX = 100
# What an assertion from a browser may weigh before it is parsed.
CREDENTIAL_JSON_MAX = 16_384
DECISIONS = ("approve", "reject")


class PasskeyWork(approvals.ApprovalsWork, Protocol):
    """A unit of work that decides and keeps passkeys."""

    @property
    def passkeys(self) -> PasskeyRepository: ...


@dataclass(frozen=True)
class RelyingParty:
    """Who the passkeys are for: the host of ``public_url`` and its origin."""

    rp_id: str
    origin: str
    name: str = "signoff"

    @classmethod
    def of(cls, public_url: str) -> RelyingParty:
        parts = urlsplit(public_url)
        return cls(rp_id=parts.hostname or "localhost", origin=f"{parts.scheme}://{parts.netloc}")


def _parse_credential(text: str) -> dict[str, Any]:
    """The browser's PublicKeyCredential JSON, and the challenge its client data names."""
    if len(text) > CREDENTIAL_JSON_MAX:
        raise PasskeyRefused()
    try:
        credential = orjson.loads(text)
        client_data = orjson.loads(unb64url(credential["response"]["clientDataJSON"]))
        credential["_challenge"] = str(client_data["challenge"])
        credential["_id"] = str(credential["id"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise PasskeyRefused() from None
    if not isinstance(credential, dict):
        raise PasskeyRefused()
    return credential


def _webauthn_fields(credential: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in credential.items() if not k.startswith("_")}


async def _new_challenge(
    repo: PasskeyRepository, now: datetime, purpose: str, **values: Any
) -> bytes:
    challenge = values.pop("challenge", None) or secrets.token_bytes(32)
    await repo.add_challenge(
        {
            "id": uuid.uuid4(),
            "challenge": b64url(challenge),
            "purpose": purpose,
            "created_at": now,
            "expires_at": now + timedelta(seconds=CHALLENGE_SECONDS),
            **values,
        },
        now,
    )
    return challenge


def _credentials(passkeys: list[Passkey] | tuple[Passkey, ...]) -> list[Credential]:
    from signoff.passkeys.webauthn_calls import Credential

    return [Credential(unb64url(key.credential_id), tuple(key.transports)) for key in passkeys]


# ---- registering ----


async def registration_options(
    repo: PasskeyRepository, member: OrgMember, rp: RelyingParty, now: datetime
) -> str:
    """The options for ``navigator.credentials.create``: a discoverable credential that
    verifies its user, not one of those the person has already."""
    from signoff.passkeys import webauthn_calls

    existing = list(await repo.list_for_user(member.user_id))
    challenge = await _new_challenge(repo, now, "register", user_id=member.user_id)
    return webauthn_calls.registration_options(
        rp_id=rp.rp_id,
        rp_name=rp.name,
        user_id=member.user_id.bytes,
        user_name=member.user_email,
        user_display_name=member.user_name,
        challenge=challenge,
        exclude=_credentials(existing),
    )


async def register(
    repo: PasskeyRepository,
    member: OrgMember,
    rp: RelyingParty,
    name: str,
    credential_json: str,
    now: datetime,
) -> Passkey:
    """Check the browser's answer to ``registration_options`` and keep the passkey."""
    from signoff.passkeys import webauthn_calls

    name = " ".join(name.split())[:NAME_MAX] or "Passkey"
    credential = _parse_credential(credential_json)
    taken = await repo.take_challenge(credential["_challenge"], "register", now)
    if taken is None or taken["user_id"] != member.user_id:
        raise PasskeyRefused("This passkey request expired. Please try again.")
    try:
        verified = webauthn_calls.verify_registration(
            _webauthn_fields(credential),
            challenge=unb64url(credential["_challenge"]),
            rp_id=rp.rp_id,
            origin=rp.origin,
        )
    except webauthn_calls.REFUSED:
        raise PasskeyRefused() from None
    credential_id = b64url(verified.credential_id)
    if await repo.find_by_credential_id(credential_id) is not None:
        raise PasskeyRefused("This passkey is registered already.")
    transports = credential.get("response", {}).get("transports") or []
    passkey = Passkey(
        id=uuid.uuid4(),
        org_id=member.org_id,
        user_id=member.user_id,
        name=name,
        credential_id=credential_id,
        public_key=b64url(verified.public_key),
        sign_count=verified.sign_count,
        transports=[
            t for t in transports if isinstance(t, str) and t in webauthn_calls.KNOWN_TRANSPORTS
        ],
        created_at=now,
    )
    await repo.add(passkey)
    # The key goes into the chain: an auditor checks later signatures against it.
    registered = {"passkey_id": str(passkey.id), "name": name, "credential_id": credential_id}
    registered["public_key"] = passkey.public_key
    await repo.record_change(member, PASSKEY_REGISTERED, registered, now)
    return passkey


async def remove(
    repo: PasskeyRepository, member: OrgMember, passkey_id: uuid.UUID, now: datetime
) -> str:
    name = await repo.remove(member.user_id, passkey_id)
    if name is None:
        raise NotFound("No passkey with this id.")
    removed = {"passkey_id": str(passkey_id), "name": name}
    await repo.record_change(member, "passkey.removed", removed, now)
    return name


# ---- signing in ----


async def signin_options(repo: PasskeyRepository, rp: RelyingParty, now: datetime) -> str:
    """Options for a discoverable credential: the authenticator says whose it is."""
    from signoff.passkeys import webauthn_calls

    challenge = await _new_challenge(repo, now, "signin")
    return webauthn_calls.authentication_options(rp_id=rp.rp_id, challenge=challenge)


async def sign_in(
    repo: PasskeyRepository, rp: RelyingParty, credential_json: str, now: datetime
) -> uuid.UUID:
    """The user whose passkey answered the sign-in challenge."""
    credential = _parse_credential(credential_json)
    taken = await repo.take_challenge(credential["_challenge"], "signin", now)
    if taken is None:
        raise PasskeyRefused("This sign-in expired. Please try again.")
    passkey = await _check_assertion(repo, rp, credential, unb64url(credential["_challenge"]), now)
    handle = credential.get("response", {}).get("userHandle")
    if handle and handle != b64url(passkey.user_id.bytes):
        raise PasskeyRefused()
    return passkey.user_id


async def _check_assertion(
    repo: PasskeyRepository,
    rp: RelyingParty,
    credential: dict[str, Any],
    expected_challenge: bytes,
    now: datetime,
) -> Passkey:
    from signoff.passkeys import webauthn_calls

    passkey = await repo.find_by_credential_id(credential["_id"])
    if passkey is None:
        raise PasskeyRefused("This passkey is not registered here.")
    try:
        sign_count = webauthn_calls.verify_assertion(
            _webauthn_fields(credential),
            challenge=expected_challenge,
            rp_id=rp.rp_id,
            origin=rp.origin,
            public_key=unb64url(passkey.public_key),
            sign_count=passkey.sign_count,
        )
    except webauthn_calls.REFUSED:
        raise PasskeyRefused() from None
    if not await repo.record_use(passkey.id, sign_count, now):
        raise PasskeyRefused()
    return passkey


# ---- signing a decision ----


async def decision_options(
    repo: PasskeyRepository,
    member: OrgMember,
    rp: RelyingParty,
    request_id: uuid.UUID,
    decision: str,
    now: datetime,
) -> str:
    """Options for signing ``decision`` on the request as its arguments are now."""
    from signoff.passkeys import webauthn_calls

    if decision not in DECISIONS:
        raise ValidationFailed.for_field("decision", "must be approve or reject")
    facts = await repo.request_facts(member.org_id, request_id)
    if facts is None:
        raise NotFound("No approval request with this id.")
    passkeys = list(await repo.list_for_user(member.user_id))
    if not passkeys:
        raise PasskeyRefused(
            "This request needs your passkey, and you have none: add one on your account page."
        )
    nonce = secrets.token_urlsafe(24)
    challenge = decision_challenge(request_id, decision, facts[2], nonce)
    await _new_challenge(
        repo,
        now,
        "decide",
        challenge=challenge,
        user_id=member.user_id,
        request_id=request_id,
        decision=decision,
        arguments_hash=facts[2],
        nonce=nonce,
    )
    return webauthn_calls.authentication_options(
        rp_id=rp.rp_id, challenge=challenge, allow=_credentials(passkeys)
    )


@dataclass(frozen=True)
class SignedDecision:
    """A verified decision assertion: the proof the approvals service asks for, and the
    row to keep with the vote."""

    proof: PasskeyProof
    values: dict[str, Any]


async def verify_decision(
    repo: PasskeyRepository,
    member: OrgMember,
    rp: RelyingParty,
    request_id: uuid.UUID,
    decision: str,
    credential_json: str,
    now: datetime,
) -> SignedDecision:
    """Check an assertion over this decision, by the person's own passkey, against the
    request's arguments as they are now (an edit since the challenge makes it fail)."""
    credential = _parse_credential(credential_json)
    taken = await repo.take_challenge(credential["_challenge"], "decide", now)
    if (
        taken is None
        or taken["user_id"] != member.user_id
        or taken["request_id"] != request_id
        or taken["decision"] != decision
    ):
        raise PasskeyRefused("This passkey signature is not for this decision. Please try again.")
    facts = await repo.request_facts(member.org_id, request_id)
    if facts is None:
        raise NotFound("No approval request with this id.")
    expected = decision_challenge(request_id, decision, facts[2], taken["nonce"])
    passkey = await _check_assertion(repo, rp, credential, expected, now)
    if passkey.user_id != member.user_id:
        raise PasskeyRefused("This passkey is not yours.")
    response = credential["response"]
    values = {
        "id": uuid.uuid4(),
        "org_id": member.org_id,
        "request_id": request_id,
        "user_id": member.user_id,
        "decision": decision,
        "arguments_hash": facts[2],
        "nonce": taken["nonce"],
        "credential_id": passkey.credential_id,
        "public_key": passkey.public_key,
        "authenticator_data": str(response["authenticatorData"]),
        "client_data_json": str(response["clientDataJSON"]),
        "signature": str(response["signature"]),
        "rp_id": rp.rp_id,
        "origin": rp.origin,
        "created_at": now,
    }
    return SignedDecision(PasskeyProof(request_id, member.user_id, decision), values)


async def keep_assertion(
    repo: PasskeyRepository, signed: SignedDecision, step_id: uuid.UUID | None
) -> None:
    """Store the assertion with the vote it signed, in the decision's transaction."""
    await repo.add_assertion({**signed.values, "step_id": step_id})


async def decide_signed(
    uow: PasskeyWork,
    member: OrgMember,
    rp: RelyingParty,
    request_id: uuid.UUID,
    payload: DecideApprovalRequest,
    credential_json: str,
    now: datetime,
) -> approvals.TransitionResult:
    """A person's decision signed by their passkey: the assertion checked first (its
    challenge used up), the decision made as anywhere else, and the assertion kept with
    the vote, all in the caller's transaction."""
    signed = await verify_decision(
        uow.passkeys, member, rp, request_id, payload.decision, credential_json, now
    )
    result = await approvals.decide(
        uow, member, request_id, payload, now, on="my_step", passkey=signed.proof
    )
    step_id = result.step.id if result.step is not None else None
    await keep_assertion(uow.passkeys, signed, step_id)
    await uow.approvals.add_event(signed_event(signed, step_id))
    return result


SIGNED_EVENT = PASSKEY_SIGNED
# What the chained event carries of the assertion: all an auditor needs to check it
# (its request and signer are the event's own request_id and actor_id).
_SIGNED_FIELDS = (
    "decision",
    "arguments_hash",
    "nonce",
    "credential_id",
    "public_key",
    "authenticator_data",
    "client_data_json",
    "signature",
    "rp_id",
    "origin",
)


def signed_event(signed: SignedDecision, step_id: uuid.UUID | None) -> NewEvent:
    """The audit event that puts the assertion into the org's hash chain, next to the
    vote it signed (docs/audit.md, "Passkey signatures")."""
    values = signed.values
    data: dict[str, Any] = {field: values[field] for field in _SIGNED_FIELDS}
    data["step_id"] = str(step_id) if step_id is not None else None
    return NewEvent(
        org_id=values["org_id"],
        request_id=values["request_id"],
        type=SIGNED_EVENT,
        actor_id=values["user_id"],
        data=data,
        created_at=values["created_at"],
    )


# ---- the org's setting ----


async def get_passkey_for(repo: PasskeyRepository, org_id: uuid.UUID) -> str:
    return await repo.passkey_for(org_id)


async def set_passkey_for(
    repo: PasskeyRepository,
    org_id: uuid.UUID,
    value: object,
    by: uuid.UUID | None = None,
    now: datetime | None = None,
) -> str:
    """Set which decisions need a passkey: "off", "critical" or "all" (else 400);
    ``by`` None: the operator (CLI)."""
    if not isinstance(value, str) or value not in PASSKEY_FOR_VALUES:
        raise ValidationFailed.for_field("passkey_for", "must be off, critical or all")
    await repo.set_passkey_for(org_id, value, by, now or utcnow())
    return value
