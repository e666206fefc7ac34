"""Without SMTP, Add user and Reset password show a generated password, and its owner
must replace it at first sign-in: every page (OAuth consent included) leads to the page
that asks for their own until it is done. API keys are unaffected, and a password set
with ``signoff user create --password`` is the operator's choice: not flagged. On SQLite
and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import html
import json
import os
import re
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from sqlalchemy import update

from signoff.context import AppContext
from signoff.models import User
from tests.conftest import Org, approval_body
from tests.dashboard.support import (
    browser_client,
    choose_own_password,
    csrf_of,
    post_form,
    sign_in,
    signed_in,
)
from tests.helpers import NO_SWEEP
from tests.oauth.support import authorize_params, pkce_pair, register_client

CHOOSE = "/account/choose-password"
OWN_PASSWORD = "my very own pass phrase"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {**NO_SWEEP, "smtp_url": None}


def shown_password(page: str) -> str:
    found = re.search(r'data-testid="password"[^>]*>([^<]+)<', page)
    assert found, "no password on the page"
    return html.unescape(found.group(1))


def sent_to_choose(answer: httpx.Response, back: str) -> None:
    assert answer.status_code == 303, answer.text
    location = urlsplit(answer.headers["location"])
    assert location.path == CHOOSE, answer.headers["location"]
    assert parse_qs(location.query)["next"] == [back]


async def flagged(ctx: AppContext, user_id: str | uuid.UUID) -> bool:
    async with ctx.reading() as uow:
        user = await uow.orgs.find_user(uuid.UUID(str(user_id)))
    assert user is not None
    return user.must_change_password


async def test_an_added_user_must_choose_their_own_password_before_any_page(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    async with browser_client(app) as admin, browser_client(app, "203.0.113.9") as newcomer:
        await signed_in(ctx, admin, org.admin)
        users_page = (await admin.get("/admin/users")).text
        assert "they must choose their own when they first sign in" in users_page
        added = await post_form(
            admin, "/admin/users", "/admin/users", name="Nia", email="nia@acme.test"
        )
        assert added.status_code == 200
        assert "When they first sign in, they must choose their own" in added.text
        password = shown_password(added.text)
        async with ctx.reading() as uow:
            nia = await uow.orgs.find_user_by_email(uuid.UUID(org.id), "nia@acme.test")
        assert nia is not None and nia.must_change_password
        assert "Temporary password" in (await admin.get("/admin/users")).text

        sent_to_choose(await sign_in(newcomer, "nia@acme.test", password, "/history"), "/history")
        for path in ("/", "/history", "/account", "/history.csv", "/admin/users", "/inbox/rows"):
            sent_to_choose(await newcomer.get(path), path)
        sent_to_choose(await newcomer.get("/history?status=approved"), "/history?status=approved")
        # A form elsewhere is refused the same way (and goes back to the inbox after).
        page = await newcomer.get(f"{CHOOSE}?next=/history")
        assert page.status_code == 200 and "Choose your password" in page.text
        assert 'href="/history"' not in page.text  # no navigation to pages that would not open
        token = csrf_of(page.text)
        sent_to_choose(await newcomer.post("/account/password", data={"csrf_token": token}), "/")
        live = await newcomer.get("/live", headers={"Accept": "text/event-stream"})
        assert live.status_code == 401

        same = await choose_own_password(newcomer, password)
        assert (
            same.status_code == 400 and "must differ from the password you were given" in same.text
        )
        mismatch = await newcomer.post(
            CHOOSE,
            data={
                "csrf_token": token,
                "next": "/history",
                "new_password": OWN_PASSWORD,
                "repeat_password": OWN_PASSWORD + "!",
            },
        )
        assert mismatch.status_code == 400 and "does not match" in mismatch.text
        assert await flagged(ctx, nia.id)

        done = await choose_own_password(newcomer, OWN_PASSWORD, "/history")
        assert done.status_code == 303 and done.headers["location"] == "/history"
        assert not await flagged(ctx, nia.id)
        for path in ("/", "/history", "/account"):
            assert (await newcomer.get(path)).status_code == 200, path
        # Done: the page leads on.
        assert (await newcomer.get(CHOOSE)).headers["location"] == "/"

    async with browser_client(app, "203.0.113.10") as later:
        assert (await sign_in(later, "nia@acme.test", password)).status_code == 401
        assert (await sign_in(later, "nia@acme.test", OWN_PASSWORD)).headers["location"] == "/"


async def test_a_reset_password_must_be_replaced_too_and_api_keys_keep_working(
    ctx: AppContext, app: Any, client: httpx.AsyncClient, org: Org
) -> None:
    member = org.member
    async with browser_client(app) as admin, browser_client(app, "203.0.113.9") as person:
        await signed_in(ctx, admin, org.admin)
        reset = await post_form(
            admin, "/admin/users", f"/admin/users/{member.user_id}/reset-password"
        )
        assert reset.status_code == 200
        password = shown_password(reset.text)
        assert await flagged(ctx, member.user_id)
        # Their API key is a connection, not a session: it keeps working.
        me = await client.get("/api/v1/me", headers=member.headers)
        assert me.status_code == 200
        created = await client.post(
            "/api/v1/approvals",
            json=approval_body(title="Still works"),
            headers=member.headers,
        )
        assert created.status_code == 201, created.text

        sent_to_choose(await sign_in(person, member.email, password), "/")
        sent_to_choose(await person.get("/"), "/")
        assert (await choose_own_password(person, OWN_PASSWORD)).status_code == 303
        assert (await person.get("/")).status_code == 200
        assert not await flagged(ctx, member.user_id)


async def test_oauth_consent_waits_for_the_own_password(
    ctx: AppContext, app: Any, org: Org
) -> None:
    registered = await register_client(ctx, org.admin)
    async with browser_client(app) as person:
        await signed_in(ctx, person, org.member)
        # As an admin's reset without SMTP leaves them (a reset would also end the session).
        async with ctx.transaction() as uow:
            await uow.session.execute(
                update(User)
                .where(User.id == uuid.UUID(org.member.user_id))
                .values(must_change_password=True)
            )
        params = authorize_params(registered, pkce_pair()[1])
        answer = await person.get("/oauth/authorize", params=params)
        assert answer.status_code == 303
        location = urlsplit(answer.headers["location"])
        assert location.path == CHOOSE
        back = parse_qs(location.query)["next"][0]
        assert back.startswith("/oauth/authorize?")
        done = await choose_own_password(person, OWN_PASSWORD, back)
        assert done.headers["location"] == back
        consent = await person.get(back)
        assert consent.status_code == 200 and 'name="decision"' in consent.text


def _signoff_command() -> list[str]:
    script = Path(sys.executable).with_name("signoff")
    return [str(script)] if script.exists() else [sys.executable, "-m", "signoff.cli"]


async def test_a_password_set_with_the_cli_is_not_forced_to_change(
    ctx: AppContext, app: Any, org: Org
) -> None:
    env = {
        **os.environ,
        "SIGNOFF_DATABASE_URL": ctx.settings.database_url,
        "SIGNOFF_SECRET_KEY": ctx.settings.secret_key or "",
        "SIGNOFF_LOG_LEVEL": "warning",
    }
    command = [
        *_signoff_command(),
        "user", "create", "--org", org.id, "--email", "op@acme.test", "--name", "Operator",
        "--password", OWN_PASSWORD, "--json",
    ]  # fmt: skip
    done = await asyncio.to_thread(
        subprocess.run, command, env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    created = json.loads(done.stdout)
    assert not await flagged(ctx, created["id"])
    async with browser_client(app) as operator:
        signed = await sign_in(operator, "op@acme.test", OWN_PASSWORD)
        assert signed.status_code == 303 and signed.headers["location"] == "/"
        assert (await operator.get("/")).status_code == 200
