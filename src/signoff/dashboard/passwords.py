"""The pages where a person chooses their password: from an invitation's or a password
reset's one-time link (``/password/{token}``), and after signing in with a password an
admin generated (``/account/choose-password``), the one page such a person may open.
"""

from __future__ import annotations

from urllib.parse import urlencode

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from signoff.common.time import utcnow
from signoff.context import context_of
from signoff.dashboard.web import (
    PAGE_HEADERS,
    PageRefused,
    PasswordChangeRequired,
    Viewer,
    checked_form,
    csrf_ok,
    form_fields,
    redirect,
    render,
    require_user,
    safe_next,
)
from signoff.errors import ValidationFailed
from signoff.invitations import service as invitations
from signoff.oauth import service as oauth_service
from signoff.oauth.endpoints import CHOOSE_PASSWORD_PATH, SESSION_COOKIE, set_session_cookie

router = APIRouter(include_in_schema=False)

_LINK_GONE = (
    "This link has been used, has expired, or a newer one was sent. Ask an admin of your "
    "organization to send you a new one."
)


def _error_text(exc: ValidationFailed) -> str:
    fields = exc.details.get("fields") or []
    text = "; ".join(f"{f['field'].replace('_', ' ')} {f['message']}" for f in fields)
    return text[:1].upper() + text[1:] if text else exc.message


def _link_gone() -> PageRefused:
    return PageRefused(404, "Link not valid", _LINK_GONE)


# ---- from a mailed link ----


async def _link_form(request: Request, token: str, error: str | None = None) -> Response:
    ctx = context_of(request)
    now = utcnow()
    try:
        async with ctx.reading() as uow:
            link, user = await invitations.open_link(uow, token, now)
            org = await uow.orgs.get_org(user.org_id)
            session = await oauth_service.current_session(
                uow.oauth, request.cookies.get(SESSION_COOKIE), now
            )
    except invitations.LinkGone:
        raise _link_gone() from None
    cookie = None
    if session is None:
        # A pre-sign-in session carries the form's CSRF token, as on the sign-in page:
        # without it another site could post its own link and sign the visitor in as
        # the attacker's account.
        async with ctx.transaction() as uow:
            session, cookie = await oauth_service.start_session(uow.oauth, None, ctx.settings, now)
    org_name = org.name if org is not None else ""
    if link.purpose == "invite":
        heading = f"Welcome to {org_name}"
        lead = f"Hello {user.name}. Choose the password you will sign in with."
    else:
        heading = "Choose a new password"
        lead = f"Hello {user.name}. Your old password no longer works: choose a new one."
    response = await render(
        request,
        "set_password.html",
        None,
        400 if error else 200,
        heading=heading,
        lead=lead,
        error=error,
        action=f"/password/{token}",
        email=user.email,
        button="Set password and sign in",
        csrf_token=session.csrf_token,
        next_url=None,
    )
    if cookie is not None:
        set_session_cookie(response, cookie, ctx.settings)
    return response


@router.get("/password/{token}")
async def link_page(request: Request, token: str) -> Response:
    """Looks only: mail scanners and previews may open it any number of times."""
    return await _link_form(request, token)


@router.post("/password/{token}")
async def link_submit(request: Request, token: str) -> Response:
    """Needs the CSRF token of the visitor's own session besides the link's token (the
    link alone is no proof the visitor chose to submit). Of two submissions at once, one
    sets the password; the other finds the link spent."""
    ctx = context_of(request)
    fields = await form_fields(request)
    now = utcnow()
    async with ctx.reading() as uow:
        try:
            await invitations.open_link(uow, token, now)
        except invitations.LinkGone:
            raise _link_gone() from None
        session = await oauth_service.current_session(
            uow.oauth, request.cookies.get(SESSION_COOKIE), now
        )
    if session is None or not csrf_ok(session.csrf_token, fields.get("csrf_token")):
        return await _link_form(request, token, "The form expired: please submit it again.")
    try:
        password_hash = await invitations.checked_password_hash(
            fields.get("new_password", ""), fields.get("repeat_password", "")
        )
    except ValidationFailed as exc:
        return await _link_form(request, token, _error_text(exc))
    try:
        async with ctx.transaction() as uow:
            user = await invitations.redeem_link(uow, token, password_hash, now)
            _, cookie = await oauth_service.start_session(uow.oauth, user.id, ctx.settings, now)
    except invitations.LinkGone:
        raise _link_gone() from None
    response = redirect("/", flash=f"Welcome, {user.name}. Your password is set.")
    set_session_cookie(response, cookie, ctx.settings)
    return response


# ---- after signing in with a generated password ----


async def _choose_form(
    request: Request, viewer: Viewer, next_url: str, error: str | None = None
) -> Response:
    # Rendered without the navigation: no other page opens until this one is done.
    return await render(
        request,
        "set_password.html",
        None,
        400 if error else 200,
        heading="Choose your password",
        lead=f"Hello {viewer.user.name}. You signed in with a password an admin gave "
        "you; choose your own to go on.",
        error=error,
        action=CHOOSE_PASSWORD_PATH,
        email=viewer.user.email,
        button="Set password",
        csrf_token=viewer.csrf_token,
        next_url=next_url,
        sign_out=True,
    )


@router.get(CHOOSE_PASSWORD_PATH)
async def choose_page(request: Request, viewer: Viewer = Depends(require_user)) -> Response:
    next_url = safe_next(request.query_params.get("next"))
    if not viewer.user.must_change_password:
        return redirect(next_url)
    return await _choose_form(request, viewer, next_url)


@router.post(CHOOSE_PASSWORD_PATH)
async def choose_submit(request: Request, viewer: Viewer = Depends(require_user)) -> Response:
    ctx = context_of(request)
    fields = await checked_form(request, viewer)
    next_url = safe_next(fields.get("next"))
    if not viewer.user.must_change_password:
        return redirect(next_url)
    new = fields.get("new_password", "")
    try:
        password_hash = await invitations.checked_password_hash(
            new, fields.get("repeat_password", "")
        )
        await invitations.refuse_given_password(viewer.user, new)
    except ValidationFailed as exc:
        return await _choose_form(request, viewer, next_url, _error_text(exc))
    async with ctx.transaction() as uow:
        await invitations.choose_password(uow, viewer.user.id, viewer.session.id, password_hash)
    return redirect(next_url, flash="Your password is set. Your other sessions are signed out.")


async def on_password_change_required(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PasswordChangeRequired)
    if request.headers.get("accept", "").startswith("text/event-stream"):
        return Response(status_code=401, headers=dict(PAGE_HEADERS))
    return redirect(f"{CHOOSE_PASSWORD_PATH}?" + urlencode({"next": safe_next(exc.next_url)}))
