"""Timing tests on a clock the test owns: an event loop whose time moves only when it has
nothing to do but wait for its next timer, and then jumps straight to it.

What code under test measures with ``loop.time()`` and waits for with ``asyncio.sleep``
or ``asyncio.wait_for`` then runs in no real time, and its durations come out exact,
whatever the load on the machine: a test asserts "it returned after exactly the settle
time", not "it returned in under half a second of wall-clock time".
"""

from __future__ import annotations

import asyncio
import functools
import selectors
from collections.abc import Callable, Coroutine
from typing import Any


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """Ready callbacks run first, as on any loop; when only timers are left, the clock is
    moved to the next one instead of sleeping until it is due."""

    def __init__(self) -> None:
        super().__init__()
        self._now = 0.0
        selector: selectors.BaseSelector = self._selector  # type: ignore[attr-defined]
        wait = selector.select

        def select(timeout: float | None = None) -> list[tuple[Any, int]]:
            if timeout is None:  # no timer at all: only I/O can wake the loop
                return wait(None)
            self._now += timeout
            return wait(0)

        selector.select = select  # type: ignore[method-assign]

    def time(self) -> float:
        return self._now


# A test still running after this much virtual time waits for something that never
# comes: it fails (in no real time) instead of hanging.
VIRTUAL_TIMEOUT_SECONDS = 3600.0


def in_virtual_time(
    test: Callable[[], Coroutine[Any, Any, None]],
) -> Callable[[], None]:
    """Runs an async test (without fixtures) on a ``VirtualTimeLoop`` of its own."""

    async def bounded() -> None:
        async with asyncio.timeout(VIRTUAL_TIMEOUT_SECONDS):
            await test()

    @functools.wraps(test)
    def run() -> None:
        with asyncio.Runner(loop_factory=VirtualTimeLoop) as runner:
            runner.run(bounded())

    return run
