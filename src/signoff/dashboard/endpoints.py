"""The dashboard's pages: thin handlers that read the form, call a service, render.

Every action is a plain form (POST, redirect, GET) and works without JavaScript; the
script only enhances (live inbox, local times, keyboard). docs/dashboard.md lists the
pages.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

import orjson
from fastapi import APIRouter, Depends, FastAPI
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from signoff.approvals import service as approvals_service
from signoff.approvals.schemas import AddComment, DecideApprovalRequest
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.common.validation import validate_model
from signoff.context import AppContext, context_of
from signoff.dashboard import argument_form, passwords, service
from signoff.dashboard.admin import router as admin_router
from signoff.dashboard.first_steps import FirstSteps, first_steps
from signoff.dashboard.people import router as people_router
from signoff.dashboard.previews import render_preview
from signoff.dashboard.web import (
    PAGE_HEADERS,
    STATIC,
    PageRefused,
    PasswordChangeRequired,
    SignInRequired,
    Viewer,
    Waiting,
    checked_form,
    csrf_ok,
    current_viewer,
    form_fields,
    not_found,
    redirect,
    render,
    render_fragment,
    require_admin,
    require_user,
    safe_next,
    waiting_count,
)
from signoff.errors import (
    AppError,
    Conflict,
    NotFound,
    PasskeyRequired,
    RequestNotPending,
    ValidationFailed,
)
from signoff.oauth import service as oauth_service
from signoff.oauth.endpoints import CHOOSE_PASSWORD_PATH, SESSION_COOKIE, set_session_cookie
from signoff.orgs.delegation import is_away
from signoff.passkeys import service as passkeys_service
from signoff.passkeys.endpoints import relying_party
from signoff.passkeys.endpoints import router as passkeys_router
from signoff.passkeys.rule import passkey_needed
from signoff.unit_of_work import UnitOfWork
from signoff.wiring import wiring_of

router = APIRouter(include_in_schema=False)
User = Depends(require_user)
# Server-sent events: a comment line this often keeps proxies from closing the stream.
LIVE_KEEPALIVE_SECONDS = 15.0


# ---- static files ----


@router.get("/static/{name}")
async def static_file(name: str) -> Response:
    found = STATIC.get(name)
    if found is None:
        raise not_found("This file")
    # The URL carries the content's hash (``static_url``): a changed file is a new URL.
    headers = {
        "Cache-Control": "public, max-age=31536000, immutable",
        "ETag": f'"{found.digest}"',
        "X-Content-Type-Options": "nosniff",
    }
    return Response(found.body, media_type=found.media_type, headers=headers)


@router.get("/favicon.ico")
async def favicon() -> Response:
    """Browsers ask for it on every site: the brand mark, not a 404 in every log."""
    found = STATIC["favicon.ico"]
    headers = {"Cache-Control": "public, max-age=86400", "ETag": f'"{found.digest}"'}
    return Response(found.body, media_type=found.media_type, headers=headers)


# ---- first run ----


@router.get("/setup/{token}")
async def setup_page(request: Request, token: str) -> Response:
    ctx = context_of(request)
    try:
        async with ctx.reading() as uow:
            await service.check_setup_link(uow.orgs, token)
    except AppError as exc:
        raise _setup_refused(exc) from None
    return await _setup_form(request, token)


def _setup_refused(exc: AppError) -> PageRefused:
    """The page for a setup link that cannot set signoff up, saying why."""
    if isinstance(exc, Conflict):
        return PageRefused(
            409,
            "Already set up",
            "signoff is already set up: an organization exists. Sign in instead, or ask "
            "an admin of your organization for an account.",
        )
    return PageRefused(
        404,
        "Setup link not valid",
        "This setup link is not valid. Only the link printed by the latest start of "
        "signoff serve works: use that one.",
    )


async def _setup_form(
    request: Request, token: str, error: str | None = None, values: dict[str, str] | None = None
) -> Response:
    return await render(
        request,
        "setup.html",
        None,
        400 if error else 200,
        token=token,
        error=error,
        values=values or {},
    )


@router.post("/setup/{token}")
async def setup_submit(request: Request, token: str) -> Response:
    """The token in the URL is the form's secret: it is as unguessable as a CSRF token."""
    ctx = context_of(request)
    fields = await form_fields(request)
    form = service.SetupForm(
        org_name=fields.get("org_name", ""),
        name=fields.get("name", ""),
        email=fields.get("email", ""),
        password=fields.get("password", ""),
        self_approval="forbid" if fields.get("self_approval") == "forbid" else "allow",
    )
    now = utcnow()
    try:
        async with ctx.transaction() as uow:
            user = await service.complete_setup(uow.orgs, token, form, now)
            _, cookie = await oauth_service.start_session(uow.oauth, user.id, ctx.settings, now)
    except ValidationFailed as exc:
        return await _setup_form(request, token, _field_errors(exc), fields)
    except AppError as exc:
        raise _setup_refused(exc) from None
    response = redirect("/", flash=f"Welcome, {user.name}. {form.org_name.strip()} is ready.")
    set_session_cookie(response, cookie, ctx.settings)
    return response


