"""``GET /api/v1/audit/export``: the org's hash-chained audit trail (docs/audit.md)."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from signoff.audit.sealing import seal_org_now
from signoff.audit.service import cloudevent, export_records
from signoff.auth.principal import Principal
from signoff.common.http import require_scope
from signoff.common.openapi_declarations import errors
from signoff.common.routing import LeanRoute
from signoff.context import context_of
from signoff.errors import Forbidden, ValidationFailed

router = APIRouter(prefix="/api/v1", tags=["audit"], route_class=LeanRoute)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
FORMATS = ("jsonl", "cloudevents")
MAX_SEQ = 2**53 - 1


def _since_seq(request: Request) -> int:
    raw = request.query_params.get("since_seq") or "1"
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_SEQ:
        raise ValidationFailed.for_field("since_seq", "must be a whole number from 1")
    return int(raw)


def _format(request: Request) -> str:
    value = request.query_params.get("format") or "jsonl"
    if value not in FORMATS:
        raise ValidationFailed.for_field("format", "must be jsonl or cloudevents")
    return value


@router.get(
    "/audit/export",
    summary="Export the organization's audit trail (admins)",
    description="Streams the org's sealed audit events from `since_seq` (default 1), by "
    "seq, one JSON object a line (`application/x-ndjson`), each signed checkpoint right "
    "after the event it signs; `format=cloudevents` wraps each in a CloudEvents 1.0 "
    "JSON envelope. Events waiting to be sealed are sealed first and the head is signed, "
    "so the export ends in a checkpoint. Verify it offline with `signoff audit verify` "
    "(docs/audit.md). 403 for non-admins.",
    responses={
        200: {"content": {"application/x-ndjson": {"schema": {"type": "string"}}}},
        **errors(ValidationFailed, Forbidden),
    },
)
async def export_audit(request: Request, principal: Reader) -> Response:
    if not principal.is_admin:
        raise Forbidden("Only an admin of the organization may export its audit trail.")
    return await export_response(request, principal.org_id)


async def export_response(
    request: Request, org_id: uuid.UUID, headers: dict[str, str] | None = None
) -> Response:
    """The export of ``org_id`` as the query asks (the API's route and the dashboard's
    download button both answer this)."""
    since_seq, fmt = _since_seq(request), _format(request)
    ctx = context_of(request)
    await seal_org_now(ctx, org_id, checkpoint=True)
    source = f"{ctx.settings.public_url}/orgs/{org_id}"

    async def lines() -> AsyncIterator[bytes]:
        async for record in export_records(ctx.db.read_session, org_id, since_seq):
            item: dict[str, Any] = cloudevent(record, source) if fmt == "cloudevents" else record
            yield json.dumps(item, separators=(",", ":")).encode() + b"\n"

    return StreamingResponse(lines(), media_type="application/x-ndjson", headers=headers)
