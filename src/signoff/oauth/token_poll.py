"""A CIBA poll of ``/oauth/token`` answered in the API guard, before routing.

A CIBA client polls the token endpoint over and over with the same small form. Through
the app, each poll also paid Starlette's exception layers, the router's matching, the
``Request`` and the token endpoint's own reading of its body: enough to cost more CPU
than ``GET /api/v1/approvals/:id`` on PostgreSQL (docs/decisions/0035). Here the guard
reads the body of a small form POST to ``/oauth/token`` (or its ``/api/v1`` alias) and,
when it is a lone CIBA grant, answers it with ``answer_poll``: the same function the
token endpoint calls for that grant, so both give the same answers, byte for byte, and
the same side effects (the pace kept in the rate limiter's store, decision 0029; the
tokens claimed once). Anything else (another grant, a JSON body, a parameter given
twice, a body that is not UTF-8) goes on to the app with its body replayed, and the
token endpoint answers it in its own words.

``SIGNOFF_STOCK_CIBA_POLL=1`` in the environment of ``signoff serve`` turns this path
off: every poll goes through the app's routing (a measurement switch,
docs/performance.md).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from urllib.parse import parse_qsl, unquote_plus

from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from signoff.common.http import json_response
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.oauth import ciba, service
from signoff.oauth.errors import OAuthError, invalid_client, invalid_request
from signoff.oauth.repository import find_client_and_backchannel_prepared

TOKEN_PATHS = frozenset({"/oauth/token", "/api/v1/oauth/token"})
FORM_TYPE = b"application/x-www-form-urlencoded"
# A poll's form is its grant type, its auth_req_id and perhaps the client's credentials:
# well under this. A larger body is not a poll, and goes to the app.
MAX_POLL_BODY = 2048
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}
# Where the guard leaves, in the scope's state, the poll it found.
POLL = "ciba_poll"
STOCK_SWITCH = "SIGNOFF_STOCK_CIBA_POLL"
# Read once, at import: the switch is for measurement, set when the server starts.
ENABLED = os.environ.get(STOCK_SWITCH) != "1"


@dataclass(frozen=True)
class Poll:
    params: dict[str, str]
    authorization: str


# ---- shared with the token endpoint ----


def oauth_error(exc: OAuthError) -> Response:
    headers = dict(NO_STORE)
    if exc.status_code == 401:
        headers["WWW-Authenticate"] = 'Basic realm="signoff"'
    return json_response(exc.to_body(), exc.status_code, headers)


def client_credentials(authorization: str, params: Mapping[str, str]) -> service.ClientCredentials:
    """client_secret_basic, client_secret_post, or none (public clients) - exactly one.
    ``authorization``: the Authorization header, or the empty string."""
    scheme, _, value = authorization.partition(" ")
    if scheme.lower() != "basic":
        return service.ClientCredentials(params.get("client_id"), params.get("client_secret"))
    if "client_secret" in params:
        raise invalid_request("Authenticate the client one way only.")
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise invalid_client("Malformed Basic credentials.") from None
    client_id, sep, secret = decoded.partition(":")
    if not sep:
        raise invalid_client("Malformed Basic credentials.")
    # RFC 6749 section 2.3.1: both parts are form-urlencoded before encoding.
    client_id, secret = unquote_plus(client_id), unquote_plus(secret)
    if params.get("client_id", client_id) != client_id:
        raise invalid_client("client_id differs from the Basic credentials.")
    return service.ClientCredentials(client_id, secret)


async def answer_poll(
    ctx: AppContext,
    pacer: ciba.PollPacer,
    given: service.ClientCredentials,
    params: Mapping[str, str],
    now: datetime,
) -> Response:
    """A CIBA poll (or the token request after a ping): one prepared read of the client and
    the request, and the pace check; only an approved request opens a transaction, to hand
    out its tokens once."""
    auth_req_id = params.get("auth_req_id")
    try:
        if not given.client_id:
            raise invalid_client("Send client_id and client_secret.")
        read = await find_client_and_backchannel_prepared(
            ctx.db.queries, given.client_id, parse_id(auth_req_id) if auth_req_id else None
        )
        client = service.check_client_credentials(read.client, given)
        polled = ciba.poll_state(client, auth_req_id, read.state)
        await ciba.pace(pacer, polled, ctx.settings)
        ciba.refuse_undecided(polled.state, now)
        async with ctx.transaction() as uow:
            issued = await ciba.issue(uow, client, polled, ctx.keys, ctx.box, ctx.settings, now)
    except OAuthError as exc:
        return oauth_error(exc)
    return json_response(issued.to_body(), 200, NO_STORE)


# ---- the guard's side ----


def may_be_poll(scope: Scope) -> bool:
    """A small form POST to the token endpoint; read before the body limit applies, so its
    length must be declared."""
    if not ENABLED or scope["method"] != "POST" or scope["path"] not in TOKEN_PATHS:
        return False
    content_type = length = None
    for name, value in scope["headers"]:
        if name == b"content-type":
            content_type = value
        elif name == b"content-length":
            length = value
    if content_type is None or length is None or not length.isdigit():
        return False
    if content_type.split(b";")[0].strip().lower() != FORM_TYPE:
        return False
    return int(length) <= MAX_POLL_BODY


def parse(scope: Scope, body: bytes) -> Poll | None:
    """The CIBA poll ``body`` is, as the token endpoint reads it; None for anything it
    should answer itself (its refusals of the body included)."""
    if len(body) > MAX_POLL_BODY:
        return None
    try:
        items = parse_qsl(body.decode(), keep_blank_values=True)
    except UnicodeDecodeError:
        return None
    params, repeated = service.single_params(items)
    if repeated or params.get("grant_type") != ciba.GRANT_TYPE:
        return None
    authorization = ""
    for name, value in scope["headers"]:
        if name == b"authorization":  # the first, as ``request.headers.get`` has it
            authorization = value.decode("latin-1")
            break
    return Poll({k: v for k, v in params.items() if v != ""}, authorization)


async def answer(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer to the poll the guard found, from the app's own context and rate limiter
    (as the token endpoint has them). An ASGI app, so that the guard calls it where it
    would call the app."""
    poll: Poll = scope["state"][POLL]
    state = scope["app"].state
    try:
        given = client_credentials(poll.authorization, poll.params)
    except OAuthError as exc:
        response = oauth_error(exc)
    else:
        response = await answer_poll(state.ctx, state.wiring.limiter, given, poll.params, utcnow())
    await response(scope, receive, send)
