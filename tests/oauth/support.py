"""Helpers shared by the OAuth tests: clients, passwords, tokens and a form-filling browser."""

from __future__ import annotations

import base64
import hashlib
import secrets
import uuid
from dataclasses import dataclass
from functools import cache
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
from sqlalchemy import update

from signoff.auth.principal import ALL_SCOPES
from signoff.auth.secrets import hash_password
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import User
from signoff.oauth import service as oauth_service
from tests.conftest import Member

PASSWORD = "correct horse battery staple"
REDIRECT_URI = "https://integration.example/callback"


@cache
def password_hash() -> str:
    """One argon2 hash for the whole run: argon2 is slow on purpose."""
    return hash_password(PASSWORD)


async def give_password(ctx: AppContext, member: Member) -> None:
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(User)
            .where(User.id == uuid.UUID(member.user_id))
            .values(password_hash=password_hash())
        )


@dataclass
class Client:
    client_id: str
    client_secret: str | None
    redirect_uri: str
    connection_id: str


async def register_client(
    ctx: AppContext,
    owner: Member,
    *,
    public: bool = False,
    redirect_uris: list[str] | None = None,
    name: str = "Zap Studio",
    ciba: oauth_service.CibaRegistration = oauth_service.NO_CIBA,
) -> Client:
    uris = redirect_uris or [REDIRECT_URI]
    async with ctx.transaction() as uow:
        connection = await uow.oauth.get_connection(uuid.UUID(owner.connection_id))
        assert connection is not None
        issued = await oauth_service.register_client(
            uow.oauth,
            ctx.settings,
            connection,
            name=name,
            redirect_uris=uris,
            public=public,
            now=utcnow(),
            ciba=ciba,
        )
    return Client(issued.client.client_id, issued.client_secret, uris[0], owner.connection_id)


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    digest = hashlib.sha256(verifier.encode()).digest()
    challenge = base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
    return verifier, challenge


def authorize_params(
    client: Client,
    challenge: str | None,
    scope: str = "approvals:read approvals:write",
    **extra: str,
) -> dict[str, str]:
    params = {
        "response_type": "code",
        "client_id": client.client_id,
        "redirect_uri": client.redirect_uri,
        "scope": scope,
        "state": "st-" + secrets.token_hex(4),
    }
    if challenge is not None:
        params["code_challenge"] = challenge
        params["code_challenge_method"] = "S256"
    params.update(extra)
    return params


class _FormParser(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.forms.append({"action": values.get("action", ""), "fields": {}})
        elif tag == "input" and self.forms and values.get("type") == "hidden":
            self.forms[-1]["fields"][values["name"]] = values.get("value", "")


def forms_of(html: str) -> list[dict[str, Any]]:
    parser = _FormParser()
    parser.feed(html)
    return parser.forms


def query_of(location: str) -> dict[str, str]:
    return {k: v[0] for k, v in parse_qs(urlsplit(location).query).items()}


class Browser:
    """Fills in the sign-in and consent forms as a person's browser would (cookies kept)."""

    def __init__(self, http: httpx.AsyncClient) -> None:
        self.http = http

    async def open(self, params: dict[str, str]) -> httpx.Response:
        return await self.http.get("/oauth/authorize?" + urlencode(params))

    async def sign_in(
        self, page: httpx.Response, email: str, password: str = PASSWORD
    ) -> httpx.Response:
        form = next(f for f in forms_of(page.text) if f["action"] == "/oauth/login")
        return await self.http.post(
            "/oauth/login", data={**form["fields"], "email": email, "password": password}
        )

    async def decide(self, page: httpx.Response, decision: str) -> httpx.Response:
        form = next(f for f in forms_of(page.text) if f["action"] == "/oauth/authorize")
        return await self.http.post(
            "/oauth/authorize", data={**form["fields"], "decision": decision}
        )

    async def authorize(
        self, params: dict[str, str], email: str, decision: str = "allow"
    ) -> dict[str, str]:
        """The whole dance; returns the query the client's redirect URI receives."""
        page = await self.open(params)
        assert page.status_code == 200, page.text
        if 'action="/oauth/login"' in page.text:
            signed_in = await self.sign_in(page, email)
            assert signed_in.status_code == 303, signed_in.text
            page = await self.http.get(signed_in.headers["location"])
            assert page.status_code == 200, page.text
        answer = await self.decide(page, decision)
        assert answer.status_code == 303, answer.text
        return query_of(answer.headers["location"])


async def token_request(
    http: httpx.AsyncClient, client: Client, data: dict[str, str], path: str = "/oauth/token"
) -> httpx.Response:
    if client.client_secret is None:
        return await http.post(path, data={**data, "client_id": client.client_id})
    return await http.post(path, data=data, auth=(client.client_id, client.client_secret))


async def grant(
    ctx: AppContext, client: Client, user: Member, scopes: tuple[str, ...] = ALL_SCOPES
) -> dict[str, Any]:
    """Tokens for ``user`` with ``scopes`` without the pages: the services the pages use."""
    now = utcnow()
    async with ctx.transaction() as uow:
        row = await uow.oauth.find_active_client(client.client_id)
        assert row is not None
        person = await uow.orgs.get_user(row.org_id, uuid.UUID(user.user_id))
        assert person is not None
        request = oauth_service.AuthorizationRequest(
            client=row,
            redirect_uri=client.redirect_uri,
            redirect_uri_explicit=True,
            scopes=scopes,
            state=None,
            code_challenge=None,
            params={},
        )
        code = await oauth_service.issue_code(uow.oauth, request, person, ctx.settings, now)
        issued = await oauth_service.exchange_code(
            uow.oauth,
            row,
            code=code,
            redirect_uri=client.redirect_uri,
            code_verifier=None,
            settings=ctx.settings,
            now=now,
        )
    return issued.to_body()


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}
