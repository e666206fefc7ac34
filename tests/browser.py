"""What every browser test shares: Debian's Chromium through Playwright (no browser
download), a live uvicorn server on a loopback port, a seeded site, sign-in, axe-core and
screenshots. A pytest plugin (``tests/conftest.py``): the fixtures ``chromium``, ``server``
and ``site`` are there for every test module; the helpers are imported from here.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from signoff.app import create_app
from signoff.config import Settings
from signoff.context import AppContext
from tests.conftest import Member, Org, approval_body, create_org
from tests.oauth.support import PASSWORD, give_password

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = Path(__file__).resolve().parents[1] / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DESKTOP = {"width": 1280, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture
def chromium() -> str:
    if not CHROMIUM.exists():
        pytest.skip(
            "headless browser test: install Debian's chromium (apt-get install -y chromium); "
            "Playwright drives it with executable_path, no browser download"
        )
    return str(CHROMIUM)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture
def server(settings: Settings) -> Iterator[str]:
    yield from live_server(settings, "127.0.0.1")


def live_server(settings: Settings, host_name: str) -> Iterator[str]:
    """``signoff``'s app under uvicorn in a thread of its own (its own event loop and
    AppContext, as a separate process would have), on a free loopback port, its public
    address named ``host_name`` (WebAuthn wants a domain: ``localhost``)."""
    port = _free_port()
    base_url = f"http://{host_name}:{port}"
    application = create_app(settings.model_copy(update={"public_url": base_url}))
    config = uvicorn.Config(application, host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not uv.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError("the test server did not start")
        time.sleep(0.02)
    try:
        yield base_url
    finally:
        uv.should_exit = True
        thread.join(10)


@dataclass
class Site:
    url: str
    org: Org
    api: httpx.AsyncClient

    async def create(self, who: Member, **overrides: Any) -> dict[str, Any]:
        answer = await self.api.post(
            "/api/v1/approvals", json=approval_body(**overrides), headers=who.headers
        )
        assert answer.status_code == 201, answer.text
        body: dict[str, Any] = answer.json()
        return body

    async def read(self, request_id: str) -> dict[str, Any]:
        answer = await self.api.get(
            f"/api/v1/approvals/{request_id}", headers=self.org.admin.headers
        )
        body: dict[str, Any] = answer.json()
        return body


@pytest.fixture
async def site(ctx: AppContext, server: str) -> AsyncIterator[Site]:
    org = await create_org(ctx, "Acme", members=3)
    for person in (org.admin, *org.members):
        await give_password(ctx, person)
    async with httpx.AsyncClient(base_url=server, timeout=10) as api:
        yield Site(server, org, api)


@asynccontextmanager
async def browser(chromium: str) -> AsyncIterator[Any]:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            await launched.close()


async def sign_in(page: Any, base_url: str, who: Member) -> None:
    await page.goto(f"{base_url}/signin")
    await page.get_by_label("Email").fill(who.email)
    await page.get_by_label("Password").fill(PASSWORD)
    await page.get_by_role("button", name="Sign in", exact=True).click()
    await page.wait_for_url(f"{base_url}/")


async def assert_accessible(page: Any) -> None:
    from axe_playwright_python.async_playwright import Axe

    results = await Axe().run(page)
    serious = [
        f"{v['id']} ({v['impact']}): {v['help']} at {[n['target'] for n in v['nodes']][:3]}"
        for v in results.response["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    assert not serious, f"{page.url}: {serious}"


async def screenshot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    await page.evaluate("window.scrollTo(0, 0)")  # a sticky header stays at the top
    await page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def row_link(page: Any, title: str) -> Any:
    return page.get_by_role("link", name=title, exact=True)
