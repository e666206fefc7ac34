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


def claims_of(receipt: repository.IssuedReceipt) -> dict[str, Any]:
    """The claims of a receipt as its row keeps them: the same bytes on every read."""
    assert receipt.issuer is not None and receipt.decided_by is not None  # signed on read
    org = str(receipt.org_id)
    sub = str(receipt.request_id)
    return {
        "iss": receipt.issuer,
        "sub": sub,
        "jti": str(receipt.jti),
        "iat": int(receipt.issued_at.timestamp()),
        "nbf": int(receipt.issued_at.timestamp()),
        "exp": int(receipt.expires_at.timestamp()),
        "org": org,
        "action_type": receipt.action_type,
        "arguments_hash": receipt.arguments_hash,
        # What the approvers were shown, so an auditor can prove it (absent: no preview).
        **({"preview_hash": receipt.preview_hash} if receipt.preview_hash else {}),
        "decided_by": list(receipt.decided_by),
        "max_uses": receipt.max_uses,
        "authorization_details": [
            {
                "type": ACTION_DETAILS_TYPE,
                "request_id": sub,
                "action_type": receipt.action_type,
                "arguments_hash": receipt.arguments_hash,
                "org": org,
            }
        ],
    }


def rebuildable(receipt: repository.IssuedReceipt) -> bool:
    """Whether the row holds the claims its token is signed from (not a stored token)."""
    return receipt.issuer is not None and receipt.decided_by is not None


class ReceiptWrites:
    """Issues receipts in a decision's transaction (``effects.ReceiptWrites``): their rows
    only. The token is signed on each read (``token_of``), never on the decide."""

    def __init__(self, session: AsyncSession, keys: KeyRing | None, issuer: str) -> None:
        self.session = session
        self.keys = keys
        self.issuer = issuer
        # The requests given a receipt in this transaction: their answer says so.
        self.issued: set[uuid.UUID] = set()

    async def issue(
        self, request: RequestRecord, decided_by: Sequence[uuid.UUID], now: datetime
    ) -> str:
        """Store the receipt's claims; ``SIGNED_ON_SEND`` for the callback's row."""
        assert self.keys is not None  # a write transaction's
        # The key that will sign it, which must load now: an approval whose receipt could
        # not be signed answers 503 (``KeyRing.current``), not a receipt-less approval.
        kid = self.keys.current.kid
        issued = int(now.timestamp())
        self.issued.add(request.id)
        await repository.add_receipt(
            self.session,
            {
                "jti": new_id(),
                "request_id": request.id,
                "org_id": request.org_id,
                "kid": kid,
                "issuer": self.issuer,
                "action_type": request.action_type,
                "arguments_hash": request.arguments_hash,
                "preview_hash": request.preview_hash,
                "decided_by": [str(user_id) for user_id in decided_by],
                "issued_at": datetime.fromtimestamp(issued, UTC),
                "expires_at": datetime.fromtimestamp(issued + request.receipt_ttl_seconds, UTC),
                "max_uses": MAX_USES,
                "uses": 0,
            },
        )
        return SIGNED_ON_SEND


# What a callback's row holds for ``receipt_encrypted`` when the receipt is to be signed as
# the attempt is made (webhooks: ``body_to_send``); not a ciphertext.
SIGNED_ON_SEND = "signed-on-send"


async def token_of(keys: KeyRing, box: SecretBox, receipt: repository.IssuedReceipt) -> str:
    """The receipt's token: signed from its row's claims with the key its ``kid`` names
    (Ed25519: the same bytes on every read), or the token stored before 0048."""
    if not rebuildable(receipt):
        assert receipt.stored_token_encrypted is not None  # 0048 kept it
        return box.decrypt(receipt.stored_token_encrypted)
    key = await keys.signing_key(receipt.kid)
    return key.sign(orjson.dumps(claims_of(receipt)))


async def token_of_request(
    session: AsyncSession, keys: KeyRing, box: SecretBox, request_id: uuid.UUID
) -> str | None:
    """The token of ``request_id``'s receipt, None if it has none."""
    receipt = await repository.receipt_of(session, request_id)
    return await token_of(keys, box, receipt) if receipt is not None else None


# What an answer says of a request that has no receipt (yet).
NO_RECEIPT: dict[str, Any] = {"receipt": None, "receipt_issued": False, "receipt_uses": 0}
# What a decision's answer says of the receipt it issued: the token is signed on read
# (GET, long poll, callback, CIBA, MCP), not on the decide.
ISSUED_UNSHOWN: dict[str, Any] = {"receipt": None, "receipt_issued": True, "receipt_uses": 0}


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
    session: AsyncSession,
    keys: KeyRing,
    box: SecretBox,
    principal: Principal,
    request: RequestRecord,
) -> dict[str, Any]:
    """``answer_fields`` of a request as stored (a read): signed here, for whom may see it;
    for others "" stands for "issued"."""
    if request.status != "approved":
        return NO_RECEIPT
    issued = await repository.receipt_of(session, request.id)
    if issued is None:
        return NO_RECEIPT
    token = await token_of(keys, box, issued) if may_see(principal, request) else ""
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
