"""The dashboard's side of issue 36's people rules: the org's settings page (admins) and
the out-of-office form of the account page. Each writes what its API route writes
(``orgs.settings``, ``orgs.delegation``), through the same checks."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

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
from signoff.orgs.settings import SETTINGS, STANDING_APPROVALS, parse_changes, settings_of

router = APIRouter(include_in_schema=False)
Admin = Depends(require_admin)
User = Depends(require_user)
SETTINGS_PAGE = "/admin/settings"


STANDING_CAPS_FORM = SETTINGS_PAGE + "/standing-approvals"
CAP_FIELDS = ("max_ttl_seconds", "max_uses")
FORBIDDEN = "forbidden_action_types"
WHOLE_NUMBER = re.compile(r"[0-9]{1,18}")


@router.get(SETTINGS_PAGE)
async def settings_page(request: Request, viewer: Viewer = Admin) -> Response:
    values = settings_of(viewer.org)
    return await _settings_page(request, viewer, values, _caps_form_of(values))


async def _settings_page(
    request: Request,
    viewer: Viewer,
    values: dict[str, Any],
    caps_form: dict[str, str],
    caps_errors: dict[str, str] | None = None,
) -> Response:
    return await render(
        request,
        "admin_settings.html",
        viewer,
        status_code=400 if caps_errors else 200,
        values=values,
        settings=SETTINGS,
        caps_form=caps_form,
        caps_errors=caps_errors or {},
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


@router.post(STANDING_CAPS_FORM)
async def save_standing_caps(request: Request, viewer: Viewer = Admin) -> Response:
    """As ``PATCH /api/v1/org/settings`` with ``standing_approvals`` (the caps replaced
    whole, an empty field no cap), checked by the API's own rules. A refusal shows the
    page again with what was typed and each problem beside its field; nothing is stored."""
    fields = await checked_form(request, viewer)
    caps_form = {name: fields.get(name, "").strip() for name in (*CAP_FIELDS, FORBIDDEN)}
    try:
        changes = parse_changes({STANDING_APPROVALS: _caps_of_form(caps_form)})
    except ValidationFailed as exc:
        errors = {
            problem["field"].removeprefix(STANDING_APPROVALS + "."): problem["message"]
            for problem in exc.details.get("fields", [])
        }
        return await _settings_page(
            request, viewer, settings_of(viewer.org), caps_form, errors or {"": exc.message}
        )
    async with context_of(request).transaction() as uow:
        await uow.orgs.update_settings(viewer.org.id, changes, viewer.user.id, utcnow())
    return redirect(SETTINGS_PAGE + "#standing", flash="Standing-approval caps saved.")


def _caps_form_of(values: dict[str, Any]) -> dict[str, str]:
    """The caps as the form shows them: an empty field for no cap, one type a line."""
    caps = values[STANDING_APPROVALS]
    shown = {name: "" if caps[name] is None else str(caps[name]) for name in CAP_FIELDS}
    shown[FORBIDDEN] = "\n".join(caps[FORBIDDEN])
    return shown


def _caps_of_form(caps_form: dict[str, str]) -> dict[str, Any]:
    """The form's text as the API's JSON: a whole number as a number (anything else is
    passed on as text, for ``parse_caps`` to refuse by its rule), one action type a line."""
    caps: dict[str, Any] = {}
    for name in CAP_FIELDS:
        text = caps_form[name]
        caps[name] = None if not text else int(text) if WHOLE_NUMBER.fullmatch(text) else text
    caps[FORBIDDEN] = [line.strip() for line in caps_form[FORBIDDEN].splitlines() if line.strip()]
    return caps


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
