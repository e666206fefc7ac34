"""Fixtures of the notification tests: a loopback SMTP server wired into the settings,
and the app without its background loops (the tests run the sender's rounds)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.notifications.support import MailBox, smtp_server


@pytest.fixture
async def smtp() -> AsyncIterator[tuple[MailBox, str]]:
    async with smtp_server() as server:
        yield server


@pytest.fixture
def mailbox(smtp: tuple[MailBox, str]) -> MailBox:
    return smtp[0]


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
