"""Direct database access for API tests: arranging the clock, and reading what was stored.

Tests read rows back through the app's own session factory (never a mock) to check what
the API answers against what the database holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select, update

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import ApprovalRequest, AuditEvent
from signoff.storage.sqlite_driver import InlineConnection


@contextlib.asynccontextmanager
async def sqlite_statements(ctx: AppContext) -> AsyncIterator[list[str]]:
    """SQLite: the statements the writer connection runs in the block (a trigger's own
    statements, SQLite's ``-- `` lines, left out)."""
    seen: list[str] = []

    def traced(statement: str) -> None:
        if not statement.startswith("-- "):
            seen.append(statement)

    async with ctx.db.write_engine.connect() as connection:
        driver = (await connection.get_raw_connection()).driver_connection
        assert isinstance(driver, InlineConnection)
        driver._conn.set_trace_callback(traced)
    try:
        yield seen
    finally:
        driver._conn.set_trace_callback(None)


# Settings for modules that need a pending request past its deadline to stay unswept.
NO_SWEEP = {"expiry_sweep_interval_seconds": 3600.0}


async def backdate_expiry(
    ctx: AppContext, request_id: str, *, ago: timedelta = timedelta(seconds=5)
) -> datetime:
    """Move a request's deadline into the past (creation refuses a past ``expires_at``).

    Returns the new deadline, as stored (milliseconds, UTC).
    """
    expires_at = utcnow() - ago
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(ApprovalRequest)
            .where(ApprovalRequest.id == uuid.UUID(request_id))
            .values(expires_at=expires_at)
        )
    return expires_at


async def stored_request(ctx: AppContext, request_id: str) -> ApprovalRequest:
    async with ctx.reading() as uow:
        row = await uow.session.scalar(
            select(ApprovalRequest).where(ApprovalRequest.id == uuid.UUID(request_id))
        )
    assert row is not None
    return row


async def stored_events(ctx: AppContext, request_id: str) -> list[dict[str, Any]]:
    async with ctx.reading() as uow:
        rows = await uow.session.scalars(
            select(AuditEvent)
            .where(AuditEvent.request_id == uuid.UUID(request_id))
            .order_by(AuditEvent.created_at, AuditEvent.id)
        )
        return [
            {"type": e.type, "actor_id": e.actor_id, "data": e.data, "created_at": e.created_at}
            for e in rows
        ]


class CallbackReceiver:
    """A real HTTP receiver on loopback that records what it is sent and answers ``status``.

    Minimal HTTP/1.1 on purpose: it reads one request per connection and closes it.
    """

    def __init__(self, status: int = 200) -> None:
        self.status = status
        self.bodies: list[bytes] = []
        self.headers: list[dict[str, str]] = []
        self._server: asyncio.Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}/hook"

    async def __aenter__(self) -> CallbackReceiver:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")[1:]
            headers = {
                name.strip().lower(): value.strip()
                for name, _, value in (line.partition(":") for line in lines if line)
            }
            body = await reader.readexactly(int(headers.get("content-length", "0")))
            self.headers.append(headers)
            self.bodies.append(body)
            status_line = f"HTTP/1.1 {self.status} X\r\n"
            writer.write(status_line.encode() + b"Content-Length: 0\r\nConnection: close\r\n\r\n")
            await writer.drain()
        finally:
            writer.close()


def python_apart(script: str, database_url: str) -> str:
    """The last line ``script`` prints, run by a fresh interpreter on ``database_url`` with
    no other ``SIGNOFF_`` setting of this process (what a module loads at import shows)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env["SIGNOFF_DATABASE_URL"] = database_url
    env["SIGNOFF_SECRET_KEY"] = "x" * 40
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]