def _field_errors(exc: ValidationFailed) -> str:
    fields = exc.details.get("fields") or []
    return "; ".join(f"{f['field'].replace('_', ' ')} {f['message']}" for f in fields) or str(exc)


# ---- sign-in ----


@router.get("/signin")
async def signin_page(request: Request) -> Response:
    ctx = context_of(request)
    next_url = safe_next(request.query_params.get("next"))
    if await current_viewer(ctx, request) is not None:
        return redirect(next_url)
    return await _signin_form(request, next_url)


async def _signin_form(
    request: Request,
    next_url: str,
    *,
    error: str | None = None,
    email: str = "",
    status_code: int = 200,
) -> Response:
    """The form, with the CSRF token of the visitor's (anonymous) session."""
    ctx = context_of(request)
    now = utcnow()
    async with ctx.reading() as uow:
        session = await oauth_service.current_session(
            uow.oauth, request.cookies.get(SESSION_COOKIE), now
        )
        any_org = await uow.orgs.any_org_exists()
    cookie = None
    if session is None:
        async with ctx.transaction() as uow:
            session, cookie = await oauth_service.start_session(uow.oauth, None, ctx.settings, now)
    response = await render(
        request,
        "signin.html",
        None,
        status_code,
        csrf_token=session.csrf_token,
        next_url=next_url,
        error=error,
        email=email,
        first_run=not any_org,
    )
    if cookie is not None:
        set_session_cookie(response, cookie, ctx.settings)
    return response


@router.post("/signin")
async def signin_submit(request: Request) -> Response:
    ctx = context_of(request)
    settings = ctx.settings
    fields = await form_fields(request)
    next_url = safe_next(fields.get("next"))
    email = fields.get("email", "").strip().lower()[:320]
    now = utcnow()
    async with ctx.reading() as uow:
        session = await oauth_service.current_session(
            uow.oauth, request.cookies.get(SESSION_COOKIE), now
        )
    if session is None or not csrf_ok(session.csrf_token, fields.get("csrf_token")):
        return await _signin_form(
            request, next_url, error="This form expired. Please try again.", status_code=403
        )
    address = request.client.host if request.client else "unknown"
    limit = settings.login_attempts_per_hour
    # Per address (shared with the OAuth sign-in page) and per account.
    by_address = await wiring_of(request).limiter.hit(f"login:{address}", limit)
    by_account = await wiring_of(request).limiter.hit(f"login-account:{email}", limit)
    if not (by_address.allowed and by_account.allowed):
        return await _signin_form(
            request,
            next_url,
            error="Too many sign-in attempts. Try again later.",
            email=email,
            status_code=429,
        )
    async with ctx.reading() as uow:
        user = await service.check_sign_in(uow.orgs, email, fields.get("password", ""))
    if user is None:
        return await _signin_form(
            request, next_url, error="Wrong email or password.", email=email, status_code=401
        )
    async with ctx.transaction() as uow:
        _, cookie = await oauth_service.start_session(
            uow.oauth, user.id, settings, now, replacing=session
        )
    if user.must_change_password:
        # An admin has seen this password: its owner chooses their own before going on.
        next_url = f"{CHOOSE_PASSWORD_PATH}?" + urlencode({"next": next_url})
    response = redirect(next_url)
    set_session_cookie(response, cookie, settings)
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    ctx = context_of(request)
    fields = await form_fields(request)
    async with ctx.transaction() as uow:
        session = await oauth_service.current_session(
            uow.oauth, request.cookies.get(SESSION_COOKIE), utcnow()
        )
        if session is not None and csrf_ok(session.csrf_token, fields.get("csrf_token")):
            await uow.oauth.delete_session(session.id)
    response = redirect("/signin", flash="You are signed out.", kind="info")
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


# ---- the inbox ----


