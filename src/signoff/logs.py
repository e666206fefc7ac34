"""Logging: one line per event, JSON in production, readable in development.

Every line written while a request is served carries its ``request_id``: the caller's
``X-Request-Id`` when it is well-formed, else one made here (``request_id_of``, called by
``middleware.ApiGuard``). The id goes back on the answer as ``X-Request-Id`` and out on the
callbacks the request causes (stored with each delivery, so retries by any process send it
too).

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
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar, Token
from typing import Any

import structlog

from signoff.config import Settings

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


def request_id_of(headers: Iterable[tuple[bytes, bytes]]) -> str:
    """The caller's ``X-Request-Id`` when it is well-formed, else a new one."""
    for name, value in headers:
        if name == b"x-request-id":
            if _WELL_FORMED.fullmatch(value):
                return value.decode("ascii")
            break
    return new_request_id()


def bind_request_id(request_id: str) -> Token[str | None]:
    """Make ``request_id`` the current one until ``unbind_request_id``. Cheaper than
    ``request_id_scope`` on the request path: no generator per call."""
    return _request_id.set(request_id)


def unbind_request_id(token: Token[str | None]) -> None:
    _request_id.reset(token)


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
