"""What every dashboard page shares: who is signed in, CSRF, flash messages, rendering.

Building a page (admin pages too):

- ``viewer: Viewer = Depends(require_user)`` (or ``require_admin``) signs the visitor
  in or sends them to ``/signin``; ``viewer.member`` is what the services take.
- A POST reads its fields with ``await checked_form(request, viewer)``: it refuses a
  missing or wrong CSRF token; templates put ``{{ csrf_field() }}`` in every form.
- Answer a POST with ``redirect(url, flash="Saved.")`` (POST, redirect, GET); the next
  page shows the message once.
- ``render(request, "page.html", viewer, **values)`` renders inside ``base.html`` with
  the strict headers (CSP without inline scripts or styles, no framing, no caching).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from fastapi import Depends
from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from signoff.approvals.listing import count_waiting
from signoff.approvals.previews import KIND_LABELS
from signoff.auth.principal import OrgMember
from signoff.common.time import utcnow
from signoff.context import AppContext, context_of
from signoff.dashboard.activity import describe_event
from signoff.models import DashboardSession, Organization, User
from signoff.oauth import credentials

# One sign-in session for the dashboard and the OAuth pages: the same cookie.
from signoff.oauth.endpoints import CHOOSE_PASSWORD_PATH, SESSION_COOKIE
from signoff.wiring import wiring_of

HERE = Path(__file__).parent
FLASH_COOKIE = "signoff_flash"
FLASH_MAX_CHARS = 300

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


# ---- static files: read once, served with a content hash in their URL ----


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    media_type: str
    digest: str


def _load_static() -> dict[str, StaticFile]:
    types = {
        ".css": "text/css; charset=utf-8",
        ".js": "text/javascript; charset=utf-8",
        ".ico": "image/x-icon",
    }
    files = {}
    for path in sorted((HERE / "static").iterdir()):
        if path.suffix in types:
            body = path.read_bytes()
            digest = hashlib.sha256(body).hexdigest()[:12]
            files[path.name] = StaticFile(body, types[path.suffix], digest)
    return files


STATIC = _load_static()


def static_url(name: str) -> str:
    """The file's URL with its content hash: cached for a year, new URL on each change."""
    return f"/static/{name}?v={STATIC[name].digest}"


# ---- templates ----

