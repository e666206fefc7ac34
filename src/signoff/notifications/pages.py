"""The notifications' pages in the dashboard: the one-click links' confirmation pages
and the routing editor (admins)."""

from __future__ import annotations

from pathlib import Path

import yaml
from fastapi import APIRouter, Depends
from jinja2 import ChoiceLoader, FileSystemLoader
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from signoff.auth.principal import OrgMember
from signoff.common.time import utcnow
from signoff.context import AppContext, context_of
from signoff.dashboard import web
from signoff.errors import AppError, RequestNotPending, ValidationFailed
from signoff.notifications.decisions import links
from signoff.notifications.endpoints import routing_checks
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing import form as routing_form
from signoff.notifications.routing import service
from signoff.notifications.sending import messages
from signoff.wiring import wiring_of

pages = APIRouter(include_in_schema=False)
Admin = Depends(web.require_admin)


# ---- one-click confirmation pages ----

# The notification pages render inside the dashboard's layout, with its helpers: its
# template environment also finds this package's templates.
web.templates.loader = ChoiceLoader(
    [web.templates.loader, FileSystemLoader(str(Path(__file__).parent / "templates"))]  # type: ignore[list-item]
)

_STATE_PAGES: dict[str, tuple[int, str, str]] = {
    "unknown": (404, "Link not valid", "This link is not valid. Open the request from the inbox."),
    "used": (410, "Link already used", "This link has been used; each works once."),
    "expired": (410, "Link expired", "This link has expired. Open the request to decide."),
    "decided": (409, "Already decided", "This request is no longer waiting for a decision."),
    "foreign": (
        403,
        "Not your link",
        "This link was sent to someone else. Open the request to decide as yourself.",
    ),
    "stopped": (503, "Emergency stop", "The emergency stop is on: nothing is decided."),
    "passkey": (
        403,
        "Passkey needed",
        "This request is decided with your passkey, on its page in signoff: a link cannot sign it.",
    ),
    "sign_in": (200, "Sign in to decide", "Sign in first: this request needs it."),
}


async def _link_page(
    request: Request, view: links.LinkView, viewer: web.Viewer | None, token: str
) -> HTMLResponse:
    decision = view.link.decision if view.link else None
    if view.state == "ready":
        status_code, heading, message = (
            200,
            _heading(decision),
            ("Nothing is decided until you confirm below."),
        )
    else:
        status_code, heading, message = _STATE_PAGES[view.state]
    q = view.request if view.state != "unknown" else None
    outcome = None
    if view.state in _SPENT and q is not None:
        # The link no longer decides, so it no longer shows the request: what became of
        # it is for the organization's members, signed in.
        if viewer is not None and viewer.org.id == q.org_id:
            outcome = view.outcome
        else:
            q = None
            message = _SPENT[view.state] + ("" if viewer is not None else _SIGN_IN_TO_SEE)
    return await web.render(
        request,
        "link.html",
        viewer,
        status_code,
        heading=heading,
        message=message,
        state=view.state,
        decision=decision,
        q=q,
        details=messages.key_metadata(q) if q else [],
        action=f"/links/{token}",
        sign_in_next=f"/links/{token}",
        voter=_voter(view, viewer),
        outcome=outcome,
        used_at=view.link.used_at if view.link else None,
    )


# A link that can no longer decide: the words for a visitor who may not see the request.
_SPENT = {
    "used": "This link has been used; each works once.",
    "decided": "This request is no longer waiting for a decision.",
}
_SIGN_IN_TO_SEE = " Sign in to see what was decided."


def _voter(view: links.LinkView, viewer: web.Viewer | None) -> links.Person | None:
    """Whose vote confirming records: the signed-in person's, else the link's person's."""
    if viewer is not None:
        return links.Person(viewer.user.name, viewer.user.email)
    return view.person


def _heading(decision: str | None) -> str:
    return "Approve this request?" if decision == "approve" else "Reject this request?"


async def _viewer(ctx: AppContext, request: Request) -> tuple[web.Viewer | None, OrgMember | None]:
    viewer = await web.current_viewer(ctx, request)
    return viewer, viewer.member if viewer else None


@pages.get("/links/{token}")
async def link_page(request: Request, token: str) -> Response:
    """Looks only: scanners and previews may fetch it any number of times."""
    ctx = context_of(request)
    viewer, member = await _viewer(ctx, request)
    async with ctx.reading() as uow:
        repo = NotificationRepository(uow.session, uow.dialect)
        view = await links.inspect_link(
            repo, token, member, utcnow(), emergency_stop=ctx.settings.emergency_stop
        )
    return await _link_page(request, view, viewer, token)


