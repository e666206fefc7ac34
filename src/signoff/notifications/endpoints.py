"""The notifications' JSON API: the routing document, and what a request's notifications
did (the dashboard's pages are ``pages.py``; Slack's webhook, ``slack_webhook.py``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from signoff.auth.principal import Principal
from signoff.common.http import json_body_doc, json_response, path_id, require_scope
from signoff.common.openapi_declarations import errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import read_json_object
from signoff.context import context_of
from signoff.errors import Forbidden, NotFound, ValidationFailed
from signoff.notifications.planning import service as planning
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing import service
from signoff.notifications.routing.document import RoutingDocument
from signoff.notifications.schemas import NotificationListOut, RoutingOut
from signoff.wiring import wiring_of

router = APIRouter(prefix="/api/v1", tags=["notifications"], route_class=LeanRoute)

Reader = Annotated[Principal, Depends(require_scope("approvals:read"))]
Writer = Annotated[Principal, Depends(require_scope("approvals:write"))]


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
    return json_response(service.with_warnings(document, routing_checks(request)))


def routing_checks(request: Request) -> service.RoutingChecks:
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
            repo, ctx.box, routing_checks(request), principal, principal.org_id, data, utcnow()
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
        rows = await planning.notifications_of_request(repo, principal, rid)
    return json_response({"data": rows})
