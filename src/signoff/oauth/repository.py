"""Every query on OAuth clients, codes, tokens and sign-in sessions."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, cast

from sqlalchemy import CursorResult, and_, bindparam, delete, func, select, update
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
from signoff.storage import PreparedQuery, QueryRunner


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


class PolledClient(NamedTuple):
    """What a CIBA poll needs of its client (``service.ClientFacts``): a plain row, not
    an ORM object, since a poll must cost no more than reading a request."""

    id: uuid.UUID
    org_id: uuid.UUID
    is_public: bool
    secret_hash: str | None
    ciba_enabled: bool


# A CIBA poll in one prepared statement by keys: the active client of that client_id and,
# when it is that client's, where the polled request stands (left joins: an unknown or
# foreign auth_req_id still finds the client, to authenticate it first).
_CLIENT_AND_BACKCHANNEL = PreparedQuery(
    select(
        *(getattr(OAuthClient, name).label(name) for name in PolledClient._fields),
        ApprovalRequest.status.label("bc_status"),
        ApprovalRequest.expires_at.label("bc_expires_at"),
        _BC.token_issued_at.label("bc_token_issued_at"),
        _BC.user_id.label("bc_user_id"),
        _BC.scope.label("bc_scope"),
    )
    .join(Connection, Connection.id == OAuthClient.connection_id)
    .outerjoin(
        _BC, and_(_BC.request_id == bindparam("request_id"), _BC.client_pk == OAuthClient.id)
    )
    .outerjoin(ApprovalRequest, ApprovalRequest.id == _BC.request_id)
    .where(
        OAuthClient.client_id == bindparam("client_id"),
        OAuthClient.deleted_at.is_(None),
        Connection.revoked_at.is_(None),
    )
)
# Matches no request: what an auth_req_id that is no id is looked up as.
_NO_REQUEST = uuid.UUID(int=0)


@dataclass(frozen=True)
class ClientAndBackchannel:
    """What a CIBA poll reads: the active client (None if unknown) and, if the request is
    that client's, where it stands."""

    client: PolledClient | None
    state: BackchannelPoll | None


async def find_client_and_backchannel_prepared(
    queries: QueryRunner, client_id: str, request_id: uuid.UUID | None
) -> ClientAndBackchannel:
    """The client of a CIBA poll and its request's state, outside any session, in one
    prepared read by keys."""
    row = await queries.one(
        _CLIENT_AND_BACKCHANNEL,
        {"client_id": client_id, "request_id": request_id or _NO_REQUEST},
    )
    if row is None:
        return ClientAndBackchannel(None, None)
    client = PolledClient(*row[: len(PolledClient._fields)])
    status, expires_at, token_issued_at, user_id, scope = row[len(PolledClient._fields) :]
    if user_id is None:
        return ClientAndBackchannel(client, None)
    return ClientAndBackchannel(
        client, BackchannelPoll(status, expires_at, token_issued_at, user_id, scope)
    )


class OAuthRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

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

    async def backchannel_arguments(
        self, family_id: uuid.UUID, client_pk: uuid.UUID
    ) -> dict[str, Any] | None:
        """The approved arguments behind a token family, when the family was issued for a
        CIBA request of this client (its id is the family's); None otherwise."""
        value = await self.session.scalar(
            select(ApprovalRequest.arguments)
            .join(_BC, _BC.request_id == ApprovalRequest.id)
            .where(_BC.request_id == family_id, _BC.client_pk == client_pk)
        )
        return cast(dict[str, Any] | None, value)

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