@pages.post("/links/{token}")
async def link_confirm(request: Request, token: str) -> Response:
    """The confirmation: the token is the form's secret (as unguessable as a CSRF token)."""
    ctx = context_of(request)
    viewer, member = await _viewer(ctx, request)
    try:
        async with ctx.transaction() as uow:
            view = await links.use_link(
                uow, token, member, utcnow(), emergency_stop=ctx.settings.emergency_stop
            )
    except RequestNotPending:
        view = links.LinkView("decided")
    except AppError as exc:
        # Refused by the approval services (not this person's step, say): nothing changed.
        raise web.PageRefused(
            403 if exc.status_code == 403 else 409, "Not decided", exc.message
        ) from None
    if view.state != "ready" or view.request is None:
        return await _link_page(request, view, viewer, token)
    callback = uow.first_attempts.delivered
    verb = "approved" if view.link and view.link.decision == "approve" else "rejected"
    message = f"You {verb} this request." + (" The caller has been told." if callback else "")
    if viewer is not None:
        return web.redirect(f"/requests/{view.request.id}", flash=message)
    return await web.render(
        request,
        "link.html",
        None,
        heading="Done",
        message=message,
        state="done",
        decision=None,
        q=view.request,
        details=[],
        action="",
        sign_in_next=f"/requests/{view.request.id}",
        voter=view.person,
        outcome=None,
        used_at=None,
    )


# ---- the routing editor (admins) ----


async def _routing_page(
    request: Request,
    viewer: web.Viewer,
    *,
    form: routing_form.RoutingForm | None = None,
    text: str | None = None,
    error: str | None = None,
    problems: list[dict[str, str]] | None = None,
) -> HTMLResponse:
    """The form editor (rows) and, under Advanced, the whole document as YAML. A refused
    save shows what was sent, the form's rows with their problems on them."""
    ctx = context_of(request)
    async with ctx.reading() as uow:
        repo = NotificationRepository(uow.session, uow.dialect)
        document = await service.read_routing(repo, ctx.box, viewer.org.id)
    if text is None:
        text = yaml.safe_dump(document, sort_keys=False, allow_unicode=True)
    refused = error is not None or (form is not None and _has_errors(form))
    return await web.render(
        request,
        "routing.html",
        viewer,
        400 if refused else 200,
        document=document,
        warnings=service.routing_warnings(document, routing_checks(request)),
        form=form or routing_form.form_of(document),
        saved_names=list(document["channels"]),
        channel_types=routing_form.CHANNEL_TYPES,
        priorities=routing_form.PRIORITIES,
        text=text,
        error=error,
        problems=problems or [],
    )


def _has_errors(form: routing_form.RoutingForm) -> bool:
    rows: list[routing_form.ChannelRow | routing_form.RuleRow] = [*form.channels, *form.rules]
    return bool(form.errors) or any(row.errors for row in rows)


@pages.get("/settings/notifications")
async def routing_page(request: Request, viewer: web.Viewer = Admin) -> Response:
    return await _routing_page(request, viewer)


@pages.post("/settings/notifications")
async def routing_save(request: Request, viewer: web.Viewer = Admin) -> Response:
    """Saves either editor's document (``document``: the Advanced YAML; else the rows)
    through the service the API uses."""
    fields = await web.checked_form(request, viewer)
    if "document" in fields:
        return await _save_yaml(request, viewer, fields["document"])
    form = routing_form.form_from_fields(fields)
    built = routing_form.build_document(form)
    try:
        await _write(request, viewer, built.document, built.renamed, blocked=built.blocked)
    except ValidationFailed as exc:
        routing_form.place_problems(form, built, exc.details.get("fields", []))
        return await _routing_page(request, viewer, form=form)
    return web.redirect("/settings/notifications", flash="Routing saved.")


async def _save_yaml(request: Request, viewer: web.Viewer, text: str) -> Response:
    try:
        data = yaml.safe_load(text) if text.strip() else {}
        await _write(request, viewer, data, {})
    except yaml.YAMLError as exc:
        return await _routing_page(request, viewer, text=text, error=f"Not valid YAML: {exc}")
    except ValidationFailed as exc:
        problems = exc.details.get("fields", [])
        message = "Not saved: fix each of these." if problems else exc.message
        return await _routing_page(request, viewer, text=text, error=message, problems=problems)
    return web.redirect("/settings/notifications", flash="Routing saved.")


async def _write(
    request: Request,
    viewer: web.Viewer,
    data: object,
    renamed: dict[str, str],
    *,
    blocked: bool = False,
) -> None:
    """Saves, or raises naming every problem; ``blocked`` (a row the form could not put
    into the document) rolls back what would otherwise have been saved."""
    ctx = context_of(request)
    async with ctx.transaction() as uow:
        repo = NotificationRepository(uow.session, uow.dialect)
        await service.write_routing(
            repo,
            ctx.box,
            routing_checks(request),
            viewer.member,
            viewer.org.id,
            data,
            utcnow(),
            renamed,
        )
        if blocked:
            raise ValidationFailed()


@pages.post("/settings/notifications/test")
async def routing_test(request: Request, viewer: web.Viewer = Admin) -> Response:
    """Sends a sample message on one channel now (not stored, nothing to decide)."""
    fields = await web.checked_form(request, viewer)
    result = await wiring_of(request).notifications.send_test(
        viewer.org.id, fields.get("channel", ""), viewer.member
    )
    back = "/settings/notifications"
    if result is None:
        return web.redirect(back, flash="No such channel.", kind="error")
    if result.success:
        return web.redirect(back, flash=f"Test notification sent to {fields['channel']}.")
    return web.redirect(
        back,
        flash=f"The test notification failed: {result.error or result.status_code}.",
        kind="error",
    )
