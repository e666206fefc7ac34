"""Notification endpoints: the routing document (API), what a request's notifications
did (API), the one-click confirmation pages, and Slack's interactivity endpoint."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

import yaml
from fastapi import APIRouter, Depends
from jinja2 import ChoiceLoader, FileSystemLoader
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from signoff.auth.principal import OrgMember, Principal
from signoff.common.http import json_body_doc, json_response, path_id, require_scope
from signoff.common.openapi import errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import read_json_object
from signoff.context import AppContext, context_of
from signoff.dashboard import web
from signoff.errors import (
    AppError,
    Forbidden,
    NotFound,
    RequestNotPending,
    Unauthorized,
    ValidationFailed,
)
from signoff.notifications import links, messages, routing_form, service, slack
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing import RoutingDocument
from signoff.notifications.schemas import NotificationListOut, RoutingOut
from signoff.webhooks.dispatcher import WebhookDispatcher
from signoff.wiring import wiring_of

router = APIRouter(prefix="/api/v1", tags=["notifications"], route_class=LeanRoute)
pages = APIRouter(include_in_schema=False)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]
Admin = Depends(web.require_admin)


# ---- the routing document ----


@router.get(
    "/routing",
    response_model=RoutingOut,
    summary="The organization's notification routing (admins)",
    description="Channels (secrets masked) and the ordered rules; the first matching rule "
    "applies. `warnings` names what cannot work yet on this server (an e-mail channel "
    "while `SIGNOFF_SMTP_URL` is unset). 403 for non-admins.",
    responses=errors(Forbidden),
)
async def get_routing(request: Request, principal: Reader) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    async with ctx.reading() as uow:
        repo = NotificationRepository(uow.session, uow.dialect)
        document = await service.read_routing(repo, ctx.box, principal.org_id)
    return json_response(service.with_warnings(document, _checks(request)))


def _checks(request: Request) -> service.RoutingChecks:
    settings = context_of(request).settings
    return service.RoutingChecks(wiring_of(request).webhooks.policy, bool(settings.smtp_url))


@router.put(
    "/routing",
    response_model=RoutingOut,
    openapi_extra=json_body_doc(RoutingDocument),
    summary="Replace the organization's notification routing (admins)",
    description="Validates the whole document and stores nothing unless all of it is right: "
    "400 names every wrong field at once (`rules.0.channels.1`, `channels.ops.webhook_url`). "
    "Channel URLs follow the callback URLs' policy (absolute http or https without "
    "credentials; in production https only, and no host that is or resolves to a loopback, "
    "private, link-local, shared or reserved address), checked here and again at each send. "
    "A secret sent back masked, as GET shows it, keeps its stored value; `warnings` in the "
    "body is ignored, and the answer's says what cannot work yet.",
    responses=errors(ValidationFailed, Forbidden),
)
async def put_routing(request: Request, principal: Writer) -> Response:
    ctx = context_of(request)
    service.require_admin(principal)
    data = await read_json_object(request)
    async with ctx.transaction() as uow:
        repo = NotificationRepository(uow.session, uow.dialect)
        document = await service.write_routing(
            repo, ctx.box, _checks(request), principal, principal.org_id, data, utcnow()
        )
    return json_response(document)


@router.get(
    "/approvals/{request_id}/notifications",
    response_model=NotificationListOut,
    summary="What was sent about a request, to whom, and how it went",
    description="A worker plans a request's notifications after its create commits: they "
    "appear here within moments (an empty list until then). Scheduled reminders appear as "
    "`pending` until due; `cancelled` once the request was decided before they were.",
    responses=errors(NotFound),
)
async def list_notifications(request: Request, request_id: str, principal: Reader) -> Response:
    ctx = context_of(request)
    rid = path_id(request_id)
    async with ctx.reading() as uow:
        repo = NotificationRepository(uow.session, uow.dialect)
        rows = await service.notifications_of_request(repo, principal, rid)
    return json_response({"data": rows})


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
        warnings=service.routing_warnings(document, _checks(request)),
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
            repo, ctx.box, _checks(request), viewer.member, viewer.org.id, data, utcnow(), renamed
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


# ---- Slack interactivity ----


@dataclass
class _SlackContext(AppContext):
    """The runtime as slack.py reads it: with the dispatcher, whose address policy its
    calls to Slack go through, until it is given that policy on its own."""

    webhooks: WebhookDispatcher = field(kw_only=True)

    @classmethod
    def of(cls, request: Request) -> _SlackContext:
        ctx = context_of(request)
        return cls(
            ctx.settings,
            ctx.db,
            ctx.box,
            ctx.after_commit,
            ctx.notifier,
            webhooks=wiring_of(request).webhooks,
        )


@pages.post("/integrations/slack/interactions")
async def slack_interactions(request: Request) -> Response:
    """Verified, acknowledged at once (Slack waits 3 s), handled after the answer."""
    ctx = _SlackContext.of(request)
    body = await request.body()
    timestamp = request.headers.get("X-Slack-Request-Timestamp")
    signature = request.headers.get("X-Slack-Signature", "")
    if not slack.fresh(timestamp, time.time()):
        raise Unauthorized("Stale or missing X-Slack-Request-Timestamp.")
    assert timestamp is not None
    press = slack.parse_press(body)
    app = await slack.verified_app(ctx, press, timestamp, signature, body) if press else None
    if press is None or app is None:
        raise Unauthorized("The Slack signature does not match.")
    return Response(status_code=200, background=BackgroundTask(slack.handle_press, ctx, app, press))
