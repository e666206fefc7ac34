"""Slack's interactivity webhook: a press of a message's button, verified and acknowledged
at once, then handled (``decisions/slack.py``)."""

from __future__ import annotations

import time
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

from fastapi import APIRouter
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from signoff.config import Settings
from signoff.context import AppContext, context_of
from signoff.crypto import SecretBox
from signoff.errors import Unauthorized
from signoff.notifications.decisions import slack
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.dispatcher import WebhookDispatcher
from signoff.wiring import wiring_of

webhook = APIRouter(include_in_schema=False)


@dataclass(frozen=True)
class _SlackHost:
    """The runtime and the callbacks' dispatcher, as ``slack.SlackHost`` reads them."""

    runtime: AppContext
    webhooks: WebhookDispatcher

    @property
    def settings(self) -> Settings:
        return self.runtime.settings

    @property
    def box(self) -> SecretBox:
        return self.runtime.box

    def reading(self) -> AbstractAsyncContextManager[UnitOfWork]:
        return self.runtime.reading()

    def transaction(self) -> AbstractAsyncContextManager[UnitOfWork]:
        return self.runtime.transaction()


@webhook.post("/integrations/slack/interactions")
async def slack_interactions(request: Request) -> Response:
    """Verified, acknowledged at once (Slack waits 3 s), handled after the answer."""
    ctx = _SlackHost(context_of(request), wiring_of(request).webhooks)
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
