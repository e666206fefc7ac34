"""Who holds SQLite's writer turn (``storage/group_commit``) in a ``signoff serve``, and for
how long: a measurement, loaded by Python itself at start-up from ``PYTHONPATH``.

    BENCH_WRITER_TURNS=<label> PYTHONPATH=$PWD/bench/writer_turns make bench-compare ...

The path must be absolute (the servers run in a directory of their own), and the
variable's name must not start with SIGNOFF_ (the bench passes on the environment but
those). Every ``signoff serve`` started with it (both builds of a comparison: their
``GroupCommit`` has the same shape) writes ``/tmp/writer-turns-<label>-<pid>.json``
every two seconds and at exit: per second of the run, per caller (the first two frames
outside the storage layer), the turns taken,
the seconds waited for them and the seconds held (a held turn includes the block's own
statements, the event loop's one turn that lets other writers queue behind it, and a
commit in a worker thread); the commits, the writers' blocks they held and their
seconds; SQLITE_BUSY retries. ``python -m bench.writer_turns.summary FILE...`` sums
the seconds of the chain scenario. Nothing is loaded without the variable.
"""

from __future__ import annotations

import os
import sys

_LABEL = os.environ.get("BENCH_WRITER_TURNS")


def _install(label: str) -> None:
    import asyncio
    import atexit
    import json
    import threading
    import time
    from collections import defaultdict
    from typing import Any

    from signoff.storage import group_commit, sqlite_driver

    start = time.time()
    # second -> caller -> [turns, seconds waited, seconds held]
    turns: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(lambda: [0, 0, 0]))
    commits: dict[int, list[float]] = defaultdict(lambda: [0, 0, 0])  # commits, writers, s
    busy: dict[int, int] = defaultdict(int)

    def second() -> int:
        return int(time.time() - start)

    def caller() -> str:
        frame = sys._getframe(3)
        names: list[str] = []
        while frame is not None and len(names) < 2:
            path = frame.f_code.co_filename
            if "/signoff/" in path and not any(
                part in path for part in ("/storage/", "unit_of_work", "contextlib")
            ):
                names.append(f"{path.split('/signoff/', 1)[1]}:{frame.f_code.co_name}")
            frame = frame.f_back
        return " < ".join(names) or "?"

    class TimedTurn(asyncio.Lock):
        held_by = "?"
        taken_at = 0.0
        waited = 0.0

        async def acquire(self) -> bool:
            who = caller()
            asked = time.perf_counter()
            await super().acquire()
            self.held_by, self.taken_at = who, time.perf_counter()
            self.waited = self.taken_at - asked
            return True

        def release(self) -> None:
            row = turns[second()][self.held_by]
            row[0] += 1
            row[1] += self.waited
            row[2] += time.perf_counter() - self.taken_at
            super().release()

    plain_init = group_commit.GroupCommit.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        plain_init(self, *args, **kwargs)
        self._turn = TimedTurn()

    plain_commit = group_commit.GroupCommit._commit

    async def commit(self: Any, batch: Any) -> None:
        began, writers = time.perf_counter(), batch.writers
        try:
            await plain_commit(self, batch)
        finally:
            row = commits[second()]
            row[0] += 1
            row[1] += writers
            row[2] += time.perf_counter() - began

    plain_until = sqlite_driver.Retrier._until_not_busy

    async def until_not_busy(self: Any, attempt: Any, *, refused_once: bool) -> Any:
        if refused_once:
            busy[second()] += 1
        return await plain_until(self, attempt, refused_once=refused_once)

    group_commit.GroupCommit.__init__ = init  # type: ignore[method-assign]
    group_commit.GroupCommit._commit = commit  # type: ignore[method-assign]
    sqlite_driver.Retrier._until_not_busy = until_not_busy  # type: ignore[method-assign]

    def dump() -> None:
        snapshot = {
            "turns": {s: dict(row) for s, row in list(turns.items())},
            "commits": dict(commits),
            "busy": dict(busy),
        }
        with open(f"/tmp/writer-turns-{label}-{os.getpid()}.json", "w") as out:
            json.dump(snapshot, out)

    def every_two_seconds() -> None:
        while True:
            time.sleep(2)
            try:
                dump()
            except Exception:  # a dict changed size meanwhile: the next one will do
                pass

    threading.Thread(target=every_two_seconds, daemon=True).start()
    atexit.register(dump)


if _LABEL and "serve" in sys.argv[1:3]:
    _install(_LABEL)
