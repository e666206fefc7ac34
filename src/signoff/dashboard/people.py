"""The dashboard's side of issue 36's people rules: the org's settings page (admins) and
the out-of-office form of the account page. Each writes what its API route writes
(``orgs.settings``, ``orgs.delegation``), through the same checks."""

from __future__ import annotations

from datetime import UTC, datetime

from fastapi import APIRouter, Depends
from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import Response

from signoff.common.time import utcnow
from signoff.context import context_of
from signoff.dashboard.web import (
    Viewer,
    checked_form,
    redirect,
    render,
    require_admin,
    require_user,
)
from signoff.errors import ValidationFailed
from signoff.orgs.delegation import DelegationIn, clear_delegation, set_delegation
from signoff.orgs.settings import SETTINGS, parse_changes, settings_of

router = APIRouter(include_in_schema=False)
Admin = Depends(require_admin)
User = Depends(require_user)
SETTINGS_PAGE = "/admin/settings"


@router.get(SETTINGS_PAGE)
async def settings_page(request: Request, viewer: Viewer = Admin) -> Response:
    return await render(
        request,
        "admin_settings.html",
        viewer,
        values=settings_of(viewer.org),
        settings=SETTINGS,
    )


@router.post(SETTINGS_PAGE)
async def save_settings(request: Request, viewer: Viewer = Admin) -> Response:
    """As ``PATCH /api/v1/org/settings`` with the settings the form sends."""
    fields = await checked_form(request, viewer)
    try:
        changes = parse_changes({name: fields[name] for name in SETTINGS if name in fields})
    except ValidationFailed as exc:
        return redirect(SETTINGS_PAGE, flash=exc.message, kind="error")
    async with context_of(request).transaction() as uow:
        await uow.orgs.update_settings(viewer.org.id, changes, viewer.user.id, utcnow())
    return redirect(SETTINGS_PAGE, flash="Settings saved.")


# ---- out of office (the account page) ----


@router.post("/account/delegation")
async def save_delegation(request: Request, viewer: Viewer = User) -> Response:
    fields = await checked_form(request, viewer)
    try:
        payload = _delegation_of(fields)
        async with context_of(request).transaction() as uow:
            user = await uow.orgs.get_user(viewer.org.id, viewer.user.id)
            assert user is not None  # the signed-in person
            delegate = await set_delegation(uow.orgs, user, payload, utcnow())
    except ValidationFailed as exc:
        return redirect("/account#away", flash=exc.message, kind="error")
    return redirect("/account#away", flash=f"While you are away, {delegate.name} stands in.")


@router.post("/account/delegation/end")
async def end_delegation(request: Request, viewer: Viewer = User) -> Response:
    await checked_form(request, viewer)
    async with context_of(request).transaction() as uow:
        user = await uow.orgs.get_user(viewer.org.id, viewer.user.id)
        if user is not None:
            clear_delegation(user)
    return redirect("/account#away", flash="You are back: your steps wait for you alone.")


def _delegation_of(fields: dict[str, str]) -> DelegationIn:
    """The form's fields (times in UTC, as the page says: it works without script, which
    would be needed to know the browser's time zone)."""
    try:
        return DelegationIn(
            away_from=_utc(fields.get("away_from", ""), "away_from"),
            away_until=_utc(fields.get("away_until", ""), "away_until"),
            delegate_id=fields.get("delegate_id", ""),
        )
    except ValidationError:
        raise ValidationFailed.for_field("delegate_id", "choose a person") from None


def _utc(text: str, field: str) -> datetime | None:
    if not text.strip():
        if field == "away_until":
            raise ValidationFailed.for_field("away_until", "is required")
        return None
    try:
        return datetime.fromisoformat(text.strip()).replace(tzinfo=UTC)
    except ValueError:
        raise ValidationFailed.for_field(field, "is not a date and time") from None
