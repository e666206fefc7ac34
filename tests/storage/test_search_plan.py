"""PostgreSQL's list search reads its GIN index (``ix_approval_requests_search``): EXPLAIN
of the very statement a search page runs, on an org with enough requests that a scan of
the org's history would cost more."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg  # type: ignore[import-untyped]
import orjson
import pytest

from signoff.approvals.listing import (
    SEARCH_RANKED_UP_TO,
    ListFilters,
    page_queries,
    read_page,
)
from signoff.approvals.listing.search import search_query
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.storage.asyncpg_connections import asyncpg_dsn
from tests.conftest import Org
from tests.storage.seeding import seed_requests

pytestmark = pytest.mark.anyio

ROWS = 30_000


async def _seed(connection: Any, org_id: uuid.UUID) -> None:
    """``ROWS`` requests of the org, three of which mention a rare word."""
    title = (
        "CASE WHEN n % 10000 = 0 THEN 'Rotate zanzibar keys ' || n "
        "ELSE 'Deploy billing service ' || n END"
    )
    description = "'Routine change number ' || n"
    await seed_requests(connection, org_id, ROWS, title=title, description=description)


# PostgreSQL's plan; SQLite searches its FTS5 table.
@pytest.mark.usefixtures("postgres_only")
async def test_a_search_page_and_its_count_use_the_gin_index_for_a_rare_word(
    ctx: AppContext, org: Org
) -> None:
    plan = page_queries("postgresql", (), frozenset(), True)
    org_id = uuid.UUID(org.id)
    params = {
        "org_id": org_id,
        "now": utcnow(),
        "offset": 0,
        "limit": 20,
        "search_query": search_query("postgresql", ["zanzibar"], org_id),
    }
    dialect = ctx.db.read_engine.dialect
    connection = await asyncpg.connect(asyncpg_dsn(ctx.settings.database_url))
    try:
        await _seed(connection, org_id)
        for query in (plan.page, plan.count):
            compiled = query.for_postgres(dialect)
            rows = await connection.fetch("EXPLAIN " + compiled.sql, *compiled.parameters(params))
            explained = "\n".join(row[0] for row in rows)
            assert "ix_approval_requests_search" in explained, explained
        found = await ctx.db.queries.all(plan.page, params)
        assert len(found) == ROWS // 10_000
        # The count reads the index for a rare word, and walks the org's newest requests
        # for a word in nearly all of them, stopping one past the bound
        # (``postgres_planner._postgres_search_count``): each branch the other leaves is
        # never executed.
        common = SEARCH_RANKED_UP_TO + 1  # counting stops one past the bound
        for word, index_used, total in (("zanzibar", True, 3), ("deploy", False, common)):
            params["search_query"] = search_query("postgresql", [word], org_id)
            compiled = plan.count.for_postgres(dialect)
            rows = await connection.fetch(
                "EXPLAIN (ANALYZE, COSTS OFF) " + compiled.sql, *compiled.parameters(params)
            )
            gin = [row[0] for row in rows if "ix_approval_requests_search" in row[0]]
            assert gin and ("never executed" not in gin[0]) == index_used, (word, gin)
            counted = await ctx.db.queries.all(plan.count, params)
            assert counted[0].total == total, word
        # The common word's page: its newest matches, newest first (walked, not ranked).
        rendered, _ = await read_page(
            ctx.db.queries, org_id, ListFilters(search="deploy"), now=utcnow(), offset=0, limit=5
        )
        titles = [orjson.loads(item)["title"] for item in rendered]
        assert titles == [f"Deploy billing service {n}" for n in range(1, 6)]
    finally:
        await connection.close()
