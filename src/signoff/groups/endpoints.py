"""The group API: every member of the org reads, admins change (docs/groups.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from signoff.auth.principal import Principal
from signoff.common.http import json_body_doc, json_response, path_id, require_scope
from signoff.common.openapi_declarations import errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import parse_json_body
from signoff.context import context_of
from signoff.errors import Conflict, Forbidden, NotFound, ValidationFailed
from signoff.groups import service
from signoff.groups.schemas import (
    GroupCreateIn,
    GroupListOut,
    GroupMemberIn,
    GroupMembersIn,
    GroupOut,
    GroupRenameIn,
)

router = APIRouter(prefix="/api/v1", tags=["groups"], route_class=LeanRoute)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]
MEMBERS_400 = (
    "400 names each user id that is not an active user of the org (an unknown id and "
    "another org's user alike), and nothing is changed."
)


@router.get(
    "/groups",
    response_model=GroupListOut,
    summary="The org's groups, by name",
    description="Each with how many members it has. Every member of the org may read.",
)
async def list_groups(request: Request, principal: Reader) -> Response:
    async with context_of(request).reading() as uow:
        groups = await service.list_groups(uow.groups, principal.org_id)
    return json_response({"data": groups})


@router.post(
    "/groups",
    status_code=201,
    response_model=GroupOut,
    openapi_extra=json_body_doc(GroupCreateIn),
    summary="Create a group (admins)",
    description="409 when the org has a group of this name (ignoring case). " + MEMBERS_400,
    responses=errors(ValidationFailed, Forbidden, Conflict),
)
async def create_group(request: Request, principal: Writer) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    body = await parse_json_body(request, GroupCreateIn, ctx.settings)
    async with ctx.transaction() as uow:
        repo = uow.groups
        group = await service.create_group(
            repo, principal.org_id, body.name, body.member_ids, principal.user_id, utcnow()
        )
    return json_response(group, 201)


@router.get(
    "/groups/{group_id}",
    response_model=GroupOut,
    summary="A group with its members",
    description="Members by name; a deactivated one is listed with `active: false`.",
    responses=errors(NotFound),
)
async def get_group(request: Request, group_id: str, principal: Reader) -> Response:
    gid = path_id(group_id, "group")
    async with context_of(request).reading() as uow:
        repo = uow.groups
        group = await service.read_group(repo, principal.org_id, gid)
    return json_response(group)


@router.patch(
    "/groups/{group_id}",
    response_model=GroupOut,
    openapi_extra=json_body_doc(GroupRenameIn),
    summary="Rename a group (admins)",
    description="409 when another group of the org has this name (ignoring case).",
    responses=errors(ValidationFailed, Forbidden, NotFound, Conflict),
)
async def rename_group(request: Request, group_id: str, principal: Writer) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    gid = path_id(group_id, "group")
    body = await parse_json_body(request, GroupRenameIn, ctx.settings)
    async with ctx.transaction() as uow:
        repo = uow.groups
        group = await service.rename_group(
            repo, principal.org_id, gid, body.name, principal.user_id, utcnow()
        )
    return json_response(group)


@router.delete(
    "/groups/{group_id}",
    status_code=204,
    summary="Delete a group (admins)",
    description="Its members stay users of the org.",
    responses=errors(Forbidden, NotFound),
)
async def delete_group(request: Request, group_id: str, principal: Writer) -> Response:
    service.require_admin(principal)
    gid = path_id(group_id, "group")
    async with context_of(request).transaction() as uow:
        repo = uow.groups
        await service.delete_group(repo, principal.org_id, gid, principal.user_id, utcnow())
    return Response(status_code=204)


@router.put(
    "/groups/{group_id}/members",
    response_model=GroupOut,
    openapi_extra=json_body_doc(GroupMembersIn),
    summary="Replace a group's members (admins)",
    description="The group's members become exactly `user_ids`. " + MEMBERS_400,
    responses=errors(ValidationFailed, Forbidden, NotFound),
)
async def replace_members(request: Request, group_id: str, principal: Writer) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    gid = path_id(group_id, "group")
    body = await parse_json_body(request, GroupMembersIn, ctx.settings)
    async with ctx.transaction() as uow:
        repo = uow.groups
        group = await service.replace_members(
            repo, principal.org_id, gid, body.user_ids, principal.user_id, utcnow()
        )
    return json_response(group)


@router.post(
    "/groups/{group_id}/members",
    response_model=GroupOut,
    openapi_extra=json_body_doc(GroupMemberIn),
    summary="Add a member to a group (admins)",
    description="Adding someone already in the group changes nothing. " + MEMBERS_400,
    responses=errors(ValidationFailed, Forbidden, NotFound),
)
async def add_member(request: Request, group_id: str, principal: Writer) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    gid = path_id(group_id, "group")
    body = await parse_json_body(request, GroupMemberIn, ctx.settings)
    async with ctx.transaction() as uow:
        repo = uow.groups
        group = await service.add_member(
            repo, principal.org_id, gid, body.user_id, principal.user_id, utcnow()
        )
    return json_response(group)


@router.delete(
    "/groups/{group_id}/members/{user_id}",
    status_code=204,
    summary="Remove a member from a group (admins)",
    description="404 when there is no such group, or the user is not in it.",
    responses=errors(Forbidden, NotFound),
)
async def remove_member(
    request: Request, group_id: str, user_id: str, principal: Writer
) -> Response:
    service.require_admin(principal)
    gid = path_id(group_id, "group")
    uid = path_id(user_id, "member of this group")
    async with context_of(request).transaction() as uow:
        repo = uow.groups
        await service.remove_member(repo, principal.org_id, gid, uid, principal.user_id, utcnow())
    return Response(status_code=204)
