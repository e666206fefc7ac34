"""Every query on organizations, users and connections."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import CursorResult, bindparam, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.auth.principal import ALL_SCOPES, Principal
from signoff.models import Connection, Organization, SetupToken, User
from signoff.storage import PreparedQuery, QueryRunner

# Every API call runs this: built once, since building a statement (and its cache key)
# costs more than SQLite takes to answer it (``make bench``, every scenario;
# docs/engineering-log.md, *The first round*).
# What a Principal is made of, selected by every authentication query (API key, OAuth).
PRINCIPAL_COLUMNS = (
    Connection.id.label("connection_id"),
    Connection.name.label("connection_name"),
    Connection.rate_limit_per_hour,
    Organization.id.label("org_id"),
    Organization.name.label("org_name"),
    Organization.emergency_stop,
    User.id.label("user_id"),
    User.email.label("user_email"),
    User.name.label("user_name"),
    User.role,
)
_PRINCIPAL_BY_KEY_HASH = PreparedQuery(
    select(*PRINCIPAL_COLUMNS)
    .join(Organization, Organization.id == Connection.org_id)
    .join(User, User.id == Connection.owner_id)
    .where(Connection.api_key_hash == bindparam("key_hash"), Connection.revoked_at.is_(None))
)


class OrgRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(self, row: Organization | User | Connection) -> None:
        self.session.add(row)
        await self.session.flush()

    async def get_org(self, org_id: uuid.UUID) -> Organization | None:
        return await self.session.get(Organization, org_id)

    async def find_orgs_by_name(self, name: str) -> Sequence[Organization]:
        result = await self.session.scalars(select(Organization).where(Organization.name == name))
        return result.all()

    async def list_orgs(self) -> Sequence[Organization]:
        result = await self.session.scalars(select(Organization).order_by(Organization.created_at))
        return result.all()

    async def set_emergency_stop(self, org_id: uuid.UUID, active: bool) -> None:
        await self.session.execute(
            update(Organization).where(Organization.id == org_id).values(emergency_stop=active)
        )

    async def get_user(self, org_id: uuid.UUID, user_id: uuid.UUID) -> User | None:
        user = await self.session.get(User, user_id)
        return user if user is not None and user.org_id == org_id else None

    async def find_user_by_email(self, org_id: uuid.UUID, email: str) -> User | None:
        return cast(
            User | None,
            await self.session.scalar(
                select(User).where(User.org_id == org_id, User.email == email)
            ),
        )

    async def find_active_users_by_email(self, email: str) -> Sequence[User]:
        """Users of any org with this e-mail who may sign in (an e-mail is unique per org)."""
        result = await self.session.scalars(
            select(User)
            .where(User.email == email, User.deactivated_at.is_(None))
            .order_by(User.created_at)
        )
        return result.all()

    async def find_user(self, user_id: uuid.UUID) -> User | None:
        return await self.session.get(User, user_id)

    async def any_org_exists(self) -> bool:
        return (await self.session.scalar(select(Organization.id).limit(1))) is not None

    async def add_setup_token(self, token: SetupToken) -> None:
        self.session.add(token)
        await self.session.flush()

    async def claim_setup_token(self, token_hash: str, now: datetime) -> bool:
        """Mark the unused setup token with this hash used; False if there is none."""
        result = await self.session.execute(
            update(SetupToken)
            .where(SetupToken.token_hash == token_hash, SetupToken.used_at.is_(None))
            .values(used_at=now)
        )
        return cast(CursorResult[tuple[()]], result).rowcount == 1

    async def setup_token_usable(self, token_hash: str) -> bool:
        found = await self.session.scalar(
            select(SetupToken.id).where(
                SetupToken.token_hash == token_hash, SetupToken.used_at.is_(None)
            )
        )
        return found is not None

    async def list_users(self, org_id: uuid.UUID) -> Sequence[User]:
        result = await self.session.scalars(
            select(User).where(User.org_id == org_id).order_by(User.created_at)
        )
        return result.all()

    async def get_connection(
        self, org_id: uuid.UUID, connection_id: uuid.UUID
    ) -> Connection | None:
        connection = await self.session.get(Connection, connection_id)
        return connection if connection is not None and connection.org_id == org_id else None

    async def list_connections(self, org_id: uuid.UUID) -> Sequence[Connection]:
        result = await self.session.scalars(
            select(Connection).where(Connection.org_id == org_id).order_by(Connection.created_at)
        )
        return result.all()


async def find_principal_by_key_hash(queries: QueryRunner, key_hash: str) -> Principal | None:
    """The identity behind an API key; None if unknown or revoked.

    Every API call asks this, so it runs as a prepared query: no session, and on SQLite
    no SQLAlchemy execution at all (prepared.py). Read afresh on every call, so a revoked
    key or an emergency stop set by any process (a CLI, another replica) bites at once;
    ``PrincipalsByKey`` keeps its answers only while nothing is committed.
    """
    row = await queries.one(_PRINCIPAL_BY_KEY_HASH, {"key_hash": key_hash})
    return principal_from_row(row) if row is not None else None


class PrincipalsByKey:
    """API-key principals, each read once per state of the database.

    Why: every API call authenticates, and reading the principal afresh each time was a
    share of every call's CPU (``make bench``, scenarios create and get;
    docs/engineering-log.md, *The seventh round*).

    Kept only until anything at all is committed: the commit stamp
    (``QueryRunner.commit_stamp``) changes with every commit by any connection or
    process, and a changed stamp empties the cache. A principal found here is thus what
    a read now would return, and a revoked key, a new rate limit or an emergency stop
    bites at once, as decisions.md asks. Without a stamp (PostgreSQL) every call reads.
    """

    # Keys kept at most between two commits; past it the cache starts over. Unknown keys
    # are never kept, so guessing keys cannot fill it.
    MAX_KEYS = 1_024

    def __init__(self, queries: QueryRunner) -> None:
        self._queries = queries
        self._stamp: tuple[int, int] | None = None
        self._principals: dict[str, Principal] = {}

    async def find(self, key_hash: str) -> Principal | None:
        stamp = self._queries.commit_stamp()
        if stamp is None:
            return await find_principal_by_key_hash(self._queries, key_hash)
        if stamp != self._stamp:
            self._principals.clear()
            self._stamp = stamp
        elif (cached := self._principals.get(key_hash)) is not None:
            return cached
        principal = await find_principal_by_key_hash(self._queries, key_hash)
        # Kept only if no other call moved the stamp on while this read waited (a busy
        # database): the read may then be older than the stamp the cache is at.
        if principal is not None and self._stamp == stamp:
            if len(self._principals) >= self.MAX_KEYS:
                self._principals.clear()
            self._principals[key_hash] = principal
        return principal


def principal_from_row(
    row: Sequence[Any],
    *,
    scopes: tuple[str, ...] = ALL_SCOPES,
    auth_method: Literal["api_key", "oauth"] = "api_key",
) -> Principal:
    """A Principal from a row that starts with ``PRINCIPAL_COLUMNS``."""
    return Principal(
        connection_id=row[0],
        connection_name=row[1],
        rate_limit_per_hour=row[2],
        org_id=row[3],
        org_name=row[4],
        org_emergency_stop=row[5],
        user_id=row[6],
        user_email=row[7],
        user_name=row[8],
        role=cast("Literal['admin', 'member']", row[9]),  # a string: not evaluated per call
        scopes=scopes,
        auth_method=auth_method,
    )
