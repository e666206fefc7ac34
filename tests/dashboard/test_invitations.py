"""Invitations and password resets by mailed one-time link (SMTP configured), on SQLite
and PostgreSQL: the mail goes out with a working link; the link sets the password and
signs in; it works once (two uses at once included), and not once expired.

The mails come through a real SMTP server on loopback (``bench/mailserver.py``).
"""

from __future__ import annotations

import asyncio
import email.utils
import uuid
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from bench.mailserver import Mail, MailBox
from sqlalchemy import select, update

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import PasswordLink, User
from signoff.wiring import Wiring
from tests.conftest import Org
from tests.dashboard.support import browser_client, csrf_of, post_form, sign_in, signed_in
from tests.helpers import NO_SWEEP
from tests.notifications.support import mailbox, smtp

__all__ = ["mailbox", "smtp"]  # fixtures of tests/notifications/support.py

NEW_PASSWORD = "a phrase of my own choosing"


@pytest.fixture
def settings_overrides(smtp: tuple[MailBox, str]) -> dict[str, Any]:
    return {
        **NO_SWEEP,
        "smtp_url": smtp[1],
        "mail_from": "signoff <signoff@acme.example>",
        "public_url": "http://signoff.test",
    }


def link_path(mail: Mail, label: str) -> str:
    url = mail.link(label)
    assert url.startswith("http://signoff.test/password/"), url
    return urlsplit(url).path


async def invite(admin: httpx.AsyncClient, name: str, email: str) -> httpx.Response:
    return await post_form(admin, "/admin/users", "/admin/users", name=name, email=email)


async def set_password(
    http: httpx.AsyncClient, path: str, password: str = NEW_PASSWORD, repeat: str | None = None
) -> httpx.Response:
    page = await http.get(path)
    token = csrf_of(page.text) if page.status_code == 200 else ""
    return await http.post(
        path,
        data={
            "new_password": password,
            "repeat_password": password if repeat is None else repeat,
            "csrf_token": token,
        },
    )


async def user_named(ctx: AppContext, org: Org, email: str) -> User:
    async with ctx.reading() as uow:
        found = await uow.orgs.find_user_by_email(uuid.UUID(org.id), email)
    assert found is not None
    return found


def folded_headers(mail: Mail) -> list[str]:
    """The headers of the mail as it came over the wire that run over several lines
    (the library folds a multipart Content-Type's boundary: that one is expected)."""
    raw = mail.message.as_bytes().decode().replace("\r\n", "\n")
    lines = raw.split("\n\n", 1)[0].split("\n")
    return [
        lines[i - 1].split(":", 1)[0]
        for i in range(1, len(lines))
        if lines[i][:1] in (" ", "\t") and not lines[i - 1].startswith("Content-Type")
    ]


