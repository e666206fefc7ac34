"""Receipts: issued when a request is approved, checked and counted when redeemed.

A receipt is a compact JWS (Ed25519, ``typ: signoff-receipt+jwt``) whose claims say which
request of which org was approved, by whom, for exactly which arguments
(``arguments_hash``), until when, and how many times it may be used. docs/receipts.md
describes it for executors.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from joserfc import jws
from joserfc.errors import JoseError
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.approvals.repository import NewEvent
from signoff.approvals.typed_rows import RequestRecord
from signoff.auth.principal import Principal
from signoff.common.ids import new_id
from signoff.common.time import format_timestamp
from signoff.crypto import SecretBox
from signoff.errors import (
    ArgumentsMismatch,
    NotFound,
    ReceiptExpired,
    ReceiptInvalid,
    ReceiptUsedUp,
)
from signoff.receipts import repository
from signoff.receipts.arguments import arguments_hash
from signoff.receipts.keys import ACCEPTED_ALGORITHMS, TOKEN_TYPE, KeyRing

if TYPE_CHECKING:
    from signoff.unit_of_work import UnitOfWork

MAX_USES = 1
ACTION_DETAILS_TYPE = "signoff_action"
# A kid is one of ours (a UUID); anything much longer is not worth a lookup.
_MAX_KID_LENGTH = 64


def claims_of(
    request: RequestRecord,
    decided_by: Sequence[uuid.UUID],
    issuer: str,
    jti: uuid.UUID,
    now: datetime,
) -> dict[str, Any]:
    """The claims of the receipt ``request``'s approval issues at ``now``."""
    issued = int(now.timestamp())
    org = str(request.org_id)
    sub = str(request.id)
    return {
        "iss": issuer,
        "sub": sub,
        "jti": str(jti),
        "iat": issued,
        "nbf": issued,
        "exp": issued + request.receipt_ttl_seconds,
        "org": org,
        "action_type": request.action_type,
        "arguments_hash": request.arguments_hash,
        # What the approvers were shown, so an auditor can prove it (absent: no preview).
        **({"preview_hash": request.preview_hash} if request.preview_hash else {}),
        "decided_by": [str(user_id) for user_id in decided_by],
        "max_uses": MAX_USES,
        "authorization_details": [
            {
                "type": ACTION_DETAILS_TYPE,
                "request_id": sub,
                "action_type": request.action_type,
                "arguments_hash": request.arguments_hash,
                "org": org,
            }
        ],
    }


class ReceiptWrites:
    """Issues receipts in a decision's transaction (``effects.ReceiptWrites``)."""

    def __init__(
        self, session: AsyncSession, keys: KeyRing | None, box: SecretBox | None, issuer: str
    ) -> None:
        self.session = session
        self.keys = keys
        self.box = box
        self.issuer = issuer
        # The tokens issued in this transaction, by request: its answer shows them.
        self.tokens: dict[uuid.UUID, str] = {}

    async def issue(
        self, request: RequestRecord, decided_by: Sequence[uuid.UUID], now: datetime
    ) -> str:
        assert self.keys is not None and self.box is not None  # a write transaction's
        key = self.keys.current
        jti = new_id()
        claims = claims_of(request, decided_by, self.issuer, jti, now)
        token = key.sign(orjson.dumps(claims))
        token_encrypted = self.box.encrypt(token)
        self.tokens[request.id] = token
        await repository.add_receipt(
            self.session,
            {
                "jti": jti,
                "request_id": request.id,
                "org_id": request.org_id,
                "kid": key.kid,
                "token_encrypted": token_encrypted,
                "issued_at": now,
                "expires_at": datetime.fromtimestamp(claims["exp"], UTC),
                "max_uses": MAX_USES,
                "uses": 0,
            },
        )
        return token_encrypted


# What an answer says of a request that has no receipt (yet).
NO_RECEIPT: dict[str, Any] = {"receipt": None, "receipt_issued": False, "receipt_uses": 0}


def may_see(principal: Principal, request: RequestRecord) -> bool:
    """The receipt is the creating connection's to use; admins may see it too."""
    return principal.is_admin or principal.connection_id == request.connection_id


def answer_fields(
    principal: Principal, request: RequestRecord, token: str | None, uses: int = 0
) -> dict[str, Any]:
    """``receipt``, ``receipt_issued`` and ``receipt_uses`` of an answer about ``request``
    (``token``: its receipt, None if it has none)."""
    if token is None:
        return NO_RECEIPT
    shown = token if may_see(principal, request) else None
    return {"receipt": shown, "receipt_issued": True, "receipt_uses": uses}


