"""Every query on organizations, users and connections."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, cast

from sqlalchemy import (
    Boolean,
    ColumnElement,
    CursorResult,
    Row,
    Select,
    and_,
    bindparam,
    delete,
    exists,
    func,
    select,
    union,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import aliased

from signoff.audit import events as audit_events
from signoff.audit.events import SETTINGS_EVENT
from signoff.auth.principal import ALL_SCOPES, Principal, PrincipalCheck
from signoff.common.time import utcnow
from signoff.models import (
    ApprovalRequest,
    Base,
    Connection,
    NotificationChannel,
    Organization,
    SetupLink,
    User,
)
from signoff.orgs.settings import columns_of
from signoff.storage import PreparedQuery, QueryRunner, channel_presence

# Every API call runs this: built once, since building a statement (and its cache key)
# costs more than SQLite takes to answer it (docs/decisions/0004-prepared-statements.md).
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
    # The owner's deactivation: an API key of theirs goes on, without their authority.
    User.deactivated_at.label("owner_deactivated_at"),
    # Which decisions need a passkey: an API call never has one (``passkeys.rule``).
    Organization.passkey_for,
    Organization.self_approval,
    Organization.policy_version,
    Organization.standing_approvals_granted,
    # Whether the org has a channel (``storage.channel_presence``): one probe of the
    # channels' unique (org_id, name) index.
    exists().where(NotificationChannel.org_id == Organization.id).label("org_has_channels"),
)
_PRINCIPAL_BY_KEY_HASH = PreparedQuery(
    select(*PRINCIPAL_COLUMNS)
    .join(Organization, Organization.id == Connection.org_id)
    .join(User, User.id == Connection.owner_id)
    .where(Connection.api_key_hash == bindparam("key_hash"), Connection.revoked_at.is_(None))
)


def principal_guard() -> ColumnElement[bool]:
    """True while an API-key principal is still what the database says: its connection
    not revoked, and every attribute a call acts on (rate limit, names, the org's
    emergency stop, the owner's e-mail, role and deactivation) unchanged.

    A call whose principal comes from this process's memory (``PrincipalsByKey.
    remembered``, PostgreSQL) puts this into its first statement, where it is read in the
    same snapshot as the call's own work, in the same round trip: a write is made only if
    it holds, and a call it fails is answered afresh (``PrincipalCheck``). Its parameters
    are ``principal_guard_params``'. Three primary-key lookups inside PostgreSQL cost far
    less than the round trip of reading the principal apart (docs/performance.md, *Round
    trips*)."""
    return exists(
        select(Connection.id)
        .join(Organization, Organization.id == Connection.org_id)
        .join(User, User.id == Connection.owner_id)
        .where(
            Connection.id == bindparam("principal_connection_id", type_=Connection.id.type),
            Connection.revoked_at.is_(None),
            Connection.name == bindparam("principal_connection_name", type_=Connection.name.type),
            Connection.rate_limit_per_hour
            == bindparam("principal_rate_limit", type_=Connection.rate_limit_per_hour.type),
            Organization.id == bindparam("principal_org_id", type_=Organization.id.type),
            Organization.name == bindparam("principal_org_name", type_=Organization.name.type),
            Organization.emergency_stop
            == bindparam("principal_emergency_stop", type_=Organization.emergency_stop.type),
            Organization.passkey_for
            == bindparam("principal_passkey_for", type_=Organization.passkey_for.type),
            User.id == bindparam("principal_user_id", type_=User.id.type),
            User.email == bindparam("principal_user_email", type_=User.email.type),
            User.name == bindparam("principal_user_name", type_=User.name.type),
            User.role == bindparam("principal_role", type_=User.role.type),
            User.deactivated_at.is_(None) == bindparam("principal_owner_active", type_=Boolean()),
            Organization.self_approval
            == bindparam("principal_self_approval", type_=Organization.self_approval.type),
            Organization.policy_version
            == bindparam("principal_policy_version", type_=Organization.policy_version.type),
            Organization.standing_approvals_granted
            == bindparam(
                "principal_standing_approvals",
                type_=Organization.standing_approvals_granted.type,
            ),
        )
    )


def principal_guard_params(check: PrincipalCheck) -> dict[str, Any]:
    """The values ``principal_guard`` compares: the remembered principal's."""
    principal = check.principal
    return {
        "principal_connection_id": principal.connection_id,
        "principal_connection_name": principal.connection_name,
        "principal_rate_limit": principal.rate_limit_per_hour,
        "principal_org_id": principal.org_id,
        "principal_org_name": principal.org_name,
        "principal_emergency_stop": principal.org_emergency_stop,
        "principal_passkey_for": principal.org_passkey_for,
        "principal_user_id": principal.user_id,
        "principal_user_email": principal.user_email,
        "principal_user_name": principal.user_name,
        "principal_role": principal.role,
        "principal_owner_active": not principal.owner_deactivated,
        "principal_self_approval": principal.org_self_approval,
        "principal_policy_version": principal.org_policy_version,
        "principal_standing_approvals": principal.org_standing_approvals,
    }


