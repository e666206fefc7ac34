"""The invitation's mail as bytes: one-line header values whatever the names hold, and
the Date and Message-ID headers RFC 5322 asks for (no I/O)."""

from __future__ import annotations

import email
import email.policy
from datetime import UTC, datetime

import pytest

from signoff.invitations.mail import LinkMail, link_message, message_id_domain, one_line

BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
NOW = datetime(2026, 11, 27, 21, 0, tzinfo=UTC)


@pytest.mark.parametrize("brk", BREAKS)
def test_every_line_break_in_a_name_becomes_a_space(brk: str) -> None:
    assert one_line(f"Nia{brk}Okafor") == "Nia Okafor"
    assert one_line(f"  Acme{brk}{brk} Ltd\t") == "Acme Ltd"


@pytest.mark.parametrize("purpose", ["invite", "reset"])
@pytest.mark.parametrize("brk", BREAKS)
def test_the_mail_goes_out_whatever_the_names_hold(purpose: str, brk: str) -> None:
    mail = LinkMail(
        purpose="invite" if purpose == "invite" else "reset",
        to_name=f"Nia{brk}Okafor",
        to_email="nia@acme.test",
        org_name=f"Acme{brk}Bcc: victim@example.com",
        by_name=f"Grace{brk}Hopper",
        url="https://signoff.example/password/abc",
        expires_at=NOW,
    )
    message = link_message(
        mail, sender="signoff <signoff@acme.example>", now=NOW, domain="acme.example"
    )
    raw = message.as_bytes()  # raises on a header value with a line break
    parsed = email.message_from_bytes(raw, policy=email.policy.default)
    assert parsed["Bcc"] is None
    assert "\n" not in str(parsed["Subject"]) and "\n" not in str(parsed["To"])
    assert "Acme Bcc: victim@example.com" in str(parsed["Subject"])
    assert parsed["Date"] == "Fri, 27 Nov 2026 21:00:00 +0000"
    assert str(parsed["Message-ID"]).endswith("@acme.example>")
    body = parsed.get_body(("plain",))
    assert body is not None
    assert f": {mail.url}\n" in body.get_content().replace("\r\n", "\n")


def test_message_ids_use_the_senders_domain_without_asking_dns() -> None:
    assert message_id_domain("signoff <signoff@acme.example>", "http://x.test") == "acme.example"
    assert message_id_domain("signoff", "https://signoff.acme.test:8443") == "signoff.acme.test"