async def read_fields(
    session: AsyncSession, box: SecretBox, principal: Principal, request: RequestRecord
) -> dict[str, Any]:
    """``answer_fields`` of a request as stored (a read)."""
    if request.status != "approved":
        return NO_RECEIPT
    issued = await repository.receipt_of(session, request.id)
    if issued is None:
        return NO_RECEIPT
    # Decrypted only for whom may see it; for others "" stands for "issued".
    token = box.decrypt(issued.token_encrypted) if may_see(principal, request) else ""
    return answer_fields(principal, request, token, issued.uses)


@dataclass(frozen=True)
class Redemption:
    request_id: uuid.UUID
    jti: uuid.UUID
    uses_left: int
    redeemed_at: datetime

    def as_dict(self) -> dict[str, Any]:
        return {
            "request_id": str(self.request_id),
            "jti": str(self.jti),
            "uses_left": self.uses_left,
            "redeemed_at": format_timestamp(self.redeemed_at),
        }


async def verified_claims(keys: KeyRing, token: str) -> dict[str, Any]:
    """The claims of ``token`` if it is a receipt signed by one of our keys (whether
    expired or not), else raise ``ReceiptInvalid``. Only Ed25519 is accepted, under
    either name: ``none`` and HMAC algorithms never verify."""
    try:
        header = jws.extract_compact(token.encode()).headers()
    except (JoseError, ValueError, TypeError):
        raise ReceiptInvalid("The receipt is not a compact JWS.") from None
    if header.get("typ") != TOKEN_TYPE:
        raise ReceiptInvalid(f"The receipt's typ must be {TOKEN_TYPE}.")
    if header.get("alg") not in ACCEPTED_ALGORITHMS:
        raise ReceiptInvalid("The receipt's alg must be Ed25519 (or EdDSA).")
    kid = header.get("kid")
    if not isinstance(kid, str) or not kid or len(kid) > _MAX_KID_LENGTH:
        raise ReceiptInvalid("The receipt names no signing key of this server.")
    key = await keys.public_key(kid)
    if key is None:
        raise ReceiptInvalid("The receipt names no signing key of this server.")
    try:
        verified = jws.deserialize_compact(token.encode(), key, algorithms=ACCEPTED_ALGORITHMS)
        claims = orjson.loads(verified.payload)
    except (JoseError, ValueError, TypeError):
        raise ReceiptInvalid("The receipt's signature does not verify.") from None
    if not isinstance(claims, dict):
        raise ReceiptInvalid("The receipt's claims are not a JSON object.")
    return claims


def _claim_id(claims: dict[str, Any], name: str) -> uuid.UUID:
    try:
        return uuid.UUID(str(claims[name]))
    except (KeyError, ValueError):
        raise ReceiptInvalid(f"The receipt has no valid {name}.") from None


async def redeem(
    uow: UnitOfWork,
    keys: KeyRing,
    principal: Principal,
    token: str,
    arguments: dict[str, Any] | None,
    arguments_given: bool,
    now: datetime,
) -> Redemption:
    """Use the receipt once, in the caller's transaction, with its audit event.

    Checked in order: the signature and header (400 ``RECEIPT_INVALID``), the org (404:
    another org's receipt is not the caller's to know of), the expiry (410), the
    arguments when given (400 ``ARGUMENTS_MISMATCH``), then the count (409)."""
    claims = await verified_claims(keys, token)
    jti = _claim_id(claims, "jti")
    request_id = _claim_id(claims, "sub")
    if _claim_id(claims, "org") != principal.org_id:
        raise NotFound("No receipt with this id in your organization.")
    expires = claims.get("exp")
    if not isinstance(expires, int) or now.timestamp() >= expires:
        raise ReceiptExpired()
    if arguments_given:
        try:
            given = arguments_hash(arguments)
        except ValueError:
            given = None
        if given != claims.get("arguments_hash"):
            raise ArgumentsMismatch()
    if await repository.request_of(uow.session, jti, principal.org_id) is None:
        raise NotFound("No receipt with this id in your organization.")
    used = await repository.use_once(uow.session, jti)
    if used is None:
        raise ReceiptUsedUp()
    data = {
        "jti": str(jti),
        "uses": used.uses,
        "max_uses": used.max_uses,
        "redeemed_by": {
            "user_id": str(principal.user_id),
            "connection_id": str(principal.connection_id),
            "auth_method": principal.auth_method,
        },
    }
    event = NewEvent(
        org_id=principal.org_id,
        request_id=request_id,
        type="receipt.redeemed",
        actor_id=principal.user_id,
        data=data,
        created_at=now,
    )
    await uow.approvals.add_event(event)
    return Redemption(request_id, jti, used.max_uses - used.uses, now)


async def jwks(session: AsyncSession, now: datetime) -> dict[str, Any]:
    return {"keys": await repository.listed_keys(session, now)}