# Who stands in for whom (orgs/delegation.py), in SQL: the inbox and votes read it.


def _away(user: Any, now: ColumnElement[Any]) -> ColumnElement[bool]:
    return and_(user.away_from <= now, user.away_until > now)


def stood_in_for(voter: ColumnElement[Any], now: ColumnElement[Any]) -> Select[Any]:
    """The ids of the people ``voter`` stands in for at ``now``: those away who delegate
    to them, and those away who delegate to someone away who delegates to them. Two
    lookups in ``ix_users_delegate_id``; most people stand in for nobody, and then the
    answer is empty at the cost of one index probe."""
    first, second = aliased(User), aliased(User)
    direct = select(first.id).where(first.delegate_id == voter, _away(first, now))
    passed_on = (
        select(second.id)
        .join(first, second.delegate_id == first.id)
        .where(first.delegate_id == voter, _away(first, now), _away(second, now))
    )
    return select(union(direct, passed_on).subquery().c.id)


# The setup link's one row (models.orgs.SetupLink).
SETUP_LINK_ROW = 1


class OrgRepository:
    def __init__(self, session: AsyncSession) -> None:
        self.session = session

    async def add(self, row: Organization | User | Connection) -> None:
        self.session.add(row)
        await self.session.flush()

    async def get_org(self, org_id: uuid.UUID) -> Organization | None:
        return await self.session.get(Organization, org_id)

    async def find_org_by_name(self, name: str) -> Organization | None:
        """The org of this name, ignoring case as the unique index does (``lower``)."""
        return cast(
            Organization | None,
            await self.session.scalar(
                select(Organization).where(func.lower(Organization.name) == func.lower(name))
            ),
        )

    async def org_has_requests(self, org_id: uuid.UUID) -> bool:
        found = await self.session.scalar(
            select(ApprovalRequest.id).where(ApprovalRequest.org_id == org_id).limit(1)
        )
        return found is not None

    async def delete_org(self, org_id: uuid.UUID) -> None:
        """Delete the org and every row of it, table by table, children first.

        Why not one ``DELETE`` and the cascades: some references are not cascades (a
        vote's user, a request's connection), and PostgreSQL checks those as the cascades
        go, before the rows that hold them are deleted by a later cascade. Rows without
        an ``org_id`` (votes, steps, attempts, OAuth tokens) go with their parent's
        cascade."""
        for table in reversed(Base.metadata.sorted_tables):
            if table.name != Organization.__tablename__ and "org_id" in table.c:
                await self.session.execute(delete(table).where(table.c.org_id == org_id))
        await self.session.execute(delete(Organization).where(Organization.id == org_id))

    async def list_orgs(self) -> Sequence[Organization]:
        result = await self.session.scalars(select(Organization).order_by(Organization.created_at))
        return result.all()

    async def set_emergency_stop(
        self,
        org_id: uuid.UUID,
        active: bool,
        by: uuid.UUID | None = None,
        now: datetime | None = None,
    ) -> None:
        """Turning it on records who and when (None: the CLI, no person); off keeps them.
        Either way an audit event says who turned it which way."""
        values: dict[str, object] = {"emergency_stop": active}
        if active:
            values.update(emergency_stop_at=now, emergency_stop_by=by)
        await self.session.execute(
            update(Organization).where(Organization.id == org_id).values(**values)
        )
        kind = "emergency_stop.on" if active else "emergency_stop.off"
        await audit_events.record(self.session, org_id, kind, by, {}, now or utcnow())

    async def update_settings(
        self, org_id: uuid.UUID, values: dict[str, Any], by: uuid.UUID | None, now: datetime
    ) -> None:
        """Write settings (``orgs.settings``: names and values checked already), with an
        audit event naming them."""
        if values:
            await self.session.execute(
                update(Organization).where(Organization.id == org_id).values(**columns_of(values))
            )
            await audit_events.record(self.session, org_id, SETTINGS_EVENT, by, values, now)

    async def lock_users(
        self, org_id: uuid.UUID, user_ids: set[uuid.UUID]
    ) -> dict[uuid.UUID, User]:
        """The org's users of ``user_ids``, read afresh and locked in id order
        (PostgreSQL; SQLite's writer lock already serializes writes)."""
        statement = (
            select(User)
            .where(User.org_id == org_id, User.id.in_(user_ids))
            .order_by(User.id)
            .execution_options(populate_existing=True)
        )
        if self.session.get_bind().dialect.name == "postgresql":
            statement = statement.with_for_update()
        return {user.id: user for user in (await self.session.scalars(statement)).all()}

    async def stood_in_for(
        self, org_id: uuid.UUID, voter_id: uuid.UUID, now: datetime
    ) -> dict[uuid.UUID, str]:
        """Who ``voter_id`` stands in for at ``now`` (``stood_in_for``), with their names."""
        ids = stood_in_for(bindparam("voter", voter_id), bindparam("now", now)).subquery()
        rows = await self.session.execute(
            select(User.id, User.name).where(User.org_id == org_id, User.id.in_(select(ids.c.id)))
        )
        return {row.id: row.name for row in rows if row.id != voter_id}

    async def stand_ins(
        self, org_id: uuid.UUID, user_ids: Sequence[uuid.UUID], now: datetime
    ) -> list[uuid.UUID]:
        """Who stands in for ``user_ids`` at ``now`` (their delegates while they are away,
        and those delegates' own if away too: two hops, orgs/delegation.py), none of
        ``user_ids`` themselves. By primary key: two small reads at most."""
        found: list[uuid.UUID] = []
        hop = list(user_ids)
        for _ in range(2):
            if not hop:
                break
            rows = await self.session.execute(
                select(User.delegate_id).where(
                    User.org_id == org_id,
                    User.id.in_(hop),
                    User.delegate_id.is_not(None),
                    User.away_from <= now,
                    User.away_until > now,
                )
            )
            hop = [d for (d,) in rows if d is not None and d not in user_ids and d not in found]
            found += hop
        return found

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

    async def active_users(self, org_id: uuid.UUID) -> Sequence[Row[uuid.UUID, str, str, str]]:
        """The org's users who may sign in (``id``, ``email``, ``name``, ``role``), by
        e-mail: those notifications may tell."""
        rows = await self.session.execute(
            select(User.id, User.email, User.name, User.role)
            .where(User.org_id == org_id, User.deactivated_at.is_(None))
            .order_by(User.email)
        )
        return rows.all()

    async def find_user(self, user_id: uuid.UUID) -> User | None:
        return await self.session.get(User, user_id)

    async def any_org_exists(self) -> bool:
        return (await self.session.scalar(select(Organization.id).limit(1))) is not None

    async def replace_setup_link(self, token_hash: str, now: datetime) -> None:
        """Make ``token_hash`` the one setup link: the links of earlier starts stop working."""
        insert = postgresql.insert if self._dialect() == "postgresql" else sqlite.insert
        statement = insert(SetupLink).values(
            id=SETUP_LINK_ROW, token_hash=token_hash, issued_at=now, used_at=None
        )
        await self.session.execute(
            statement.on_conflict_do_update(
                index_elements=[SetupLink.id],
                set_={"token_hash": token_hash, "issued_at": now, "used_at": None},
            )
        )

    async def claim_setup_link(self, token_hash: str, now: datetime) -> bool:
        """Use the setup link with this hash; False if it is not the current one.

        Concurrent claims update the same row: PostgreSQL makes the later wait for the
        earlier to commit, then finds the link used (SQLite runs one writer at a time).
        """
        result = await self.session.execute(
            update(SetupLink)
            .where(SetupLink.id == SETUP_LINK_ROW, SetupLink.token_hash == token_hash)
            .values(token_hash=None, used_at=now)
        )
        return cast(CursorResult[tuple[()]], result).rowcount == 1

    async def close_setup_link(self) -> None:
        """No setup link works any more (an organization now exists).

        It locks the row while a link is open: a setup submitted meanwhile waits for this
        transaction, and then finds its link closed."""
        await self.session.execute(
            update(SetupLink)
            .where(SetupLink.id == SETUP_LINK_ROW, SetupLink.token_hash.is_not(None))
            .values(token_hash=None)
        )

    async def setup_link_is(self, token_hash: str) -> bool:
        found = await self.session.scalar(
            select(SetupLink.id).where(
                SetupLink.id == SETUP_LINK_ROW, SetupLink.token_hash == token_hash
            )
        )
        return found is not None

    def _dialect(self) -> str:
        return self.session.get_bind().dialect.name

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

    async def list_active_connections_of_owner(
        self, org_id: uuid.UUID, owner_id: uuid.UUID
    ) -> Sequence[Connection]:
        result = await self.session.scalars(
            select(Connection)
            .where(
                Connection.org_id == org_id,
                Connection.owner_id == owner_id,
                Connection.revoked_at.is_(None),
            )
            .order_by(Connection.created_at)
        )
        return result.all()

    async def list_connections(self, org_id: uuid.UUID) -> Sequence[Connection]:
        result = await self.session.scalars(
            select(Connection).where(Connection.org_id == org_id).order_by(Connection.created_at)
        )
        return result.all()


