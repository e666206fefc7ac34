"""Everything one process shares: settings, database, secret box, limiter, waiters."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field

from signoff.approvals.search_index import SQLITE_CATCH_UP
from signoff.auth.principal import Principal
from signoff.auth.secrets import hash_api_key, looks_like_api_key
from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.dashboard.live import OrgSignals
from signoff.notifications.repository import WROTE_NOTIFICATIONS
from signoff.notifications.sender import NotificationSender
from signoff.oauth.credentials import hash_token, looks_like_access_token
from signoff.orgs.repository import PrincipalsByKey
from signoff.ratelimit.limiter import RateLimiter
from signoff.storage import Database
from signoff.unit_of_work import RequestChange, UnitOfWork
from signoff.webhooks.dispatcher import WebhookDispatcher
from signoff.webhooks.service import outbox_of, start_outbox


class RequestWaiters:
    """Wakes long-polling readers of a request the moment this process changes it.

    A reader registers with ``watch`` *before* it reads, so a change that commits between
    its read and its wait still wakes it. Changes made by other processes are noticed by
    the readers' periodic re-check.

    ``close`` wakes every reader for good as the server shuts down: each answers with the
    request's current state instead of holding the shutdown up until its wait ends.
    """

    def __init__(self) -> None:
        self._watchers: dict[uuid.UUID, set[asyncio.Event]] = {}
        self.closing = False

    @contextmanager
    def watch(self, request_id: uuid.UUID) -> Iterator[asyncio.Event]:
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
        for watchers in self._watchers.values():
            for event in watchers:
                event.set()

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
    # Wakes the dashboard's open pages of an org when one of its requests changes.
    live: OrgSignals = field(init=False)
    # Notifications: claims, sends and records (notifications/sender.py).
    notifications: NotificationSender = field(init=False)

    def __post_init__(self) -> None:
        self.webhooks = WebhookDispatcher(self.settings, self.db, self.box, self.poisoned)
        self.principals = PrincipalsByKey(self.db.queries)
        self.notifications = NotificationSender(
            self.settings, self.db, self.box, self.webhooks.clients, self.webhooks.policy
        )
        postgres = self.db.dialect == "postgresql"
        self.live = OrgSignals(self.settings.database_url if postgres else None)

    @classmethod
    def from_settings(cls, settings: Settings) -> AppContext:
        return cls(
            settings=settings,
            db=Database(settings.database_url, sqlite_before_commit=SQLITE_CATCH_UP),
            box=SecretBox.from_settings(settings),
            limiter=RateLimiter(settings.redis_url),
        )

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[UnitOfWork]:
        """A write transaction, committed when the block ends without an exception."""
        async with self.db.write_transaction() as session:
            # Callbacks written by this transaction are held by it for this long.
            outbox = start_outbox(session, self.settings.delivery_lease_seconds)
            uow = UnitOfWork(session, self.db.dialect, outbox)
            yield uow
        self.publish(uow.changes)
        if session.info.pop(WROTE_NOTIFICATIONS, False):
            self.notifications.wakeup.set()  # committed: send them now

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

    async def authenticate(self, token: str) -> Principal | None:
        if looks_like_api_key(token):
            return await self.principals.find(hash_api_key(token))
        if looks_like_access_token(token):
            # An OAuth access token: the consenting user, the token's scopes, and the
            # rate limit of the connection that owns the client (decisions.md section 1).
            async with self.reading() as uow:
                return await uow.oauth.find_principal_by_access_token_hash(
                    hash_token(token), utcnow()
                )
        return None

    async def close(self) -> None:
        await self.live.close()
        await self.webhooks.close()
        await self.db.dispose()
