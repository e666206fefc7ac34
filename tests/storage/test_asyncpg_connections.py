"""The hot path's statements run on asyncpg under SQLAlchemy's adapter (asyncpg_connections.py):
they must commit and roll back with the session, and an upgrade of SQLAlchemy that moves
the adapter's attributes must fail here, naming them."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import bindparam, select
from sqlalchemy.dialects.postgresql.asyncpg import AsyncAdapt_asyncpg_connection

from signoff.context import AppContext
from signoff.models import Organization
from signoff.storage import PreparedQuery, count_in
from signoff.storage.asyncpg_connections import ADAPTER_ATTRIBUTES

pytestmark = pytest.mark.anyio

_RENAME = PreparedQuery(
    Organization.__table__.update()  # type: ignore[attr-defined]
    .where(Organization.__table__.c.id == bindparam("org_id"))  # type: ignore[attr-defined]
    .values(name=bindparam("new_name"))
)
_NAME = PreparedQuery(select(Organization.name).where(Organization.id == bindparam("org_id")))


def test_the_adapter_still_has_the_attributes_we_reach_under() -> None:
    slots = set(AsyncAdapt_asyncpg_connection.__slots__)
    for name in ADAPTER_ATTRIBUTES:
        assert name in slots or hasattr(AsyncAdapt_asyncpg_connection, name), name


async def test_a_prepared_write_commits_and_rolls_back_with_its_session(
    ctx: AppContext, backend: str
) -> None:
    org_id = uuid.uuid4()
    async with ctx.transaction() as uow:
        uow.session.add(Organization(id=org_id, name="Before"))

    with pytest.raises(RuntimeError):
        async with ctx.transaction() as uow:
            assert await count_in(uow.session, _RENAME, {"org_id": org_id, "new_name": "No"}) == 1
            raise RuntimeError("roll back")
    assert (await ctx.db.queries.one(_NAME, {"org_id": org_id})).name == "Before"

    async with ctx.transaction() as uow:
        assert await count_in(uow.session, _RENAME, {"org_id": org_id, "new_name": "Yes"}) == 1
    assert (await ctx.db.queries.one(_NAME, {"org_id": org_id})).name == "Yes"
