"""OAuth 2.0 end to end, as an integration and a person meet it.

One real ``signoff serve`` on a loopback socket, set up with the real ``signoff``
command (org, user with a password, connection, OAuth clients). Then:

- Authlib's OAuth client discovers the endpoints (RFC 8414), sends a person through the
  sign-in and consent forms (filled in over HTTP), exchanges the code with PKCE, calls
  the API, refreshes, introspects and revokes;
- headless Chromium (Playwright, Debian's /usr/bin/chromium) clicks through the same
  pages; a screenshot of the consent page is saved under test-artifacts/.

SQLite only: the server process owns its database; the API tests cover PostgreSQL.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from authlib.common.security import generate_token

from signoff.crypto import generate_secret_key
from tests.oauth.support import forms_of, query_of

with warnings.catch_warnings():
    # Authlib nudges towards its httpx2 fork; this project (and its users) use httpx.
    warnings.simplefilter("ignore")
    from authlib.integrations.httpx_client import AsyncOAuth2Client

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
REDIRECT_URI = "https://zap.example/oauth/callback"
PUBLIC_REDIRECT_URI = "http://127.0.0.1:1/cli-callback"
PASSWORD = "a long enough password"
EMAIL = "ada@acme.example"
SCOPE = "approvals:read approvals:write comments:write"


def _signoff_command() -> list[str]:
    script = Path(sys.executable).with_name("signoff")
    return [str(script)] if script.exists() else [sys.executable, "-m", "signoff.cli"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Server:
    base_url: str
    user_id: str
    connection_id: str
    client_id: str
    client_secret: str
    public_client_id: str


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    workdir = tmp_path_factory.mktemp("oauth-e2e")
    port = _free_port()
    base_url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "SIGNOFF_DATABASE_URL": f"sqlite:///{workdir / 'signoff.db'}",
        "SIGNOFF_SECRET_KEY": generate_secret_key(),
        "SIGNOFF_PUBLIC_URL": base_url,
        "SIGNOFF_LOG_LEVEL": "warning",
    }
    env.pop("SIGNOFF_REDIS_URL", None)

    def cli(*args: str) -> dict[str, Any]:
        done = subprocess.run(
            [*_signoff_command(), *args, "--json"],
            env=env,
            cwd=workdir,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        result: dict[str, Any] = json.loads(done.stdout)
        return result

    org = cli("org", "create", "Acme")
    user = cli(
        "user", "create", "--org", org["id"], "--email", EMAIL, "--name", "Ada Lovelace",
        "--role", "admin", "--password", PASSWORD,
    )  # fmt: skip
    connection = cli(
        "connection", "create", "--org", org["id"], "--owner", user["id"], "--name", "zap"
    )
    confidential = cli(
        "oauth-client", "create", "--connection", connection["id"], "--name", "Zap Studio",
        "--redirect-uri", REDIRECT_URI, "--redirect-uri", "https://zap.example/other",
    )  # fmt: skip
    public = cli(
        "oauth-client", "create", "--connection", connection["id"], "--name", "Acme CLI",
        "--redirect-uri", PUBLIC_REDIRECT_URI, "--public",
    )  # fmt: skip
    assert confidential["client_secret"].startswith("cs_") and public["client_secret"] is None

    log = (workdir / "server.log").open("w")
    process = subprocess.Popen(
        [*_signoff_command(), "serve", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=workdir,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError((workdir / "server.log").read_text())
            time.sleep(0.1)
        yield Server(
            base_url,
            user["id"],
            connection["id"],
            confidential["client_id"],
            confidential["client_secret"],
            public["client_id"],
        )
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


async def _person_consents(base_url: str, authorization_url: str) -> str:
    """A person's browser over HTTP: sign in, allow; returns where it was sent back to."""
    async with httpx.AsyncClient(base_url=base_url) as person:
        page = await person.get(authorization_url)
        assert page.status_code == 200, page.text
        login = next(f for f in forms_of(page.text) if f["action"] == "/oauth/login")
        signed_in = await person.post(
            "/oauth/login", data={**login["fields"], "email": EMAIL, "password": PASSWORD}
        )
        assert signed_in.status_code == 303, signed_in.text
        consent = await person.get(signed_in.headers["location"])
        assert "Zap Studio" in consent.text or "Acme CLI" in consent.text
        form = next(f for f in forms_of(consent.text) if f["action"] == "/oauth/authorize")
        allowed = await person.post(
            "/oauth/authorize", data={**form["fields"], "decision": "allow"}
        )
        assert allowed.status_code == 303, allowed.text
        return allowed.headers["location"]


