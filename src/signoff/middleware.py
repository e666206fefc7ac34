"""Our one ASGI layer (``ApiGuard``): trailing slashes, request ids and HTTP stats for every
request; authentication, rate limits and the emergency stop for ``/api/v1`` (and ``/mcp``);
the body size limit; and for the four busiest API calls, the routing (``hot_routes.py``).

One layer, not one per concern: each layer wrapped ``send`` again, and those wrappers were a
tenth of a decide's CPU (docs/decisions/0025). Pure ASGI (no BaseHTTPMiddleware) for the
same reason. The guard runs before routing, so every ``/api/v1`` answer, errors and unknown
paths included, carries the ``X-RateLimit-*`` headers (decisions.md section 7).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Awaitable, Callable, Sequence

import orjson
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from signoff.auth.principal import PrincipalCheck, StalePrincipal
from signoff.config import Settings
from signoff.errors import AppError, EmergencyStopActive, PayloadTooLarge, RateLimited, Unauthorized
from signoff.hot_routes import HotRoutes
from signoff.logs import bind_request_id, request_id_of, unbind_request_id
from signoff.metrics import HttpStats
from signoff.oauth import token_poll
from signoff.ratelimit.limiter import RateLimitDecision
from signoff.remote_mcp import task_poll
from signoff.remote_mcp.resource import MCP_PATH, resource_metadata_url
from signoff.wiring import Wiring

logger = logging.getLogger(__name__)

API_PREFIX = "/api/v1"
# Open to anyone: the interface's own description and the OAuth token exchange alias
# (decisions.md section 13), whose callers authenticate as clients, not with a bearer.
PUBLIC_API_PATHS = frozenset(
    {
        "/api/v1/openapi.json",
        "/api/v1/docs",
        "/api/v1/docs/oauth2-redirect",
        "/api/v1/oauth/token",
    }
)
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The one write an admin must still make while the stop is on: turning it off.
EMERGENCY_STOP_PATH = "/api/v1/emergency-stop"
# The calls whose first statement confirms a remembered principal (``PrincipalCheck``),
# by method: a create, a get, a decision, a chain's configuration and a step's vote. Any
# other call reads its principal first.
_CONFIRMED_IN_FIRST_STATEMENT = {
    "POST": re.compile(r"/api/v1/approvals(/[^/]+/steps)?"),
    "GET": re.compile(r"/api/v1/approvals/[^/]+"),
    "PATCH": re.compile(r"/api/v1/approvals/[^/]+(/steps/[^/]+)?"),
}


async def send_error(
    send: Send, error: AppError, extra_headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    body = orjson.dumps(error.to_body())
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *[(k.lower().encode(), v.encode()) for k, v in error.headers.items()],
        *(extra_headers or []),
    ]
    await send({"type": "http.response.start", "status": error.status_code, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _bearer_token(scope: Scope) -> str | None:
    for name, value in scope["headers"]:
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            return token.strip() if scheme.lower() == "bearer" and token.strip() else None
    return None


class _Answer:
    """One request's answer as it goes out: the one ``send`` wrapper of the layer.

    It adds the rate limit headers of the call (once the guard has them), then
    ``X-Request-Id``, to whatever starts the answer, the guard's own refusals included;
    it notes the status for the HTTP stats; and, for a call whose principal no statement
    has confirmed yet, it confirms it before anything goes out (``ApiGuard._confirm``).
    """

    __slots__ = ("_request_id", "_send", "confirm", "rate_headers", "started", "status")

    def __init__(self, send: Send, request_id: str) -> None:
        self._send = send
        self._request_id = (b"x-request-id", request_id.encode("ascii"))
        self.status = 500
        self.started = False
        self.rate_headers: list[tuple[bytes, bytes]] = []
        self.confirm: Callable[[], Awaitable[None]] | None = None

    async def send(self, message: Message) -> None:
        if message["type"] == "http.response.start":
            if self.confirm is not None:
                await self.confirm()
            self.started = True
            self.status = message["status"]
            message["headers"] = [
                *message.get("headers", []),
                *self.rate_headers,
                self._request_id,
            ]
        await self._send(message)

    async def refuse(self, error: AppError, decision: RateLimitDecision | None = None) -> None:
        """Answer ``error`` before the app is called (with the caller's allowance)."""
        if decision is not None:
            self.rate_headers = decision.headers()
        await send_error(self.send, error)


class ApiGuard:
    """The one layer every HTTP request passes: see the module's docstring. In order: the
    trailing slash goes, the request id is taken or made (and bound for the logs), the
    ``/api/v1`` or ``/mcp`` guard runs, then the body size limit, then the app."""

    def __init__(
        self,
        app: ASGIApp,
        wiring: Wiring,
        max_bytes: int,
        stats: HttpStats | None = None,
        routes: Sequence[BaseRoute] = (),
        hot: HotRoutes | None = None,
    ) -> None:
        self.app = app
        # The calls answered by their route's handler without the app's routing.
        self.hot = hot
        # Its services and settings are read at each call, not kept: a test swaps some.
        self.wiring = wiring
        self.max_bytes = max_bytes
        self.stats = stats
        # The app's own list, read at call time: routes added later count too.
        self.routes = routes
        self._routes_found: dict[str, BaseRoute | None] = {}

    @property
    def settings(self) -> Settings:
        return self.wiring.ctx.settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        scope = strip_trailing_slash(scope)
        request_id = request_id_of(scope["headers"])
        answer = _Answer(send, request_id)
        token = bind_request_id(request_id)
        try:
            await self._dispatch(scope, receive, answer)
        finally:
            unbind_request_id(token)
            if self.stats is not None:
                # The scope the router saw: it names the route that served the call.
                self.stats.observe_request(
                    scope, self.routes, answer.status, time.perf_counter() - started
                )

    async def _dispatch(self, scope: Scope, receive: Receive, answer: _Answer) -> None:
        path = scope["path"]
        if path == MCP_PATH:
            await self._guard_mcp(scope, receive, answer)
            return
        if not (path == API_PREFIX or path.startswith(API_PREFIX + "/")):
            # The dashboard, health, discovery documents: only the body limit applies.
            receive, app = await self._ciba_poll(scope, receive)
            await self._call_limited(scope, receive, answer, app)
            return
        if scope["method"] not in WRITE_METHODS:
            await self._guard_api(scope, receive, answer)
            return
        writes = self.wiring.api_writes
        writes.started()
        try:
            await self._guard_api(scope, receive, answer)
        finally:
            writes.ended()

    async def _guard_api(self, scope: Scope, receive: Receive, answer: _Answer) -> None:
        path = scope["path"]
        settings = self.settings
        client = scope.get("client") or ("unknown", 0)
        address_key = f"ip:{client[0]}"
        if path in PUBLIC_API_PATHS:
            # Open and not counted, but like every /api/v1 answer they show the caller's
            # allowance: the one of its address.
            decision = await self.wiring.limiter.peek(
                address_key, settings.rate_limit_unauthenticated
            )
            receive, app = await self._ciba_poll(scope, receive)
            await self._call_with_headers(scope, receive, answer, decision, app=app)
            return
        token = _bearer_token(scope)
        method = scope["method"]
        if token and _confirmed_in_first_statement(method, path):
            remembered = self.wiring.callers.remembered_principal(token)
            if remembered is not None:
                replayable = _ReplayableReceive(receive)
                try:
                    check = PrincipalCheck(remembered)
                    await self._serve(scope, replayable.receive, answer, token, check)
                    return
                except StalePrincipal:
                    # Nothing was written or sent: the call starts over with the
                    # principal as the database has it now (or a 401).
                    self.wiring.callers.forget_principal(token)
                    receive = replayable.replay()
                    state = scope.get("state", {})
                    state.pop("principal", None)
                    state.pop("principal_check", None)
                    await self._serve_authenticated(scope, receive, answer, token, counted=True)
                    return
        await self._serve_authenticated(scope, receive, answer, token, counted=False)

    async def _serve_authenticated(
        self, scope: Scope, receive: Receive, answer: _Answer, token: str | None, *, counted: bool
    ) -> None:
        """The call, with the principal read now. ``counted``: this call has been counted
        against its connection's limit already (a call started over), and is not again."""
        principal = await self.wiring.callers.authenticate(token) if token else None
        if principal is None:
            # Unauthenticated calls count per client address: this also slows key guessing.
            client = scope.get("client") or ("unknown", 0)
            decision = await self.wiring.limiter.hit(
                f"ip:{client[0]}", self.settings.rate_limit_unauthenticated
            )
            await answer.refuse(Unauthorized() if decision.allowed else RateLimited(), decision)
            return
        await self._serve(scope, receive, answer, token, PrincipalCheck(principal, True), counted)

    async def _serve(
        self,
        scope: Scope,
        receive: Receive,
        answer: _Answer,
        token: str | None,
        check: PrincipalCheck,
        counted: bool = False,
        method: str | None = None,
        app: ASGIApp | None = None,
    ) -> None:
        """Rate limit, emergency stop, then the call, as ``check.principal``; if that is
        not confirmed yet, the call's first statement confirms it, or ``StalePrincipal``
        is raised before anything is answered. ``method``: what the call counts as, when
        not its own (a task poll on ``/mcp`` is a read); ``app``: what answers it, when
        not the app's routes (a task poll the guard found answers itself)."""
        settings = self.settings
        principal = check.principal
        method = method or scope["method"]
        decision = await self._count(
            principal.connection_id.hex, principal.rate_limit_per_hour, method, counted
        )
        if not decision.allowed:
            await self._confirm(token, check)
            await answer.refuse(RateLimited(), decision)
            return
        if (
            method in WRITE_METHODS
            and (settings.emergency_stop or principal.org_emergency_stop)
            and scope.get("path") != EMERGENCY_STOP_PATH
        ):
            await self._confirm(token, check)
            await answer.refuse(EmergencyStopActive(), decision)
            return
        state = scope.setdefault("state", {})
        state["principal"] = principal
        if not check.confirmed:
            state["principal_check"] = check
        await self._call_with_headers(scope, receive, answer, decision, token, check, app)

    async def _confirm(self, token: str | None, check: PrincipalCheck) -> None:
        """Before anything is answered with a principal no statement has confirmed (a 404,
        a 422 before any read, a 429): read it afresh, and start over if it changed."""
        if check.confirmed:
            return
        fresh = await self.wiring.callers.authenticate(token) if token else None
        if fresh != check.principal:
            raise StalePrincipal()
        check.confirmed = True

    async def _ciba_poll(self, scope: Scope, receive: Receive) -> tuple[Receive, ASGIApp | None]:
        """A CIBA poll of the token endpoint is answered here, before routing
        (oauth/token_poll.py): what it is answered by, and ``receive`` with the body
        read (replayed for the app when it is not one)."""
        if not token_poll.may_be_poll(scope):
            return receive, None
        body, messages = await task_poll.read_body(receive)
        poll = token_poll.parse(scope, body)
        if poll is None:
            return task_poll.replaying(messages, receive), None
        scope.setdefault("state", {})[token_poll.POLL] = poll
        # The route it stands for, as the router would have named it (for the HTTP stats).
        scope["route"] = self._route_of(scope["path"])
        return task_poll.replaying(messages, receive), token_poll.answer

    async def _guard_mcp(self, scope: Scope, receive: Receive, answer: _Answer) -> None:
        """``/mcp`` authenticates as ``/api/v1`` does. Its tools act through ``/api/v1``
        calls made in-process with the caller's credentials (remote_mcp/sdk.py), and
        those are what is counted and what the emergency stop refuses: one tool call
        costs what the same calls would cost any client, and reads go on while writes
        are stopped. A task poll, which ``/mcp`` answers itself, is guarded here as the
        API read it stands for (``_guard_poll``)."""
        token = _bearer_token(scope)
        if token and task_poll.may_be_poll(scope) and task_poll.sdk_loaded():
            body, messages = await task_poll.read_body(receive)
            replay = task_poll.replaying(messages, receive)
            if (poll := task_poll.parse(body)) is not None:
                scope.setdefault("state", {})[task_poll.POLL] = poll
                await self._guard_poll(scope, receive, messages, answer, token)
                return
            receive = replay
        principal = await self.wiring.callers.authenticate(token) if token else None
        if principal is None:
            await self._refuse_mcp(scope, answer)
            return
        limit = min(principal.rate_limit_per_hour, self.settings.rate_limit_ceiling)
        decision = await self.wiring.limiter.peek(f"conn:{principal.connection_id.hex}", limit)
        scope.setdefault("state", {})["principal"] = principal
        await self._call_with_headers(scope, receive, answer, decision)

    async def _guard_poll(
        self, scope: Scope, receive: Receive, messages: list[Message], answer: _Answer, token: str
    ) -> None:
        """A task poll as ``GET /api/v1/approvals/:id`` is guarded: counted once, as a
        read, and on PostgreSQL with the remembered principal its one read confirms."""
        # The route it stands for, as the router would have named it (for the HTTP stats).
        scope["route"] = self._mcp_route()
        counted = False
        remembered = self.wiring.callers.remembered_principal(token)
        if remembered is not None:
            try:
                check = PrincipalCheck(remembered)
                replay = task_poll.replaying(messages, receive)
                await self._serve(
                    scope, replay, answer, token, check, method="GET", app=task_poll.answer
                )
                return
            except StalePrincipal:
                self.wiring.callers.forget_principal(token)
                state = scope["state"]
                state.pop("principal", None)
                state.pop("principal_check", None)
                counted = True
        principal = await self.wiring.callers.authenticate(token)
        if principal is None:
            await self._refuse_mcp(scope, answer)
            return
        replay = task_poll.replaying(messages, receive)
        confirmed = PrincipalCheck(principal, True)
        await self._serve(
            scope, replay, answer, token, confirmed, counted, method="GET", app=task_poll.answer
        )

    def _mcp_route(self) -> BaseRoute | None:
        return self._route_of(MCP_PATH)

    def _route_of(self, path: str) -> BaseRoute | None:
        """The route whose template is ``path`` (found once)."""
        found = self._routes_found
        if path not in found:
            path_of = {getattr(candidate, "path", None): candidate for candidate in self.routes}
            found[path] = path_of.get(path)
        return found[path]

    async def _refuse_mcp(self, scope: Scope, answer: _Answer) -> None:
        """401 (429 for an address guessing keys), naming where ``/mcp``'s authorization
        server is found (RFC 9728 section 5.1)."""
        client = scope.get("client") or ("unknown", 0)
        decision = await self.wiring.limiter.hit(
            f"ip:{client[0]}", self.settings.rate_limit_unauthenticated
        )
        error: AppError = Unauthorized() if decision.allowed else RateLimited()
        error.headers["WWW-Authenticate"] = (
            f'Bearer resource_metadata="{resource_metadata_url(self.settings)}"'
        )
        await answer.refuse(error, decision)

    async def _count(
        self, connection_key: str, hourly_limit: int, method: str, counted: bool = False
    ) -> RateLimitDecision:
        settings = self.settings
        limiter = self.wiring.limiter
        count = limiter.peek if counted else limiter.hit
        if settings.rate_limit_scope == "writes" and method not in WRITE_METHODS:
            # Polling integrations: reads are held by a per-minute guard instead.
            return await count(
                f"reads:{connection_key}", settings.rate_limit_reads_per_minute, "minute"
            )
        limit = min(hourly_limit, settings.rate_limit_ceiling)
        return await count(f"conn:{connection_key}", limit)

    async def _call_with_headers(
        self,
        scope: Scope,
        receive: Receive,
        answer: _Answer,
        decision: RateLimitDecision,
        token: str | None = None,
        check: PrincipalCheck | None = None,
        app: ASGIApp | None = None,
    ) -> None:
        answer.rate_headers = decision.headers()
        if check is not None:

            async def confirm() -> None:
                await self._confirm(token, check)

            answer.confirm = confirm
        try:
            await self._call_limited(scope, receive, answer, app)
        except StalePrincipal:
            if answer.started:  # pragma: no cover - raised only before the answer starts
                raise RuntimeError("a principal went stale after the answer started") from None
            answer.confirm = None  # the call starts over, with its own check
            raise
        except Exception:
            # The envelope, never a stack trace; the trace goes to the log.
            logger.exception("unhandled error in %s %s", scope["method"], scope["path"])
            if not answer.started:
                answer.confirm = None  # as before the fold: a 500 reads no principal
                await send_error(answer.send, AppError())

    async def _call_limited(
        self, scope: Scope, receive: Receive, answer: _Answer, app: ASGIApp | None = None
    ) -> None:
        """The app (or ``app``), with 413 PAYLOAD_TOO_LARGE for bodies over the limit,
        declared or streamed."""
        max_bytes = self.max_bytes
        if declared_too_large(scope, max_bytes):
            await send_error(answer.send, payload_too_large(max_bytes))
            return
        received = 0

        async def limited_receive() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > max_bytes:
                    raise payload_too_large(max_bytes)
            return message

        if app is None and self.hot is not None and (found := self.hot.find(scope)) is not None:
            await self.hot.call(found, scope, limited_receive, answer.send, answer)
            return
        await (app or self.app)(scope, limited_receive, answer.send)


def _confirmed_in_first_statement(method: str, path: str) -> bool:
    pattern = _CONFIRMED_IN_FIRST_STATEMENT.get(method)
    return pattern is not None and pattern.fullmatch(path) is not None


class _ReplayableReceive:
    """The request's body as the app reads it, kept so that a call started over
    (``StalePrincipal``) reads it again."""

    def __init__(self, receive: Receive) -> None:
        self._receive = receive
        self._read: list[Message] = []

    async def receive(self) -> Message:
        message = await self._receive()
        if message["type"] == "http.request":
            self._read.append(message)
        return message

    def replay(self) -> Receive:
        unread = list(self._read)

        async def receive() -> Message:
            return unread.pop(0) if unread else await self._receive()

        return receive


def declared_too_large(scope: Scope, max_bytes: int) -> bool:
    for name, value in scope["headers"]:
        if name == b"content-length" and value.isdigit() and int(value) > max_bytes:
            return True
    return False


def payload_too_large(max_bytes: int) -> PayloadTooLarge:
    return PayloadTooLarge(f"The request body exceeds {max_bytes} bytes.", {"max_bytes": max_bytes})


def strip_trailing_slash(scope: Scope) -> Scope:
    """``/api/v1/approvals/`` is ``/api/v1/approvals``: answered, not redirected.

    A redirect would be a non-2xx answer without the error envelope, and clients that
    append slashes would pay a round trip for every call. A copy, not a change: the
    server's scope stays as it came.
    """
    path = scope.get("path", "")
    if len(path) > 1 and path.endswith("/"):
        stripped = path.rstrip("/") or "/"
        return {**scope, "path": stripped, "raw_path": stripped.encode()}
    return scope
