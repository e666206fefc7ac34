"""Use cases of organizations, users and connections. Never commits."""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy.exc import IntegrityError

from signoff.audit import events as audit_events
from signoff.auth.secrets import (
    api_key_display_prefix,
    generate_api_key,
    generate_webhook_secret,
    hash_api_key,
    hash_password,
)
from signoff.common.ids import new_id, parse_id
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.errors import Conflict, NotFound, ValidationFailed
from signoff.models import Connection, Organization, User
from signoff.oauth.repository import OAuthRepository
from signoff.orgs.repository import OrgRepository

Role = Literal["admin", "member"]
EMAIL_PATTERN = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
MIN_PASSWORD_LENGTH = 8


@dataclass(frozen=True)
class IssuedConnection:
    """A new connection with its credentials: the only time they are ever readable."""

    connection: Connection
    api_key: str
    webhook_secret: str


def _require_name(value: str, field: str) -> str:
    value = value.strip()
    if not value or len(value) > 200:
        raise ValidationFailed.for_field(field, "must be 1 to 200 characters")
    return value


async def create_org(repo: OrgRepository, name: str, now: datetime) -> Organization:
    """A new organization; its name must be unused, ignoring case.

    The first organization, however it is made, also closes the first-run setup link."""
    name = _require_name(name, "name")
    await _require_free_name(repo, name)
    await repo.close_setup_link()
    org = Organization(id=new_id(), name=name, created_at=now)
    try:
        async with repo.session.begin_nested():
            await repo.add(org)
    except IntegrityError:
        # Created by someone else since the check above (the unique index is the rule).
        raise _name_taken(name) from None
    return org


async def rename_org(repo: OrgRepository, org: Organization, name: str) -> None:
    name = _require_name(name, "name")
    if name.lower() != org.name.lower():
        await _require_free_name(repo, name)
    org.name = name
    try:
        async with repo.session.begin_nested():
            await repo.session.flush()
    except IntegrityError:
        raise _name_taken(name) from None


async def delete_org(repo: OrgRepository, org: Organization, *, with_data: bool) -> None:
    """Delete the org with its users, connections and settings; one with requests only
    ``with_data`` (its requests, their history and its audit trail go too)."""
    if not with_data and await repo.org_has_requests(org.id):
        raise Conflict(
            f"The organization {org.name!r} has approval requests; deleting it deletes "
            "them and their audit trail too. Confirm with --with-data.",
            {"org_id": str(org.id)},
        )
    await repo.delete_org(org.id)


async def _require_free_name(repo: OrgRepository, name: str) -> None:
    if await repo.find_org_by_name(name) is not None:
        raise _name_taken(name)


def _name_taken(name: str) -> Conflict:
    return Conflict(
        f"An organization named {name!r} exists already (names are unique, ignoring case)."
    )


async def resolve_org(repo: OrgRepository, reference: str) -> Organization:
    """An org by id, or by name (ignoring case)."""
    org_id = parse_id(reference)
    if org_id is not None and (org := await repo.get_org(org_id)) is not None:
        return org
    org = await repo.find_org_by_name(reference.strip())
    if org is None:
        raise NotFound(f"No organization {reference!r}.")
    return org


async def resolve_user(repo: OrgRepository, org_id: uuid.UUID, reference: str) -> User:
    """A user of the org by id or by e-mail."""
    user_id = parse_id(reference)
    user = await repo.get_user(org_id, user_id) if user_id else None
    user = user or await repo.find_user_by_email(org_id, reference.strip().lower())
    if user is None:
        raise NotFound(f"No user {reference!r} in this organization.")
    return user


async def create_user(
    repo: OrgRepository,
    org_id: uuid.UUID,
    *,
    email: str,
    name: str,
    role: Role,
    password: str | None,
    now: datetime,
    by: uuid.UUID | None = None,
) -> User:
    email = email.strip().lower()
    if not EMAIL_PATTERN.fullmatch(email) or len(email) > 320:
        raise ValidationFailed.for_field("email", "must be an e-mail address")
    if password is not None and len(password) < MIN_PASSWORD_LENGTH:
        raise ValidationFailed.for_field(
            "password", f"must be at least {MIN_PASSWORD_LENGTH} characters"
        )
    user = User(
        id=new_id(),
        org_id=org_id,
        email=email,
        name=_require_name(name, "name"),
        role=role,
        password_hash=hash_password(password) if password else None,
        created_at=now,
    )
    try:
        async with repo.session.begin_nested():
            await repo.add(user)
    except IntegrityError:
        raise Conflict(f"A user with the e-mail {email} already exists.") from None
    audit_events.note(user, "user.invited", by, {"user_id": str(user.id), "role": role}, now)
    return user


def _check_rate_limit(rate_limit: int, settings: Settings) -> int:
    if not 1 <= rate_limit <= settings.rate_limit_ceiling:
        raise ValidationFailed.for_field(
            "rate_limit", f"must be between 1 and the ceiling of {settings.rate_limit_ceiling}"
        )
    return rate_limit


async def create_connection(
    repo: OrgRepository,
    box: SecretBox,
    settings: Settings,
    org_id: uuid.UUID,
    *,
    owner: User,
    name: str,
    rate_limit: int | None,
    now: datetime,
    by: uuid.UUID | None = None,
) -> IssuedConnection:
    api_key = generate_api_key()
    webhook_secret = generate_webhook_secret()
    connection = Connection(
        id=new_id(),
        org_id=org_id,
        owner_id=owner.id,
        name=_require_name(name, "name"),
        rate_limit_per_hour=_check_rate_limit(rate_limit or settings.rate_limit_default, settings),
        api_key_hash=hash_api_key(api_key),
        api_key_prefix=api_key_display_prefix(api_key),
        webhook_secret_encrypted=box.encrypt(webhook_secret),
        created_at=now,
    )
    await repo.add(connection)
    _note_connection(connection, "connection.created", by, now)
    return IssuedConnection(connection, api_key, webhook_secret)