async def test_authlib_client_full_flow(server: Server) -> None:
    async with httpx.AsyncClient() as plain:
        metadata = (
            await plain.get(f"{server.base_url}/.well-known/oauth-authorization-server")
        ).json()
    assert metadata["issuer"] == server.base_url

    verifier = generate_token(64)
    async with AsyncOAuth2Client(
        client_id=server.client_id,
        client_secret=server.client_secret,
        scope=SCOPE,
        redirect_uri=REDIRECT_URI,
        code_challenge_method="S256",
    ) as oauth:
        url, state = oauth.create_authorization_url(
            metadata["authorization_endpoint"], code_verifier=verifier
        )
        callback = await _person_consents(server.base_url, url)
        assert callback.startswith(REDIRECT_URI + "?")
        assert query_of(callback)["iss"] == metadata["issuer"]  # RFC 9207

        token = await oauth.fetch_token(
            metadata["token_endpoint"],
            authorization_response=callback,
            state=state,
            code_verifier=verifier,
        )
        assert token["token_type"] == "Bearer" and token["scope"] == SCOPE

        me = await oauth.get(f"{server.base_url}/api/v1/me")
        assert me.status_code == 200, me.text
        assert me.json()["user"]["id"] == server.user_id
        assert me.json()["connection"]["id"] == server.connection_id
        assert me.json()["auth_method"] == "oauth"
        assert me.headers["x-ratelimit-limit"] == "100"

        created = await oauth.post(
            f"{server.base_url}/api/v1/approvals",
            json={"title": "Publish post", "description": "From Zap Studio.", "priority": "low"},
        )
        assert created.status_code == 201, created.text
        comment = await oauth.post(
            f"{server.base_url}/api/v1/approvals/{created.json()['id']}/comments",
            json={"body": "Sent on Ada's behalf."},
        )
        assert comment.status_code == 201, comment.text

        refreshed = await oauth.refresh_token(metadata["token_endpoint"])
        assert refreshed["refresh_token"] != token["refresh_token"]
        assert (await oauth.get(f"{server.base_url}/api/v1/me")).status_code == 200

        introspected = await oauth.introspect_token(
            metadata["introspection_endpoint"], token=refreshed["access_token"]
        )
        assert introspected.json()["active"] is True
        assert introspected.json()["client_id"] == server.client_id

        revoked = await oauth.revoke_token(
            metadata["revocation_endpoint"],
            token=refreshed["refresh_token"],
            token_type_hint="refresh_token",
        )
        assert revoked.status_code == 200
        assert (await oauth.get(f"{server.base_url}/api/v1/me")).status_code == 401


async def test_authlib_public_client_with_pkce_on_the_api_alias(server: Server) -> None:
    verifier = generate_token(64)
    async with AsyncOAuth2Client(
        client_id=server.public_client_id,
        scope="approvals:read",
        redirect_uri=PUBLIC_REDIRECT_URI,
        code_challenge_method="S256",
        token_endpoint_auth_method="none",
    ) as oauth:
        url, state = oauth.create_authorization_url(
            f"{server.base_url}/oauth/authorize", code_verifier=verifier
        )
        callback = await _person_consents(server.base_url, url)
        token = await oauth.fetch_token(
            f"{server.base_url}/api/v1/oauth/token",
            authorization_response=callback,
            state=state,
            code_verifier=verifier,
        )
        assert token["scope"] == "approvals:read"
        assert (await oauth.get(f"{server.base_url}/api/v1/approvals")).status_code == 200
        refused = await oauth.post(
            f"{server.base_url}/api/v1/approvals",
            json={"title": "t", "description": "d", "priority": "low"},
        )
        assert refused.status_code == 403
        assert refused.json()["error"]["details"] == {"required_scope": "approvals:write"}


