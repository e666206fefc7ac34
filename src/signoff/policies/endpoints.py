"""The policy API (admins): the document, its versions, restore, and the dry run."""

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
from signoff.common.validation import read_json_object
from signoff.context import context_of
from signoff.errors import Forbidden, NotFound, ValidationFailed
from signoff.policies import dry_run as replay
from signoff.policies import service
from signoff.policies.repository import PolicyRepository
from signoff.policies.schemas import (
    DryRunIn,
    DryRunOut,
    PolicyDocumentIn,
    PolicyDocumentOut,
    PolicyVersionListOut,
)

router = APIRouter(prefix="/api/v1", tags=["policies"], route_class=LeanRoute)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]


@router.get(
    "/policies",
    response_model=PolicyDocumentOut,
    summary="The organization's policy document in force (admins)",
    description="The ordered rules (the first whose condition is true applies), with the "
    "version, its author and time. Version 0 with no rules until one is saved.",
    responses=errors(Forbidden),
)
async def get_policies(request: Request, principal: Reader) -> Response:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        document = await service.read_document(
            PolicyRepository(uow.session, uow.dialect), principal
        )
    return json_response(document)


@router.put(
    "/policies",
    response_model=PolicyDocumentOut,
    openapi_extra=json_body_doc(PolicyDocumentIn),
    summary="Save a new version of the policy document (admins)",
    description="Checks and compiles every rule; 400 names each wrong field (a condition "
    "that does not compile: its line and column) and stores nothing. Each save is a new "
    "version, in force at once on every replica.",
    responses=errors(ValidationFailed, Forbidden),
)
async def put_policies(request: Request, principal: Writer) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    data = await read_json_object(request)
    async with ctx.transaction() as uow:
        repo = PolicyRepository(uow.session, uow.dialect)
        document = await service.save_document(repo, principal, data, utcnow())
    return json_response(document)


@router.get(
    "/policies/versions",
    response_model=PolicyVersionListOut,
    summary="Saved versions of the policy document, newest first (admins)",
    responses=errors(Forbidden),
)
async def list_policy_versions(request: Request, principal: Reader) -> Response:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        repo = PolicyRepository(uow.session, uow.dialect)
        versions = await service.list_versions(repo, principal)
    return json_response({"data": versions})


@router.post(
    "/policies/versions/{version}/restore",
    response_model=PolicyDocumentOut,
    summary="Restore an earlier version (admins)",
    description="Saves that version's rules as a new version (`restored_from` names it).",
    responses=errors(Forbidden, NotFound),
)
async def restore_policy_version(request: Request, version: str, principal: Writer) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    if not version.isdigit() or len(version) > 9:
        raise NotFound("No policy document with this version.")
    async with ctx.transaction() as uow:
        repo = PolicyRepository(uow.session, uow.dialect)
        document = await service.restore_version(repo, principal, int(version), utcnow())
    return json_response(document)


@router.post(
    "/policies/dry-run",
    response_model=DryRunOut,
    openapi_extra=json_body_doc(DryRunIn),
    summary="Replay a draft document over the decided requests of the last `days` (admins)",
    description="Nothing is stored. Answers how many requests each rule would have "
    "matched, what it would have decided, where it disagrees with what people decided "
    "(an auto-approval of a rejected request, an auto-rejection of an approved one), "
    "with links, and when each budget would have run out.",
    responses=errors(ValidationFailed, Forbidden),
)
async def dry_run_policies(request: Request, principal: Writer) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    data = await read_json_object(request)
    days = service.check_days(data.get("days"))
    async with ctx.reading() as uow:
        repo = PolicyRepository(uow.session, uow.dialect)
        answer = await replay.dry_run(repo, principal, data, days, utcnow())
    return json_response(answer)
