"""The server-rendered sign-in, consent and error pages (Jinja2, no build step)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.responses import HTMLResponse

SCOPE_DESCRIPTIONS: Mapping[str, str] = {
    # interface.md section 5, word for word.
    "approvals:read": "Read approval requests and their status",
    "approvals:write": "Create, approve, reject and cancel approval requests",
    "comments:write": "Add comments to approval requests",
}

_environment = Environment(
    loader=FileSystemLoader(Path(__file__).parent / "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)

# The pages must never be framed (clickjacking the Allow button), cached or leak their
# query string (it carries state and the PKCE challenge) through Referer.
PAGE_HEADERS = {
    "Cache-Control": "no-store",
    "Pragma": "no-cache",
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def render(template: str, status_code: int = 200, **context: Any) -> HTMLResponse:
    html = _environment.get_template(template).render(**context)
    return HTMLResponse(html, status_code, headers=dict(PAGE_HEADERS))
