"""The runtime every use case runs in: settings, database, secret box and transactions.

Nothing else lives here. The services a commit hands work to (long polls, the dashboard's
live pages, the notification sender, the callbacks' first attempts) are built in
``signoff/wiring.py`` and given to ``AppContext`` as the small protocols below, so this
module knows none of them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Protocol

from starlette.requests import Request

from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.receipts.keys import KeyRing
from signoff.storage import (
    PLAN_CHANNEL,
    REQUEST_CHANNEL,
    WROTE_NOTIFICATIONS,
    Database,
    Notifier,
    notifies_left_to_caller,
)
from signoff.unit_of_work import RequestChange, UnitOfWork
from signoff.webhooks.service import (
    FirstAttempt,
    FirstAttemptPolicy,
    FirstAttempts,
    Outbox,
    outbox_of,
    start_outbox,
)


class Publisher(Protocol):
    """Told of the requests a commit created or changed (long polls, live pages)."""

    def publish(self, changes: Sequence[RequestChange]) -> None: ...


class Wakeup(Protocol):
    """Set when a commit wrote notifications: the sender sends them now."""

    def set(self) -> None: ...


class FirstAttemptStarter(Protocol):
    """Starts attempt 1 of the callbacks a committed transaction wrote."""

    async def after_commit(self, outbox: Outbox, how: FirstAttemptPolicy) -> FirstAttempts: ...


@dataclass(frozen=True)
class AfterCommit:
    """Who a commit hands its work to, once and only for a commit (``wiring.py``)."""

    changes: Publisher
    notifications: Wakeup
    callbacks: FirstAttemptStarter


@dataclass
class AppContext:
    settings: Settings
    db: Database
    box: SecretBox
    after_commit: AfterCommit
    # PostgreSQL: tells other processes, after each commit, what it changed (migration 0019).
    notifier: Notifier | None = None
    # The keys receipts are signed with (receipts/keys.py): secrets of the runtime, as the box.
    keys: KeyRing = field(init=False)

    def __post_init__(self) -> None:
        self.keys = KeyRing(self.db, self.box, self.settings.signing_key_refresh_seconds)

    @asynccontextmanager
    async def transaction(
        self, first_attempt: FirstAttemptPolicy = FirstAttempt.NOW
    ) -> AsyncIterator[UnitOfWork]:
        """A write transaction, committed when the block ends without an exception.

        What must follow the commit happens here, once, and only for a commit: watchers
        of the changed requests are woken, the notification sender too, and the callbacks
        the transaction wrote get their attempt 1 as ``first_attempt`` says (its outcome
        in ``uow.first_attempts``). A rolled-back transaction's callbacks are never sent."""
        # Signing a receipt reads nothing: the key is loaded (or looked for anew) first.
        await self.keys.ready()
        async with self.db.write_transaction() as session:
            # Callbacks written by this transaction are held by it for this long.
            outbox = start_outbox(session, self.settings.delivery_lease_seconds)
            uow = UnitOfWork(
                session,
                self.db.dialect,
                outbox,
                self.db.queries,
                self.keys,
                self.box,
                self.settings.public_url,
            )
            try:
                yield uow
            except BaseException:
                if self.notifier is not None and notifies_left_to_caller(session):
                    # A statement of the block may have committed on its own, in
                    # autocommit, before the raise: others are told anyway, and a wake-up
                    # for nothing costs its listener one read.
                    self._tell_other_processes(
                        uow.changes, bool(session.info.get(WROTE_NOTIFICATIONS))
                    )
                raise
            # Read before the block ends: on SQLite the session is shared with other
            # writers (group commit), and its ``info`` is emptied for the next one.
            wrote_notifications = session.info.pop(WROTE_NOTIFICATIONS, False)
            notifies_left = notifies_left_to_caller(session)
        self.after_commit.changes.publish(uow.changes)
        if wrote_notifications:
            self.after_commit.notifications.set()  # committed: send them now
        if self.notifier is not None and notifies_left:
            self._tell_other_processes(uow.changes, wrote_notifications)
        if uow.outbox.claimed:
            uow.first_attempts = await self.after_commit.callbacks.after_commit(
                uow.outbox, first_attempt
            )

    def _tell_other_processes(
        self, changes: Sequence[RequestChange], wrote_notifications: bool
    ) -> None:
        """PostgreSQL: what the triggers of migrations 0011 and 0015 send, for a
        transaction that wrote on the hot path's connections, where they send nothing
        (migration 0019). As 0011's, a request is named only when its status changed (a
        decision, a cancellation, an expiry: ``final``): its listeners are long polls,
        which answer only once the request has left pending, so a create or a vote that
        leaves it pending would only cost each of them a read, and the database a
        notification for every call."""
        assert self.notifier is not None
        for change in changes:
            if change.final:
                self.notifier.send(REQUEST_CHANNEL, str(change.request_id))
        if wrote_notifications:
            self.notifier.send(PLAN_CHANNEL)

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[UnitOfWork]:
        async with self.db.read_session() as session:
            yield UnitOfWork(session, self.db.dialect, outbox_of(session))

    async def close(self) -> None:
        if self.notifier is not None:
            await self.notifier.close()
        await self.db.dispose()


def context_of(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx
