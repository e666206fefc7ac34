"""``NotificationRepository``: every query of notifications, bound to one session. Each
room holds its own (``routing/``, ``planning/``, ``sending/``, ``decisions/``); the
requests and people they concern are read through the approvals' and orgs' repositories,
on the same session."""

from __future__ import annotations

import functools

from sqlalchemy.ext.asyncio import AsyncSession

from signoff.approvals.repository import ApprovalRepository
from signoff.notifications.decisions.repository import LinkQueries
from signoff.notifications.planning.repository import PlanQueries
from signoff.notifications.routing.repository import RoutingQueries
from signoff.notifications.sending.repository import OutboxQueries
from signoff.orgs.repository import OrgRepository


class NotificationRepository(RoutingQueries, PlanQueries, OutboxQueries, LinkQueries):
    def __init__(self, session: AsyncSession, dialect: str) -> None:
        self.session = session
        self.dialect = dialect

    @functools.cached_property
    def approvals(self) -> ApprovalRepository:
        """The requests notifications tell of (built when first asked: most transactions
        only write a plan row)."""
        return ApprovalRepository(self.session, self.dialect)

    @functools.cached_property
    def orgs(self) -> OrgRepository:
        """The people notifications tell."""
        return OrgRepository(self.session)
