"""The admin pages: connections, users, OAuth clients, deliveries, emergency stop, audit,
and the admin's override of a chain on a request's page.

Thin handlers on ``admin_service`` (the services of the API and the CLI). Every action is
a plain form: POST, then a redirect to a GET with a flash message; the exception is an
action that issues a secret (a new connection, a rotated webhook secret, a new or reset
password, a new OAuth client): its answer is the page that shows the secret, once, and
nothing stores it to show it again.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeVar
from urllib.parse import urlencode

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from signoff.approvals import service as approvals
from signoff.approvals.schemas import DecideApprovalRequest
from signoff.audit import repository as audit_repository
from signoff.audit.endpoints import export_response
from signoff.common.time import utcnow
from signoff.common.validation import validate_model
from signoff.context import context_of
from signoff.dashboard import admin_service as admin
from signoff.dashboard.admin_repository import AdminRepository
from signoff.dashboard.web import (
    Viewer,
    checked_form,
    not_found,
    redirect,
    render,
    require_admin,
    utc_text,
)
from signoff.errors import AppError, RequestNotPending, ValidationFailed
from signoff.invitations import service as invitations
from signoff.models import Connection, User
from signoff.oauth import ciba
from signoff.oauth.service import IssuedClient
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.service import FirstAttempt
from signoff.wiring import wiring_of

router = APIRouter(include_in_schema=False)
Admin = Depends(require_admin)

Done = TypeVar("Done")
# An admin action: its writes in the unit of work, from the form's fields.
Action = Callable[[UnitOfWork, dict[str, str]], Awaitable[Done]]


def _message(exc: AppError) -> str:
    if isinstance(exc, ValidationFailed):
        fields = exc.details.get("fields") or []
        text = "; ".join(f"{f['field'].replace('_', ' ')} {f['message']}" for f in fields)
        return text[:1].upper() + text[1:] if text else exc.message
    return exc.message


def _failed(back: str, exc: AppError) -> Response:
    """A refused action: 404 as a page (never another org's data), the rest as a flash."""
    if exc.status_code == 404:
        raise not_found("This item") from None
    return redirect(back, flash=_message(exc), kind="error")


async def _acted(
    request: Request, viewer: Viewer, back: str, action: Action[Done]
) -> Done | Response:
    """Runs a form's action in one transaction: what it did, or the refusal's answer."""
    ctx = context_of(request)
    fields = await checked_form(request, viewer)
    try:
        async with ctx.transaction() as uow:
            return await action(uow, fields)
    except AppError as exc:
        return _failed(back, exc)


async def _change(
    request: Request,
    viewer: Viewer,
    back: str,
    action: Action[Done],
    flash: Callable[[Done], str],
) -> Response:
    """A form action answered by a redirect to ``back`` with a flash saying what it did."""
    done = await _acted(request, viewer, back, action)
    if isinstance(done, Response):
        return done
    return redirect(back, flash=flash(done))


async def _issue(
    request: Request,
    viewer: Viewer,
    back: str,
    action: Action[Done],
    shown: Callable[[Done], dict[str, Any]],
    refused_to: str | None = None,
) -> Response:
    """A form action that issues a secret: its answer is the page that shows it, once
    (``back`` is where that page leads; a refusal goes to ``refused_to``, else there)."""
    done = await _acted(request, viewer, refused_to or back, action)
    if isinstance(done, Response):
        return done
    return await render(request, "admin_secret.html", viewer, back=back, **shown(done))


# ---- connections ----


@router.get("/admin/connections")
async def connections_page(request: Request, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        rows = await admin.connections(uow, viewer.member)
        people = await admin.users(uow, viewer.member)
    return await render(
        request,
        "admin_connections.html",
        viewer,
        rows=rows,
        # Who a connection may act as: active people, the admin first (the default).
        people=sorted(
            (p for p in people if p.deactivated_at is None),
            key=lambda p: p.id != viewer.user.id,
        ),
        default_rate_limit=ctx.settings.rate_limit_default,
        ceiling=ctx.settings.rate_limit_ceiling,
        grace_hours=admin.DEFAULT_GRACE_HOURS,
    )


@router.post("/admin/connections")
async def create_connection(request: Request, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    return await _issue(
        request,
        viewer,
        "/admin/connections",
        lambda uow, fields: admin.create_connection(
            uow,
            ctx.box,
            ctx.settings,
            viewer.member,
            name=fields.get("name", ""),
            owner=fields.get("owner_id", ""),
            rate_limit=fields.get("rate_limit", ""),
            now=utcnow(),
        ),
        lambda issued: {
            "title": f"Connection {issued.connection.name} created",
            "lead": "Give these to the automation that uses this connection. They are "
            "shown once: copy them now. Only their hashes or encrypted forms are kept.",
            "secrets": [
                ("API key", "api-key", issued.api_key),
                ("Webhook secret", "webhook-secret", issued.webhook_secret),
            ],
        },
        refused_to="/admin/connections#new-connection",
    )


@router.post("/admin/connections/{connection_id}/revoke")
async def revoke_connection(
    request: Request, connection_id: str, viewer: Viewer = Admin
) -> Response:
    return await _change(
        request,
        viewer,
        "/admin/connections",
        lambda uow, fields: admin.revoke_connection(uow, viewer.member, connection_id, utcnow()),
        lambda found: f"{found.name} is revoked: its API key no longer works.",
    )


@router.post("/admin/connections/{connection_id}/rotate-secret")
async def rotate_secret(request: Request, connection_id: str, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    return await _issue(
        request,
        viewer,
        "/admin/connections",
        lambda uow, fields: admin.rotate_webhook_secret(
            uow, ctx.box, viewer.member, connection_id, utcnow()
        ),
        lambda rotated: {
            "title": f"New webhook secret for {rotated[0].name}",
            "lead": "Callbacks are signed with both the old and the new secret for the next "
            f"{admin.DEFAULT_GRACE_HOURS} hours; switch your receiver over before then. "
            "The new secret is shown once.",
            "secrets": [("Webhook secret", "webhook-secret", rotated[1])],
        },
    )


@router.post("/admin/connections/{connection_id}/transfer")
async def transfer_connection(
    request: Request, connection_id: str, viewer: Viewer = Admin
) -> Response:
    return await _change(
        request,
        viewer,
        "/admin/connections",
        lambda uow, fields: admin.transfer_connection(
            uow, viewer.member, connection_id, fields.get("owner_id", "")
        ),
        lambda done: f"{done[0].name} now acts as {done[1].name}.",
    )


@router.post("/admin/connections/{connection_id}/rate-limit")
async def set_rate_limit(request: Request, connection_id: str, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    return await _change(
        request,
        viewer,
        "/admin/connections",
        lambda uow, fields: admin.set_rate_limit(
            uow, ctx.settings, viewer.member, connection_id, fields.get("rate_limit", "")
        ),
        lambda found: f"{found.name} may now make {found.rate_limit_per_hour:,} calls an hour.",
    )


# ---- users ----


@router.get("/admin/users")
async def users_page(request: Request, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        people = await admin.users(uow, viewer.member)
        invited = await invitations.invited_user_ids(uow, viewer.org.id, utcnow())
    return await render(
        request,
        "admin_users.html",
        viewer,
        people=people,
        roles=admin.ROLES,
        invited=invited,
        by_link=wiring_of(request).notifications.smtp is not None,
        link_hours=ctx.settings.invitation_ttl_hours,
    )


@router.post("/admin/users")
async def add_user(request: Request, viewer: Viewer = Admin) -> Response:
    """With SMTP configured the person is mailed an invitation; else the answer shows a
    generated password, which they must replace when they first sign in."""
    ctx = context_of(request)
    by_link = wiring_of(request).notifications.smtp is not None
    done = await _acted(
        request,
        viewer,
        "/admin/users",
        lambda uow, fields: admin.add_user(
            uow,
            viewer.member,
            ctx.settings,
            email=fields.get("email", ""),
            name=fields.get("name", ""),
            role=fields.get("role", "member"),
            now=utcnow(),
            by_link=by_link,
        ),
    )
    if isinstance(done, Response):
        return done
    return await _handed(
        request,
        viewer,
        done,
        title=f"{done.user.name} can sign in",
        lead=f"Send {done.user.email} this initial password over a channel you trust. "
        "When they first sign in, they must choose their own. It is shown once.",
    )


async def _handed(
    request: Request, viewer: Viewer, done: admin.Handed, *, title: str, lead: str
) -> Response:
    """The mailed link's page, or the generated password shown once."""
    if done.link is not None:
        return await _link_mailed(request, viewer, done.link)
    return await render(
        request,
        "admin_secret.html",
        viewer,
        back="/admin/users",
        title=title,
        lead=lead,
        secrets=[("Password", "password", done.password)],
    )


async def _link_mailed(request: Request, viewer: Viewer, link: invitations.IssuedLink) -> Response:
    """Mail the link (after the commit) and say whether it went."""
    ctx = context_of(request)
    now = utcnow()
    smtp = wiring_of(request).notifications.smtp
    assert smtp is not None  # a link is issued only when SMTP is configured
    sent = await invitations.send_link(smtp, ctx.settings, link, viewer.member, now)
    user = link.user
    what = "An invitation" if link.purpose == "invite" else "A password reset link"
    if sent.success:
        title = (
            f"Invitation sent to {user.name}"
            if link.purpose == "invite"
            else f"Password reset link sent to {user.name}"
        )
        lead = (
            f"{what} is on its way to {user.email}. The link works once, until "
            f"{utc_text(link.expires_at)}; with it they choose their password and are "
            "signed in."
        )
    else:
        title = f"{what} for {user.name} could not be sent"
        lead = (
            f"The mail server did not take the mail ({sent.error}). Check SIGNOFF_SMTP_URL, "
            "then send it again from the Users page."
        )
    if link.purpose == "reset":
        lead = "Their old password no longer works and their sessions have ended. " + lead
    return await render(
        request,
        "admin_mailed.html",
        viewer,
        back="/admin/users",
        title=title,
        lead=lead,
        sent=sent.success,
    )


@router.post("/admin/users/{user_id}/role")
async def change_role(request: Request, user_id: str, viewer: Viewer = Admin) -> Response:
    return await _change(
        request,
        viewer,
        "/admin/users",
        lambda uow, fields: admin.change_role(uow, viewer.member, user_id, fields.get("role", "")),
        lambda user: f"{user.name} is now {user.role}.",
    )


@router.post("/admin/users/{user_id}/deactivate")
async def deactivate_user(request: Request, user_id: str, viewer: Viewer = Admin) -> Response:
    return await _change(
        request,
        viewer,
        "/admin/users",
        lambda uow, fields: admin.deactivate_user(uow, viewer.member, user_id, utcnow()),
        _deactivated,
    )


def _deactivated(done: tuple[User, Sequence[Connection]]) -> str:
    user, owned = done
    said = f"{user.name} is deactivated and signed out everywhere."
    if not owned:
        return said
    names = ", ".join(c.name for c in owned)
    return (
        f"{said} Their connections ({names}) keep working without their authority "
        "(no decisions, votes or admin acts): transfer them on Connections."
    )


@router.post("/admin/users/{user_id}/reactivate")
async def reactivate_user(request: Request, user_id: str, viewer: Viewer = Admin) -> Response:
    return await _change(
        request,
        viewer,
        "/admin/users",
        lambda uow, fields: admin.reactivate_user(uow, viewer.member, user_id),
        lambda user: f"{user.name} can sign in again.",
    )


@router.post("/admin/users/{user_id}/reset-password")
async def reset_password(request: Request, user_id: str, viewer: Viewer = Admin) -> Response:
    """With SMTP configured the person is mailed a link to choose a new password; else
    the answer shows a generated one, which they must replace at their next sign-in."""
    ctx = context_of(request)
    by_link = wiring_of(request).notifications.smtp is not None
    done = await _acted(
        request,
        viewer,
        "/admin/users",
        lambda uow, fields: admin.reset_password(
            uow, viewer.member, ctx.settings, user_id, utcnow(), by_link=by_link
        ),
    )
    if isinstance(done, Response):
        return done
    return await _handed(
        request,
        viewer,
        done,
        title=f"New password for {done.user.name}",
        lead="Their old password no longer works and their sessions have ended. Send them "
        "this password over a channel you trust; when they next sign in, they must choose "
        "their own. It is shown once.",
    )


# ---- OAuth clients ----


@router.get("/admin/oauth-clients")
async def clients_page(request: Request, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        rows = await admin.oauth_clients(uow, viewer.member)
        connections = await admin.connections(uow, viewer.member)
    return await render(
        request,
        "admin_clients.html",
        viewer,
        rows=rows,
        connections=[r for r in connections if r.connection.revoked_at is None],
    )


@router.post("/admin/oauth-clients")
async def register_client(request: Request, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    form = await request.form()
    kind = str(form.get("kind", ""))
    try:
        # Before the transaction: checking a ping endpoint may resolve its host.
        registration = await ciba.check_registration(
            wiring_of(request).webhooks.policy,
            kind.startswith("ciba-"),
            kind.removeprefix("ciba-") if kind.startswith("ciba-") else None,
            str(form.get("notification_endpoint", "")).strip() or None
            if kind == "ciba-ping"
            else None,
        )
    except AppError as exc:
        return _failed("/admin/oauth-clients", exc)
    return await _issue(
        request,
        viewer,
        "/admin/oauth-clients",
        lambda uow, fields: admin.register_client(
            uow,
            ctx.settings,
            viewer.member,
            name=fields.get("name", ""),
            redirect_uris=fields.get("redirect_uris", ""),
            public=fields.get("kind") == "public",
            connection_id=fields.get("connection_id", ""),
            now=utcnow(),
            ciba=registration,
        ),
        _client_shown,
    )


def _client_shown(issued: IssuedClient) -> dict[str, Any]:
    shown = [("Client ID", "client-id", issued.client.client_id)]
    if issued.client_secret:
        shown.append(("Client secret", "client-secret", issued.client_secret))
    return {
        "title": f"OAuth client {issued.client.name} registered",
        "lead": "The client ID is public. The client secret is shown once: copy it now."
        if issued.client_secret
        else "A public client has no secret: it proves itself with PKCE.",
        "secrets": shown,
    }


@router.post("/admin/oauth-clients/{client_id}/delete")
async def delete_client(request: Request, client_id: str, viewer: Viewer = Admin) -> Response:
    return await _change(
        request,
        viewer,
        "/admin/oauth-clients",
        lambda uow, fields: admin.delete_client(uow, viewer.member, client_id, utcnow()),
        lambda client: f"{client.name} is deleted; its tokens no longer work.",
    )


# ---- deliveries ----


@router.get("/admin/deliveries")
async def deliveries_page(request: Request, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    query = dict(request.query_params)
    filters = admin.delivery_filters(query)
    page = admin.page_number(query.get("page"))
    async with ctx.reading() as uow:
        listing = await admin.deliveries(AdminRepository(uow.session), viewer.member, filters, page)
        connections = await admin.connections(uow, viewer.member)
    kept = {k: v for k, v in query.items() if k in ("request_id", "status", "connection_id") and v}
    return await render(
        request,
        "admin_deliveries.html",
        viewer,
        listing=listing,
        filters=filters,
        query=kept,
        statuses=admin.DELIVERY_STATUSES,
        connections=connections,
        page_link=lambda n: "/admin/deliveries?" + urlencode({**kept, "page": n}),
    )


@router.get("/admin/deliveries/{delivery_id}")
async def delivery_page(request: Request, delivery_id: str, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    try:
        async with ctx.reading() as uow:
            detail = await admin.delivery(AdminRepository(uow.session), viewer.member, delivery_id)
    except AppError:
        raise not_found("This delivery") from None
    return await render(
        request, "admin_delivery.html", viewer, d=detail, shown_chars=admin.RESPONSE_BODY_SHOWN
    )


@router.post("/admin/deliveries/{delivery_id}/retry")
async def retry_delivery(request: Request, delivery_id: str, viewer: Viewer = Admin) -> Response:
    """As ``POST /api/v1/webhooks/:id/retry``: one more attempt, now, numbered after the last."""
    ctx = context_of(request)
    await checked_form(request, viewer)
    back = f"/admin/deliveries/{delivery_id}"
    try:
        async with ctx.reading() as uow:
            detail = await admin.delivery(AdminRepository(uow.session), viewer.member, delivery_id)
        recorded = await wiring_of(request).webhooks.retry(viewer.org.id, detail.row.delivery.id)
    except AppError as exc:
        return _failed(back, exc)
    entry = recorded.entry
    if entry.success:
        return redirect(back, flash=f"Attempt {entry.attempt} succeeded ({entry.status_code}).")
    why = f"HTTP {entry.status_code}" if entry.status_code else (entry.error or "no answer")
    return redirect(back, flash=f"Attempt {entry.attempt} failed: {why}.", kind="error")


# ---- emergency stop ----


@router.get("/admin/emergency-stop")
async def stop_page(request: Request, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        state = await admin.stop_state(uow, viewer.member, ctx.settings)
    return await render(request, "admin_stop.html", viewer, state=state)


@router.post("/admin/emergency-stop")
async def set_stop(request: Request, viewer: Viewer = Admin) -> Response:
    """As ``PUT /api/v1/emergency-stop``: the stop commits first, then the cancellations."""
    ctx = context_of(request)
    fields = await checked_form(request, viewer)
    back = "/admin/emergency-stop"
    active = fields.get("active") == "on"
    if active and fields.get("confirm") != "yes":
        return redirect(back, flash="Tick the confirmation to turn the stop on.", kind="error")
    async with ctx.transaction() as uow:
        await admin.set_stop(uow, viewer.member, active, utcnow())
    cancelled = 0
    if active and fields.get("cancel_pending") == "yes":
        # One cancellation callback per request, committed with it; workers send them.
        cancelled = await approvals.cancel_all_pending(
            functools.partial(ctx.transaction, FirstAttempt.BY_WORKERS),
            viewer.org.id,
            viewer.member,
            poisoned=wiring_of(request).poisoned,
        )
    if not active:
        return redirect(back, flash="The emergency stop is off: requests flow again.")
    extra = f" {cancelled:,} pending requests were cancelled." if cancelled else ""
    return redirect(back, flash="The emergency stop is on." + extra, kind="info")


# ---- audit ----


@router.get("/admin/audit")
async def audit_page(request: Request, viewer: Viewer = Admin) -> Response:
    ctx = context_of(request)
    query = dict(request.query_params)
    error = None
    try:
        filters = admin.audit_filters(query)
    except ValidationFailed as exc:
        filters, error = admin.audit_filters({}), _message(exc)
    page = admin.page_number(query.get("page"))
    async with ctx.reading() as uow:
        repo = AdminRepository(uow.session)
        listing = await admin.audit(repo, viewer.member, filters, page)
        types = await repo.audit_types(viewer.org.id)
        people = await admin.users(uow, viewer.member)
        chain = await audit_repository.head(uow.session, viewer.org.id)
    kept = {
        k: v
        for k, v in query.items()
        if k in ("type", "request_id", "actor_id", "since", "until") and v
    }
    return await render(
        request,
        "admin_audit.html",
        viewer,
        listing=listing,
        query=kept,
        types=types,
        people=people,
        names={p.id: p.name for p in people},
        error=error,
        chain=chain,
        page_link=lambda n: "/admin/audit?" + urlencode({**kept, "page": n}),
    )


@router.get("/admin/audit/export")
async def audit_export(request: Request, viewer: Viewer = Admin) -> Response:
    """The export button: the hash-chained trail as a file (docs/audit.md)."""
    disposition = {"Content-Disposition": 'attachment; filename="signoff-audit.jsonl"'}
    return await export_response(request, viewer.org.id, disposition)


# ---- the admin's override of a chain (a form on the request's page) ----


@router.post("/requests/{request_id}/override")
async def override(request: Request, request_id: str, viewer: Viewer = Admin) -> Response:
    """A request-level decision by an admin on a chain, as ``PATCH /api/v1/approvals/:id``
    allows: it decides the whole request, whatever steps are still open."""
    ctx = context_of(request)
    fields = await checked_form(request, viewer)
    back = f"/requests/{request_id}"
    if viewer.org.emergency_stop:
        return redirect(back, flash="The emergency stop is on: nothing is decided.", kind="error")
    data = {
        "decision": fields.get("decision"),
        "comment": fields.get("comment", "").strip(),
        "source": "dashboard",
    }
    try:
        payload = validate_model(DecideApprovalRequest, data, ctx.settings)
        rid = admin._id(request_id)
        if rid is None:
            raise not_found("This request")
        async with ctx.transaction() as uow:
            await approvals.decide(uow, viewer.member, rid, payload, utcnow())
    except RequestNotPending:
        return redirect(back, flash="Someone decided this request before you.", kind="info")
    except AppError as exc:
        return _failed(back, exc)
    verb = "approved" if payload.decision == "approve" else "rejected"
    return redirect(back, flash=f"You overrode the chain: the request is {verb}.")
