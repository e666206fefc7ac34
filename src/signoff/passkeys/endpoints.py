"""The dashboard's passkey pages and calls: register and remove on the account page,
sign in, and the challenge for signing one decision. The options calls answer JSON to
the page's script (``static/passkeys.js``); everything else is a form, as elsewhere."""

from __future__ import annotations

import orjson
from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.context import context_of
from signoff.dashboard.web import (
    Viewer,
    checked_form,
    csrf_ok,
    form_fields,
    not_found,
    redirect,
    require_admin,
    require_user,
    safe_next,
)
from signoff.errors import AppError
from signoff.oauth import service as oauth_service
from signoff.oauth.endpoints import SESSION_COOKIE, set_session_cookie
from signoff.passkeys import service
from signoff.passkeys.service import PasskeyRefused, RelyingParty
from signoff.wiring import wiring_of

router = APIRouter(include_in_schema=False)
User = Depends(require_user)
JSON_HEADERS = {"Cache-Control": "no-store", "X-Content-Type-Options": "nosniff"}


def relying_party(request: Request) -> RelyingParty:
    return RelyingParty.of(context_of(request).settings.public_url)


def _json(body: str, status_code: int = 200) -> Response:
    return Response(body, status_code, JSON_HEADERS, media_type="application/json")


def _refusal(exc: AppError) -> Response:
    return _json(orjson.dumps(exc.to_body()).decode(), exc.status_code)


# ---- the account page: register, remove ----


@router.post("/account/passkeys/options")
async def registration_options(request: Request, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    await checked_form(request, viewer)
    async with ctx.transaction() as uow:
        body = await service.registration_options(
            uow.passkeys, viewer.member, relying_party(request), utcnow()
        )
    return _json(body)


@router.post("/account/passkeys")
async def register(request: Request, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    fields = await checked_form(request, viewer)
    if not fields.get("credential"):
        return redirect(
            "/account", flash="Adding a passkey needs JavaScript in this browser.", kind="error"
        )
    try:
        async with ctx.transaction() as uow:
            passkey = await service.register(
                uow.passkeys,
                viewer.member,
                relying_party(request),
                fields.get("name", ""),
                fields["credential"],
                utcnow(),
            )
    except PasskeyRefused as exc:
        return redirect("/account#passkeys", flash=exc.message, kind="error")
    return redirect("/account#passkeys", flash=f"Passkey “{passkey.name}” added.")


@router.post("/account/passkeys/{passkey_id}/remove")
async def remove(request: Request, passkey_id: str, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    await checked_form(request, viewer)
    pid = parse_id(passkey_id)
    if pid is None:
        raise not_found("This passkey")
    try:
        async with ctx.transaction() as uow:
            name = await service.remove(uow.passkeys, viewer.member, pid, utcnow())
    except AppError:
        raise not_found("This passkey") from None
    return redirect("/account#passkeys", flash=f"Passkey “{name}” removed.")


# ---- the org's setting (admins) ----

PASSKEY_FOR_WORDS = {
    "off": "No decision needs a passkey.",
    "critical": "Decisions on critical requests need the approver's passkey.",
    "all": "Every decision needs the approver's passkey.",
}


@router.post("/admin/passkeys")
async def set_passkey_for(request: Request, viewer: Viewer = Depends(require_admin)) -> Response:
    ctx = context_of(request)
    fields = await checked_form(request, viewer)
    back = "/admin/users#passkey-setting"
    try:
        async with ctx.transaction() as uow:
            value = await service.set_passkey_for(
                uow.passkeys, viewer.org.id, fields.get("passkey_for"), viewer.user.id, utcnow()
            )
    except AppError as exc:
        return redirect(back, flash=exc.message, kind="error")
    return redirect(back, flash=PASSKEY_FOR_WORDS[value])


# ---- signing in ----


@router.post("/signin/passkey/options")
async def signin_options(request: Request) -> Response:
    ctx = context_of(request)
    fields = await form_fields(request)
    now = utcnow()
    async with ctx.transaction() as uow:
        session = await oauth_service.current_session(
            uow.oauth, request.cookies.get(SESSION_COOKIE), now
        )
        if session is None or not csrf_ok(session.csrf_token, fields.get("csrf_token")):
            return _refusal(PasskeyRefused("This page expired. Reload it and try again."))
        # Each call stores a challenge: anonymous callers get as many as sign-in attempts.
        address = request.client.host if request.client else "unknown"
        limit = ctx.settings.login_attempts_per_hour
        if not (await wiring_of(request).limiter.hit(f"passkey:{address}", limit)).allowed:
            return _refusal(PasskeyRefused("Too many sign-in attempts. Try again later."))
        body = await service.signin_options(uow.passkeys, relying_party(request), now)
    return _json(body)


@router.post("/signin/passkey")
async def sign_in(request: Request) -> Response:
    ctx = context_of(request)
    fields = await form_fields(request)
    next_url = safe_next(fields.get("next"))
    back = "/signin?" + (f"next={next_url}" if next_url != "/" else "")
    now = utcnow()
    async with ctx.reading() as uow:
        session = await oauth_service.current_session(
            uow.oauth, request.cookies.get(SESSION_COOKIE), now
        )
    if session is None or not csrf_ok(session.csrf_token, fields.get("csrf_token")):
        return redirect(back, flash="This form expired. Please try again.", kind="error")
    address = request.client.host if request.client else "unknown"
    limit = ctx.settings.login_attempts_per_hour
    if not (await wiring_of(request).limiter.hit(f"login:{address}", limit)).allowed:
        return redirect(back, flash="Too many sign-in attempts. Try again later.", kind="error")
    try:
        async with ctx.transaction() as uow:
            user_id = await service.sign_in(
                uow.passkeys, relying_party(request), fields.get("credential", ""), now
            )
            user = await uow.orgs.find_user(user_id)
            if user is None or not user.is_active:
                raise PasskeyRefused("This account cannot sign in.")
            _, cookie = await oauth_service.start_session(
                uow.oauth, user.id, ctx.settings, now, replacing=session
            )
    except PasskeyRefused as exc:
        return redirect(back, flash=exc.message, kind="error")
    response = redirect(next_url)
    set_session_cookie(response, cookie, ctx.settings)
    return response


# ---- signing a decision ----


@router.post("/requests/{request_id}/passkey/options")
async def decision_options(request: Request, request_id: str, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    fields = await checked_form(request, viewer)
    rid = parse_id(request_id)
    if rid is None:
        raise not_found("This request")
    try:
        async with ctx.transaction() as uow:
            body = await service.decision_options(
                uow.passkeys,
                viewer.member,
                relying_party(request),
                rid,
                fields.get("decision", ""),
                utcnow(),
            )
    except AppError as exc:
        return _refusal(exc)
    return _json(body)
