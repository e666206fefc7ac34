"""``/api/v1/approvals/:id/steps``: configure a chain, read it, vote on a step."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from signoff.approvals import service
from signoff.approvals.json_answers import group_step_fields, step_to_dict
from signoff.approvals.schemas import DecideApprovalRequest
from signoff.approvals.typed_rows import StepRecord
from signoff.auth.principal import Principal
from signoff.common.http import (
    json_body_doc,
    json_response,
    path_id,
    principal_check_of,
    require_scope,
)
from signoff.common.openapi_declarations import UuidPath, errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import parse_json_body
from signoff.context import AppContext, context_of
from signoff.errors import (
    EditsNotAllowed,
    Forbidden,
    NotFound,
    PasskeyRequired,
    RequestNotPending,
    SelfApprovalForbidden,
    ServiceUnavailable,
    StepNotPending,
    StepOutOfOrder,
    StepsLocked,
    ValidationFailed,
)
from signoff.steps.schemas import ConfiguredStepListOut, SetSteps, StepListOut, StepVoteOut

router = APIRouter(prefix="/api/v1", tags=["steps"], route_class=LeanRoute)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]


@router.post(
    "/approvals/{request_id}/steps",
    status_code=201,
    response_model=ConfiguredStepListOut,
    responses=errors(ValidationFailed, Forbidden, NotFound, RequestNotPending, StepsLocked),
    openapi_extra=json_body_doc(SetSteps),
    summary="Set (replace) the approval chain",
    description="Allowed while the request is pending and nobody has voted (else 409 "
    "STEPS_LOCKED; a vote on a group step short of its quorum counts). "
    "`required_approvals` becomes the number of steps.",
)
async def set_steps(request: Request, request_id: UuidPath, principal: Writer) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    payload = await parse_json_body(request, SetSteps, ctx.settings)
    specs = [
        service.StepSpec(
            uuid.UUID(s.approver_id) if s.approver_id else None,
            s.step_order,
            uuid.UUID(s.group_id) if s.group_id else None,
            s.required_approvals or 1,
        )
        for s in payload.steps
    ]
    check = principal_check_of(request)
    async with ctx.transaction() as uow:
        steps = await service.set_steps(uow, principal, rid, specs, utcnow(), check)
    names = await _group_names(ctx, principal, steps)
    return json_response(
        {
            "data": [
                {
                    "id": str(s.id),
                    "step_order": s.step_order,
                    "approver_id": str(s.approver_id) if s.approver_id else None,
                    "status": s.status,
                    **group_step_fields(s, names),
                }
                for s in steps
            ]
        },
        201,
    )


async def _group_names(
    ctx: AppContext, principal: Principal, steps: Sequence[StepRecord]
) -> dict[uuid.UUID, str]:
    """The names of the chain's groups (no read for a chain of people)."""
    if not any(step.group_id for step in steps):
        return {}
    async with ctx.reading() as uow:
        return await service.group_names_of(uow.approvals, principal.org_id, steps)


@router.get(
    "/approvals/{request_id}/steps",
    response_model=StepListOut,
    responses=errors(NotFound),
    summary="The chain, in order",
)
async def list_steps(request: Request, request_id: UuidPath, principal: Reader) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    async with ctx.reading() as uow:
        steps = await service.list_steps(uow.approvals, principal, rid)
        names = await service.group_names_of(uow.approvals, principal.org_id, steps)
    return json_response({"data": [step_to_dict(s, names) for s in steps]})


@router.patch(
    "/approvals/{request_id}/steps/{step_id}",
    response_model=StepVoteOut,
    responses=errors(
        ValidationFailed,
        Forbidden,
        PasskeyRequired,
        SelfApprovalForbidden,
        NotFound,
        RequestNotPending,
        StepNotPending,
        StepOutOfOrder,
        EditsNotAllowed,
        ServiceUnavailable,
    ),
    openapi_extra=json_body_doc(DecideApprovalRequest),
    summary="Vote on one step",
    description="The step's approver, their delegate while they are away "
    "(`/api/v1/me/delegation`), or an admin; 403 SELF_APPROVAL_FORBIDDEN for the requester "
    "while the org forbids self-approval; the step and request pending (409 "
    "STEP_NOT_PENDING / REQUEST_NOT_PENDING); sequential chains in order (409 "
    "STEP_OUT_OF_ORDER). With `arguments` (approve with edits, on a request with an "
    "`arguments_schema`, else 400 EDITS_NOT_ALLOWED) the steps approved before reopen, "
    "every vote on a group step is dismissed (its voters asked again), and the edit is "
    "this vote, counted toward the step's quorum (docs/groups.md). 403 "
    "PASSKEY_REQUIRED when the org's `passkey_for` needs the "
    "approver's passkey for this request: `details.url` is its page (docs/passkeys.md).",
)
async def vote_step(
    request: Request, request_id: UuidPath, step_id: UuidPath, principal: Writer
) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    sid = path_id(step_id, "step")
    payload = await parse_json_body(request, DecideApprovalRequest, ctx.settings)
    check = principal_check_of(request)
    async with ctx.transaction() as uow:
        result = await service.decide(uow, principal, rid, payload, utcnow(), check, on=sid)
    assert result.step is not None  # a step vote answers its step
    # The vote that decides the request made attempt 1 of its callback, as PATCH does.
    callback_delivered = uow.first_attempts.delivered
    names = await _group_names(ctx, principal, [result.step])
    step = step_to_dict(result.step, names)
    if result.step.group_id is not None:
        # The request's counts keep their names: the group step's quorum is the step's.
        step["step_required_approvals"] = step.pop("required_approvals")
        step["step_current_approvals"] = step.pop("current_approvals")
    return json_response(
        {
            **step,
            "request_status": result.request.status,
            "current_approvals": result.request.current_approvals,
            "required_approvals": result.request.required_approvals,
            # The receipt is signed on read, not here (docs/receipts.md).
            "receipt_issued": rid in uow.receipts.issued,
            "receipt": None,
            "callback_delivered": callback_delivered,
        }
    )
