"""Errors a browser sees as pages: a wrong address, a refused method, a server fault.

Programs keep the API's ``{"error": …}`` envelope: everything under ``/api``, ``/mcp``,
the OAuth endpoints that answer JSON, the metadata under ``/.well-known``, the health
checks and Slack's endpoint answer JSON whatever the Accept header says. Elsewhere a
visitor whose Accept header asks for ``text/html`` (every browser's navigation does) gets
the product's page: the layout, the navigation when signed in, and a way back.
"""

from __future__ import annotations

import contextlib
import logging
from http import HTTPStatus

from starlette.requests import Request
from starlette.responses import Response

from signoff.context import context_of
from signoff.dashboard.web import current_viewer, render
from signoff.errors import AppError

logger = logging.getLogger(__name__)

# Paths that programs call: never answered with a page.
MACHINE_ROOTS = (
    "/api",
    "/mcp",
    "/.well-known",
    "/oauth/token",
    "/oauth/revoke",
    "/oauth/introspect",
    "/integrations",
    "/healthz",
    "/readyz",
    "/metrics",
)

_WORDS: dict[int, tuple[str, str]] = {
    404: (
        "Page not found",
        "There is nothing at this address. The link may be mistyped, or the page has moved.",
    ),
    405: ("Not available here", "This address cannot be used this way."),
    500: (
        "Something went wrong",
        "The server could not show this page. The error has been logged; try again in a moment.",
    ),
}


def is_machine_path(path: str) -> bool:
    return any(path == root or path.startswith(root + "/") for root in MACHINE_ROOTS)


def _quality(media_range: str) -> tuple[str, float]:
    kind, *params = (part.strip() for part in media_range.split(";"))
    quality = 1.0
    for param in params:
        name, _, value = param.partition("=")
        if name.strip().lower() == "q":
            try:
                quality = float(value)
            except ValueError:
                quality = 0.0
    return kind.lower(), quality


def prefers_html(accept: str) -> bool:
    """``text/html`` named in the Accept header, and not ranked below JSON: a browser's
    navigation, not a program that also takes HTML."""
    ranks = dict(_quality(part) for part in accept.split(",") if part.strip())
    html = ranks.get("text/html", 0.0)
    return html > 0 and html >= ranks.get("application/json", 0.0)


def wants_page(request: Request) -> bool:
    return not is_machine_path(request.url.path) and prefers_html(request.headers.get("accept", ""))


def _words(error: AppError) -> tuple[str, str]:
    if error.status_code in _WORDS:
        return _WORDS[error.status_code]
    if error.status_code >= 500:
        return _WORDS[500]
    try:
        title = HTTPStatus(error.status_code).phrase
    except ValueError:
        title = "Not possible"
    if error.status_code == 403:
        title = "Not allowed"
    return title, error.message


async def error_page(request: Request, error: AppError) -> Response | None:
    """The error as a page inside the layout; ``None`` if even that fails (the caller
    answers with the envelope then)."""
    viewer = None
    with contextlib.suppress(Exception):  # a fault of the database must not hide the page
        viewer = await current_viewer(context_of(request), request)
    title, message = _words(error)
    for shown_to in (viewer, None) if viewer is not None else (None,):
        try:
            response = await render(
                request,
                "error.html",
                shown_to,
                error.status_code,
                title=title,
                message=message,
                code=error.status_code,
            )
        except Exception:
            logger.exception("the error page could not be rendered")
            continue
        response.headers.update(error.headers)
        return response
    return None
