"""Fixtures of the notification tests: a loopback SMTP server wired into the settings,
and the app without its background loops (the tests run the sender's rounds)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.notifications.support import MailBox, mailbox, smtp

__all__ = ["mailbox", "smtp"]  # fixtures, shared with the invitation tests


@pytest.fixture
def settings_overrides(smtp: tuple[MailBox, str]) -> dict[str, Any]:
    return {
        "smtp_url": smtp[1],
        "mail_from": "signoff <signoff@acme.example>",
        "public_url": "http://signoff.test",
    }


@pytest.fixture
def api(api_only: httpx.AsyncClient) -> httpx.AsyncClient:
    """The app without its background loops (``tests/conftest.py``): each test runs the
    sender's rounds itself."""
    return api_only
