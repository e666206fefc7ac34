"""Everything one process shares: settings, database, secret box, limiter, waiters."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

from signoff.approvals.search_index import SQLITE_CATCH_UP
from signoff.auth.principal import Principal
from signoff.auth.secrets import hash_api_key, looks_like_api_key
from signoff.common.poison import PoisonedRows
from signoff.common.quiet import ApiWrites
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.dashboard.live import OrgSignals
from signoff.notifications.repository import NOTIFY_CHANNEL as PLAN_CHANNEL
from signoff.notifications.repository import WROTE_NOTIFICATIONS
from signoff.notifications.sender import NotificationSender
from signoff.oauth.credentials import hash_token, looks_like_access_token
from signoff.orgs.last_used import ConnectionUse
from signoff.orgs.repository import PrincipalsByKey
from signoff.ratelimit.limiter import RateLimiter
from signoff.storage import ChannelListener, Database, Notifier, notifies_left_to_caller
from signoff.unit_of_work import RequestChange, UnitOfWork
from signoff.webhooks.dispatcher import FirstAttempt, FirstAttemptPolicy, WebhookDispatcher
from signoff.webhooks.service import outbox_of, start_outbox

# Where PostgreSQL announces a request's change of status (migration 0011's trigger).
REQUEST_CHANNEL = "signoff_requests"


class RequestWaiters:
    """Wakes long-polling readers of a request the moment this process changes it.

    A reader registers with ``watch`` *before* it reads, so a change that commits between
    its read and its wait still wakes it. On PostgreSQL, changes made by other processes
    (another replica, a worker's expiry sweep) wake it too: a trigger notifies
    ``signoff_requests`` with the request's id when its status changes (migration 0011),
    which a LISTEN connection of this process, opened with the first ``watch``, hands to
    ``notify``. On SQLite, and while that connection is down, the readers' periodic
    re-check notices them.

    ``close`` wakes every reader for good as the server shuts down: each answers with the
    request's current state instead of holding the shutdown up until its wait ends.
    """

    def __init__(self) -> None:
        self._watchers: dict[uuid.UUID, set[asyncio.Event]] = {}
        self.closing = False
        self._listener: ChannelListener | None = None

    def listen_on(self, database_url: str) -> None:
        """Listen for other processes' changes on this PostgreSQL database, from the first
        ``watch`` on (it runs in the event loop)."""
        self._listener = ChannelListener(
            database_url, REQUEST_CHANNEL, self._notified, on_connect=self._wake_all
        )

    def _notified(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self.notify(uuid.UUID(payload))

    def _wake_all(self) -> None:
        """Listening (re)started: what changed meanwhile went unnoticed, so all look again."""
        for watchers in self._watchers.values():
            for event in watchers:
                event.set()

    async def stop_listening(self) -> None:
        if self._listener is not None:
            await self._listener.close()

    @contextmanager
    def watch(self, request_id: uuid.UUID) -> Iterator[asyncio.Event]:
        if self._listener is not None:
            self._listener.start()
        event = asyncio.Event()
        self._watchers.setdefault(request_id, set()).add(event)
        try:
            yield event
        finally:
            watchers = self._watchers.get(request_id)
            if watchers is not None:
                watchers.discard(event)
                if not watchers:
                    del self._watchers[request_id]

    def notify(self, request_id: uuid.UUID) -> None:
        for event in self._watchers.get(request_id, ()):
            event.set()

    def close(self) -> None:
        self.closing = True
        self._wake_all()

    def __len__(self) -> int:
        return len(self._watchers)

    def waiting(self) -> int:
        """Readers waiting now (several may watch one request)."""
        return sum(len(watchers) for watchers in self._watchers.values())


@dataclass
class AppContext:
    settings: Settings
    db: Database
    box: SecretBox
    limiter: RateLimiter
    waiters: RequestWaiters = field(default_factory=RequestWaiters)
    # Rows background jobs could not process, parked so they hold no batch (poison.py).
    poisoned: PoisonedRows = field(default_factory=PoisonedRows)
    # Callback attempts, claims and records (webhooks/dispatcher.py).
    webhooks: WebhookDispatcher = field(init=False)
    # Who an API key is, read once per state of the database (orgs/repository.py).
    principals: PrincipalsByKey = field(init=False)
    # When each connection's API key was last used, written once a minute at most.
    connection_use: ConnectionUse = field(init=False)
    # Wakes the dashboard's open pages of an org when one of its requests changes.
    live: OrgSignals = field(init=False)
    # Notifications: claims, sends and records (notifications/sender.py).
    notifications: NotificationSender = field(init=False)
    # PostgreSQL: tells other processes, after each commit, what it changed (migration 0019).
    notifier: Notifier | None = field(init=False)

    def __post_init__(self) -> None:
        self.webhooks = WebhookDispatcher(self.settings, self.db, self.box, self.poisoned)
        self.principals = PrincipalsByKey(self.db.queries)
        self.connection_use = ConnectionUse(self.db)
        # Counted by the API's guard; the sender's pieces wait for a quiet moment.
        self.api_writes = ApiWrites()
        self.notifications = NotificationSender(
            self.settings,
            self.db,
            self.box,
            self.webhooks.clients,
            self.webhooks.policy,
            self.poisoned,
            api_writes=self.api_writes,
        )
        postgres = self.db.dialect == "postgresql"
        self.notifier = Notifier(self.settings.database_url) if postgres else None
        self.live = OrgSignals(self.settings.database_url if postgres else None, self.notifier)
        if postgres:
            # Decisions made by other processes wake this one's long polls (a trigger's
            # NOTIFY on every status change, migration 0011).
            self.waiters.listen_on(self.settings.database_url)

    @classmethod
    def from_settings(cls, settings: Settings) -> AppContext:
        return cls(
            settings=settings,
            db=Database(settings.database_url, sqlite_before_commit=SQLITE_CATCH_UP),
            box=SecretBox.from_settings(settings),
            limiter=RateLimiter(settings.redis_url),
        )

    @asynccontextmanager
    async def transaction(
        self, first_attempt: FirstAttemptPolicy = FirstAttempt.NOW
    ) -> AsyncIterator[UnitOfWork]:
        """A write transaction, committed when the block ends without an exception.

        What must follow the commit happens here, once, and only for a commit: watchers
        of the changed requests are woken, the notification sender too, and the callbacks
        the transaction wrote get their attempt 1 as ``first_attempt`` says (its outcome
        in ``uow.first_attempts``). A rolled-back transaction's callbacks are never sent."""
        async with self.db.write_transaction() as session:
            # Callbacks written by this transaction are held by it for this long.
            outbox = start_outbox(session, self.settings.delivery_lease_seconds)
            uow = UnitOfWork(session, self.db.dialect, outbox, self.db.queries)
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
        self.publish(uow.changes)
        if wrote_notifications:
            self.notifications.wakeup.set()  # committed: send them now
        if self.notifier is not None and notifies_left:
            self._tell_other_processes(uow.changes, wrote_notifications)
        if uow.outbox.claimed:
            uow.first_attempts = await self.webhooks.after_commit(uow.outbox, first_attempt)

    def _tell_other_processes(
        self, changes: Sequence[RequestChange], wrote_notifications: bool
    ) -> None:
        """PostgreSQL: what the triggers of migrations 0011 and 0015 send, for a
        transaction that wrote on the hot path's connections, where they send nothing
        (migration 0019). As 0011's, a request is named only when its status changed (a
        decision, a cancellation, an expiry: ``final``): its listeners are long polls,
        which answer only once the request has left pending, so a create or a vote that
        leaves it pending would only cost each of them a read, and the database a
        notification for every call (docs/engineering-log.md, *Issue 24: where
        PostgreSQL's time goes in a chain*)."""
        assert self.notifier is not None
        for change in changes:
            if change.final:
                self.notifier.send(REQUEST_CHANNEL, str(change.request_id))
        if wrote_notifications:
            self.notifier.send(PLAN_CHANNEL)

    def publish(self, changes: Sequence[RequestChange]) -> None:
        """Tell this process's watchers (long polls) of requests a commit changed, and the
        dashboard's live pages of their orgs (every replica's, on PostgreSQL)."""
        for change in changes:
            self.waiters.notify(change.request_id)
        for org_id in {change.org_id for change in changes}:
            self.live.request_changed(org_id)

    @asynccontextmanager
    async def reading(self) -> AsyncIterator[UnitOfWork]:
        async with self.db.read_session() as session:
            yield UnitOfWork(session, self.db.dialect, outbox_of(session))

    def remembered_principal(self, token: str) -> Principal | None:
        """On PostgreSQL, the principal of an API key as this process last read it, for a
        call whose first statement confirms it (``PrincipalCheck``); else None."""
        if self.db.is_sqlite or not looks_like_api_key(token):
            return None  # SQLite's ``authenticate`` answers from memory; OAuth reads afresh
        principal = self.principals.remembered(hash_api_key(token))
        if principal is not None:
            self.connection_use.used(principal.connection_id)
        return principal

    def forget_principal(self, token: str) -> None:
        if looks_like_api_key(token):
            self.principals.forget(hash_api_key(token))

    async def authenticate(self, token: str) -> Principal | None:
        if looks_like_api_key(token):
            principal = await self.principals.find(hash_api_key(token))
            if principal is not None:
                self.connection_use.used(principal.connection_id)
            return principal
        if looks_like_access_token(token):
            # An OAuth access token: the consenting user, the token's scopes, and the
            # rate limit of the connection that owns the client (decisions.md section 1).
            async with self.reading() as uow:
                return await uow.oauth.find_principal_by_access_token_hash(
                    hash_token(token), utcnow()
                )
        return None

    async def close(self) -> None:
        await self.connection_use.settled()
        await self.live.close()
        if self.notifier is not None:
            await self.notifier.close()
        await self.waiters.stop_listening()
        await self.webhooks.close()
        await self.db.dispose()