@router.get("/")
async def inbox(request: Request, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    view = service.ListView.from_query(dict(request.query_params), ("pending",))
    page = await service.inbox(ctx.db.queries, viewer.member, view)
    waiting = await _waiting(request, viewer, view, page)
    steps = await _first_steps(ctx, viewer, view, page)
    return await render(
        request, "inbox.html", viewer, page=page, view=view, waiting=waiting, first_steps=steps
    )


async def _first_steps(
    ctx: AppContext, viewer: Viewer, view: service.ListView, page: service.Page
) -> FirstSteps | None:
    """An admin's empty inbox, before the org's first request: what to do next."""
    if page.rows or view.is_filtered or not viewer.is_admin:
        return None
    async with ctx.reading() as uow:
        return await first_steps(uow, viewer.member, ctx.settings.public_url)


async def _waiting(
    request: Request, viewer: Viewer, view: service.ListView, page: service.Page
) -> Waiting:
    """The unfiltered inbox's total is the waiting count: keep it for the other pages."""
    if view.is_filtered:
        return await waiting_count(request, viewer)
    waiting = Waiting(page.total, page.total_is_exact)
    wiring_of(request).live.counts.put(viewer.org.id, viewer.user.id, waiting)
    return waiting


@router.get("/inbox/rows")
async def inbox_rows(request: Request, viewer: Viewer = User) -> Response:
    """The inbox's list alone, for the live update (the page's script swaps it in)."""
    ctx = context_of(request)
    view = service.ListView.from_query(dict(request.query_params), ("pending",))
    page = await service.inbox(ctx.db.queries, viewer.member, view)
    waiting = await _waiting(request, viewer, view, page)
    steps = await _first_steps(ctx, viewer, view, page)
    return render_fragment(
        "_inbox_list.html",
        page=page,
        view=view,
        waiting=waiting,
        now=utcnow(),
        first_steps=steps,
    )


@router.get("/live")
async def live(request: Request, viewer: Viewer = User) -> Response:
    """Server-sent events: ``changed`` whenever a request of the viewer's org changes."""
    live = wiring_of(request).live
    await live.start_listening()
    org_id = viewer.org.id

    async def events() -> AsyncIterator[str]:
        with live.watch(org_id) as changed:
            yield "retry: 2000\n\n"
            while True:
                try:
                    await asyncio.wait_for(changed.wait(), LIVE_KEEPALIVE_SECONDS)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                changed.clear()
                yield "event: changed\ndata: {}\n\n"

    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events(), media_type="text/event-stream", headers=headers)


# ---- one request ----


def _request_id(value: str) -> uuid.UUID:
    parsed = parse_id(value)
    if parsed is None:
        raise not_found("This request")
    return parsed


