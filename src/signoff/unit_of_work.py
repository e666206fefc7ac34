"""A transaction and the repositories bound to it."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from signoff.approvals.repository import ApprovalRepository
from signoff.oauth.repository import OAuthRepository
from signoff.orgs.repository import OrgRepository
from signoff.webhooks.repository import WebhookRepository
from signoff.webhooks.service import Outbox


class UnitOfWork:
    def __init__(self, session: AsyncSession, dialect: str, outbox: Outbox) -> None:
        self.session = session
        self._outbox = outbox
        self.dialect = dialect
        self.approvals = ApprovalRepository(session, dialect)
        self.orgs = OrgRepository(session)
        self.webhooks = WebhookRepository(session, dialect)
        self.oauth = OAuthRepository(session)

    @property
    def outbox(self) -> Outbox:
        """Callbacks this transaction wrote; after the commit, deliver or hand them off."""
        return self._outbox
