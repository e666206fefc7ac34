"""The policy editor in the dashboard (admins): the document as YAML, its dry run shown
before it can be saved, and the versions with restore. Everything goes through the
services the API uses."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import yaml
from fastapi import APIRouter, Depends
from jinja2 import ChoiceLoader, FileSystemLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.context import context_of
from signoff.dashboard import web
from signoff.errors import AppError, ValidationFailed
from signoff.policies import dry_run, service, standing
from signoff.policies.repository import PolicyRepository

pages = APIRouter(include_in_schema=False)
Admin = Depends(web.require_admin)
PATH = "/settings/policies"

web.templates.loader = ChoiceLoader(
    [web.templates.loader, FileSystemLoader(str(Path(__file__).parent / "templates"))]  # type: ignore[list-item]
)


async def _page(
    request: Request,
    viewer: web.Viewer,
    *,
    text: str | None = None,
    days: int = 30,
    replay: dict[str, Any] | None = None,
    error: str | None = None,
    problems: list[dict[str, str]] | None = None,
) -> HTMLResponse:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        repo = PolicyRepository(uow.session, uow.dialect)
        document = await service.document_of(repo, viewer.org.id)
        versions = [
            service.version_dict(v, with_rules=False) for v in await repo.versions(viewer.org.id)
        ]
    if text is None:
        shown = {"rules": document["rules"]}
        text = yaml.safe_dump(shown, sort_keys=False, allow_unicode=True, width=100)
    return await web.render(
        request,
        "policies.html",
        viewer,
        400 if error else 200,
        document=document,
        versions=versions,
        text=text,
        days=days,
        replay=replay,
        error=error,
        problems=problems or [],
    )


def _parse(text: str) -> Any:
    try:
        return yaml.safe_load(text) if text.strip() else {"rules": []}
    except yaml.YAMLError as exc:
        raise ValidationFailed.for_field("document", f"not valid YAML or JSON: {exc}") from None


def _days(value: str | None) -> int:
    try:
        return service.check_days(int(value or "30"))
    except ValueError:
        raise ValidationFailed.for_field("days", "an integer 1 to 365") from None


@pages.get(PATH)
async def policies_page(request: Request, viewer: web.Viewer = Admin) -> Response:
    return await _page(request, viewer)


@pages.post(PATH)
async def policies_post(request: Request, viewer: web.Viewer = Admin) -> Response:
    """``action=dry_run`` replays the draft and shows it with a Save button;
    ``action=save`` stores it as the next version."""
    fields = await web.checked_form(request, viewer)
    text = fields.get("document", "")
    ctx = context_of(request)
    try:
        days = _days(fields.get("days"))
        data = _parse(text)
        if fields.get("action") == "save":
            async with ctx.transaction() as uow:
                repo = PolicyRepository(uow.session, uow.dialect)
                saved = await service.save_document(repo, viewer.member, data, utcnow())
            return web.redirect(PATH, flash=f"Policies saved as version {saved['version']}.")
        async with ctx.reading() as uow:
            repo = PolicyRepository(uow.session, uow.dialect)
            replay = await dry_run.dry_run(repo, viewer.member, data, days, utcnow())
    except AppError as exc:
        problems = exc.details.get("fields", []) if isinstance(exc, ValidationFailed) else []
        message = "Not checked: fix each of these." if problems else exc.message
        return await _page(request, viewer, text=text, error=message, problems=problems)
    return await _page(request, viewer, text=text, days=days, replay=replay)


@pages.post(PATH + "/versions/{version}/restore")
async def policies_restore(request: Request, version: int, viewer: web.Viewer = Admin) -> Response:
    await web.checked_form(request, viewer)
    async with context_of(request).transaction() as uow:
        repo = PolicyRepository(uow.session, uow.dialect)
        saved = await service.restore_version(repo, viewer.member, version, utcnow())
    return web.redirect(PATH, flash=f"Version {version} restored as version {saved['version']}.")


# ---- standing approvals (every member) ----

STANDING_PATH = "/standing-approvals"
Member = Depends(web.require_user)


@pages.get(STANDING_PATH)
async def standing_page(request: Request, viewer: web.Viewer = Member) -> Response:
    """What stands in the org, as ``GET /api/v1/standing-approvals`` lists it, each with
    Revoke for its grantor and the admins."""
    async with context_of(request).reading() as uow:
        listed = await standing.list_live(uow.standing, viewer.member, utcnow())
        names = await uow.policies.connection_names(viewer.org.id)
    for item in listed:
        item["connection_name"] = names.get(uuid.UUID(item["connection_id"]), "a connection")
        item["may_revoke"] = viewer.is_admin or item["granted_by"]["id"] == str(viewer.user.id)
    return await web.render(request, "standing_approvals.html", viewer, standing=listed)


@pages.post(STANDING_PATH + "/{standing_id}/revoke")
async def revoke_standing(
    request: Request, standing_id: str, viewer: web.Viewer = Member
) -> Response:
    """As ``DELETE /api/v1/standing-approvals/:id``."""
    await web.checked_form(request, viewer)
    sid = parse_id(standing_id)
    if sid is None:
        raise web.not_found("This standing approval")
    try:
        async with context_of(request).transaction() as uow:
            await standing.revoke(uow.standing, viewer.member, sid, utcnow())
    except AppError as exc:
        if exc.status_code == 404:
            raise web.not_found("This standing approval") from None
        return web.redirect(STANDING_PATH, flash=exc.message, kind="error")
    return web.redirect(STANDING_PATH, flash="Revoked: those requests go to people again.")
