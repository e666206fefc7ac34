"""Test fixtures: every database test runs on SQLite, and on PostgreSQL when
``SIGNOFF_TEST_POSTGRES_URL`` is set (CI sets it, with ``SIGNOFF_TEST_REQUIRE_ALL=1`` so a
missing service fails the run instead of skipping).

Isolation: SQLite tests each get a copy of a database migrated once per session;
PostgreSQL tests share one database created (and dropped) by the session and truncated
after every test.
"""

from __future__ import annotations

import asyncio
import gc
import os
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine

from signoff.app import create_app
from signoff.common.time import utcnow
from signoff.config import Settings, normalize_database_url
from signoff.context import AppContext
from signoff.crypto import generate_secret_key
from signoff.migrations import upgrade_to_head
from signoff.models import Base
from signoff.orgs import service as orgs_service
from signoff.wiring import Wiring
from tests.helpers import sqlite_statements

# The browser tests' fixtures (chromium, server, site) for every module.
pytest_plugins = ["tests.browser"]

POSTGRES_URL = os.environ.get("SIGNOFF_TEST_POSTGRES_URL")
REDIS_URL = os.environ.get("SIGNOFF_TEST_REDIS_URL")
REQUIRE_ALL = os.environ.get("SIGNOFF_TEST_REQUIRE_ALL") == "1"
SECRET_KEY = generate_secret_key()

BACKENDS = ["sqlite", "postgres"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if REQUIRE_ALL and not POSTGRES_URL:
        raise pytest.UsageError("SIGNOFF_TEST_REQUIRE_ALL=1 but SIGNOFF_TEST_POSTGRES_URL is unset")


@pytest.fixture(scope="module", autouse=True)
def _no_long_collection_pauses() -> None:
    """Leave what is alive when a test module starts out of garbage collection.

    Why: by the end of the suite the test process holds a large heap, and a full
    collection of it paused the event loop for up to 0.5 s (measured over tests/api),
    long enough to make a timed retry late (the retry-schedule tests failed so, twice
    in CI). ``signoff serve`` does the same with its startup objects (cli/serve.py). What a
    module's tests allocate is still collected; the collection first clears what earlier
    modules left behind.
    """
    gc.collect()
    gc.freeze()


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


# ---- databases ----


def _postgres_admin_url() -> str:
    assert POSTGRES_URL
    return normalize_database_url(POSTGRES_URL)


async def _create_pg_database(name: str) -> str:
    admin = create_async_engine(_postgres_admin_url(), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'CREATE DATABASE "{name}"'))
    finally:
        await admin.dispose()
    return make_url(_postgres_admin_url()).set(database=name).render_as_string(hide_password=False)


async def _drop_pg_database(name: str) -> None:
    admin = create_async_engine(_postgres_admin_url(), isolation_level="AUTOCOMMIT")
    try:
        async with admin.connect() as conn:
            await conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        await admin.dispose()


@dataclass
class TestDatabase:
    backend: str
    template_url: str  # SQLite: the migrated template file; PostgreSQL: the test database
    created: list[str] = field(default_factory=list)


@pytest.fixture(scope="session", params=BACKENDS)
def test_database(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TestDatabase]:
    backend = request.param
    if backend == "sqlite":
        path = tmp_path_factory.mktemp("sqlite-template") / "template.db"
        url = f"sqlite+aiosqlite:///{path}"
        upgrade_to_head(url)
        yield TestDatabase("sqlite", url)
        return
    if not POSTGRES_URL:
        pytest.skip("PostgreSQL tests: set SIGNOFF_TEST_POSTGRES_URL=postgresql://... to run")
    name = f"signoff_test_{os.getpid()}_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(_create_pg_database(name))
    upgrade_to_head(url)
    try:
        yield TestDatabase("postgres", url)
    finally:
        asyncio.run(_drop_pg_database(name))


async def _truncate_all(url: str) -> None:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            tables = ", ".join(f'"{t.name}"' for t in Base.metadata.sorted_tables)
            await conn.execute(text(f"TRUNCATE {tables} CASCADE"))
    finally:
        await engine.dispose()


@pytest.fixture
def database_url(test_database: TestDatabase, tmp_path: Path) -> Iterator[str]:
    """A clean, migrated database for one test."""
    if test_database.backend == "sqlite":
        template = Path(make_url(test_database.template_url).database or "")
        copy = tmp_path / "signoff.db"
        shutil.copyfile(template, copy)
        yield f"sqlite+aiosqlite:///{copy}"
        return
    yield test_database.template_url
    asyncio.run(_truncate_all(test_database.template_url))


@pytest.fixture
def backend(test_database: TestDatabase) -> str:
    return test_database.backend


@pytest.fixture
def postgres_only(backend: str) -> None:
    """Skips the test on SQLite: ``@pytest.mark.usefixtures("postgres_only")`` on a test,
    or in a module's ``pytestmark`` for all of its tests. The test (or the module) says
    why it has nothing to show on SQLite."""
    if backend != "postgres":
        pytest.skip("PostgreSQL only")


# ---- the app ----


