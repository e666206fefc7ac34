"""``/api/v1/org/settings`` (the org's settings document) and ``/api/v1/me/delegation``
(the caller's out-of-office delegation)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends
from pydantic import BaseModel, ConfigDict, Field
from starlette.requests import Request
from starlette.responses import Response

from signoff.auth.principal import Principal
from signoff.common.http import json_body_doc, json_response, require_scope
from signoff.common.openapi_declarations import errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import parse_json_body, read_json_object
from signoff.context import context_of
from signoff.errors import Forbidden, NotFound, ValidationFailed
from signoff.orgs.delegation import (
    DelegationIn,
    DelegationOut,
    clear_delegation,
    delegation_to_dict,
    set_delegation,
)
from signoff.orgs.endpoints import require_admin_api_key
from signoff.orgs.settings import SETTINGS, parse_changes, settings_of

router = APIRouter(prefix="/api/v1", tags=["org"], route_class=LeanRoute)


class StandingApprovalCapsDoc(BaseModel):
    """The admins' caps on standing approvals (docs/policies.md): null, no cap."""

    max_ttl_seconds: int | None = Field(None, ge=1, description="The longest a grant stands.")
    max_uses: int | None = Field(None, ge=1, description="The most requests a grant approves.")
    forbidden_action_types: list[str] = Field(
        default_factory=list, description="Action types no standing approval may name."
    )


class OrgSettingsDoc(BaseModel):
    """The org's settings: one key per setting. A PATCH names only those it changes."""

    model_config = ConfigDict(extra="forbid")

    self_approval: str | None = Field(
        None,
        description=SETTINGS["self_approval"].description,
        json_schema_extra={"enum": list(SETTINGS["self_approval"].values)},
    )
    passkey_for: str | None = Field(
        None,
        description=SETTINGS["passkey_for"].description,
        json_schema_extra={"enum": list(SETTINGS["passkey_for"].values)},
    )
    standing_approvals: StandingApprovalCapsDoc | None = Field(
        None,
        description="Caps on standing approvals: a PATCH replaces them whole (a cap left "
        "out or null is none). A grant past them is refused.",
    )


# Every member may read the rules their decisions follow.
Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]


@router.get(
    "/org/settings",
    response_model=OrgSettingsDoc,
    summary="The org's settings",
    description="Every setting of the org, with its value: `self_approval` is `allow` "
    "(the person who owns a request's connection may decide it) or `forbid` (four-eyes); "
    "`passkey_for` is `off`, `critical` or `all` (which decisions need the approver's "
    "passkey); `standing_approvals` holds the caps on standing approvals.",
)
async def get_org_settings(request: Request, principal: Reader) -> Response:
    async with context_of(request).reading() as uow:
        org = await uow.orgs.get_org(principal.org_id)
    if org is None:  # pragma: no cover - the principal's org exists
        raise NotFound("No such organization.")
    return json_response(settings_of(org))


@router.patch(
    "/org/settings",
    response_model=OrgSettingsDoc,
    responses=errors(ValidationFailed, Forbidden),
    openapi_extra=json_body_doc(OrgSettingsDoc),
    summary="Change the org's settings (admins, API key)",
    description="Names only the settings it changes; answers the whole document. An "
    "unknown setting or value is a 400 naming each, and nothing is changed. Admins with "
    "an API key only: an OAuth token, however broad, cannot loosen four-eyes.",
)
async def patch_org_settings(
    request: Request, principal: Annotated[Principal, Depends(require_admin_api_key)]
) -> Response:
    ctx = context_of(request)
    changes = parse_changes(await read_json_object(request))
    async with ctx.transaction() as uow:
        org = await uow.orgs.get_org(principal.org_id)
        if org is None:  # pragma: no cover - the principal's org exists
            raise NotFound("No such organization.")
        document = {**settings_of(org), **changes}
        await uow.orgs.update_settings(principal.org_id, changes, principal.user_id, utcnow())
    return json_response(document)


# ---- /me/delegation ----


Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]


async def _delegation_answer(uow: Any, principal: Principal) -> dict[str, Any]:
    user = await uow.orgs.get_user(principal.org_id, principal.user_id)
    if user is None:  # pragma: no cover - the principal's user exists
        raise NotFound("No such user.")
    delegate = (
        await uow.orgs.get_user(principal.org_id, user.delegate_id) if user.delegate_id else None
    )
    return delegation_to_dict(user, delegate, utcnow())


@router.get(
    "/me/delegation",
    response_model=DelegationOut,
    tags=["account"],
    summary="Your out-of-office delegation",
    description="Away from … until …, and who stands in for you meanwhile; every field "
    "null when none is set.",
)
async def get_delegation(request: Request, principal: Reader) -> Response:
    async with context_of(request).reading() as uow:
        return json_response(await _delegation_answer(uow, principal))


@router.put(
    "/me/delegation",
    response_model=DelegationOut,
    tags=["account"],
    responses=errors(ValidationFailed),
    openapi_extra=json_body_doc(DelegationIn),
    summary="Set your out-of-office delegation",
    description="While you are away your delegate sees the steps assigned to you in their "
    "inbox, is notified of them, and may vote them (recorded as theirs, for you). A "
    "delegate who is away passes it on, two hops at most. 400, with nothing stored, for "
    "yourself as delegate, a deactivated user or one not of the org, a loop, or a window "
    "that ends before it starts, in the past, or more than 366 days from now.",
)
async def put_delegation(request: Request, principal: Writer) -> Response:
    ctx = context_of(request)
    payload = await parse_json_body(request, DelegationIn, ctx.settings)
    async with ctx.transaction() as uow:
        user = await uow.orgs.get_user(principal.org_id, principal.user_id)
        if user is None:  # pragma: no cover - the principal's user exists
            raise NotFound("No such user.")
        await set_delegation(uow.orgs, user, payload, utcnow())
        answer = await _delegation_answer(uow, principal)
    return json_response(answer)


@router.delete(
    "/me/delegation",
    status_code=204,
    tags=["account"],
    summary="End your out-of-office delegation",
    description="From now on the steps assigned to you wait for you alone. Idempotent.",
)
async def delete_delegation(request: Request, principal: Writer) -> Response:
    async with context_of(request).transaction() as uow:
        user = await uow.orgs.get_user(principal.org_id, principal.user_id)
        if user is not None:
            clear_delegation(user)
    return Response(status_code=204)
