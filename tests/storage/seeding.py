"""An org's history for PostgreSQL plan tests: many pending requests written by one
statement, straight into the table."""

from __future__ import annotations

import uuid
from typing import Any


async def seed_requests(
    connection: Any,
    org_id: uuid.UUID,
    rows: int,
    *,
    title: str = "'Deploy ' || n",
    description: str = "'Change ' || n",
    analyze: bool = True,
) -> uuid.UUID:
    """``rows`` pending requests of the org on its first connection, without idempotency
    keys, numbered from 1001 (``title`` and ``description``: SQL of the row's ``n``),
    then ANALYZE unless told not to; the connection's id."""
    connector: uuid.UUID = await connection.fetchval(
        "SELECT id FROM connections WHERE org_id = $1 LIMIT 1", org_id
    )
    await connection.execute(
        f"""
        INSERT INTO approval_requests (
            id, org_id, connection_id, title, description, status, priority, metadata,
            required_approvals, current_approvals, is_sequential, created_at, updated_at,
            comments_count, has_steps, number)
        SELECT gen_random_uuid(), $1, $2, {title}, {description}, 'pending',
               'medium', '{{}}'::jsonb, 1, 0, false, now() - n * interval '1 second', now(),
               0, false, 1000 + n
        FROM generate_series(1, $3) AS n
        """,
        org_id,
        connector,
        rows,
    )
    if analyze:
        await connection.execute("ANALYZE approval_requests")
    return connector
