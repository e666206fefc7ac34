"""A transaction and the repositories bound to it."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from signoff.approvals.repository import ApprovalRepository
from signoff.oauth.repository import OAuthRepository
from signoff.orgs.repository import OrgRepository


class UnitOfWork:
    def __init__(self, session: AsyncSession, dialect: str) -> None:
        self.session = session
        self.dialect = dialect
        self.approvals = ApprovalRepository(session, dialect)
        self.orgs = OrgRepository(session)
        self.oauth = OAuthRepository(session)
