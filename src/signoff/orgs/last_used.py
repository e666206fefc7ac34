"""When each connection's API key was last used, written without a write per API call.

Every API call authenticates, and a write on each would cost every call a transaction
(and, on SQLite, empty the cache of principals, ``PrincipalsByKey``, at every call). So
a process records a connection's use at most once per ``INTERVAL`` (an in-memory map of
when it last did), in a task of its own after the call has been authenticated: the call
never waits for it, and a failed write is logged, never the call's error. The ``UPDATE``
itself skips a row recorded less than ``INTERVAL`` ago, so replicas that each record
once a minute still write about once a minute between them. ``last_used_at`` therefore
lags the last call by up to ``INTERVAL`` (docs/dashboard.md, *Admin pages*).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from datetime import datetime, timedelta

from sqlalchemy import or_, update

from signoff.common.time import utcnow
from signoff.models import Connection
from signoff.storage import Database

logger = logging.getLogger(__name__)


class ConnectionUse:
    """Records ``connections.last_used_at``: see the module's docstring."""

    INTERVAL = timedelta(seconds=60)
    # Connections remembered at most; past it the map starts over (a write each, once).
    MAX_CONNECTIONS = 100_000

    def __init__(self, db: Database) -> None:
        self._db = db
        # Monotonic time this process last recorded each connection's use.
        self._recorded: dict[uuid.UUID, float] = {}
        self._writes: set[asyncio.Task[None]] = set()

    def used(self, connection_id: uuid.UUID) -> None:
        """A call was authenticated with the connection's API key (cheap: a dict lookup,
        and a write at most once per interval, off the caller's path)."""
        now = time.monotonic()
        last = self._recorded.get(connection_id)
        if last is not None and now - last < self.INTERVAL.total_seconds():
            return
        if len(self._recorded) >= self.MAX_CONNECTIONS:
            self._recorded.clear()
        self._recorded[connection_id] = now
        task = asyncio.get_running_loop().create_task(self._record(connection_id, utcnow()))
        self._writes.add(task)
        task.add_done_callback(self._writes.discard)

    async def _record(self, connection_id: uuid.UUID, at: datetime) -> None:
        try:
            async with self._db.write_transaction() as session:
                await session.execute(
                    update(Connection)
                    .where(
                        Connection.id == connection_id,
                        or_(
                            Connection.last_used_at.is_(None),
                            Connection.last_used_at < at - self.INTERVAL,
                        ),
                    )
                    .values(last_used_at=at)
                    .execution_options(synchronize_session=False)
                )
        except Exception as exc:
            # Lost: a call after the interval records it. Not retried sooner, so that a
            # database in trouble is not sent a write per call.
            logger.warning("recording the use of connection %s failed (%r)", connection_id, exc)

    async def settled(self) -> None:
        """Wait for the writes under way (tests; the end of the process)."""
        if self._writes:
            await asyncio.wait(list(self._writes), timeout=5)
