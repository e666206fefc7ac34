"""PostgreSQL notifications (LISTEN) on a connection of their own, reconnected when lost."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from signoff.storage.asyncpg_shape import asyncpg_dsn

logger = logging.getLogger(__name__)
RECONNECT_SECONDS = 5.0


class ChannelListener:
    """Calls ``on_payload`` with each notification's payload on ``channel``, and
    ``on_connect`` each time listening (re)starts: notifications sent while nobody
    listened are lost, so the caller looks again then."""

    def __init__(
        self,
        database_url: str,
        channel: str,
        on_payload: Callable[[str], None],
        on_connect: Callable[[], None] = lambda: None,
    ) -> None:
        self._dsn = asyncpg_dsn(database_url)
        self._channel = channel
        self._on_payload = on_payload
        self._on_connect = on_connect
        self._connection: Any = None
        self._task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._keep_listening(), name=f"LISTEN {self._channel}")

    async def _keep_listening(self) -> None:
        while True:
            if not self.alive:
                await self._connect()
            await asyncio.sleep(RECONNECT_SECONDS)

    async def _connect(self) -> None:
        import asyncpg  # type: ignore[import-untyped]

        await self._close_connection()
        try:
            self._connection = await asyncpg.connect(self._dsn)
            await self._connection.add_listener(self._channel, self._notified)
        except Exception as exc:
            logger.warning("LISTEN %s unavailable (%s); re-reading instead", self._channel, exc)
            await self._close_connection()
            return
        self._on_connect()

    def _notified(self, _connection: object, _pid: int, _channel: str, payload: str) -> None:
        self._on_payload(payload)

    async def _close_connection(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception):
                await connection.close(timeout=2)

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._close_connection()
