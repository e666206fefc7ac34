"""The first-run setup link is atomic, on SQLite and PostgreSQL: only the newest link
works, it works only while no organization exists, and of submissions made at the same
moment (through one app or two apps on one database, as two replicas) exactly one
creates an organization; the others get the "already set up" page."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from signoff.app import create_app
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.dashboard import service as dashboard_service
from signoff.models import Organization, User
from signoff.orgs import service as orgs_service
from signoff.wiring import Wiring
from tests.conftest import eventually
from tests.dashboard.support import browser_client
from tests.helpers import NO_SWEEP
from tests.oauth.support import PASSWORD


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


async def _issue(ctx: AppContext) -> str:
    """What a start of ``signoff serve`` on an empty database does."""
    async with ctx.transaction() as uow:
        token = await dashboard_service.issue_setup_token(uow.orgs, utcnow())
    assert token
    return token


def _form(name: str) -> dict[str, str]:
    return {
        "org_name": name,
        "name": f"Admin of {name}",
        "email": f"admin@{name.lower()}.example",
        "password": PASSWORD,
    }


async def _counts(ctx: AppContext) -> tuple[int, int]:
    async with ctx.reading() as uow:
        orgs = await uow.session.scalar(select(func.count()).select_from(Organization))
        users = await uow.session.scalar(select(func.count()).select_from(User))
    return int(orgs or 0), int(users or 0)


@asynccontextmanager
async def _second_replica(ctx: AppContext) -> AsyncIterator[httpx.AsyncClient]:
    """Another app on the same database, with engines (and, on SQLite, a writer queue)
    of its own: what a second ``signoff serve`` process is to the database."""
    other = Wiring.from_settings(ctx.settings)
    application = create_app(other.ctx.settings, wiring=other, background=False)
    try:
        async with (
            application.router.lifespan_context(application),
            browser_client(application, "203.0.113.8") as http,
        ):
            yield http
    finally:
        await other.close()


async def test_only_the_newest_link_works(ctx: AppContext, client: httpx.AsyncClient) -> None:
    first = await _issue(ctx)
    newest = await _issue(ctx)  # a restart prints a new link

    page = await client.get(f"/setup/{first}")
    assert page.status_code == 404 and "Setup link not valid" in page.text
    assert "latest start" in page.text
    refused = await client.post(f"/setup/{first}", data=_form("Early"))
    assert refused.status_code == 404
    assert await _counts(ctx) == (0, 0)

    assert (await client.get(f"/setup/{newest}")).status_code == 200
    done = await client.post(f"/setup/{newest}", data=_form("Acme"))
    assert done.status_code == 303
    assert await _counts(ctx) == (1, 1)
    # Once set up, every link (the old one too) says so.
    for token in (first, newest):
        late = await client.post(f"/setup/{token}", data=_form("Late"))
        assert late.status_code == 409 and "Already set up" in late.text
    assert await _counts(ctx) == (1, 1)


async def test_a_refused_form_keeps_the_link_working(
    ctx: AppContext, client: httpx.AsyncClient
) -> None:
    token = await _issue(ctx)
    short = await client.post(f"/setup/{token}", data={**_form("Acme"), "password": "short"})
    assert short.status_code == 400 and "at least 8 characters" in short.text
    assert (await client.post(f"/setup/{token}", data=_form("Acme"))).status_code == 303


async def test_submissions_at_the_same_moment_on_two_replicas_create_one_org(
    ctx: AppContext, client: httpx.AsyncClient
) -> None:
    """Two replicas started together each printed a link; people use both at once."""
    older = await _issue(ctx)
    newest = await _issue(ctx)
    async with _second_replica(ctx) as replica:
        answers = await asyncio.gather(
            *(
                http.post(f"/setup/{token}", data=_form(f"Org{index}"))
                for index, (http, token) in enumerate(
                    [(client, newest), (replica, newest), (client, older), (replica, older)] * 3
                )
            )
        )
    statuses = sorted(answer.status_code for answer in answers)
    assert statuses.count(303) == 1, statuses
    assert set(statuses) <= {303, 404, 409}, statuses
    # Every submission of the newest link that lost says "already set up".
    assert statuses.count(409) >= 5, statuses
    assert await _counts(ctx) == (1, 1)


async def _waits_for_a_writer(ctx: AppContext) -> bool:
    """A write waits for an open write transaction to end: on SQLite for its turn at the
    one writer (group commit), on PostgreSQL for a lock that transaction holds."""
    if ctx.db.group_commit is not None:
        return ctx.db.group_commit._queued == 1
    async with ctx.reading() as uow:
        waiting = await uow.session.scalar(
            text(
                "SELECT count(*) FROM pg_stat_activity"
                " WHERE datname = current_database() AND wait_event_type = 'Lock'"
            )
        )
    return waiting == 1


async def test_an_org_created_meanwhile_ends_a_setup_in_flight(
    ctx: AppContext, client: httpx.AsyncClient
) -> None:
    """``signoff org create`` and the setup form at the same moment: whichever commits
    first wins, and the setup then answers "already set up" (no second admin)."""
    token = await _issue(ctx)
    async with ctx.transaction() as uow:
        await orgs_service.create_org(uow.orgs, "Made by the CLI", utcnow())
        submit = asyncio.create_task(client.post(f"/setup/{token}", data=_form("Acme")))
        # The database holds the submission until this transaction ends.
        await eventually(lambda: _waits_for_a_writer(ctx), "the submission to be held")
        assert not submit.done()
    answer = await submit
    assert answer.status_code == 409 and "Already set up" in answer.text
    assert await _counts(ctx) == (1, 0)


async def test_no_link_once_an_org_exists(ctx: AppContext, client: httpx.AsyncClient) -> None:
    token = await _issue(ctx)
    async with ctx.transaction() as uow:
        await orgs_service.create_org(uow.orgs, "Acme", utcnow())
        assert await dashboard_service.issue_setup_token(uow.orgs, utcnow()) is None
    answer = await client.post(f"/setup/{token}", data=_form("Second"))
    assert answer.status_code == 409
    assert await _counts(ctx) == (1, 0)
