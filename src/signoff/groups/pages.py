"""The groups page in the dashboard (admins): every group with its members, and forms to
create, rename, delete and change members. Plain POST forms, each answered by a redirect
with a flash message; everything goes through the services the API uses."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends
from jinja2 import ChoiceLoader, FileSystemLoader
from starlette.requests import Request
from starlette.responses import Response

from signoff.common.http import path_id
from signoff.common.time import utcnow
from signoff.context import context_of
from signoff.dashboard import web
from signoff.errors import AppError, ValidationFailed
from signoff.groups import service
from signoff.groups.repository import GroupRepository
from signoff.orgs import service as orgs_service

pages = APIRouter(include_in_schema=False)
Admin = Depends(web.require_admin)
PATH = "/admin/groups"

web.templates.loader = ChoiceLoader(
    [web.templates.loader, FileSystemLoader(str(Path(__file__).parent / "templates"))]  # type: ignore[list-item]
)

# A change: (the repository, the form's fields) -> the flash message saying what it did.
Change = Callable[[GroupRepository, dict[str, str]], Awaitable[str]]


def _message(exc: AppError) -> str:
    if isinstance(exc, ValidationFailed):
        fields = exc.details.get("fields") or []
        return "; ".join(f"{f['field'].replace('_', ' ')}: {f['message']}" for f in fields)
    return exc.message


async def _changed(request: Request, viewer: web.Viewer, change: Change) -> Response:
    """Run a form's change in one transaction; a refusal comes back as a flash (404 as a
    page: never another org's group)."""
    fields = await web.checked_form(request, viewer)
    try:
        async with context_of(request).transaction() as uow:
            said = await change(uow.groups, fields)
    except AppError as exc:
        if exc.status_code == 404:
            raise web.not_found("This group") from None
        return web.redirect(PATH, flash=_message(exc) or exc.message, kind="error")
    return web.redirect(PATH, flash=said)


def _group_id(value: str) -> uuid.UUID:
    try:
        return path_id(value, "group")
    except AppError:
        raise web.not_found("This group") from None


@pages.get("/groups")
async def groups_short(viewer: web.Viewer = Admin) -> Response:
    return web.redirect(PATH)


@pages.get(PATH)
async def groups_page(request: Request, viewer: web.Viewer = Admin) -> Response:
    org_id = viewer.org.id
    async with context_of(request).reading() as uow:
        repo = uow.groups
        groups: list[dict[str, Any]] = []
        for row in await service.list_groups(repo, org_id):
            groups.append(await service.read_group(repo, org_id, uuid.UUID(row["id"])))
        people = [u for u in await orgs_service.list_users(uow.orgs, org_id) if u.is_active]
    return await web.render(request, "groups.html", viewer, groups=groups, people=people)


@pages.post(PATH)
async def create_group(request: Request, viewer: web.Viewer = Admin) -> Response:
    form = await request.form()
    member_ids = [v for v in form.getlist("member_ids") if isinstance(v, str)]

    async def change(repo: GroupRepository, fields: dict[str, str]) -> str:
        made = await service.create_group(
            repo, viewer.org.id, fields.get("name", ""), member_ids, viewer.user.id, utcnow()
        )
        return f"Group {made['name']} created with {made['member_count']} members."

    return await _changed(request, viewer, change)


# A change of one group by one field of its form: (the repository, the org, the group, the
# field's value, the actor, now) -> the group as the API answers it.
FieldChange = Callable[
    [GroupRepository, uuid.UUID, uuid.UUID, str, uuid.UUID, datetime], Awaitable[dict[str, Any]]
]


async def _changed_by_field(
    request: Request,
    viewer: web.Viewer,
    group_id: str,
    field: str,
    action: FieldChange,
    said: Callable[[dict[str, Any]], str],
) -> Response:
    """A form that changes one group by one of its fields (a rename, a new member)."""
    gid = _group_id(group_id)

    async def change(repo: GroupRepository, fields: dict[str, str]) -> str:
        group = await action(
            repo, viewer.org.id, gid, fields.get(field, ""), viewer.user.id, utcnow()
        )
        return said(group)

    return await _changed(request, viewer, change)


@pages.post(PATH + "/{group_id}/rename")
async def rename_group(request: Request, group_id: str, viewer: web.Viewer = Admin) -> Response:
    return await _changed_by_field(
        request, viewer, group_id, "name", service.rename_group,
        lambda group: f"Group renamed to {group['name']}.",
    )  # fmt: skip


@pages.post(PATH + "/{group_id}/members")
async def add_member(request: Request, group_id: str, viewer: web.Viewer = Admin) -> Response:
    return await _changed_by_field(
        request, viewer, group_id, "user_id", service.add_member,
        lambda group: f"{group['name']} now has {group['member_count']} members.",
    )  # fmt: skip


@pages.post(PATH + "/{group_id}/delete")
async def delete_group(request: Request, group_id: str, viewer: web.Viewer = Admin) -> Response:
    gid = _group_id(group_id)

    async def change(repo: GroupRepository, fields: dict[str, str]) -> str:
        gone = await service.delete_group(repo, viewer.org.id, gid, viewer.user.id, utcnow())
        return f"Group {gone.name} deleted."

    return await _changed(request, viewer, change)


@pages.post(PATH + "/{group_id}/members/{user_id}/remove")
async def remove_member(
    request: Request, group_id: str, user_id: str, viewer: web.Viewer = Admin
) -> Response:
    gid, uid = _group_id(group_id), _group_id(user_id)

    async def change(repo: GroupRepository, fields: dict[str, str]) -> str:
        group = await service.remove_member(repo, viewer.org.id, gid, uid, viewer.user.id, utcnow())
        return f"Member removed from {group.name}."

    return await _changed(request, viewer, change)
