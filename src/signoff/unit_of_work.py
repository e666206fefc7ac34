"""A transaction and the repositories bound to it."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.ext.asyncio import AsyncSession

from signoff.approvals.repository import ApprovalRepository, CreatedPlan
from signoff.approvals.typed_rows import RequestRecord
from signoff.crypto import SecretBox
from signoff.groups.repository import GroupRepository
from signoff.notifications.planning import service as notifications
from signoff.notifications.planning.repository import created_plan_from, plans_written
from signoff.notifications.repository import NotificationRepository
from signoff.oauth.repository import OAuthRepository
from signoff.orgs.repository import OrgRepository
from signoff.passkeys.repository import PasskeyRepository
from signoff.policies.repository import PolicyRepository
from signoff.policies.standing_repository import StandingApprovalRepository
from signoff.receipts.keys import KeyRing
from signoff.receipts.service import ReceiptWrites
from signoff.storage import QueryRunner
from signoff.webhooks.repository import WebhookRepository
from signoff.webhooks.service import (
    DecisionFacts,
    FirstAttempts,
    Outbox,
    enqueue_decision_callback,
    enqueue_decision_callbacks,
)

# How a PostgreSQL create writes its notification plan row, in its own statement.
CREATED_PLAN = CreatedPlan(created_plan_from, plans_written)


@dataclass(frozen=True)
class RequestChange:
    """A request this transaction created or changed: watchers are told once it commits."""

    org_id: uuid.UUID
    request_id: uuid.UUID
    final: bool


class DecisionCallbacks:
    """Decision callbacks written by this transaction into the outbox (webhooks)."""

    def __init__(self, webhooks: WebhookRepository) -> None:
        self._webhooks = webhooks

    async def enqueue(self, facts: DecisionFacts, now: datetime) -> None:
        await enqueue_decision_callback(self._webhooks, facts, now)

    async def enqueue_many(self, facts: Sequence[DecisionFacts], now: datetime) -> None:
        await enqueue_decision_callbacks(self._webhooks, facts, now)


class RequestNotifications:
    """The notifications a request's changes cause: one plan row in this transaction,
    planned by a worker after the commit (routing rules decide who hears)."""

    def __init__(self, repo: NotificationRepository) -> None:
        self._repo = repo

    async def request_created(self, request: RequestRecord, now: datetime) -> None:
        await notifications.on_request_created(self._repo, request.org_id, request.id, now)

    async def steps_opened(
        self, request: RequestRecord, approver_ids: Sequence[uuid.UUID], now: datetime
    ) -> None:
        await notifications.on_step_opened(
            self._repo, request.org_id, request.id, approver_ids, now
        )

    async def asked_again(
        self, request: RequestRecord, user_ids: Sequence[uuid.UUID], now: datetime
    ) -> None:
        await notifications.on_asked_again(self._repo, request.org_id, request.id, user_ids, now)

    async def left_pending(self, request_id: uuid.UUID, now: datetime) -> None:
        await notifications.on_requests_left_pending(self._repo, [request_id], now)

    async def left_pending_many(self, request_ids: Sequence[uuid.UUID], now: datetime) -> None:
        await notifications.on_requests_left_pending(self._repo, request_ids, now)


class UnitOfWork:
    def __init__(
        self,
        session: AsyncSession,
        dialect: str,
        outbox: Outbox,
        queries: QueryRunner | None = None,
        keys: KeyRing | None = None,
        box: SecretBox | None = None,
        issuer: str = "",
    ) -> None:
        """``queries``: where a PostgreSQL write that is the transaction's only one may run
        in autocommit (``storage.execute_alone``)."""
        self.session = session
        self._outbox = outbox
        self.dialect = dialect
        self.approvals = ApprovalRepository(session, dialect, queries, CREATED_PLAN)
        self.policies = PolicyRepository(session, dialect, queries)
        self.standing = StandingApprovalRepository(session, dialect, queries)
        self.orgs = OrgRepository(session)
        self.groups = GroupRepository(session, dialect)
        self.webhooks = WebhookRepository(session, dialect)
        self.oauth = OAuthRepository(session)
        self.passkeys = PasskeyRepository(session)
        self.callbacks = DecisionCallbacks(self.webhooks)
        # Receipts are issued in write transactions only (``AppContext.transaction``), and
        # signed on read (receipts/service.py).
        self.receipts = ReceiptWrites(session, keys, issuer)
        self.notifications = RequestNotifications(NotificationRepository(session, dialect))
        self.changes: list[RequestChange] = []
        # Once committed: what became of the callbacks it wrote (``AppContext.transaction``
        # starts their attempt 1; an answer's ``callback_delivered`` reads it here).
        self.first_attempts = FirstAttempts()

    @property
    def outbox(self) -> Outbox:
        """Callbacks this transaction wrote, held by it until it commits."""
        return self._outbox

    def request_changed(self, org_id: uuid.UUID, request_id: uuid.UUID, *, final: bool) -> None:
        self.changes.append(RequestChange(org_id, request_id, final))