async def test_an_invitation_is_mailed_and_its_link_sets_the_password_and_signs_in(
    ctx: AppContext, app: Any, org: Org, mailbox: MailBox
) -> None:
    async with browser_client(app) as admin, browser_client(app, "203.0.113.9") as invitee:
        await signed_in(ctx, admin, org.admin)
        users_page = (await admin.get("/admin/users")).text
        assert "e-mailed an invitation" in users_page and "72 hours" in users_page

        answer = await invite(admin, "Nia\u2028Okafor\nJr", "nia@acme.test")
        assert answer.status_code == 200, answer.text
        assert "Invitation sent" in answer.text and "nia@acme.test" in answer.text
        assert 'data-testid="password"' not in answer.text  # no password to pass on

        [mail] = await mailbox.wait_for(1)
        assert mail.recipients == ["nia@acme.test"]
        message = mail.message
        assert message["To"].addresses[0].addr_spec == "nia@acme.test"
        assert message["Subject"] == f"{org.admin.name} invited you to Acme on signoff"
        sent_at = email.utils.parsedate_to_datetime(message["Date"])
        assert abs((sent_at - utcnow()).total_seconds()) < 60
        assert message["Message-ID"].startswith("<") and message["Message-ID"].endswith(
            "@acme.example>"
        )
        assert folded_headers(mail) == []
        assert "Nia Okafor Jr" in message["To"]

        # The invited person shows as such, and cannot sign in before choosing a password.
        assert "Invited" in (await admin.get("/admin/users")).text
        nia = await user_named(ctx, org, "nia@acme.test")
        assert nia.password_hash is None and not nia.must_change_password

        path = link_path(mail, "Choose your password")
        page = await invitee.get(path)
        assert page.status_code == 200 and "Welcome to Acme" in page.text
        assert "nia@acme.test" in page.text
        # Looking twice (a mail scanner, a preview) spends nothing.
        assert (await invitee.get(path)).status_code == 200

        mismatch = await set_password(invitee, path, repeat="something else entirely")
        assert mismatch.status_code == 400 and "does not match" in mismatch.text
        short = await set_password(invitee, path, "short")
        assert short.status_code == 400 and "at least 8 characters" in short.text

        done = await set_password(invitee, path)
        assert done.status_code == 303 and done.headers["location"] == "/"
        inbox = await invitee.get("/")
        assert inbox.status_code == 200 and 'who-name">Nia' in inbox.text  # signed in as Nia

        # The link is spent: a second use is refused, and changes nothing.
        again = await set_password(invitee, path, "another password again")
        assert again.status_code == 404 and "has been used" in again.text
        assert (await invitee.get(path)).status_code == 404

    async with browser_client(app, "203.0.113.10") as later:
        assert (await sign_in(later, "nia@acme.test", "another password again")).status_code == 401
        assert (await sign_in(later, "nia@acme.test", NEW_PASSWORD)).headers["location"] == "/"
    nia = await user_named(ctx, org, "nia@acme.test")
    assert not nia.must_change_password


async def test_an_expired_link_is_refused(
    ctx: AppContext, app: Any, org: Org, mailbox: MailBox
) -> None:
    async with browser_client(app) as admin, browser_client(app, "203.0.113.9") as invitee:
        await signed_in(ctx, admin, org.admin)
        assert (await invite(admin, "Ola", "ola@acme.test")).status_code == 200
        [mail] = await mailbox.wait_for(1)
        path = link_path(mail, "Choose your password")
        async with ctx.transaction() as uow:
            link = await uow.session.scalar(select(PasswordLink))
            assert link is not None
            # Issued with the configured lifetime...
            assert abs(link.expires_at - link.created_at - timedelta(hours=72)) < timedelta(
                seconds=1
            )
            # ... which has now passed.
            await uow.session.execute(
                update(PasswordLink).values(expires_at=utcnow() - timedelta(seconds=1))
            )
        assert (await invitee.get(path)).status_code == 404
        refused = await set_password(invitee, path)
        assert refused.status_code == 404 and "has expired" in refused.text
        assert "signoff_session" not in refused.cookies
        ola = await user_named(ctx, org, "ola@acme.test")
        assert ola.password_hash is None
        assert "Invited" not in (await admin.get("/admin/users")).text


async def test_two_uses_of_one_link_at_once_set_one_password(
    ctx: AppContext, app: Any, org: Org, mailbox: MailBox
) -> None:
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        assert (await invite(admin, "Kai", "kai@acme.test")).status_code == 200
    [mail] = await mailbox.wait_for(1)
    path = link_path(mail, "Choose your password")
    async with (
        browser_client(app, "203.0.113.9") as one,
        browser_client(app, "203.0.113.10") as two,
    ):
        answers = await asyncio.gather(
            set_password(one, path, "the first of two passwords"),
            set_password(two, path, "the second of two passwords"),
        )
    assert sorted(a.status_code for a in answers) == [303, 404], [a.text for a in answers]
    winner = (
        "the first of two passwords"
        if answers[0].status_code == 303
        else "the second of two passwords"
    )
    loser = (
        "the second of two passwords"
        if winner.startswith("the first")
        else "the first of two passwords"
    )
    async with browser_client(app, "203.0.113.11") as later:
        assert (await sign_in(later, "kai@acme.test", loser)).status_code == 401
        assert (await sign_in(later, "kai@acme.test", winner)).status_code == 303