@router.get("/requests/{request_id}")
async def request_page(request: Request, request_id: str, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    rid = _request_id(request_id)
    try:
        async with ctx.reading() as uow:
            page = await service.request_page(uow, viewer.member, rid)
            signed = await uow.passkeys.assertions_of(rid)
    except AppError:
        raise not_found("This request") from None
    intent = request.query_params.get("decide")
    # Off the event loop: a large preview takes a while to format, and other pages
    # must not wait for it.
    preview = await asyncio.to_thread(render_preview, page.request["preview"])
    return await render(
        request,
        "request.html",
        viewer,
        r=page,
        preview=preview,
        intent=intent if intent in ("approve", "reject") else None,
        needs_passkey=passkey_needed(viewer.org.passkey_for, page.request["priority"]),
        signed_votes={(a.user_id, a.decision) for a in signed},
    )


@router.post("/requests/{request_id}/decision")
async def decide(request: Request, request_id: str, viewer: Viewer = User) -> Response:
    """Approve or reject: the same services, transaction, callback attempt and wake-ups
    as ``PATCH /api/v1/approvals/:id`` and the step vote."""
    ctx = context_of(request)
    rid = _request_id(request_id)
    fields = await checked_form(request, viewer)
    back = f"/requests/{rid}"
    if viewer.org.emergency_stop:
        return redirect(back, flash="The emergency stop is on: nothing is decided.", kind="error")
    # The passkey script submits the form itself, without the pressed button's value.
    data: dict[str, Any] = {
        "decision": fields.get("decision") or fields.get("passkey_decision"),
        "comment": fields.get("comment", "").strip(),
    }
    if fields.get("arguments"):
        # Edit and approve: the arguments the confirm page carries (checked again here).
        try:
            data["arguments"] = orjson.loads(fields["arguments"])
        except orjson.JSONDecodeError:
            return redirect(back, flash="The edited arguments are not valid JSON.", kind="error")
    if data["decision"] == "approve":
        data["standing"] = await _standing_chosen(ctx, viewer, rid, fields)
    try:
        payload = validate_model(
            DecideApprovalRequest, {**data, "source": "dashboard"}, ctx.settings
        )
    except ValidationFailed as exc:
        return redirect(back, flash=_field_errors(exc), kind="error")
    try:
        async with ctx.transaction() as uow:
            result = await _decide_signed(request, uow, viewer, rid, payload, fields)
    except PasskeyRequired:
        message = "This request needs your passkey: use a browser with JavaScript on."
        return redirect(back, flash=message, kind="error")
    except RequestNotPending:
        # Someone else decided meanwhile: the page says who and when.
        return redirect(back, flash="Someone decided this request before you.", kind="info")
    except AppError as exc:
        if exc.status_code == 404:
            raise not_found("This request") from None
        return redirect(back, flash=exc.message, kind="error")
    # Long polls and live pages were told, and the callback attempted, at the commit.
    callback = uow.first_attempts.delivered
    verb = "approved" if payload.decision == "approve" else "rejected"
    final = result.transition.is_final
    message = f"You {verb} this request." if final else "Your vote is recorded."
    if result.transition.edit is not None:
        message = "You edited the arguments. " + message
        if result.transition.asked_again:
            message += " Earlier approvals were of the old arguments: they are asked again."
    if final and callback:
        message += " The caller has been told."
    return redirect(back, flash=message)


async def _standing_chosen(
    ctx: AppContext, viewer: Viewer, rid: uuid.UUID, fields: dict[str, str]
) -> dict[str, Any] | None:
    """ "Don't ask again" as chosen beside an approval; the request's arguments are read
    only when "only with these same arguments" is ticked."""
    arguments = None
    if fields.get("standing_same_arguments"):
        try:
            async with ctx.reading() as uow:
                row = await approvals_service.get_request(uow.approvals, viewer.member, rid)
        except NotFound:
            raise not_found("This request") from None
        arguments = row.arguments
    return service.standing_from_form(fields, arguments)


async def _editable_page(request: Request, rid: uuid.UUID, viewer: Viewer) -> service.RequestPage:
    """The request's page, if this person may edit its arguments and approve now."""
    try:
        async with context_of(request).reading() as uow:
            page = await service.request_page(uow, viewer.member, rid)
    except AppError:
        raise not_found("This request") from None
    if page.request["status"] != "pending" or not page.can_decide or not page.has_schema:
        raise not_found("An editable request")
    return page


@router.get("/requests/{request_id}/edit")
async def edit_page(request: Request, request_id: str, viewer: Viewer = User) -> Response:
    """Edit and approve: the form the request's ``arguments_schema`` generates."""
    page = await _editable_page(request, _request_id(request_id), viewer)
    form = argument_form.build_form(page.schema, page.request["arguments"])
    return await render(request, "request_edit.html", viewer, r=page, form=form, changes=None)


@router.post("/requests/{request_id}/edit")
async def review_edit(request: Request, request_id: str, viewer: Viewer = User) -> Response:
    """The edited arguments read back and checked: the form again with its errors, or the
    changes to confirm (saved only by the confirm's POST to the decision)."""
    fields = await checked_form(request, viewer)
    page = await _editable_page(request, _request_id(request_id), viewer)
    original = page.request["arguments"]
    posted = {k: v for k, v in fields.items() if k.startswith(argument_form.PREFIX)}
    if argument_form.WHOLE in fields:
        posted[argument_form.WHOLE] = fields[argument_form.WHOLE]
    edited, form = argument_form.read_form(page.schema, original, posted)
    if fields.get("back") or edited is None:
        status = 200 if fields.get("back") else 400
        return await render(
            request, "request_edit.html", viewer, status, r=page, form=form, changes=None
        )
    return await render(
        request,
        "request_edit.html",
        viewer,
        r=page,
        form=form,
        changes=argument_form.changes(original, edited),
        arguments_json=orjson.dumps(edited).decode(),
        posted=posted,
    )


async def _decide_signed(
    request: Request,
    uow: UnitOfWork,
    viewer: Viewer,
    rid: uuid.UUID,
    payload: DecideApprovalRequest,
    fields: dict[str, str],
) -> approvals_service.TransitionResult:
    """The decision, signed by the person's passkey when the page's script sent an
    assertion (kept with the vote), else as it is."""
    now = utcnow()
    credential = fields.get("passkey_credential")
    if not credential:
        return await approvals_service.decide(uow, viewer.member, rid, payload, now, on="my_step")
    return await passkeys_service.decide_signed(
        uow, viewer.member, relying_party(request), rid, payload, credential, now
    )


@router.post("/requests/{request_id}/comments")
async def add_comment(request: Request, request_id: str, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    rid = _request_id(request_id)
    fields = await checked_form(request, viewer)
    back = f"/requests/{rid}#comments"
    try:
        body = validate_model(AddComment, {"body": fields.get("body", "")}, ctx.settings).body
        async with ctx.transaction() as uow:
            await service.add_comment(uow.approvals, viewer.member, rid, body, utcnow())
    except AppError as exc:
        if exc.status_code == 404:
            raise not_found("This request") from None
        message = _field_errors(exc) if isinstance(exc, ValidationFailed) else exc.message
        return redirect(back, flash=message, kind="error")
    return redirect(back, flash="Comment added.")


# ---- history ----


@router.get("/history")
async def history(request: Request, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    view = service.ListView.from_query(dict(request.query_params), service.DECIDED_STATUSES)
    page = await service.history(ctx.db.queries, viewer.member, view)
    return await render(
        request, "history.html", viewer, page=page, view=view, statuses=service.DECIDED_STATUSES
    )


@router.get("/history.csv")
async def history_csv(request: Request, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    view = service.ListView.from_query(dict(request.query_params), service.DECIDED_STATUSES)
    text = await service.history_csv(ctx.db.queries, viewer.member, view)
    headers = {
        "Content-Disposition": 'attachment; filename="signoff-history.csv"',
        "Cache-Control": "no-store",
        "X-Content-Type-Options": "nosniff",
    }
    return Response(text, media_type="text/csv; charset=utf-8", headers=headers)


# ---- admin ----

FIRST_ADMIN_PAGE = "/admin/connections"


@router.get("/admin")
async def admin_home(viewer: Viewer = Depends(require_admin)) -> Response:
    """The Admin tab's address typed by hand: its first page."""
    return redirect(FIRST_ADMIN_PAGE)


# ---- account ----


@router.get("/account")
async def account(request: Request, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        grants = await service.authorizations(uow.oauth, viewer.user.id)
        passkeys = await uow.passkeys.list_for_user(viewer.user.id)
        people = await uow.orgs.list_users(viewer.org.id)
    # Who may stand in: the org's active people but oneself (orgs/delegation.py).
    others = [p for p in people if p.is_active and p.id != viewer.user.id]
    delegate = next((p for p in people if p.id == viewer.user.delegate_id), None)
    return await render(
        request,
        "account.html",
        viewer,
        grants=grants,
        passkeys=passkeys,
        others=others,
        delegate=delegate,
        away_now=is_away(viewer.user, utcnow()),
    )


@router.post("/account/password")
async def change_password(request: Request, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    fields = await checked_form(request, viewer)
    try:
        async with ctx.transaction() as uow:
            await service.change_password(
                uow.orgs,
                uow.oauth,
                viewer.user.id,
                viewer.session.id,
                fields.get("current_password", ""),
                fields.get("new_password", ""),
            )
    except ValidationFailed as exc:
        return redirect("/account", flash=_field_errors(exc), kind="error")
    return redirect("/account", flash="Password changed. Your other sessions are signed out.")


@router.post("/account/authorizations/{client_id}/revoke")
async def revoke_authorization(request: Request, client_id: str, viewer: Viewer = User) -> Response:
    ctx = context_of(request)
    await checked_form(request, viewer)
    try:
        async with ctx.transaction() as uow:
            name = await service.revoke_authorization(
                uow.oauth, viewer.user.id, client_id[:100], utcnow()
            )
    except AppError:
        raise not_found("This authorization") from None
    return redirect("/account", flash=f"{name} can no longer act for you.")


# ---- mounting ----


def install_dashboard(app: FastAPI) -> None:
    """The pages, and the answers to their refusals (HTML, never the API's JSON)."""

    async def on_sign_in_required(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SignInRequired)
        if request.headers.get("accept", "").startswith("text/event-stream"):
            return Response(status_code=401, headers=dict(PAGE_HEADERS))
        return redirect("/signin?" + urlencode({"next": safe_next(exc.next_url)}))

    async def on_page_refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, PageRefused)
        viewer = None
        with contextlib.suppress(Exception):
            viewer = await current_viewer(context_of(request), request)
        return await render(
            request,
            "error.html",
            viewer,
            exc.status_code,
            title=exc.title,
            message=exc.message,
            code=exc.status_code,
        )

    app.add_exception_handler(SignInRequired, on_sign_in_required)
    app.add_exception_handler(PasswordChangeRequired, passwords.on_password_change_required)
    app.add_exception_handler(PageRefused, on_page_refused)
    app.include_router(router)
    app.include_router(passwords.router)
    app.include_router(passkeys_router)
    app.include_router(admin_router)
    app.include_router(people_router)
