"""Every query of passkeys, their challenges, the assertions that signed decisions, and
the org's ``passkey_for`` setting."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, cast

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.audit import events as audit_events
from signoff.audit.events import SETTINGS_EVENT
from signoff.auth.principal import OrgMember
from signoff.models import ApprovalRequest, DecisionAssertion, Organization, Passkey
from signoff.models import PasskeyChallenge as Challenge


class PasskeyRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    # ---- challenges ----

    async def add_challenge(self, values: Mapping[str, Any], now: datetime) -> None:
        """Store a challenge; those past their time go first (indexed by expiry)."""
        await self.session.execute(delete(Challenge).where(Challenge.expires_at <= now))
        await self.session.execute(insert(Challenge).values(**values))

    async def take_challenge(
        self, challenge: str, purpose: str, now: datetime
    ) -> Mapping[str, Any] | None:
        """The challenge, deleted as it is read: of two uses (two replicas, a replay),
        one finds it. None if unknown, used, of another purpose or expired."""
        row = (
            await self.session.execute(
                delete(Challenge)
                .where(
                    Challenge.challenge == challenge,
                    Challenge.purpose == purpose,
                    Challenge.expires_at > now,
                )
                .returning(
                    Challenge.user_id,
                    Challenge.request_id,
                    Challenge.decision,
                    Challenge.arguments_hash,
                    Challenge.nonce,
                )
            )
        ).first()
        return dict(row._mapping) if row is not None else None

    # ---- passkeys ----

    async def list_for_user(self, user_id: uuid.UUID) -> Sequence[Passkey]:
        return (
            await self.session.scalars(
                select(Passkey).where(Passkey.user_id == user_id).order_by(Passkey.created_at)
            )
        ).all()

    async def find_by_credential_id(self, credential_id: str) -> Passkey | None:
        return cast(
            Passkey | None,
            await self.session.scalar(
                select(Passkey).where(Passkey.credential_id == credential_id)
            ),
        )

    async def add(self, passkey: Passkey) -> None:
        self.session.add(passkey)
        await self.session.flush()

    async def remove(self, user_id: uuid.UUID, passkey_id: uuid.UUID) -> str | None:
        """Delete one of the user's passkeys; its name, or None if they have none such."""
        return cast(
            str | None,
            await self.session.scalar(
                delete(Passkey)
                .where(Passkey.id == passkey_id, Passkey.user_id == user_id)
                .returning(Passkey.name)
            ),
        )

    async def record_use(self, passkey_id: uuid.UUID, sign_count: int, now: datetime) -> bool:
        """Move the sign count on; False if another use got there first with a count
        this one does not pass (a cloned authenticator, or the same assertion twice).
        Authenticators that keep no count always report 0."""
        statement = update(Passkey).where(Passkey.id == passkey_id)
        if sign_count:
            statement = statement.where(Passkey.sign_count < sign_count)
        done = await self.session.execute(statement.values(sign_count=sign_count, last_used_at=now))
        return bool(getattr(done, "rowcount", 0))

    async def record_change(
        self, member: OrgMember, event_type: str, data: dict[str, Any], now: datetime
    ) -> None:
        """A passkey registered or removed, as an event of the member's org."""
        await audit_events.record(
            self.session, member.org_id, event_type, member.user_id, data, now
        )

    # ---- assertions kept with votes ----

    async def add_assertion(self, values: Mapping[str, Any]) -> None:
        await self.session.execute(insert(DecisionAssertion).values(**values))

    async def assertions_of(self, request_id: uuid.UUID) -> Sequence[DecisionAssertion]:
        return (
            await self.session.scalars(
                select(DecisionAssertion)
                .where(DecisionAssertion.request_id == request_id)
                .order_by(DecisionAssertion.created_at)
            )
        ).all()

    # ---- what is signed, and by whom it must be ----

    async def request_facts(
        self, org_id: uuid.UUID, request_id: uuid.UUID
    ) -> tuple[str, str, str] | None:
        """The request's priority, status and arguments hash, if the org has it."""
        row = (
            await self.session.execute(
                select(
                    ApprovalRequest.priority,
                    ApprovalRequest.status,
                    ApprovalRequest.arguments_hash,
                ).where(ApprovalRequest.id == request_id, ApprovalRequest.org_id == org_id)
            )
        ).first()
        return (row[0], row[1], row[2]) if row is not None else None

    async def passkey_for(self, org_id: uuid.UUID) -> str:
        found = await self.session.scalar(
            select(Organization.passkey_for).where(Organization.id == org_id)
        )
        return str(found or "off")

    async def set_passkey_for(
        self, org_id: uuid.UUID, value: str, by: uuid.UUID | None, now: datetime
    ) -> None:
        await self.session.execute(
            update(Organization).where(Organization.id == org_id).values(passkey_for=value)
        )
        change = {"passkey_for": value}
        await audit_events.record(self.session, org_id, SETTINGS_EVENT, by, change, now)
