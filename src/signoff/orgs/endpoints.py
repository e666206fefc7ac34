"""``/api/v1/me``, the per-org emergency stop, the org's directory (its members and the
action types in use) that pickers and filters are filled from, and the transfer of a
connection to another owner."""

from __future__ import annotations

import functools
from typing import Annotated, Literal

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field, StrictBool
from starlette.requests import Request
from starlette.responses import Response

from signoff.approvals import service as approvals_service
from signoff.auth.principal import Principal
from signoff.common.http import (
    json_body_doc,
    json_response,
    principal_of,
    require_scope,
)
from signoff.common.openapi_declarations import UuidPath, errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import parse_json_body
from signoff.context import context_of
from signoff.errors import Conflict, Forbidden, NotFound, ValidationFailed
from signoff.orgs import service as orgs_service
from signoff.orgs.schemas import ConnectionOut, TransferConnectionIn, connection_to_dict
from signoff.webhooks.service import FirstAttempt
from signoff.wiring import wiring_of

router = APIRouter(prefix="/api/v1", tags=["account"], route_class=LeanRoute)


class MeOut(BaseModel):
    org: dict[str, object]
    connection: dict[str, object]
    user: dict[str, object]
    scopes: list[str]
    auth_method: str
    rate_limit: dict[str, object]


class TeamMemberOut(BaseModel):
    id: str
    email: str
    full_name: str
    role: Literal["admin", "member"]


class TeamMemberListOut(BaseModel):
    data: list[TeamMemberOut] = Field(description="The org's users, oldest first.")


class ActionTypeListOut(BaseModel):
    data: list[str] = Field(
        description="Every distinct `action_type` of the org's requests, in order."
    )


class EmergencyStopIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    active: StrictBool = Field(description="A JSON boolean.")
    cancel_pending: StrictBool = Field(
        False, description="With `active: true`: also cancel every pending request."
    )


class EmergencyStopOut(BaseModel):
    org_id: str
    active: bool
    operator_stop: bool
    cancelled: int


@router.get("/me", response_model=MeOut, summary="Who am I")
async def me(request: Request) -> Response:
    principal = principal_of(request)
    ctx = context_of(request)
    limit = min(principal.rate_limit_per_hour, ctx.settings.rate_limit_ceiling)
    return json_response(
        {
            "org": {
                "id": str(principal.org_id),
                "name": principal.org_name,
                "emergency_stop": principal.org_emergency_stop or ctx.settings.emergency_stop,
            },
            "connection": {
                "id": str(principal.connection_id),
                "name": principal.connection_name,
                "owner_deactivated": principal.owner_deactivated,
            },
            "user": {
                "id": str(principal.user_id),
                "email": principal.user_email,
                "name": principal.user_name,
                "role": principal.role,
            },
            "scopes": list(principal.scopes),
            "auth_method": principal.auth_method,
            "rate_limit": {
                "limit": limit,
                "window_seconds": 3600,
                "scope": ctx.settings.rate_limit_scope,
            },
        }
    )


@router.get("/emergency-stop", response_model=EmergencyStopOut, summary="Emergency stop state")
async def get_emergency_stop(
    request: Request, principal: Annotated[Principal, Depends(require_scope("approvals:read"))]
) -> Response:
    ctx = context_of(request)
    return json_response(
        {
            "org_id": str(principal.org_id),
            "active": principal.org_emergency_stop,
            "operator_stop": ctx.settings.emergency_stop,
            "cancelled": 0,
        }
    )


@router.put(
    "/emergency-stop",
    response_model=EmergencyStopOut,
    responses=errors(ValidationFailed, Forbidden),
    openapi_extra=json_body_doc(EmergencyStopIn),
    summary="Turn the org's emergency stop on or off (admins)",
    description="While on, every write of the org answers 503 EMERGENCY_STOP. "
    "`cancel_pending: true` also cancels every pending request, with its callback.",
)
async def put_emergency_stop(
    request: Request, principal: Annotated[Principal, Depends(require_scope("approvals:write"))]
) -> Response:
    if not principal.is_admin:
        raise Forbidden("Only admins may toggle the emergency stop.")
    ctx = context_of(request)
    payload = await parse_json_body(request, EmergencyStopIn, ctx.settings)
    # The stop commits first: from then on no request of the org is created or decided.
    async with ctx.transaction() as uow:
        await uow.orgs.set_emergency_stop(
            principal.org_id, payload.active, principal.user_id, utcnow()
        )
    cancelled = 0
    if payload.active and payload.cancel_pending:
        # One cancellation callback per request, committed with it; workers send them.
        cancelled = await approvals_service.cancel_all_pending(
            functools.partial(ctx.transaction, FirstAttempt.BY_WORKERS),
            principal.org_id,
            principal,
            poisoned=wiring_of(request).poisoned,
        )
    return json_response(
        {
            "org_id": str(principal.org_id),
            "active": payload.active,
            "operator_stop": ctx.settings.emergency_stop,
            "cancelled": cancelled,
        }
    )


Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]


@router.get(
    "/team/members",
    response_model=TeamMemberListOut,
    tags=["org"],
    summary="The org's members",
    description="Everyone who can approve in the caller's org: for approver pickers.",
)
async def list_team_members(request: Request, principal: Reader) -> Response:
    async with context_of(request).reading() as uow:
        users = await orgs_service.list_users(uow.orgs, principal.org_id)
    return json_response(
        {
            "data": [
                {"id": str(user.id), "email": user.email, "full_name": user.name, "role": user.role}
                for user in users
            ]
        }
    )


@router.get(
    "/org/action-types",
    response_model=ActionTypeListOut,
    tags=["org"],
    summary="The action types in use",
    description="The distinct `action_type` values of the org's requests: for filters.",
)
async def list_action_types(request: Request, principal: Reader) -> Response:
    async with context_of(request).reading() as uow:
        action_types = await approvals_service.action_types_in_use(uow.approvals, principal)
    return json_response({"data": action_types})


# ---- connections ----


async def require_admin_api_key(request: Request) -> Principal:
    """Whose authority a key carries is decided by admins with an API key: a delegated
    OAuth token must not be able to hand a connection to anyone."""
    principal = principal_of(request)
    if principal.auth_method != "api_key":
        raise Forbidden("Connections are managed with an API key, not an OAuth token.")
    if not principal.is_admin:
        raise Forbidden("Only admins may manage connections.")
    return principal


AdminKey = Annotated[Principal, Depends(require_admin_api_key)]


@router.post(
    "/connections/{connection_id}/transfer",
    response_model=ConnectionOut,
    tags=["org"],
    responses=errors(ValidationFailed, Forbidden, NotFound, Conflict),
    openapi_extra=json_body_doc(TransferConnectionIn),
    summary="Give a connection another owner (admins, API key)",
    description="The connection's API key acts as `owner_id` (an active user of the org) "
    "from the next call on, on every server; its key, webhook secret, OAuth clients and "
    "requests stay as they are. For a connection whose owner is deactivated, whose calls "
    "answer 403 `OWNER_DEACTIVATED` to anything but creating, reading, commenting on and "
    "cancelling its own requests. 400 if the user is unknown or deactivated; 409 if the "
    "connection is revoked.",
)
async def transfer_connection(
    request: Request, connection_id: UuidPath, principal: AdminKey
) -> Response:
    ctx = context_of(request)
    payload = await parse_json_body(request, TransferConnectionIn, ctx.settings)
    async with ctx.transaction() as uow:
        connection = await orgs_service.transfer(
            uow.orgs, principal.org_id, connection_id, payload.owner_id, utcnow(), principal.user_id
        )
    return json_response(connection_to_dict(connection))
