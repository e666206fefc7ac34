"""Slack's interactivity webhook: a press of a message's button, verified and acknowledged
at once, then handled (``decisions/slack.py``)."""

from __future__ import annotations

import time

from fastapi import APIRouter
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response

from signoff.common.http import context_of
from signoff.errors import Unauthorized
from signoff.notifications.decisions import slack

webhook = APIRouter(include_in_schema=False)


@webhook.post("/integrations/slack/interactions")
async def slack_interactions(request: Request) -> Response:
    """Verified, acknowledged at once (Slack waits 3 s), handled after the answer."""
    ctx = context_of(request)
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