# ---- headless Chromium ----


@pytest.fixture
def chromium() -> str:
    if not CHROMIUM.exists():
        pytest.skip(
            "headless browser test: install Debian's chromium (apt-get install -y chromium); "
            "no browser is ever downloaded"
        )
    ARTIFACTS.mkdir(exist_ok=True)
    return str(CHROMIUM)


async def test_browser_signs_in_and_consents(server: Server, chromium: str) -> None:
    from playwright.async_api import Route, async_playwright

    verifier = generate_token(64)
    async with AsyncOAuth2Client(
        client_id=server.client_id,
        client_secret=server.client_secret,
        scope="approvals:read comments:write",
        redirect_uri=REDIRECT_URI,
        code_challenge_method="S256",
    ) as oauth:
        url, state = oauth.create_authorization_url(
            f"{server.base_url}/oauth/authorize", code_verifier=verifier
        )
        arrived: list[str] = []

        async def integration(route: Route) -> None:
            arrived.append(route.request.url)
            await route.fulfill(status=200, content_type="text/html", body="<h1>Connected</h1>")

        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=chromium)
            try:
                page = await browser.new_page(viewport={"width": 800, "height": 720})
                await page.route("https://zap.example/**", integration)
                await page.goto(url)
                await page.get_by_label("E-mail").fill(EMAIL)
                await page.get_by_label("Password").fill(PASSWORD)
                await page.get_by_role("button", name="Sign in").click()
                heading = page.get_by_role("heading", name="Allow Zap Studio to act for you?")
                await heading.wait_for()
                text = await page.locator("main").inner_text()
                assert "Read approval requests and their status" in text
                assert "Add comments to approval requests" in text
                assert "Create, approve, reject and cancel" not in text

                cookies = {c["name"]: c for c in await page.context.cookies()}
                session = cookies["signoff_session"]
                assert session["httpOnly"] is True and session["sameSite"] == "Lax"

                shot = ARTIFACTS / "oauth-consent.png"
                assert len(await page.screenshot(path=str(shot), full_page=True)) > 1000
                print(f"consent page screenshot: {shot}")

                await page.get_by_role("button", name="Allow").click()
                await page.get_by_role("heading", name="Connected").wait_for()
                callback = arrived[-1]
                assert query_of(callback)["state"] == state

                # Signed in already: a second request goes straight to consent; Deny.
                await page.goto(url)
                await page.get_by_role("button", name="Deny").click()
                await page.get_by_role("heading", name="Connected").wait_for()
                assert query_of(arrived[-1])["error"] == "access_denied"
            finally:
                await browser.close()

        token = await oauth.fetch_token(
            f"{server.base_url}/oauth/token",
            authorization_response=callback,
            state=state,
            code_verifier=verifier,
        )
        assert token["scope"] == "approvals:read comments:write"
        assert (await oauth.get(f"{server.base_url}/api/v1/me")).json()["scopes"] == [
            "approvals:read",
            "comments:write",
        ]


async def test_error_page_for_an_unregistered_redirect_uri(server: Server) -> None:
    query = urlencode(
        {
            "response_type": "code",
            "client_id": server.client_id,
            "redirect_uri": "https://attacker.example/steal",
        }
    )
    async with httpx.AsyncClient() as http:
        page = await http.get(f"{server.base_url}/oauth/authorize?{query}")
    assert page.status_code == 400 and "location" not in page.headers
    assert re.search(r"<h1>Invalid redirect URI</h1>", page.text)
