"""``/api/v1/approvals``: thin handlers that parse, authorize, call one service, answer."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Depends, Query
from starlette.requests import Request
from starlette.responses import Response

from signoff.approvals import service
from signoff.approvals.json_answers import (
    comment_to_dict,
    event_to_dict,
    pagination,
    request_to_dict,
    step_to_dict,
    vote_to_dict,
)
from signoff.approvals.listing import (
    SEARCH_RANKED_UP_TO,
    TOTAL_EXACT_UP_TO,
    bounded_total,
    next_cursor,
)
from signoff.approvals.repository import ApprovalReads
from signoff.approvals.schemas import (
    AddComment,
    ApprovalListOut,
    ApprovalRequestDetailOut,
    ApprovalRequestOut,
    AuditEventListOut,
    CommentListOut,
    CommentOut,
    CreateApprovalRequest,
    DecideApprovalRequest,
    DecisionOut,
    ListApprovalsQuery,
)
from signoff.approvals.typed_rows import RequestRecord
from signoff.auth.principal import Principal, PrincipalCheck
from signoff.common.http import (
    json_body_doc,
    json_response,
    path_id,
    principal_check_of,
    require_scope,
)
from signoff.common.openapi_declarations import (
    UuidPath,
    default_setting,
    documented_as,
    errors,
    query_parameters,
)
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import parse_json_body, read_json_object, validate_model
from signoff.context import AppContext, context_of
from signoff.errors import (
    AlreadyVoted,
    EditsNotAllowed,
    Forbidden,
    NotFound,
    PasskeyRequired,
    RequestNotPending,
    SelfApprovalForbidden,
    ServiceUnavailable,
    ValidationFailed,
)
from signoff.receipts import service as receipts
from signoff.webhooks.service import check_callback_url
from signoff.wiring import wiring_of

router = APIRouter(prefix="/api/v1", tags=["approvals"], route_class=LeanRoute)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]
Commenter = Annotated[Principal, Depends(require_scope("comments:write"))]

# The long poll's parameter as documented; the handler reads a string and validates it.
WAIT = {
    "type": "number",
    "minimum": 0,
    "maximum": default_setting("long_poll_max_seconds"),
}


@router.post(
    "/approvals",
    status_code=201,
    response_model=ApprovalRequestOut,
    responses={
        200: {
            "model": ApprovalRequestOut,
            "description": "The org's request created earlier with this `idempotency_key` "
            "(nothing new is created).",
            "headers": {
                "Idempotent-Replayed": {
                    "description": "`true` on a replay.",
                    "schema": {"type": "string", "enum": ["true"]},
                    "required": True,
                }
            },
        },
        **errors(ValidationFailed),
    },
    openapi_extra=json_body_doc(CreateApprovalRequest),
    summary="Create an approval request",
    description="201 with the new request; 200 with the existing one (and the header "
    "`Idempotent-Replayed: true`) when `idempotency_key` was used before in this org.",
)
async def create_approval(request: Request, principal: Writer) -> Response:
    ctx = context_of(request)
    data = await read_json_object(request)
    try:
        payload = validate_model(CreateApprovalRequest, data, ctx.settings)
        service.check_api_source(payload)
    except ValidationFailed:
        # A used key answers with its request "whatever the body" (decisions.md 4): a
        # retry must not fail because its expires_at has passed since the first try.
        async with ctx.reading() as uow:
            replayed = await service.find_replayed_request(
                uow.approvals, principal, data.get("idempotency_key")
            )
        if replayed is None:
            raise
        return _replay(replayed)
    if payload.callback_url:
        await check_callback_url(wiring_of(request).webhooks.policy, payload.callback_url)
    now = utcnow()
    check = principal_check_of(request)
    async with ctx.transaction() as uow:
        result = await service.create_request(uow, principal, payload, ctx.box, now, check)
    if not result.created:
        return _replay(result.request)
    return json_response(request_to_dict(result.request, now), 201)


def _replay(existing: RequestRecord) -> Response:
    return json_response(request_to_dict(existing, utcnow()), 200, {"Idempotent-Replayed": "true"})


@router.get(
    "/approvals",
    response_model=ApprovalListOut,
    responses=errors(ValidationFailed),
    openapi_extra={"parameters": query_parameters(ListApprovalsQuery)},
    summary="List approval requests",
    description="Newest first. Two ways to page: "
    "`page` (numbered pages), or `cursor`: pass the `next_cursor` of the page you have "
    "to get the page after it, which stays fast however deep you go and neither skips "
    "nor repeats requests when new ones arrive meanwhile. `total` counts exactly up to "
    f"{TOTAL_EXACT_UP_TO:,} matches ({SEARCH_RANKED_UP_TO:,} for a search); past that it "
    "reads that bound and `total_is_exact` is false (there are more). A search lists its "
    f"matches best first when it has at most {SEARCH_RANKED_UP_TO:,} of them, newest "
    "first when it has more.",
)
async def list_approvals(request: Request, principal: Reader) -> Response:
    ctx = context_of(request)
    raw: dict[str, Any] = dict(request.query_params)
    if len(statuses := request.query_params.getlist("status")) > 1:
        raw["status"] = ",".join(statuses)
    query = validate_model(ListApprovalsQuery, raw, ctx.settings)
    filters = query.filters(
        principal.user_id, after=_cursor(query.cursor, query.page, query.search)
    )
    rendered, total = await service.list_requests(
        ApprovalReads(ctx.db.queries),
        principal,
        filters,
        page=query.page,
        page_size=query.page_size,
        now=utcnow(),
    )
    total, total_is_exact = bounded_total(total, searched=query.search is not None)
    paging = pagination(query.page, query.page_size, total)
    return json_response(
        {
            # Rendered by the database as request_to_dict would (approvals/json_in_sql.py).
            "data": [orjson.Fragment(item) for item in rendered],
            "pagination": paging,
            "total_is_exact": total_is_exact,
            "next_cursor": None if query.search else next_cursor(rendered, query.page_size),
            "total": total,
            "page": query.page,
            "page_size": query.page_size,
        }
    )


@router.get(
    "/approvals/{request_id}",
    response_model=ApprovalRequestDetailOut,
    responses=errors(ValidationFailed, NotFound),
    summary="Get one approval request",
    description="With `?wait=N` (up to 60 s) the answer is held until the request leaves "
    "pending or N seconds pass: one long poll instead of many short ones.",
)
async def get_approval(
    request: Request,
    request_id: UuidPath,
    principal: Reader,
    wait: Annotated[
        str | None,
        documented_as(WAIT),
        Query(description="Seconds to wait for a decision, 0 to 60."),
    ] = None,
) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    wait_seconds = _parse_wait(wait, ctx.settings.long_poll_max_seconds)
    check = principal_check_of(request)
    if wait_seconds == 0:
        body, _ = await _read_detail(ctx, principal, rid, check, final=True)
        return json_response(body)
    deadline = time.monotonic() + wait_seconds
    waiters = wiring_of(request).waiters
    with waiters.watch(rid) as changed:
        while True:
            changed.clear()
            remaining = deadline - time.monotonic()
            # A server shutting down answers with the current state at once.
            last = remaining <= 0 or waiters.closing
            body, pause = await _read_detail(ctx, principal, rid, check, final=last)
            if body["status"] != "pending" or last:
                return json_response(body)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(remaining, pause))


async def _read_detail(
    ctx: AppContext,
    principal: Principal,
    request_id: uuid.UUID,
    check: PrincipalCheck | None,
    *,
    final: bool,
) -> tuple[dict[str, Any], float]:
    """The single read's body, and how long a long poll may sleep before reading again.

    A fresh, short read each round: a waiting client holds no connection or lock. Steps
    and votes are read only for the answer actually sent. The first read confirms a
    principal from memory (``check``).
    """
    now = utcnow()
    reads = ApprovalReads(ctx.db.queries)
    row = await service.get_request(reads, principal, request_id, check)
    body = request_to_dict(row, now)
    if final or body["status"] != "pending":
        steps, votes = await service.steps_and_votes(reads, row)
        names = await service.group_names_of(reads, principal.org_id, steps)
        body["steps"] = [step_to_dict(step, names) for step in steps]
        body["votes"] = [vote_to_dict(vote) for vote in votes]
    # Every read says whether a receipt was issued, a pending one too (as list items do).
    body.update(await _receipt_fields(ctx, principal, row))
    pause = ctx.settings.long_poll_recheck_seconds
    if row.expires_at is not None:
        # Wake at the deadline: the request reads as expired from then on.
        pause = min(pause, max(0.0, (row.expires_at - now).total_seconds()) + 0.001)
    return body, pause


async def _receipt_fields(
    ctx: AppContext, principal: Principal, row: RequestRecord
) -> dict[str, Any]:
    if row.status != "approved":
        return receipts.NO_RECEIPT
    async with ctx.db.read_session() as session:
        return await receipts.read_fields(session, ctx.keys, ctx.box, principal, row)


def _cursor(value: str | None, page: int, search: str | None) -> uuid.UUID | None:
    """The request a cursor names; ``page`` and ``search`` have no meaning beside one."""
    if value in (None, ""):
        return None
    if page != 1:
        raise ValidationFailed.for_field("cursor", "cannot be combined with page")
    if search:
        raise ValidationFailed.for_field("cursor", "cannot be combined with search")
    try:
        return uuid.UUID(value)
    except ValueError:
        raise ValidationFailed.for_field("cursor", "is not a cursor of this list") from None


def _parse_wait(value: str | None, maximum: int) -> float:
    if value in (None, ""):
        return 0.0
    try:
        seconds = float(value)
    except ValueError:
        raise ValidationFailed.for_field("wait", "must be a number of seconds") from None
    if not 0 <= seconds <= maximum:
        raise ValidationFailed.for_field("wait", f"must be between 0 and {maximum}")
    return seconds


@router.patch(
    "/approvals/{request_id}",
    response_model=DecisionOut,
    responses=errors(
        ValidationFailed,
        Forbidden,
        PasskeyRequired,
        SelfApprovalForbidden,
        NotFound,
        RequestNotPending,
        AlreadyVoted,
        EditsNotAllowed,
        ServiceUnavailable,
    ),
    openapi_extra=json_body_doc(DecideApprovalRequest),
    summary="Approve or reject a request",
    description="Count-based requests need `required_approvals` approvals by distinct users; "
    "until then the answer is 200 with `status: pending`. One reject rejects. An approval "
    "issues a receipt (docs/receipts.md): this answer says `receipt_issued: true` with "
    "`receipt: null`, as the token is signed on read (`GET /api/v1/approvals/:id`, its long "
    "poll, the decision callback), not on the decision; 503 SERVICE_UNAVAILABLE if it "
    "cannot be signed "
    "(the signing key does not decrypt with this server's SIGNOFF_SECRET_KEY). Approve "
    'with edits: `arguments` beside `decision: "approve"` replaces the request\'s '
    "arguments, which must satisfy its `arguments_schema` (400 VALIDATION_ERROR naming "
    "each failing JSON pointer; 400 EDITS_NOT_ALLOWED without a schema); earlier "
    "approvals no longer count and the edit is this approval. 403 "
    "PASSKEY_REQUIRED when the org's `passkey_for` needs the approver's passkey for this "
    "request: an API key or token cannot sign; `details.url` is the request's page "
    "(docs/passkeys.md). 403 "
    ""
    "SELF_APPROVAL_FORBIDDEN while the org's `self_approval` is `forbid` and the caller is "
    "the requester (the requesting connection's key, or the person who owns it).",
)
async def decide_approval(request: Request, request_id: UuidPath, principal: Writer) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    payload = await parse_json_body(request, DecideApprovalRequest, ctx.settings)
    now = utcnow()
    check = principal_check_of(request)
    async with ctx.transaction() as uow:
        result = await service.decide(uow, principal, rid, payload, now, check)
    body = request_to_dict(result.request, now)
    # The receipt is signed on read, not here: GET shows it (docs/receipts.md).
    issued = rid in uow.receipts.issued
    body.update(receipts.ISSUED_UNSHOWN if issued else receipts.NO_RECEIPT)
    # Attempt 1 ran once the decision committed; the answer reports its outcome.
    body["callback_delivered"] = uow.first_attempts.delivered
    return json_response(body)


@router.delete(
    "/approvals/{request_id}",
    response_model=DecisionOut,
    responses=errors(NotFound, RequestNotPending),
    summary="Cancel a request",
    description="`callback_delivered` is the outcome of the first attempt of the "
    "cancellation callback (false without a `callback_url`).",
)
async def cancel_approval(request: Request, request_id: UuidPath, principal: Writer) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    now = utcnow()
    async with ctx.transaction() as uow:
        result = await service.cancel(uow, principal, rid, now)
    body = request_to_dict(result.request, now)
    body.update(receipts.NO_RECEIPT)
    body["callback_delivered"] = uow.first_attempts.delivered
    return json_response(body)


@router.post(
    "/approvals/{request_id}/comments",
    status_code=201,
    response_model=CommentOut,
    responses=errors(ValidationFailed, NotFound),
    openapi_extra=json_body_doc(AddComment),
    summary="Add a comment",
)
async def add_comment(request: Request, request_id: UuidPath, principal: Commenter) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    payload = await parse_json_body(request, AddComment, ctx.settings)
    async with ctx.transaction() as uow:
        comment = await service.add_comment(uow.approvals, principal, rid, payload.body, utcnow())
    return json_response(comment_to_dict(comment), 201)


@router.get(
    "/approvals/{request_id}/comments",
    response_model=CommentListOut,
    responses=errors(NotFound),
    summary="List comments, oldest first",
)
async def list_comments(request: Request, request_id: UuidPath, principal: Reader) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    async with ctx.reading() as uow:
        comments = await service.list_comments(uow.approvals, principal, rid)
    return json_response({"data": [comment_to_dict(c) for c in comments]})


@router.get(
    "/approvals/{request_id}/events",
    response_model=AuditEventListOut,
    responses=errors(NotFound),
    summary="The audit trail of a request, oldest first",
)
async def list_events(request: Request, request_id: UuidPath, principal: Reader) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    async with ctx.reading() as uow:
        events = await service.list_events(uow.approvals, principal, rid)
    return json_response({"data": [event_to_dict(e) for e in events]})
