"""Every query of receipts and signing keys."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import Table, insert, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.models import Receipt, SigningKey, StoredReceiptToken
from signoff.storage import PreparedQuery, insert_ignoring_conflicts, queue_write

_RECEIPTS = cast(Table, Receipt.__table__)
_KEYS = cast(Table, SigningKey.__table__)
_STORED = cast(Table, StoredReceiptToken.__table__)

RECEIPT_COLUMNS = (
    "jti",
    "request_id",
    "org_id",
    "kid",
    "issuer",
    "action_type",
    "arguments_hash",
    "preview_hash",
    "decided_by",
    "issued_at",
    "expires_at",
    "max_uses",
    "uses",
)
_INSERT_RECEIPT = PreparedQuery(insert(_RECEIPTS), column_keys=RECEIPT_COLUMNS)


class KeyRow(NamedTuple):
    kid: str
    public_jwk: dict[str, Any]
    private_key_encrypted: str


class IssuedReceipt(NamedTuple):
    """A request's receipt as stored: the claims its token is signed from on each read,
    or (stored before 0048 and not rebuildable) its token, encrypted."""

    jti: uuid.UUID
    request_id: uuid.UUID
    org_id: uuid.UUID
    kid: str
    issuer: str | None
    action_type: str | None
    arguments_hash: str | None
    preview_hash: str | None
    decided_by: list[str] | None
    issued_at: datetime
    expires_at: datetime
    max_uses: int
    uses: int
    stored_token_encrypted: str | None


class Redeemed(NamedTuple):
    uses: int
    max_uses: int


async def add_receipt(session: AsyncSession, values: Mapping[str, Any]) -> None:
    """The receipt's row, queued with the decision's other writes (one statement on
    PostgreSQL, ``storage.queue_write``)."""
    await queue_write(session, _INSERT_RECEIPT, values)


_RECEIPT_OF = select(
    _RECEIPTS.c.jti,
    _RECEIPTS.c.request_id,
    _RECEIPTS.c.org_id,
    _RECEIPTS.c.kid,
    _RECEIPTS.c.issuer,
    _RECEIPTS.c.action_type,
    _RECEIPTS.c.arguments_hash,
    _RECEIPTS.c.preview_hash,
    _RECEIPTS.c.decided_by,
    _RECEIPTS.c.issued_at,
    _RECEIPTS.c.expires_at,
    _RECEIPTS.c.max_uses,
    _RECEIPTS.c.uses,
    _STORED.c.token_encrypted,
).select_from(_RECEIPTS.outerjoin(_STORED, _STORED.c.jti == _RECEIPTS.c.jti))


async def receipt_of(session: AsyncSession, request_id: uuid.UUID) -> IssuedReceipt | None:
    row = (await session.execute(_RECEIPT_OF.where(_RECEIPTS.c.request_id == request_id))).first()
    return IssuedReceipt._make(row) if row is not None else None


async def request_of(session: AsyncSession, jti: uuid.UUID, org_id: uuid.UUID) -> uuid.UUID | None:
    """The request of the org's receipt ``jti`` (None: no such receipt in the org)."""
    found = await session.scalar(
        select(_RECEIPTS.c.request_id).where(_RECEIPTS.c.jti == jti, _RECEIPTS.c.org_id == org_id)
    )
    return cast(uuid.UUID | None, found)


async def use_once(session: AsyncSession, jti: uuid.UUID) -> Redeemed | None:
    """Count one use of the receipt, unless it is used up: one conditional update, so
    however many redeem it at once, no more than ``max_uses`` succeed. None: used up."""
    row = (
        await session.execute(
            update(_RECEIPTS)
            .where(_RECEIPTS.c.jti == jti, _RECEIPTS.c.uses < _RECEIPTS.c.max_uses)
            .values(uses=_RECEIPTS.c.uses + 1)
            .returning(_RECEIPTS.c.uses, _RECEIPTS.c.max_uses)
        )
    ).first()
    return Redeemed(*row) if row is not None else None


# ---- signing keys ----


async def current_key(session: AsyncSession) -> KeyRow | None:
    row = (
        await session.execute(
            select(_KEYS.c.kid, _KEYS.c.public_jwk, _KEYS.c.private_key_encrypted).where(
                _KEYS.c.current.is_(True)
            )
        )
    ).first()
    return KeyRow(*row) if row is not None else None


async def key_by_kid(session: AsyncSession, kid: str) -> KeyRow | None:
    row = (
        await session.execute(
            select(_KEYS.c.kid, _KEYS.c.public_jwk, _KEYS.c.private_key_encrypted).where(
                _KEYS.c.kid == kid
            )
        )
    ).first()
    return KeyRow(*row) if row is not None else None


async def add_key_unless_one_signs(
    session: AsyncSession, dialect: str, values: Mapping[str, Any]
) -> None:
    """A new current key, unless another process made one first (the unique ``current``)."""
    await session.execute(insert_ignoring_conflicts(dialect, _KEYS, ["current"]), [dict(values)])


async def retire_current(session: AsyncSession, now: datetime) -> None:
    await session.execute(
        update(_KEYS).where(_KEYS.c.current.is_(True)).values(current=None, retired_at=now)
    )


async def add_key(session: AsyncSession, values: Mapping[str, Any]) -> None:
    await session.execute(insert(_KEYS), [dict(values)])


async def listed_keys(session: AsyncSession, now: datetime) -> list[dict[str, Any]]:
    """The public keys a verifier may need: every unretired key, and each retired one
    that signed a receipt not yet expired. Newest first."""
    unexpired = select(_RECEIPTS.c.kid).where(_RECEIPTS.c.expires_at > now)
    rows = await session.execute(
        select(_KEYS.c.public_jwk)
        .where(or_(_KEYS.c.retired_at.is_(None), _KEYS.c.kid.in_(unexpired)))
        .order_by(_KEYS.c.created_at.desc(), _KEYS.c.kid)
    )
    return [dict(row[0]) for row in rows]
