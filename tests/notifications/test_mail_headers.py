"""The headers of notification mails, read at a real SMTP server: text placed in a header
is one line whatever the request's title holds, every mail has ``Date`` and
``Message-ID``, and the mails about one request form one thread per person."""

from __future__ import annotations

import email.utils
import uuid
from datetime import timedelta

import httpx
import pytest

from signoff.auth.principal import OrgMember
from signoff.context import AppContext
from signoff.notifications.sending import messages
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.notifications.support import Mail, MailBox
from tests.notifications.test_schedule import Clock, put

pytestmark = pytest.mark.anyio

# Every character Python's e-mail package takes for a line break (``str.splitlines``):
# in a header each made the whole mail fail with ValueError.
LINE_BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]


def _header_lines(mail: Mail) -> list[str]:
    """The raw header block as the server received it, unfolded."""
    raw = mail.message.as_bytes().decode("utf-8", "replace").replace("\r\n", "\n")
    head = raw.split("\n\n", 1)[0]
    return head.replace("\n ", " ").replace("\n\t", " ").split("\n")


async def test_a_line_break_in_a_title_is_folded_in_the_subject_and_kept_in_the_body(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    await put(api, org, {"audience": {"users": ["member1@acme.example"]}})
    titles = {}
    for brk in LINE_BREAKS:
        title = f"Deploy{brk}  billing {brk}now"
        created = await create_approval(api, org.member, title=title, description=title)
        titles[created["id"]] = (title, brk)
    assert await wiring.notifications.run_once() == len(titles)
    mails = await mailbox.wait_for(len(titles))
    assert len(mails) == len(titles)

    for mail in mails:
        subject = str(mail.message["Subject"])
        assert subject == "[high] Approval requested: Deploy billing now", repr(subject)
        # Only the headers are folded: the body carries the title as it was written
        # (a bare CR or CRLF is a line end in a text part, so those read as one).
        [(title, brk)] = [t for rid, t in titles.items() if rid in mail.text]
        kept = title.replace(brk, "\n") if brk in ("\r", "\r\n") else title
        assert kept in mail.text, repr(mail.text)
    log = [
        r
        for m in await _all_logs(api, org)
        for r in m
        if r["kind"] == "created" and r["channel_type"] == "email"
    ]
    assert {r["status"] for r in log} == {"sent"} and len(log) == len(titles)


async def _all_logs(api: httpx.AsyncClient, org: Org) -> list[list[dict[str, object]]]:
    listed = await api.get("/api/v1/approvals?limit=100", headers=org.admin.headers)
    logs = []
    for request in listed.json()["data"]:
        response = await api.get(
            f"/api/v1/approvals/{request['id']}/notifications", headers=org.admin.headers
        )
        logs.append(response.json()["data"])
    return logs


def test_header_text_is_one_line_of_collapsed_whitespace() -> None:
    for brk in [*LINE_BREAKS, "\t", "\x1f", "\x00", "\x7f"]:
        assert messages.header_text(f" a{brk}{brk} b {brk}") == "a b"
    assert messages.header_text("Ünïcode — kept") == "Ünïcode — kept"


async def test_every_mail_has_a_date_and_a_message_id(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    clock = Clock()
    wiring.notifications.clock = clock
    await put(api, org, {"audience": "admins"})
    await create_approval(api, org.member)
    await wiring.notifications.run_once()
    [mail] = await mailbox.wait_for(1)
    sent = email.utils.parsedate_to_datetime(str(mail.message["Date"]))
    assert abs(sent - clock.now) < timedelta(seconds=5)
    message_id = str(mail.message["Message-ID"]).strip()
    # The domain is the public URL's host (``settings_overrides``: http://signoff.test).
    assert message_id.startswith("<") and message_id.endswith("@signoff.test>")
    headers = [line.split(":", 1)[0].lower() for line in _header_lines(mail)]
    assert headers.count("date") == 1 and headers.count("message-id") == 1


async def test_the_mails_about_one_request_are_one_thread_per_person(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    clock = Clock()
    wiring.notifications.clock = clock
    await put(
        api,
        org,
        {
            "audience": {"users": ["member1@acme.example", "member2@acme.example"]},
            "reminders": {"after_minutes": 30, "times": 1},
            "escalation": {"after_minutes": 60},
            "expiry_warning": {"at_fraction": 0.8},
        },
    )
    expires = (clock.now + timedelta(minutes=100)).isoformat()
    first = await create_approval(api, org.member, expires_at=expires)
    other = await create_approval(api, org.member, expires_at=expires)
    await wiring.notifications.run_once()
    for minutes in (31, 30, 20):  # the reminder, the escalation, the expiry warning
        clock.advance(minutes)
        await wiring.notifications.run_once()
    mails = await mailbox.wait_for(16)
    assert len(mails) == 16  # 2 requests x 2 people x 4 kinds

    def about(request_id: str, person: str) -> list[Mail]:
        return [m for m in mails if request_id in m.text and m.recipients == [person]]

    ids = [str(m.message["Message-ID"]).strip() for m in mails]
    assert len(set(ids)) == len(ids)  # each mail its own id
    roots = set()
    for request in (first, other):
        for person in ("member1@acme.example", "member2@acme.example"):
            opened, *later = about(request["id"], person)
            assert "Approval requested" in str(opened.message["Subject"])
            assert [str(m.message["Subject"]).split(":")[0].strip() for m in later] == [
                "[high] Reminder",
                "[high] Escalated",
                "[high] Expires soon",
            ]
            root = str(opened.message["Message-ID"]).strip()
            assert opened.message["In-Reply-To"] is None and opened.message["References"] is None
            for mail in later:
                assert str(mail.message["In-Reply-To"]).strip() == root
                assert str(mail.message["References"]).strip() == root
            roots.add(root)
    assert len(roots) == 4  # per request and per person


async def test_the_first_mails_id_is_derived_from_the_request_and_the_person(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    # Nothing stored: any sender, after any restart (or a retry of this very mail),
    # gives the same id from the request and the person.
    await put(api, org, {"audience": {"users": ["member1@acme.example"]}})
    created = await create_approval(api, org.member)
    await wiring.notifications.run_once()
    [mail] = await mailbox.wait_for(1)
    again = messages.mail_ids(
        "created",
        created["id"],
        "01a21ecb-0000-7000-8000-000000000000",  # a row's id: not the first mail's
        "member1@acme.example",
        messages.mail_domain("http://signoff.test"),
    )
    assert again == (str(mail.message["Message-ID"]).strip(), None)


async def test_the_routing_pages_test_mail_has_a_date_and_an_id_of_its_own(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    await put(api, org, {"audience": "admins"})
    admin = OrgMember(
        org_id=uuid.UUID(org.id),
        org_name="Acme",
        org_emergency_stop=False,
        user_id=uuid.UUID(org.admin.user_id),
        user_email=org.admin.email,
        user_name="Admin Zero",
        role="admin",
    )
    for _ in range(2):
        result = await wiring.notifications.send_test(uuid.UUID(org.id), "mail", admin)
        assert result is not None and result.success, result
    mails = await mailbox.wait_for(2)
    assert all(m.message["Date"] and m.message["In-Reply-To"] is None for m in mails)
    ids = {str(m.message["Message-ID"]).strip() for m in mails}
    assert len(ids) == 2 and all(i.endswith("@signoff.test>") for i in ids)


def test_the_mail_domain_comes_from_the_public_url() -> None:
    assert messages.mail_domain("https://Signoff.Example.com:8443/base") == "signoff.example.com"
    assert messages.mail_domain("http://127.0.0.1:8000") == "[127.0.0.1]"
    assert messages.mail_domain("http://[::1]:8000") == "[IPv6:::1]"
    assert messages.mail_domain("https://bücher.example") == "xn--bcher-kva.example"
    assert messages.mail_domain("not a url") == "localhost"
