"""``SignoffClient(oauth_token=...)``: a user's OAuth token, got through the real flow."""

from __future__ import annotations

import base64
import hashlib
import secrets
import uuid
from html.parser import HTMLParser
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from conftest import LiveServer
from signoff_client import InsufficientScope, SignoffClient

PASSWORD = "correct horse battery staple"
REDIRECT_URI = "http://127.0.0.1:9/callback"  # never followed: the code is read from it


class _Forms(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.forms: dict[str, dict[str, str]] = {}
        self._current: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "form":
            self._current = self.forms.setdefault(values.get("action", ""), {})
        elif tag == "input" and self._current is not None and "name" in values:
            self._current[values["name"]] = values.get("value", "")

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._current = None


def _form(html: str, action: str) -> dict[str, str]:
    parser = _Forms()
    parser.feed(html)
    return parser.forms[action]


def _access_token(live: LiveServer, scope: str) -> str:
    """A person signs in and consents over HTTP; the integration swaps the code (PKCE)."""
    email = f"oauth-{uuid.uuid4().hex[:8]}@acme.example"
    live.cli("user", "create", "--org", live.org_id, "--email", email, "--name", "Olga",
             "--password", PASSWORD)  # fmt: skip
    client = live.cli(
        "oauth-client", "create", "--connection", live.member.connection_id, "--name", "Agent",
        "--redirect-uri", REDIRECT_URI, "--public",
    )  # fmt: skip
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    params = {
        "response_type": "code",
        "client_id": client["client_id"],
        "redirect_uri": REDIRECT_URI,
        "scope": scope,
        "state": "s1",
        "code_challenge": challenge.decode().rstrip("="),
        "code_challenge_method": "S256",
    }
    with httpx.Client(base_url=live.base_url) as person:
        page = person.get("/oauth/authorize", params=params)
        login = _form(page.text, "/oauth/login")
        signed_in = person.post(
            "/oauth/login", data={**login, "email": email, "password": PASSWORD}
        )
        assert signed_in.status_code == 303, signed_in.text
        consent = person.get(signed_in.headers["location"])
        form = _form(consent.text, "/oauth/authorize")
        allowed = person.post("/oauth/authorize", data={**form, "decision": "allow"})
        assert allowed.status_code == 303, allowed.text
        code = parse_qs(urlsplit(allowed.headers["location"]).query)["code"][0]
        token = person.post(
            "/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT_URI,
                "client_id": client["client_id"],
                "code_verifier": verifier,
            },
        )
        assert token.status_code == 200, token.text
        body: dict[str, Any] = token.json()
        return str(body["access_token"])


def test_an_oauth_token_acts_as_its_user_with_its_scopes(
    live: LiveServer, admin: SignoffClient
) -> None:
    token = _access_token(live, "approvals:read comments:write")
    created = admin.create_approval("Read by an integration", "d", "low")
    with SignoffClient(live.base_url, oauth_token=token) as integration:
        assert integration.get_approval(created.id).id == created.id
        comment = integration.add_comment(created.id, "seen by the integration")
        assert comment.user_id != live.admin.user_id  # written as the consenting user
        with pytest.raises(InsufficientScope) as caught:
            integration.decide(created.id, "approve")
    assert (caught.value.status_code, caught.value.code) == (403, "INSUFFICIENT_SCOPE")
    assert caught.value.required_scope == "approvals:write"
