"""``/.well-known/jwks.json`` (the keys receipts are signed with) and
``/api/v1/receipts/redeem``: thin handlers."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from signoff.auth.principal import Principal
from signoff.common.http import json_body_doc, json_response, require_scope
from signoff.common.openapi_declarations import errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import read_json_object, validate_model
from signoff.context import context_of
from signoff.errors import (
    ArgumentsMismatch,
    NotFound,
    ReceiptExpired,
    ReceiptInvalid,
    ReceiptUsedUp,
    ValidationFailed,
)
from signoff.receipts import service
from signoff.receipts.schemas import JwksOut, RedeemReceipt, RedemptionOut

router = APIRouter(tags=["receipts"], route_class=LeanRoute)

Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]

# Verifiers may keep the key set this long; one that meets an unknown kid fetches again.
JWKS_CACHE = "public, max-age=300"


@router.get(
    "/.well-known/jwks.json",
    response_model=JwksOut,
    responses={
        200: {
            "description": "The key set.",
            "headers": {
                "Cache-Control": {
                    "description": f"`{JWKS_CACHE}`",
                    "schema": {"type": "string"},
                }
            },
        }
    },
    summary="The public keys receipts are signed with",
    description="No authentication. Every key that signs now, and each older key while "
    "a receipt it signed has not expired (RFC 7517; OKP, Ed25519).",
)
async def jwks(request: Request) -> Response:
    ctx = context_of(request)
    await ctx.keys.ready()  # the first key exists from the start
    async with ctx.db.read_session() as session:
        body = await service.jwks(session, utcnow())
    return json_response(body, headers={"Cache-Control": JWKS_CACHE})


@router.post(
    "/api/v1/receipts/redeem",
    response_model=RedemptionOut,
    responses=errors(
        ValidationFailed,
        ReceiptInvalid,
        ArgumentsMismatch,
        NotFound,
        ReceiptUsedUp,
        ReceiptExpired,
    ),
    openapi_extra=json_body_doc(RedeemReceipt),
    summary="Redeem a receipt (use it once)",
    description="Checks the receipt's signature and expiry, the arguments if given, and "
    "counts one use: of many redeems at once, no more than `max_uses` (1) succeed. "
    "400 RECEIPT_INVALID: not a receipt signed here (a bad signature, another `typ`, "
    "`alg` none or an HMAC algorithm, garbage); 400 ARGUMENTS_MISMATCH; 404 another "
    "organization's receipt; 409 RECEIPT_USED_UP; 410 RECEIPT_EXPIRED.",
)
async def redeem(request: Request, principal: Writer) -> Response:
    ctx = context_of(request)
    data = await read_json_object(request)
    payload = validate_model(RedeemReceipt, data, ctx.settings)
    arguments_given = data.get("arguments") is not None
    async with ctx.transaction() as uow:
        done = await service.redeem(
            uow, ctx.keys, principal, payload.receipt, payload.arguments, arguments_given, utcnow()
        )
    return json_response(done.as_dict())
