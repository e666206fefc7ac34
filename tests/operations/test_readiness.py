"""``/readyz`` beyond the database answering: the schema is current, the loops run."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
from sqlalchemy import text

from signoff.context import AppContext
from tests.conftest import assert_error


async def test_readyz_is_503_while_the_schema_is_behind(
    client: httpx.AsyncClient, ctx: AppContext
) -> None:
    assert (await client.get("/readyz")).status_code == 200
    async with ctx.transaction() as uow:
        current = await uow.session.execute(text("SELECT version_num FROM alembic_version"))
        revision = current.scalar_one()
        await uow.session.execute(text("UPDATE alembic_version SET version_num = '0001'"))
    try:
        details = assert_error(await client.get("/readyz"), 503, "SERVICE_UNAVAILABLE")
        assert details["database"] == ["0001"]
        assert revision in details["expected"]
    finally:
        async with ctx.transaction() as uow:
            await uow.session.execute(
                text("UPDATE alembic_version SET version_num = :revision"),
                {"revision": revision},
            )
    assert (await client.get("/readyz")).status_code == 200


async def test_readyz_is_503_when_a_background_loop_has_stopped(
    client: httpx.AsyncClient, app: Any
) -> None:
    assert (await client.get("/readyz")).status_code == 200
    sweep, worker = app.state.background[:2]  # then the notification sender
    worker.cancel()
    await asyncio.gather(worker, return_exceptions=True)
    details = assert_error(await client.get("/readyz"), 503, "SERVICE_UNAVAILABLE")
    assert details == {"stopped": ["delivery worker"]}
    assert not sweep.done()
