"""Bodies and answers of the receipts API."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# A compact JWS of ours is far shorter; anything longer is not worth parsing.
MAX_RECEIPT_LENGTH = 16 * 1024


class RedeemReceipt(BaseModel):
    """Body of ``POST /api/v1/receipts/redeem``."""

    model_config = ConfigDict(extra="ignore")

    receipt: str = Field(
        max_length=MAX_RECEIPT_LENGTH, description="The receipt: a compact JWS, as issued."
    )
    arguments: dict[str, Any] | None = Field(
        None,
        description="The arguments about to be run: refused (400 ARGUMENTS_MISMATCH) "
        "unless their hash is the receipt's `arguments_hash`. Left out: not checked.",
    )


class RedemptionOut(BaseModel):
    request_id: uuid.UUID
    jti: uuid.UUID
    uses_left: int = Field(ge=0)
    redeemed_at: str


class JwkOut(BaseModel):
    kty: Literal["OKP"]
    crv: Literal["Ed25519"]
    x: str
    kid: str
    use: Literal["sig"]
    alg: Literal["Ed25519"]


class JwksOut(BaseModel):
    keys: list[JwkOut]