def _note_connection(
    connection: Connection, event_type: str, by: uuid.UUID | None, now: datetime
) -> None:
    # Names and ids only: the key and the secrets never enter the audit trail.
    data = {"connection_id": str(connection.id), "name": connection.name}
    audit_events.note(connection, event_type, by, data, now)


async def get_connection(repo: OrgRepository, org_id: uuid.UUID, connection_id: str) -> Connection:
    parsed = parse_id(connection_id)
    connection = await repo.get_connection(org_id, parsed) if parsed else None
    if connection is None:
        raise NotFound(f"No connection {connection_id!r} in this organization.")
    return connection


async def revoke_connection(
    connection: Connection, now: datetime, by: uuid.UUID | None = None
) -> None:
    """Its API key answers 401 from the next call on; the row stays for the audit trail."""
    if connection.revoked_at is None:
        connection.revoked_at = now
        _note_connection(connection, "connection.revoked", by, now)


async def rotate_webhook_secret(
    connection: Connection,
    box: SecretBox,
    grace: timedelta,
    now: datetime,
    by: uuid.UUID | None = None,
) -> str:
    """Issue a new secret; the old one keeps signing beside it until the grace period ends."""
    new_secret = generate_webhook_secret()
    connection.previous_webhook_secret_encrypted = connection.webhook_secret_encrypted
    connection.previous_webhook_secret_expires_at = now + grace
    connection.webhook_secret_encrypted = box.encrypt(new_secret)
    _note_connection(connection, "connection.rotated", by, now)
    return new_secret


def set_rate_limit(
    connection: Connection,
    rate_limit: int,
    settings: Settings,
    now: datetime,
    by: uuid.UUID | None = None,
) -> None:
    before = connection.rate_limit_per_hour
    connection.rate_limit_per_hour = _check_rate_limit(rate_limit, settings)
    if connection.rate_limit_per_hour != before:
        data = {
            "connection_id": str(connection.id),
            "from": before,
            "to": connection.rate_limit_per_hour,
        }
        audit_events.note(connection, "connection.rate_limit_changed", by, data, now)


async def transfer_connection(
    connection: Connection, new_owner: User, now: datetime, by: uuid.UUID | None = None
) -> None:
    """Its API key acts as ``new_owner`` from the next call on (every process: the owner
    is part of what a remembered principal is checked against). The key, the webhook
    secret, the OAuth clients and the requests it made stay as they are."""
    if connection.revoked_at is not None:
        raise Conflict("This connection is revoked.")
    if new_owner.org_id != connection.org_id:
        raise ValidationFailed.for_field("owner_id", "must be a user of this organization")
    if new_owner.deactivated_at is not None:
        raise ValidationFailed.for_field("owner_id", "is deactivated; choose an active user")
    if connection.owner_id == new_owner.id:
        return
    data = {
        "connection_id": str(connection.id),
        "from_owner_id": str(connection.owner_id),
        "to_owner_id": str(new_owner.id),
    }
    connection.owner_id = new_owner.id
    audit_events.note(connection, "connection.transferred", by, data, now)


async def transfer(
    repo: OrgRepository,
    org_id: uuid.UUID,
    connection_id: str,
    owner: str,
    now: datetime,
    by: uuid.UUID | None = None,
) -> Connection:
    """``transfer_connection`` by references (the API's): an unknown connection is 404, an
    unknown owner a mistake in the body (400)."""
    connection = await get_connection(repo, org_id, connection_id)
    try:
        new_owner = await resolve_user(repo, org_id, owner)
    except NotFound:
        raise ValidationFailed.for_field(
            "owner_id", "must be the id or e-mail of a user of this organization"
        ) from None
    await transfer_connection(connection, new_owner, now, by)
    await repo.session.flush()
    return connection


async def deactivate_user(
    oauth: OAuthRepository, user: User, now: datetime, by: uuid.UUID | None = None
) -> None:
    """They can no longer sign in, every dashboard session of theirs ends now, and every
    OAuth token they granted is revoked (those act as them). The API keys of connections
    they own keep working without their authority (``auth.authority``) until an admin
    transfers them (docs/dashboard.md, *Deactivating a user*)."""
    if user.deactivated_at is None:
        user.deactivated_at = now
        audit_events.note(user, "user.deactivated", by, {"user_id": str(user.id)}, now)
    await oauth.delete_user_sessions(user.id, keep=None)
    await oauth.revoke_user_tokens(user.id, now)


def reactivate_user(user: User, now: datetime, by: uuid.UUID | None = None) -> None:
    """They may sign in again, and their connections' keys act with their authority again;
    ended sessions and revoked tokens stay ended."""
    if user.deactivated_at is not None:
        user.deactivated_at = None
        audit_events.note(user, "user.reactivated", by, {"user_id": str(user.id)}, now)


async def owned_connections(repo: OrgRepository, user: User) -> Sequence[Connection]:
    """The connections, not revoked, whose API keys act as ``user``."""
    return await repo.list_active_connections_of_owner(user.org_id, user.id)


async def list_users(repo: OrgRepository, org_id: uuid.UUID) -> Sequence[User]:
    return await repo.list_users(org_id)


async def list_connections(repo: OrgRepository, org_id: uuid.UUID) -> Sequence[Connection]:
    return await repo.list_connections(org_id)
