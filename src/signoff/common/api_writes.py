"""The API's writes in flight in this process, for background work that can wait a moment.

Why: in ``signoff serve`` the notification sender shares the event loop (and, on SQLite,
the one writer) with the API. Its work is cut into short pieces, but a create that comes
in while a piece runs still waits for it, and a burst of creates with routing on then
answered slower than the same burst with routing off
(docs/decisions/0016-the-senders-work-in-pieces.md). Before each piece the sender waits
for a moment with no API write in flight, never longer than it says, so it can neither
starve nor fall behind its promises.

Only writes are counted: a long poll (a GET that waits for a decision) may stay in flight
for many seconds, and reads do not queue for the writer.
"""

from __future__ import annotations

import asyncio
import contextlib

# After the last write in flight ends: the moment its answer takes to leave.
SETTLE_SECONDS = 0.001


class ApiWrites:
    def __init__(self) -> None:
        self.in_flight = 0
        self._quiet = asyncio.Event()
        self._quiet.set()

    def started(self) -> None:
        self.in_flight += 1
        self._quiet.clear()

    def ended(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self._quiet.set()

    async def wait_for_quiet(self, longest: float) -> None:
        """Until no API write has been in flight for ``SETTLE_SECONDS`` (the last one's
        answer is still being sent when its handler returns), or ``longest`` seconds have
        passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + longest
        while True:
            if self.in_flight:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._quiet.wait(), deadline - loop.time())
            await asyncio.sleep(SETTLE_SECONDS)
            if self.in_flight == 0 or loop.time() >= deadline:
                return
