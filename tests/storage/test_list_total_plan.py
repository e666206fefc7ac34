"""PostgreSQL's unfiltered list page reads the page's requests and the org's kept count
(migration 0018), in one statement: EXPLAIN ANALYZE of the very statement the page runs,
on an org whose history is far longer than a page."""

from __future__ import annotations

import re
import uuid

import asyncpg  # type: ignore[import-untyped]
import pytest

from signoff.approvals.listing import ListFilters, page_queries, read_page
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.storage.asyncpg_connections import asyncpg_dsn
from tests.conftest import Org
from tests.storage.seeding import seed_requests

pytestmark = pytest.mark.anyio

ROWS = 30_000
_ROWS_READ = re.compile(r"on approval_requests .*actual rows=(\d+) loops=(\d+)")


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
        await seed_requests(connection, org_id, ROWS)
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
