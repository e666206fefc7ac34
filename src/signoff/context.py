"""Everything one process shares: settings, database, secret box, limiter, waiters."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

from signoff.approvals.search_index import SQLITE_CATCH_UP
from signoff.auth.principal import Principal
from signoff.auth.secrets import hash_api_key, looks_like_api_key
from signoff.common.poison import PoisonedRows
from signoff.common.quiet import ApiWrites
from signoff.common.time import utcnow
from signoff.common.watchers import Watchers
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
from signoff.receipts.keys import KeyRing
from signoff.storage import Database, ListenHub, Notifier, notifies_left_to_caller
from signoff.unit_of_work import RequestChange, UnitOfWork
from signoff.webhooks.dispatcher import FirstAttempt, FirstAttemptPolicy, WebhookDispatcher
from signoff.webhooks.service import outbox_of, start_outbox

# Where PostgreSQL announces a request's change of status (migration 0011's trigger).
REQUEST_CHANNEL = "signoff_requests"


@dataclass
class AppContext:
    settings: Settings
    db: Database
    box: SecretBox
    limiter: RateLimiter
    # Long polls waiting for a request to change, by its id.
    waiters: Watchers[uuid.UUID] = field(init=False)
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
    # PostgreSQL: the one connection hearing other processes' changes (every channel).
    hub: ListenHub = field(init=False)
    # The keys receipts are signed with (receipts/keys.py).
    keys: KeyRing = field(init=False)

    def __post_init__(self) -> None:
        self.keys = KeyRing(self.db, self.box, self.settings.signing_key_refresh_seconds)
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
        self.hub = ListenHub(self.settings.database_url if postgres else None)
        self.live = OrgSignals(self.hub, self.notifier)
        # Decisions made by other processes wake this one's long polls (a trigger's NOTIFY
        # on every status change, migration 0011), heard from the first long poll on.
        self.waiters = Watchers(on_watch=self._hear_other_processes_decide if postgres else None)

    def _hear_other_processes_decide(self) -> None:
        self.hub.listen(REQUEST_CHANNEL, self._decided_elsewhere, self.waiters.notify_all)

    def _decided_elsewhere(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self.waiters.notify(uuid.UUID(payload))

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
        notification for every call."""
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
        if self.notifier is not None:
            await self.notifier.close()
        await self.hub.close()
        await self.webhooks.close()
        await self.db.dispose()
