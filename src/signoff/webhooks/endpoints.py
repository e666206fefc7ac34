"""``/api/v1/webhooks`` (delivery logs, manual retry) and ``/api/v1/test-webhook``."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query
from starlette.requests import Request
from starlette.responses import Response

from signoff.auth.principal import Principal
from signoff.common.http import json_body_doc, json_response, path_id, require_scope
from signoff.common.openapi_declarations import UuidPath, documented_as, errors
from signoff.common.routing import LeanRoute
from signoff.common.validation import parse_json_body, validate_model
from signoff.context import context_of
from signoff.errors import Conflict, Forbidden, NotFound, ValidationFailed
from signoff.webhooks import service
from signoff.webhooks.schemas import (
    MAX_LOG_LIMIT,
    DeliveryAttemptListOut,
    ListDeliveriesQuery,
    RetryOut,
    TestWebhook,
    TestWebhookOut,
    attempt_to_dict,
)
from signoff.wiring import wiring_of

router = APIRouter(prefix="/api/v1", tags=["webhooks"], route_class=LeanRoute)

# decisions.md section 11: delivery logs and test-webhook need approvals:write.
Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]


@router.get(
    "/webhooks",
    response_model=DeliveryAttemptListOut,
    responses=errors(ValidationFailed),
    summary="Delivery log: every callback attempt, newest first",
    description="Attempts of the caller's organization, optionally of one request. "
    "`status_code` is 0 when the receiver gave no HTTP answer; `error` says why.",
)
async def list_deliveries(
    request: Request,
    principal: Writer,
    request_id: Annotated[
        str | None,
        documented_as({"type": "string", "format": "uuid"}),
        Query(description="Only this approval request's attempts."),
    ] = None,
    limit: Annotated[
        str | None,
        documented_as({"type": "integer", "minimum": 1, "maximum": MAX_LOG_LIMIT}),
        Query(description="1 to 100, default 20."),
    ] = None,
) -> Response:
    ctx = context_of(request)
    query = validate_model(ListDeliveriesQuery, dict(request.query_params), ctx.settings)
    async with ctx.reading() as uow:
        rows = await service.list_attempts(
            uow.webhooks, principal.org_id, query.request_id, query.limit
        )
    return json_response({"data": [attempt_to_dict(row) for row in rows]})


@router.post(
    "/webhooks/{delivery_id}/retry",
    response_model=RetryOut,
    responses=errors(Forbidden, NotFound, Conflict),
    summary="Retry a delivery now (admins)",
    description="One more attempt of a delivery that succeeded or failed, numbered after "
    "the last; answers its log entry and the delivery's status after it. A delivery still "
    "on its automatic schedule is 409.",
)
async def retry_delivery(request: Request, delivery_id: UuidPath, principal: Writer) -> Response:
    if not principal.is_admin:
        raise Forbidden("Only admins may retry deliveries.")
    did = path_id(delivery_id, "delivery")
    recorded = await wiring_of(request).webhooks.retry(principal.org_id, did)
    return json_response({**attempt_to_dict(recorded.entry), "delivery_status": recorded.status})


@router.post(
    "/test-webhook",
    response_model=TestWebhookOut,
    responses=errors(ValidationFailed),
    openapi_extra=json_body_doc(TestWebhook),
    summary="Send a signed sample callback to a URL",
    description='A sample `approval.decided` payload with `"test": true`, signed with the '
    "caller's connection secret, sent once (not retried, not logged). `response_body` (the "
    "receiver's answer) is shown to admins only; for others it is null.",
)
async def test_webhook(request: Request, principal: Writer) -> Response:
    ctx = context_of(request)
    payload = await parse_json_body(request, TestWebhook, ctx.settings)
    await service.check_callback_url(wiring_of(request).webhooks.policy, payload.url, "url")
    result = await wiring_of(request).webhooks.send_test(
        principal.connection_id,
        service.Decider(principal.user_id, principal.user_email, principal.user_name),
        payload.url,
    )
    return json_response(
        {
            "success": result.success,
            "status_code": result.status_code,
            "duration_ms": result.duration_ms,
            "error": result.error,
            # The receiver may be an internal service: what it answers is for admins only.
            "response_body": result.response_body if principal.is_admin else None,
        }
    )
