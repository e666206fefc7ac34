"""PostgreSQL's create statement reads none of its org's other requests, with an
idempotency key or without, whatever plan the server keeps for it: run as a prepared
statement with a generic plan (what a pooled connection settles on after five runs),
counted by the transaction's own table statistics. A generic plan of the key's lookup
read every request of the org through the (org_id, number) index, filtering each by
key; the lookup now can use the key's index only (migration 0056)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from signoff.approvals.repository import _create_alone
from signoff.approvals.typed_rows import new_row
from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.notifications.planning.repository import created_plan_from
from signoff.storage.asyncpg_connections import asyncpg_dsn
from tests.conftest import Org
from tests.storage.seeding import seed_requests

pytestmark = [pytest.mark.anyio, pytest.mark.usefixtures("postgres_only")]

ROWS = 150
# The requests a create reads: its event's foreign key check of the new row only.
_READ = (
    "SELECT coalesce(sum(seq_tup_read), 0) + coalesce(sum(idx_tup_fetch), 0) "
    "FROM pg_stat_xact_user_tables WHERE relname = 'approval_requests'"
)


def _params(org_id: uuid.UUID, connection_id: uuid.UUID, key: str | None) -> dict[str, Any]:
    now = utcnow()
    row = new_row(
        {
            "id": new_id(),
            "org_id": org_id,
            "connection_id": connection_id,
            "title": "Deploy",
            "description": "Rolls out the billing service",
            "metadata": {},
            "priority": "medium",
            "idempotency_key": key,
            "created_at": now,
            "updated_at": now,
        }
    )
    return {
        **row,
        "event_id": new_id(),
        "event_type": "request.created",
        "event_actor_id": None,
        "event_data": {},
        "event_created_at": now,
        "plan_id": new_id(),
        "plan_created_at": now,
    }


async def _rows_read(ctx: AppContext, org: Org, key: str | None) -> tuple[int, int]:
    """The org's requests one create reads (its statement's generic plan, after warm-up
    runs that a pooled connection also makes), and the requests it wrote."""
    org_id = uuid.UUID(org.id)
    compiled = _create_alone(False, created_plan_from, False, key is not None).for_postgres(
        ctx.db.read_engine.dialect
    )
    connection = await asyncpg.connect(asyncpg_dsn(ctx.settings.database_url))
    try:
        # Not analyzed, as a new deployment's table: the planner guesses an org's requests
        # to be a row or two, and the (org_id, number) index looks as good as the key's.
        connector = await seed_requests(connection, org_id, ROWS, analyze=False)
        await connection.execute("SET plan_cache_mode = force_generic_plan")
        statement = await connection.prepare(compiled.sql)
        # The org's first create makes its number sequence, reading its last number.
        await statement.fetch(*compiled.parameters(_params(org_id, connector, None)))
        transaction = connection.transaction()
        await transaction.start()
        try:
            before = await connection.fetchval(_READ)
            (written,) = await statement.fetch(
                *compiled.parameters(_params(org_id, connector, key))
            )
            read = await connection.fetchval(_READ) - before
        finally:
            await transaction.rollback()
    finally:
        await connection.close()
    return int(read), int(written["requests"])


async def test_a_create_without_a_key_reads_none_of_the_orgs_requests(
    ctx: AppContext, org: Org
) -> None:
    read, written = await _rows_read(ctx, org, None)
    assert written == 1
    assert read <= 1, read


async def test_a_create_with_a_key_reads_none_of_the_orgs_other_requests(
    ctx: AppContext, org: Org
) -> None:
    read, written = await _rows_read(ctx, org, "deploy-billing-1")
    assert written == 1
    assert read <= 1, read
