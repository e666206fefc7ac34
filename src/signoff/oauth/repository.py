"""Every query on OAuth clients, codes, tokens and sign-in sessions."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import CursorResult, bindparam, delete, func, or_, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.auth.principal import Principal
from signoff.models import (
    ApprovalRequest,
    Connection,
    DashboardSession,
    OAuthAuthorizationCode,
    OAuthBackchannelRequest,
    OAuthClient,
    OAuthToken,
    Organization,
    User,
)
from signoff.orgs.repository import PRINCIPAL_COLUMNS, principal_from_row
from signoff.storage import PreparedQuery, QueryRunner, execute_alone


class BackchannelPoll(NamedTuple):
    """What a CIBA poll reads of its request."""

    status: str
    expires_at: datetime | None
    token_issued_at: datetime | None
    user_id: uuid.UUID
    scope: str


@dataclass(frozen=True)
class TokenDetails:
    """A token with what introspection reports about it."""

    token: OAuthToken
    client: OAuthClient
    user_email: str
    org_id: uuid.UUID
    connection_revoked: bool
    user_deactivated: bool = False


_BC = OAuthBackchannelRequest
# A CIBA poll: its one write and every read it needs, by primary key (the approval's
# columns by a subquery: SQLite's RETURNING names the updated table only).
_POLL_BACKCHANNEL = PreparedQuery(
    update(_BC)
    .where(
        _BC.request_id == bindparam("request_id"),
        _BC.client_pk == bindparam("client_pk"),
        or_(_BC.next_poll_at.is_(None), _BC.next_poll_at <= bindparam("now")),
    )
    .values(next_poll_at=bindparam("next"))
    .returning(
        select(ApprovalRequest.status)
        .where(ApprovalRequest.id == _BC.request_id)
        .scalar_subquery()
        .label("status"),
        select(ApprovalRequest.expires_at)
        .where(ApprovalRequest.id == _BC.request_id)
        .scalar_subquery()
        .label("expires_at"),
        _BC.token_issued_at.label("token_issued_at"),
        _BC.user_id.label("user_id"),
        _BC.scope.label("scope"),
    ),
    row_type=BackchannelPoll,
)
_ACTIVE_CLIENT = PreparedQuery(
    select(*(column.label(column.key) for column in OAuthClient.__table__.columns))
    .join(Connection, Connection.id == OAuthClient.connection_id)
    .where(
        OAuthClient.client_id == bindparam("client_id"),
        OAuthClient.deleted_at.is_(None),
        Connection.revoked_at.is_(None),
    )
)


async def find_active_client_prepared(queries: QueryRunner, client_id: str) -> OAuthClient | None:
    """``find_active_client`` outside any session, as a prepared read: the client of a
    CIBA poll, which must cost no more than reading a request (a detached row)."""
    row = await queries.one(_ACTIVE_CLIENT, {"client_id": client_id})
    return OAuthClient(**row._asdict()) if row is not None else None


class OAuthRepository:
    def __init__(self, session: AsyncSession, queries: QueryRunner | None = None) -> None:
        """``queries``: where a poll may write in autocommit (``execute_alone``)."""
        self.session = session
        self.queries = queries

    async def add(
        self,
        row: OAuthClient
        | OAuthAuthorizationCode
        | OAuthToken
        | DashboardSession
        | OAuthBackchannelRequest,
    ) -> None:
        self.session.add(row)
        await self.session.flush()

    # ---- clients ----

    async def find_active_client(self, client_id: str) -> OAuthClient | None:
        """A client that is not deleted and whose connection is not revoked."""
        return cast(
            OAuthClient | None,
            await self.session.scalar(
                select(OAuthClient)
                .join(Connection, Connection.id == OAuthClient.connection_id)
                .where(
                    OAuthClient.client_id == client_id,
                    OAuthClient.deleted_at.is_(None),
                    Connection.revoked_at.is_(None),
                )
            ),
        )

    async def get_client(self, org_id: uuid.UUID, client_id: str) -> OAuthClient | None:
        """A client of the org by its public client_id, deleted or not."""
        return cast(
            OAuthClient | None,
            await self.session.scalar(
                select(OAuthClient).where(
                    OAuthClient.client_id == client_id, OAuthClient.org_id == org_id
                )
            ),
        )

    async def find_client_anywhere(self, client_id: str) -> OAuthClient | None:
        """For the operator's CLI, which is not scoped to one org."""
        return cast(
            OAuthClient | None,
            await self.session.scalar(
                select(OAuthClient).where(OAuthClient.client_id == client_id)
            ),
        )

    async def list_clients(
        self, org_id: uuid.UUID, connection_id: uuid.UUID | None = None
    ) -> Sequence[OAuthClient]:
        query = select(OAuthClient).where(
            OAuthClient.org_id == org_id, OAuthClient.deleted_at.is_(None)
        )
        if connection_id is not None:
            query = query.where(OAuthClient.connection_id == connection_id)
        result = await self.session.scalars(query.order_by(OAuthClient.created_at))
        return result.all()

    async def revoke_client_tokens(self, client_pk: uuid.UUID, now: datetime) -> None:
        await self.session.execute(
            update(OAuthToken)
            .where(OAuthToken.client_pk == client_pk, OAuthToken.revoked_at.is_(None))
            .values(revoked_at=now)
        )

    async def list_user_authorizations(
        self, user_id: uuid.UUID, now: datetime
    ) -> Sequence[tuple[OAuthClient, datetime]]:
        """The clients holding a live token of this user, each with its latest grant."""
        latest = func.max(OAuthToken.created_at).label("latest")
        result = await self.session.execute(
            select(OAuthClient, latest)
            .join(OAuthToken, OAuthToken.client_pk == OAuthClient.id)
            .where(
                OAuthToken.user_id == user_id,
                OAuthToken.revoked_at.is_(None),
                OAuthToken.expires_at > now,
                OAuthClient.deleted_at.is_(None),
            )
            .group_by(OAuthClient.id)
            .order_by(latest.desc())
        )
        return [(row[0], row[1]) for row in result.all()]

    async def revoke_user_client_tokens(
        self, user_id: uuid.UUID, client_pk: uuid.UUID, now: datetime
    ) -> int:
        result = await self.session.execute(
            update(OAuthToken)
            .where(
                OAuthToken.user_id == user_id,
                OAuthToken.client_pk == client_pk,
                OAuthToken.revoked_at.is_(None),
            )
            .values(revoked_at=now)
        )
        return cast(CursorResult[tuple[()]], result).rowcount

    async def revoke_user_tokens(self, user_id: uuid.UUID, now: datetime) -> int:
        """Revoke every live OAuth token of a user (access and refresh, every client)."""
        result = await self.session.execute(
            update(OAuthToken)
            .where(OAuthToken.user_id == user_id, OAuthToken.revoked_at.is_(None))
            .values(revoked_at=now)
        )
        return cast(CursorResult[tuple[()]], result).rowcount

    async def delete_user_sessions(self, user_id: uuid.UUID, keep: uuid.UUID | None) -> None:
        """End every session of a user (a password change), but ``keep``."""
        statement = delete(DashboardSession).where(DashboardSession.user_id == user_id)
        if keep is not None:
            statement = statement.where(DashboardSession.id != keep)
        await self.session.execute(statement)

    # ---- authorization codes ----

    async def find_code(self, code_hash: str) -> OAuthAuthorizationCode | None:
        return cast(
            OAuthAuthorizationCode | None,
            await self.session.scalar(
                select(OAuthAuthorizationCode).where(OAuthAuthorizationCode.code_hash == code_hash)
            ),
        )

    async def claim_code(self, code_id: uuid.UUID, now: datetime) -> bool:
        """Mark the code used; False if another exchange got there first."""
        result = await self.session.execute(
            update(OAuthAuthorizationCode)
            .where(OAuthAuthorizationCode.id == code_id, OAuthAuthorizationCode.used_at.is_(None))
            .values(used_at=now)
        )
        return cast(CursorResult[tuple[()]], result).rowcount == 1

    # ---- tokens ----

    async def find_token(self, token_hash: str) -> OAuthToken | None:
        return cast(
            OAuthToken | None,
            await self.session.scalar(
                select(OAuthToken).where(OAuthToken.token_hash == token_hash)
            ),
        )

    async def claim_refresh_token(self, token_id: uuid.UUID, now: datetime) -> bool:
        """Mark a refresh token exchanged; False if it already was (a replay) or is revoked."""
        result = await self.session.execute(
            update(OAuthToken)
            .where(
                OAuthToken.id == token_id,
                OAuthToken.rotated_at.is_(None),
                OAuthToken.revoked_at.is_(None),
            )
            .values(rotated_at=now)
        )
        return cast(CursorResult[tuple[()]], result).rowcount == 1

    async def revoke_token(self, token_id: uuid.UUID, now: datetime) -> None:
        await self.session.execute(
            update(OAuthToken)
            .where(OAuthToken.id == token_id, OAuthToken.revoked_at.is_(None))
            .values(revoked_at=now)
        )

    async def revoke_family(self, family_id: uuid.UUID, now: datetime) -> None:
        await self.session.execute(
            update(OAuthToken)
            .where(OAuthToken.family_id == family_id, OAuthToken.revoked_at.is_(None))
            .values(revoked_at=now)
        )

    async def describe_token(self, token_hash: str) -> TokenDetails | None:
        row = (
            await self.session.execute(
                select(
                    OAuthToken,
                    OAuthClient,
                    User.email,
                    Connection.revoked_at,
                    User.deactivated_at,
                )
                .join(OAuthClient, OAuthClient.id == OAuthToken.client_pk)
                .join(Connection, Connection.id == OAuthClient.connection_id)
                .join(User, User.id == OAuthToken.user_id)
                .where(OAuthToken.token_hash == token_hash)
            )
        ).first()
        if row is None:
            return None
        token, client, email, connection_revoked_at, deactivated_at = row
        return TokenDetails(
            token,
            client,
            email,
            client.org_id,
            connection_revoked_at is not None,
            deactivated_at is not None,
        )

    async def find_principal_by_access_token_hash(
        self, token_hash: str, now: datetime
    ) -> Principal | None:
        """The identity behind an access token, in one indexed query; None unless the token
        is live, its client not deleted, the client's connection not revoked and the user
        who granted it not deactivated."""
        row = (
            await self.session.execute(
                select(*PRINCIPAL_COLUMNS, OAuthToken.scope)
                .join(OAuthClient, OAuthClient.id == OAuthToken.client_pk)
                .join(Connection, Connection.id == OAuthClient.connection_id)
                .join(Organization, Organization.id == Connection.org_id)
                .join(User, User.id == OAuthToken.user_id)
                .where(
                    OAuthToken.token_hash == token_hash,
                    OAuthToken.kind == "access",
                    OAuthToken.revoked_at.is_(None),
                    OAuthToken.expires_at > now,
                    OAuthClient.deleted_at.is_(None),
                    Connection.revoked_at.is_(None),
                    # Deactivation revokes the user's tokens; this holds however the user
                    # was deactivated (a token acts as that person).
                    User.deactivated_at.is_(None),
                    # Belt and braces: a token never acts outside its connection's org.
                    User.org_id == Connection.org_id,
                )
            )
        ).first()
        if row is None:
            return None
        return principal_from_row(row, scopes=tuple(row[-1].split()), auth_method="oauth")

    async def principal_of_connection(self, connection_id: uuid.UUID) -> Principal | None:
        """The connection acting as with its API key: who a CIBA client's requests are from."""
        row = (
            await self.session.execute(
                select(*PRINCIPAL_COLUMNS)
                .join(Organization, Organization.id == Connection.org_id)
                .join(User, User.id == Connection.owner_id)
                .where(Connection.id == connection_id, Connection.revoked_at.is_(None))
            )
        ).first()
        return principal_from_row(row) if row is not None else None

    # ---- CIBA requests ----

    async def poll_backchannel(
        self, request_id: uuid.UUID, client_pk: uuid.UUID, now: datetime, next_poll: datetime
    ) -> BackchannelPoll | None:
        """Record a poll that came no sooner than allowed and read where its request stands,
        in one prepared statement by primary key; None if it came too soon or is not this
        client's.

        The comparison and the write are one statement, so two replicas answering two
        quick polls at once cannot both let them through. On PostgreSQL it runs in
        autocommit when it is the transaction's first statement (``execute_alone``)."""
        params = {"request_id": request_id, "client_pk": client_pk, "now": now, "next": next_poll}
        rows = await execute_alone(self.session, self.queries, _POLL_BACKCHANNEL, params)
        return cast(BackchannelPoll, rows[0]) if rows else None

    async def backchannel_of_client(
        self, request_id: uuid.UUID, client_pk: uuid.UUID
    ) -> OAuthBackchannelRequest | None:
        return cast(
            OAuthBackchannelRequest | None,
            await self.session.scalar(
                select(OAuthBackchannelRequest).where(
                    OAuthBackchannelRequest.request_id == request_id,
                    OAuthBackchannelRequest.client_pk == client_pk,
                )
            ),
        )

    async def claim_backchannel_token(self, request_id: uuid.UUID, now: datetime) -> bool:
        """Only the first token request of an approved CIBA request gets a token."""
        result = cast(
            CursorResult[tuple[()]],
            await self.session.execute(
                update(OAuthBackchannelRequest)
                .where(
                    OAuthBackchannelRequest.request_id == request_id,
                    OAuthBackchannelRequest.token_issued_at.is_(None),
                )
                .values(token_issued_at=now)
                .execution_options(synchronize_session=False)
            ),
        )
        return result.rowcount == 1

    async def approved_arguments(self, request_id: uuid.UUID) -> dict[str, Any] | None:
        """The arguments a request was decided with (after any edit by the approver)."""
        value = await self.session.scalar(
            select(ApprovalRequest.arguments).where(ApprovalRequest.id == request_id)
        )
        return cast(dict[str, Any] | None, value)

    # ---- sign-in sessions ----

    async def find_session(self, token_hash: str, now: datetime) -> DashboardSession | None:
        return cast(
            DashboardSession | None,
            await self.session.scalar(
                # A deactivated user's sessions end at once: they no longer match.
                select(DashboardSession)
                .outerjoin(User, User.id == DashboardSession.user_id)
                .where(
                    DashboardSession.token_hash == token_hash,
                    DashboardSession.expires_at > now,
                    User.deactivated_at.is_(None),
                )
            ),
        )

    async def find_signed_in(
        self, token_hash: str, now: datetime
    ) -> tuple[DashboardSession, User, Organization] | None:
        """A signed-in session with its (active) user and their org, in one query: every
        dashboard page asks it first."""
        row = (
            await self.session.execute(
                select(DashboardSession, User, Organization)
                .join(User, User.id == DashboardSession.user_id)
                .join(Organization, Organization.id == User.org_id)
                .where(
                    DashboardSession.token_hash == token_hash,
                    DashboardSession.expires_at > now,
                    User.deactivated_at.is_(None),
                )
            )
        ).first()
        return (row[0], row[1], row[2]) if row is not None else None

    async def delete_session(self, session_id: uuid.UUID) -> None:
        await self.session.execute(
            delete(DashboardSession).where(DashboardSession.id == session_id)
        )

    async def delete_expired_sessions(self, now: datetime) -> None:
        await self.session.execute(
            delete(DashboardSession).where(DashboardSession.expires_at <= now)
        )

    async def get_user(self, user_id: uuid.UUID) -> User | None:
        return await self.session.get(User, user_id)

    async def get_org(self, org_id: uuid.UUID) -> Organization | None:
        return await self.session.get(Organization, org_id)

    async def get_connection(self, connection_id: uuid.UUID) -> Connection | None:
        return await self.session.get(Connection, connection_id)
