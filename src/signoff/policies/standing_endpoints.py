"""``/api/v1/standing-approvals``: what stands in the org, and revoking it."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from signoff.auth.principal import Principal
from signoff.common.http import json_response, path_id, require_scope
from signoff.common.openapi_declarations import UuidPath, errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.context import context_of
from signoff.errors import Forbidden, NotFound
from signoff.policies import standing
from signoff.policies.schemas import StandingApprovalListOut, StandingApprovalOut

router = APIRouter(prefix="/api/v1", tags=["policies"], route_class=LeanRoute)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]


@router.get(
    "/standing-approvals",
    response_model=StandingApprovalListOut,
    summary="The org's standing approvals in force",
    description="Every member sees what stands in the org, newest first: its connection, "
    "action type and argument constraints, who granted it, its uses and `max_uses`, and "
    "when it expires. Those revoked, expired or used up are left out.",
)
async def list_standing_approvals(request: Request, principal: Reader) -> Response:
    async with context_of(request).reading() as uow:
        listed = await standing.list_live(uow.standing, principal, utcnow())
    return json_response({"data": listed})


@router.delete(
    "/standing-approvals/{standing_id}",
    response_model=StandingApprovalOut,
    responses=errors(Forbidden, NotFound),
    summary="Revoke a standing approval (its grantor or an admin)",
    description="From now on the requests it would have approved go to people. Answers "
    "it, revoked; revoking it again changes nothing. 403 for anyone but its grantor and "
    "the org's admins.",
)
async def revoke_standing_approval(
    request: Request, standing_id: UuidPath, principal: Writer
) -> Response:
    sid = path_id(standing_id, "standing approval")
    async with context_of(request).transaction() as uow:
        revoked = await standing.revoke(uow.standing, principal, sid, utcnow())
    return json_response(revoked)
