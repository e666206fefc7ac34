"""PostgreSQL's unfiltered list page reads the page's requests and the org's kept count
(migration 0018), in one statement: EXPLAIN ANALYZE of the very statement the page runs,
on an org whose history is far longer than a page."""

from __future__ import annotations

import re
import uuid
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import pytest

from signoff.approvals.listing import ListFilters, page_queries, read_page
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.storage.asyncpg_connections import asyncpg_dsn
from tests.conftest import Org

pytestmark = pytest.mark.anyio

ROWS = 30_000
_ROWS_READ = re.compile(r"on approval_requests .*actual rows=(\d+) loops=(\d+)")


async def _seed(connection: Any, org_id: uuid.UUID) -> None:
    """``ROWS`` requests of the org, written by one statement."""
    connector = await connection.fetchval(
        "SELECT id FROM connections WHERE org_id = $1 LIMIT 1", org_id
    )
    await connection.execute(
        """
        INSERT INTO approval_requests (
            id, org_id, connection_id, title, description, status, priority, metadata,
            required_approvals, current_approvals, is_sequential, created_at, updated_at,
            comments_count, has_steps, number)
        SELECT gen_random_uuid(), $1, $2, 'Deploy ' || n, 'Change ' || n, 'pending',
               'medium', '{}'::jsonb, 1, 0, false, now() - n * interval '1 second', now(),
               0, false, 1000 + n
        FROM generate_series(1, $3) AS n
        """,
        org_id,
        connector,
        ROWS,
    )
    await connection.execute("ANALYZE approval_requests")


# PostgreSQL's plan; SQLite's count is kept since 0005 (test_list_plans).
@pytest.mark.usefixtures("postgres_only")
async def test_an_unfiltered_page_reads_its_rows_and_the_kept_count(
    ctx: AppContext, org: Org
) -> None:
    plan = page_queries("postgresql", (), frozenset(), False)
    assert plan.page_and_total is not None
    org_id = uuid.UUID(org.id)
    params = {"org_id": org_id, "now": utcnow(), "offset": 40, "limit": 20}
    compiled = plan.page_and_total.for_postgres(ctx.db.read_engine.dialect)
    connection = await asyncpg.connect(asyncpg_dsn(ctx.settings.database_url))
    try:
        await _seed(connection, org_id)
        rows = await connection.fetch(
            "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " + compiled.sql,
            *compiled.parameters(params),
        )
    finally:
        await connection.close()
    explained = "\n".join(row[0] for row in rows)
    assert "approval_request_counts" in explained, explained
    # Only the page's reach (offset and limit) of the org's history is read.
    read = [int(rows) * int(loops) for rows, loops in _ROWS_READ.findall(explained)]
    assert read and sum(read) <= 60, explained

    rendered, total = await read_page(
        ctx.db.queries, org_id, ListFilters(), now=utcnow(), offset=40, limit=20
    )
    assert len(rendered) == 20 and total == ROWS