async def test_reset_password_mails_a_link_and_ends_the_old_password(
    ctx: AppContext, app: Any, org: Org, mailbox: MailBox
) -> None:
    member = org.member
    async with browser_client(app) as admin, browser_client(app, "203.0.113.9") as person:
        await signed_in(ctx, admin, org.admin)
        await signed_in(ctx, person, member)
        users_page = (await admin.get("/admin/users")).text
        assert f"E-mail {member.name} a link to choose a new password" in users_page

        reset = await post_form(
            admin, "/admin/users", f"/admin/users/{member.user_id}/reset-password"
        )
        assert reset.status_code == 200, reset.text
        assert "Password reset link sent" in reset.text and member.email in reset.text
        assert 'data-testid="password"' not in reset.text

        # The old password and the sessions are gone at once.
        gone = await person.get("/")
        assert gone.status_code == 303 and gone.headers["location"].startswith("/signin")
        assert (await sign_in(person, member.email)).status_code == 401

        [mail] = await mailbox.wait_for(1)
        assert mail.recipients == [member.email]
        assert mail.message["Subject"] == "Choose a new signoff password for Acme"
        assert mail.message["Date"] and mail.message["Message-ID"]
        path = link_path(mail, "Choose a new password")
        page = await person.get(path)
        assert page.status_code == 200 and "Choose a new password" in page.text
        assert (await set_password(person, path)).status_code == 303
        assert (await person.get("/")).status_code == 200
        assert (await set_password(person, path, "yet another password")).status_code == 404


async def test_a_newer_link_retires_the_older_one(
    ctx: AppContext, app: Any, org: Org, mailbox: MailBox
) -> None:
    async with browser_client(app) as admin, browser_client(app, "203.0.113.9") as invitee:
        await signed_in(ctx, admin, org.admin)
        assert (await invite(admin, "Lea", "lea@acme.test")).status_code == 200
        lea = await user_named(ctx, org, "lea@acme.test")
        users_page = (await admin.get("/admin/users")).text
        assert "Resend invitation" in users_page
        resent = await post_form(admin, "/admin/users", f"/admin/users/{lea.id}/reset-password")
        assert resent.status_code == 200 and "Invitation sent" in resent.text
        first, second = await mailbox.wait_for(2)
        assert second.message["Subject"] == first.message["Subject"]  # an invitation again
        assert first.message["Message-ID"] != second.message["Message-ID"]
        assert (
            await set_password(invitee, link_path(first, "Choose your password"))
        ).status_code == 404
        assert (
            await set_password(invitee, link_path(second, "Choose your password"))
        ).status_code == 303


async def test_a_mail_server_that_refuses_is_said_so(
    ctx: AppContext, wiring: Wiring, app: Any, org: Org
) -> None:
    """The user is added; the admin is told the mail did not go, and can send it again."""
    wiring.notifications.smtp = type(wiring.notifications.smtp)(  # type: ignore[misc]
        host="127.0.0.1", port=9, username=None, password=None, implicit_tls=False, starttls=False
    )
    async with browser_client(app) as admin:
        await signed_in(ctx, admin, org.admin)
        answer = await invite(admin, "Uma", "uma@acme.test")
        assert answer.status_code == 200
        assert "could not be sent" in answer.text and "SIGNOFF_SMTP_URL" in answer.text
        assert "Resend invitation" in (await admin.get("/admin/users")).text


async def test_the_link_form_refuses_a_post_without_the_visitors_csrf_token(
    ctx: AppContext, app: Any, org: Org, mailbox: MailBox
) -> None:
    """Another site posting an attacker's own link must not sign the visitor in."""
    async with browser_client(app) as admin, browser_client(app, "203.0.113.9") as victim:
        await signed_in(ctx, admin, org.admin)
        await invite(admin, "Mallory", "mallory@acme.test")
        [mail] = await mailbox.wait_for(1)
        path = link_path(mail, "Choose your password")
        form = {"new_password": NEW_PASSWORD, "repeat_password": NEW_PASSWORD}
        forged = await victim.post(path, data=form)
        assert forged.status_code == 400 and "form expired" in forged.text
        wrong = await victim.post(path, data={**form, "csrf_token": "x" * 43})
        assert wrong.status_code == 400 and "form expired" in wrong.text
        mallory = await user_named(ctx, org, "mallory@acme.test")
        assert mallory.password_hash is None  # nothing was set
        assert (await set_password(victim, path)).status_code == 303