async def find_principal_by_key_hash(
    queries: QueryRunner, key_hash: str, channels_epoch: int = -1
) -> Principal | None:
    """The identity behind an API key; None if unknown or revoked.

    Every API call asks this, so it runs as a prepared query: no session, and on SQLite
    no SQLAlchemy execution at all (``storage/prepared/``). Read afresh on every call, so a revoked
    key or an emergency stop set by any process (a CLI, another replica) bites at once;
    ``PrincipalsByKey`` keeps its answers only while nothing is committed.
    """
    row = await queries.one(_PRINCIPAL_BY_KEY_HASH, {"key_hash": key_hash})
    return principal_from_row(row, channels_epoch=channels_epoch) if row is not None else None


class PrincipalsByKey:
    """API-key principals, read once per state of the database (SQLite) or remembered for
    the calls that confirm them in their own first statement (PostgreSQL).

    Why: every API call authenticates, and reading the principal afresh each time was a
    share of every call's CPU, and on PostgreSQL a round trip of its own
    (docs/decisions/0012-who-a-key-is.md).

    SQLite (``find``): kept only until anything at all is committed: the commit stamp
    (``QueryRunner.commit_stamp``) changes with every commit by any connection or
    process, and a changed stamp empties the cache. A principal found here is thus what
    a read now would return, and a revoked key, a new rate limit or an emergency stop
    bites at once, as decisions.md asks.

    PostgreSQL: ``find`` reads afresh every time, and remembers what it read;
    ``remembered`` answers that, unconfirmed, to the calls whose first statement carries
    ``principal_guard`` (``middleware.ApiGuard`` says which). The database confirms it
    in that statement, so a revoked key is refused at once on every replica; nothing is
    answered before it is confirmed.
    """

    # Keys kept at most (between two commits, on SQLite); past it the cache starts over.
    # Unknown keys are never kept, so guessing keys cannot fill it.
    MAX_KEYS = 1_024

    def __init__(self, queries: QueryRunner) -> None:
        self._queries = queries
        self._stamp: tuple[int, int] | None = None
        self._principals: dict[str, Principal] = {}

    async def find(self, key_hash: str) -> Principal | None:
        stamp = self._queries.commit_stamp()
        if stamp is None:
            principal = await find_principal_by_key_hash(self._queries, key_hash)
            self._remember(key_hash, principal)
            return principal
        if stamp != self._stamp:
            self._principals.clear()
            self._stamp = stamp
        elif (cached := self._principals.get(key_hash)) is not None:
            return cached
        # Taken before the read: whatever moves it on meanwhile makes the principal's
        # "no channel" untrusted (``storage.channel_presence``).
        seen = channel_presence.epoch()
        principal = await find_principal_by_key_hash(self._queries, key_hash, seen)
        # Kept only if no other call moved the stamp on while this read waited (a busy
        # database): the read may then be older than the stamp the cache is at.
        if self._stamp == stamp:
            self._remember(key_hash, principal)
        return principal

    def remembered(self, key_hash: str) -> Principal | None:
        """PostgreSQL: the principal last read for this key, to be confirmed by the
        call's first statement (``principal_guard``); None if none is kept, and always
        None on SQLite, whose ``find`` answers from memory when it may."""
        if self._queries.dialect_name != "postgresql":
            return None
        return self._principals.get(key_hash)

    def forget(self, key_hash: str) -> None:
        self._principals.pop(key_hash, None)

    def _remember(self, key_hash: str, principal: Principal | None) -> None:
        if principal is None:
            self._principals.pop(key_hash, None)
            return
        if len(self._principals) >= self.MAX_KEYS and key_hash not in self._principals:
            self._principals.clear()
        self._principals[key_hash] = principal


def principal_from_row(
    row: Sequence[Any],
    *,
    scopes: tuple[str, ...] = ALL_SCOPES,
    auth_method: Literal["api_key", "oauth"] = "api_key",
    channels_epoch: int = -1,
) -> Principal:
    """A Principal from a row that starts with ``PRINCIPAL_COLUMNS``; ``channels_epoch``:
    ``storage.channel_presence``'s epoch taken before the read (-1: none)."""
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
        owner_deactivated=row[10] is not None,
        org_passkey_for=row[11],
        org_self_approval=row[12],
        org_policy_version=row[13],
        org_standing_approvals=row[14],
        org_has_channels=bool(row[15]),
        channels_epoch=channels_epoch,
    )
