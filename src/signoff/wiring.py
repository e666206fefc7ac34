"""The process's services, built once, in one place, and handed to what needs each.

``AppContext`` (context.py) is the runtime use cases run in: settings, database, secret
box, transactions. The services here are what the app, the CLI and the worker run besides:
each is given to its user explicitly (a worker loop, the API's guard) or read from
``request.app.state.wiring`` by an endpoint (``wiring_of``). A commit reaches the ones it
hands work to through ``AppContext.after_commit``, wired below.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.requests import Request

from signoff.approvals.search_index import SQLITE_CATCH_UP
from signoff.auth.callers import Callers
from signoff.common.api_writes import ApiWrites
from signoff.common.poison import PoisonedRows
from signoff.common.watchers import Watchers
from signoff.config import Settings
from signoff.context import AfterCommit, AppContext
from signoff.crypto import SecretBox
from signoff.dashboard.live import OrgSignals
from signoff.notifications.sending.sender import NotificationSender
from signoff.ratelimit.limiter import RateLimiter
from signoff.storage import REQUEST_CHANNEL, Database, ListenHub, Notifier
from signoff.unit_of_work import RequestChange
from signoff.webhooks.dispatcher import WebhookDispatcher


class Changes:
    """Who hears of the requests a commit created or changed: this process's long polls,
    by request, and the dashboard's live pages, by org (every replica's, on PostgreSQL)."""

    def __init__(self, hub: ListenHub, live: OrgSignals, postgres: bool) -> None:
        self._hub = hub
        self.live = live
        # Decisions made by other processes wake this one's long polls (a trigger's NOTIFY
        # on every status change, migration 0011), heard from the first long poll on.
        self.waiters: Watchers[uuid.UUID] = Watchers(
            on_watch=self._hear_other_processes_decide if postgres else None
        )

    def publish(self, changes: Sequence[RequestChange]) -> None:
        for change in changes:
            self.waiters.notify(change.request_id)
        for org_id in {change.org_id for change in changes}:
            self.live.request_changed(org_id)

    def _hear_other_processes_decide(self) -> None:
        self._hub.listen(REQUEST_CHANNEL, self._decided_elsewhere, self.waiters.notify_all)

    def _decided_elsewhere(self, payload: str) -> None:
        with contextlib.suppress(ValueError):
            self.waiters.notify(uuid.UUID(payload))


@dataclass
class Wiring:
    ctx: AppContext
    limiter: RateLimiter
    # PostgreSQL: the one connection hearing other processes' changes (every channel).
    hub: ListenHub
    # Rows background jobs could not process, parked so they hold no batch (poison.py).
    poisoned: PoisonedRows
    # Callback attempts, claims and records (webhooks/dispatcher.py).
    webhooks: WebhookDispatcher
    # Notifications: claims, sends and records (notifications/sender.py).
    notifications: NotificationSender
    # Long polls and the dashboard's live pages, told of every commit's changes.
    changes: Changes
    # Who a bearer token is (auth/callers.py).
    callers: Callers
    # The API's writes in flight, counted by its guard; the sender's pieces wait for a
    # quiet moment (common/api_writes.py).
    api_writes: ApiWrites

    @property
    def waiters(self) -> Watchers[uuid.UUID]:
        """Long polls waiting for a request to change, by its id."""
        return self.changes.waiters

    @property
    def live(self) -> OrgSignals:
        """Wakes the dashboard's open pages of an org when one of its requests changes."""
        return self.changes.live

    @classmethod
    def from_settings(cls, settings: Settings) -> Wiring:
        db = Database(settings.database_url, sqlite_before_commit=SQLITE_CATCH_UP)
        box = SecretBox.from_settings(settings)
        postgres = db.dialect == "postgresql"
        notifier = Notifier(settings.database_url) if postgres else None
        hub = ListenHub(settings.database_url if postgres else None)
        poisoned = PoisonedRows()
        webhooks = WebhookDispatcher(settings, db, box, poisoned)
        api_writes = ApiWrites()
        notifications = NotificationSender(
            settings,
            db,
            box,
            webhooks.clients,
            webhooks.policy,
            poisoned,
            api_writes=api_writes,
        )
        changes = Changes(hub, OrgSignals(hub, notifier), postgres)
        after_commit = AfterCommit(changes, notifications.wakeup, webhooks)
        return cls(
            ctx=AppContext(settings, db, box, after_commit, notifier),
            limiter=RateLimiter(settings.redis_url),
            hub=hub,
            poisoned=poisoned,
            webhooks=webhooks,
            notifications=notifications,
            changes=changes,
            callers=Callers(db),
            api_writes=api_writes,
        )

    async def close(self) -> None:
        await self.callers.close()
        await self.hub.close()
        await self.webhooks.close()
        await self.ctx.close()


def wiring_of(request: Request) -> Wiring:
    wiring: Wiring = request.app.state.wiring
    return wiring