def make_settings(database_url: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "database_url": database_url,
        "secret_key": SECRET_KEY,
        "rate_limit_default": 10_000,
        "rate_limit_ceiling": 100_000,
        "expiry_sweep_interval_seconds": 0.05,
        "long_poll_recheck_seconds": 0.2,
        "redis_url": None,
    }
    values.update(overrides)
    return Settings(**values)


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    """Override in a test module (or parametrize) to change the app's settings."""
    return {}


@pytest.fixture
def settings(database_url: str, settings_overrides: dict[str, Any]) -> Settings:
    return make_settings(database_url, **settings_overrides)


@pytest.fixture
async def wiring(settings: Settings) -> AsyncIterator[Wiring]:
    """The process's services (signoff/wiring.py), as the app builds them."""
    services = Wiring.from_settings(settings)
    yield services
    await services.close()


@pytest.fixture
def ctx(wiring: Wiring) -> AppContext:
    return wiring.ctx


@pytest.fixture
async def statements(ctx: AppContext) -> AsyncIterator[list[str]]:
    """The statements SQLite's writer connection runs from now on (tests that count a
    write's statements)."""
    async with sqlite_statements(ctx) as seen:
        yield seen


@pytest.fixture
async def app(wiring: Wiring, request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    # A test that counts the writer's statements runs without the sweep and the delivery
    # worker: a background transaction would land among the statements it counts.
    background = "statements" not in request.fixturenames
    application = create_app(wiring.ctx.settings, wiring=wiring, background=background)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def client(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app, client=("203.0.113.7", 50000))
    async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
        yield c


@pytest.fixture
async def api_only(wiring: Wiring) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app without its background loops, for a test that runs them
    itself (a sweep, the notification sender's rounds).

    Why: with them, the notification sender may share-lock a request it writes
    notifications for (PostgreSQL), and a sweep passes over a locked row, leaving it to
    a later sweep: a test's own sweep then finds fewer due requests than it made, more
    often under load. The
    background sweep's first pass, at startup, is one more sweeper besides the test's.
    """
    application = create_app(wiring.ctx.settings, wiring=wiring, background=False)
    async with application.router.lifespan_context(application):
        transport = httpx.ASGITransport(app=application, client=("203.0.113.7", 50000))
        async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
            yield c


# ---- an org to test with ----


@dataclass
class Member:
    user_id: str
    email: str
    name: str
    role: str
    connection_id: str
    api_key: str
    webhook_secret: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"}


@dataclass
class Org:
    id: str
    name: str
    admin: Member
    members: list[Member]

    @property
    def member(self) -> Member:
        return self.members[0]


async def create_org(ctx: AppContext, name: str = "Acme", members: int = 3) -> Org:
    """An org with one admin and ``members`` members, each with a connection of their own."""
    now = utcnow()
    async with ctx.transaction() as uow:
        org = await orgs_service.create_org(uow.orgs, name, now)
        people: list[Member] = []
        for index in range(members + 1):
            role = "admin" if index == 0 else "member"
            user = await orgs_service.create_user(
                uow.orgs,
                org.id,
                email=f"{role}{index}@{name.lower()}.example",
                name=f"{role.title()} {index}",
                role=role,
                password=None,  # argon2 is slow on purpose; API tests need no sign-in
                now=now,
            )
            issued = await orgs_service.create_connection(
                uow.orgs,
                ctx.box,
                ctx.settings,
                org.id,
                owner=user,
                name=f"conn-{index}",
                rate_limit=None,
                now=now,
            )
            people.append(
                Member(
                    str(user.id),
                    user.email,
                    user.name,
                    role,
                    str(issued.connection.id),
                    issued.api_key,
                    issued.webhook_secret,
                )
            )
    return Org(str(org.id), name, people[0], people[1:])


@pytest.fixture
async def org(ctx: AppContext) -> Org:
    return await create_org(ctx, "Acme")


@pytest.fixture
async def other_org(ctx: AppContext) -> Org:
    return await create_org(ctx, "Globex", members=1)


def approval_body(**overrides: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "title": "Deploy v2 to production",
        "description": "Rolls out the new billing service to every region.",
        "priority": "high",
    }
    body.update(overrides)
    return body


async def create_approval(
    client: httpx.AsyncClient, who: Member, **overrides: Any
) -> dict[str, Any]:
    response = await client.post(
        "/api/v1/approvals", json=approval_body(**overrides), headers=who.headers
    )
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


def assert_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    assert body["error"]["code"] == code, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    details: dict[str, Any] = body["error"]["details"]
    return details


async def eventually(
    condition: Callable[[], bool | Awaitable[bool]], what: str, timeout: float = 10.0
) -> None:
    """Wait until ``condition`` (plain or async) holds, looking every few milliseconds:
    the way tests wait for something to be ready, instead of sleeping a fixed time."""
    deadline = time.monotonic() + timeout
    while True:
        outcome = condition()
        if outcome if isinstance(outcome, bool) else await outcome:
            return
        assert time.monotonic() < deadline, f"waited {timeout} s for {what}"
        await asyncio.sleep(0.005)


@dataclass
class ManualClock:
    """A clock that moves only when the test moves it (``WebhookDispatcher(clock=...)``)."""

    now: datetime = field(default_factory=lambda: utcnow().replace(microsecond=0))

    def __call__(self) -> datetime:
        return self.now
