"""Logging: one line per event, JSON in production, readable in development.

Every line written while a request is served carries its ``request_id``: the caller's
``X-Request-Id`` when it is well-formed, else one made here (``RequestIdMiddleware``). The
id goes back on the answer as ``X-Request-Id`` and out on the callbacks the request causes
(stored with each delivery, so retries by any process send it too).

Our modules log through the standard library (``logging.getLogger(__name__)``); structlog's
formatter renders those records and uvicorn's alike, so an operator's log pipeline sees a
single format. Secrets never reach the log: API keys, webhook secrets, passwords and
callback headers are not passed to any log call.
"""

from __future__ import annotations

import itertools
import logging
import logging.config
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import structlog
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from signoff.config import Settings
from signoff.metrics import HttpStats

REQUEST_ID_HEADER = "X-Request-Id"
# What a caller's id may look like: printable, no spaces or quotes, bounded (it goes into
# logs and out on callbacks, so it must not carry line breaks or anything unbounded).
_WELL_FORMED = re.compile(rb"[A-Za-z0-9._:+/=@-]{1,128}")

_request_id: ContextVar[str | None] = ContextVar("signoff_request_id", default=None)


def current_request_id() -> str | None:
    """The id of the request (or background run) this code runs for, if any."""
    return _request_id.get()


# Made ids: 32 hex digits, a random per-process prefix and a counter. Unique enough to
# find one call in the logs of a fleet, and a tenth of the cost of a UUID per request.
_ID_PREFIX = os.urandom(6).hex()
_id_counter = itertools.count(int.from_bytes(os.urandom(4), "big"))


def new_request_id() -> str:
    return f"{_ID_PREFIX}{next(_id_counter):020x}"


@contextmanager
def request_id_scope(request_id: str | None = None) -> Iterator[str]:
    """Run a block as one request (a background job's batch): its log lines and the
    callbacks it writes carry this id."""
    value = request_id or new_request_id()
    token = _request_id.set(value)
    try:
        yield value
    finally:
        _request_id.reset(token)


def _add_request_id(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    request_id = _request_id.get()
    if request_id is not None:
        event_dict.setdefault("request_id", request_id)
    return event_dict


class RequestIdMiddleware:
    """Takes or makes each HTTP request's id and returns it as ``X-Request-Id``.

    With ``stats`` (metrics on, ``signoff.metrics``), it also counts and times the request
    by its route template: one layer for both, since each layer costs a wrapped ``send``
    per request. It must then sit inside ``StripTrailingSlash``, whose scope copy would
    hide the route the router picks.
    """

    def __init__(
        self,
        app: ASGIApp,
        stats: HttpStats | None = None,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.app = app
        self.stats = stats
        # The app's own list, read at call time: routes added later count too.
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        request_id: str | None = None
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                if _WELL_FORMED.fullmatch(value):
                    request_id = value.decode("ascii")
                break
        if request_id is None:
            request_id = new_request_id()
        header = (b"x-request-id", request_id.encode("ascii"))
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", []), header]
            await send(message)

        token = _request_id.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            _request_id.reset(token)
            if self.stats is not None:
                self.stats.observe_request(
                    scope, self.routes, status, time.perf_counter() - started
                )


def configure_logging(settings: Settings) -> None:
    shared: list[Any] = [
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        _add_request_id,
    ]
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if settings.is_production
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "signoff": {
                    "()": structlog.stdlib.ProcessorFormatter,
                    "processors": [
                        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        structlog.processors.format_exc_info,
                        renderer,
                    ],
                    "foreign_pre_chain": shared,
                }
            },
            "handlers": {
                "stderr": {
                    "class": "logging.StreamHandler",
                    "formatter": "signoff",
                    "stream": "ext://sys.stderr",
                }
            },
            "root": {"handlers": ["stderr"], "level": settings.log_level.upper()},
            "loggers": {
                "uvicorn": {"handlers": ["stderr"], "level": "INFO", "propagate": False},
                "uvicorn.error": {"level": "INFO"},
                "uvicorn.access": {"handlers": [], "propagate": False},
                # One line per callback attempt would drown everything else; the delivery
                # log in the database has them all.
                "httpx": {"level": "WARNING"},
                "httpcore": {"level": "WARNING"},
            },
        }
    )
