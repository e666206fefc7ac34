"""The API docs page (/api/v1/docs) in headless Chromium, with the internet cut off: it
renders every operation from the app's own assets, and its Content-Security-Policy holds.

Offline is enforced, not assumed: every request the page makes to any host but the server
is aborted and recorded, and the test fails if there was one.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from signoff.app import create_app
from tests.conftest import make_settings

CHROMIUM = Path("/usr/bin/chromium")
STARTUP_SECONDS = 30.0


@pytest.fixture
def chromium() -> str:
    if not CHROMIUM.exists():
        pytest.skip(
            "headless browser test: install Debian's chromium (apt-get install -y chromium); "
            "no browser is ever downloaded"
        )
    return str(CHROMIUM)


@pytest.fixture
def base_url() -> Iterator[str]:
    """The app on a loopback port; the docs page and the document open no database."""
    unopened = Path(tempfile.gettempdir()) / "signoff-docs-page-test.db"
    app = create_app(make_settings(f"sqlite+aiosqlite:///{unopened}"), background=False)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + STARTUP_SECONDS
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(STARTUP_SECONDS)
        listener.close()


async def test_the_docs_page_renders_every_operation_offline(base_url: str, chromium: str) -> None:
    from playwright.async_api import ConsoleMessage, Route, async_playwright

    elsewhere: list[str] = []
    complaints: list[str] = []

    async def only_the_server(route: Route) -> None:
        if route.request.url.startswith(base_url + "/"):
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort()

    def on_console(message: ConsoleMessage) -> None:
        if message.type == "error":
            complaints.append(message.text)

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=chromium)
        try:
            page = await browser.new_page()
            await page.route("**/*", only_the_server)
            page.on("console", on_console)
            page.on("pageerror", lambda error: complaints.append(str(error)))
            await page.goto(f"{base_url}/api/v1/docs")
            create = page.locator("#operations-approvals-create_approval_api_v1_approvals_post")
            await create.wait_for(timeout=20_000)
            operations = await page.locator(".opblock").count()
            # Opening an operation renders its documented answers.
            await create.locator(".opblock-summary").click()
            await page.locator(
                ".responses-table .response[data-code='409'], "
                ".responses-table .response[data-code='413']"
            ).first.wait_for()
            answered = await create.locator(".responses-table .response").all_inner_texts()
        finally:
            await browser.close()

    assert elsewhere == [], "the docs page reached beyond the server"
    assert complaints == [], complaints
    assert operations >= 20
    statuses = {text.split()[0] for text in answered}
    assert {"200", "201", "400", "401", "413", "429", "503"} <= statuses, statuses