templates = Environment(
    loader=FileSystemLoader(HERE / "templates"),
    autoescape=select_autoescape(default=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
templates.globals["static_url"] = static_url


# ---- who is signed in ----


@dataclass(frozen=True)
class Viewer:
    """The signed-in person of a dashboard page."""

    session: DashboardSession
    user: User
    org: Organization

    @property
    def is_admin(self) -> bool:
        return self.user.role == "admin"

    @property
    def csrf_token(self) -> str:
        return self.session.csrf_token

    @property
    def member(self) -> OrgMember:
        """The identity the approval services take (no connection: a person)."""
        return OrgMember.of(self.user, self.org)


class SignInRequired(Exception):
    """Handled by a redirect to the sign-in page, back to ``next_url`` after it."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


class PasswordChangeRequired(Exception):
    """The signed-in person must first replace a password an admin has seen: handled by
    a redirect to the page where they choose their own, back to ``next_url`` after it."""

    def __init__(self, next_url: str) -> None:
        super().__init__(next_url)
        self.next_url = next_url


class PageRefused(Exception):
    """Handled by an HTML error page (403, 404, ...), never the API's JSON envelope."""

    def __init__(self, status_code: int, title: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.title = title
        self.message = message


def not_found(what: str = "This page") -> PageRefused:
    return PageRefused(404, "Not found", f"{what} does not exist, or is not yours to see.")


async def current_viewer(ctx: AppContext, request: Request) -> Viewer | None:
    """The visitor's session and user, if signed in (one session system with /oauth)."""
    cookie = request.cookies.get(SESSION_COOKIE)
    if not cookie or len(cookie) > 100:
        return None
    async with ctx.reading() as uow:
        found = await uow.oauth.find_signed_in(credentials.hash_token(cookie), utcnow())
    return Viewer(*found) if found is not None else None


async def require_user(request: Request) -> Viewer:
    viewer = await current_viewer(context_of(request), request)
    if viewer is None or (
        viewer.user.must_change_password and request.url.path != CHOOSE_PASSWORD_PATH
    ):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        # Back to a page afterwards, never to a form's action (a GET would fail).
        back = target if request.method == "GET" else "/"
        raise SignInRequired(back) if viewer is None else PasswordChangeRequired(back)
    return viewer


async def require_admin(viewer: Viewer = Depends(require_user)) -> Viewer:
    if not viewer.is_admin:
        raise PageRefused(403, "Admins only", "This page is for the organization's admins.")
    return viewer


# ---- forms ----


def csrf_ok(expected: str, sent: str | None) -> bool:
    return sent is not None and hmac.compare_digest(expected.encode(), sent.encode())


async def form_fields(request: Request) -> dict[str, str]:
    form = await request.form()
    return {key: value for key, value in form.items() if not isinstance(value, UploadFile)}


async def checked_form(request: Request, viewer: Viewer) -> dict[str, str]:
    """The POSTed fields, once the session's CSRF token is among them."""
    fields = await form_fields(request)
    if not csrf_ok(viewer.csrf_token, fields.get("csrf_token")):
        raise PageRefused(
            403, "Form expired", "This form has expired or did not come from this site."
        )
    return fields


def safe_next(target: str | None) -> str:
    """A local path to go back to; anything else (another site) becomes the inbox."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    return target


# ---- answers ----


def redirect(url: str, *, flash: str | None = None, kind: str = "success") -> Response:
    response = RedirectResponse(url, 303, headers={"Cache-Control": "no-store"})
    if flash:
        response.set_cookie(
            FLASH_COOKIE,
            quote(f"{kind}:{flash[:FLASH_MAX_CHARS]}"),
            max_age=120,
            path="/",
            httponly=True,
            samesite="lax",
        )
    return response


def _flash_of(request: Request) -> dict[str, str] | None:
    from urllib.parse import unquote

    raw = request.cookies.get(FLASH_COOKIE)
    if not raw:
        return None
    kind, _, message = unquote(raw).partition(":")
    if kind not in ("success", "error", "info") or not message:
        return None
    return {"kind": kind, "message": message[:FLASH_MAX_CHARS]}


@dataclass(frozen=True)
class Waiting:
    """How many requests wait for a person's vote: exact up to the inbox's cap
    (``WAITING_COUNT_CAP``), shown as "1,000+" past it."""

    count: int
    exact: bool = True

    def __bool__(self) -> bool:
        return self.count > 0

    def __str__(self) -> str:
        return f"{self.count:,}" if self.exact else f"{self.count:,}+"


async def waiting_count(request: Request, viewer: Viewer) -> Waiting:
    """How many requests wait for this person now (the navigation's and title's count):
    a bounded count, kept a few seconds (``CountsCache``)."""
    live = wiring_of(request).live
    cached = live.counts.get(viewer.org.id, viewer.user.id)
    if isinstance(cached, Waiting):
        return cached
    waiting = Waiting(
        *await count_waiting(
            context_of(request).db.queries,
            viewer.org.id,
            viewer.user.id,
            now=utcnow(),
            hide_own=viewer.org.self_approval == "forbid",
        )
    )
    live.counts.put(viewer.org.id, viewer.user.id, waiting)
    return waiting


def csrf_field(token: str) -> Markup:
    return Markup('<input type="hidden" name="csrf_token" value="{}">').format(token)


async def render(
    request: Request,
    template: str,
    viewer: Viewer | None,
    status_code: int = 200,
    **values: Any,
) -> HTMLResponse:
    """A page inside the layout, with the navigation's waiting count and a flash message."""
    if viewer is not None and "waiting" not in values:
        values["waiting"] = await waiting_count(request, viewer)
    flash = _flash_of(request)
    html = templates.get_template(template).render(
        viewer=viewer,
        flash=flash,
        path=request.url.path,
        csrf_field=(lambda: csrf_field(viewer.csrf_token)) if viewer else (lambda: ""),
        now=utcnow(),
        **values,
    )
    response = HTMLResponse(html, status_code, headers=dict(PAGE_HEADERS))
    if flash is not None or FLASH_COOKIE in request.cookies:
        response.delete_cookie(FLASH_COOKIE, path="/")
    return response


def render_fragment(template: str, **values: Any) -> HTMLResponse:
    html = templates.get_template(template).render(**values)
    return HTMLResponse(html, headers=dict(PAGE_HEADERS))


# ---- shown values ----

STATUS_WORDS = {
    "pending": "Pending",
    "approved": "Approved",
    "rejected": "Rejected",
    "expired": "Expired",
    "cancelled": "Cancelled",
}


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min"
    if seconds < 86400:
        hours, minutes = divmod(seconds // 60, 60)
        return f"{hours} h {minutes} min" if minutes and hours < 10 else f"{hours} h"
    days, rest = divmod(seconds, 86400)
    if days >= 365:
        return f"{days // 365} y"  # a far deadline: "26334 d" reads as noise
    return f"{days} d {rest // 3600} h" if days < 7 and rest >= 3600 else f"{days} d"


def parse_time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def age(value: str | datetime | None, now: datetime) -> str:
    moment = parse_time(value) if isinstance(value, str) else value
    return _duration((now - moment).total_seconds()) if moment else ""


def ago(value: str | datetime | None, now: datetime) -> str:
    """How long ago, as the inbox words an age ("3 min ago"); under a minute "just now"."""
    moment = parse_time(value) if isinstance(value, str) else value
    if moment is None:
        return ""
    seconds = (now - moment).total_seconds()
    return "just now" if seconds < 60 else f"{_duration(seconds)} ago"


def time_left(value: str | datetime | None, now: datetime) -> str:
    moment = parse_time(value) if isinstance(value, str) else value
    if moment is None:
        return ""
    left = (moment - now).total_seconds()
    return "expired" if left <= 0 else _duration(left)


def expires_soon(value: str | datetime | None, now: datetime) -> bool:
    """Within the hour: the inbox and the request page show it in the warning colour."""
    moment = parse_time(value) if isinstance(value, str) else value
    return moment is not None and (moment - now).total_seconds() < 3600


def utc_text(value: str | datetime | None) -> str:
    moment = parse_time(value) if isinstance(value, str) else value
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC") if moment else ""


def iso(value: str | datetime | None) -> str:
    moment = parse_time(value) if isinstance(value, str) else value
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ") if moment else ""


def short_id(value: uuid.UUID | str) -> str:
    return str(value)[:8]


templates.filters.update(
    status_word=lambda s: STATUS_WORDS.get(s, str(s).title()),
    utc_text=utc_text,
    iso=iso,
    short_id=short_id,
)
templates.globals.update(
    preview_label=lambda kind: KIND_LABELS.get(kind, str(kind)),
    age=age,
    ago=ago,
    time_left=time_left,
    expires_soon=expires_soon,
    describe_event=describe_event,
)
