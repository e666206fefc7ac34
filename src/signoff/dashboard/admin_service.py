"""Use cases of the admin pages, on the services the API and the CLI use. Never commits.

Every function takes the admin's ``OrgMember`` and touches only that org's rows: an id
of another org is "not found", as on the API.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Generic, Protocol, TypeVar

from signoff.approvals.listing import number_searched
from signoff.audit import events as audit_events
from signoff.auth.principal import OrgMember
from signoff.auth.secrets import hash_password
from signoff.common.ids import parse_id
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.dashboard.admin_repository import (
    AdminRepository,
    AuditFilters,
    AuditRow,
    DeliveryFilters,
    DeliveryRow,
)
from signoff.errors import Conflict, NotFound, ValidationFailed
from signoff.invitations import service as invitations
from signoff.invitations.mail import Purpose
from signoff.models import Connection, OAuthClient, User, WebhookAttempt
from signoff.oauth import service as oauth_service
from signoff.orgs import service as orgs_service

PAGE_SIZE = 50
# How long a rotated webhook secret keeps signing beside the new one, as the CLI's default.
DEFAULT_GRACE_HOURS = 24
RESPONSE_BODY_SHOWN = 1024
ROLES = ("member", "admin")


class AdminWork(invitations.LinkWork, Protocol):
    """What the admin pages' use cases need of a unit of work: the orgs' and OAuth
    repositories, and the session the invitations' links are written in (all of which
    ``LinkWork`` names already: an admin use case may issue a link)."""


def _id(value: str | None) -> uuid.UUID | None:
    return parse_id(value.strip()) if value and value.strip() else None


# ---- connections ----


@dataclass(frozen=True)
class ConnectionRow:
    connection: Connection
    owner: User | None

    @property
    def owner_name(self) -> str:
        return self.owner.name if self.owner else ""

    @property
    def owner_deactivated(self) -> bool:
        """Its key acts without its owner's authority until it is transferred."""
        return self.owner is not None and self.owner.deactivated_at is not None


async def connections(uow: AdminWork, admin: OrgMember) -> list[ConnectionRow]:
    people = {u.id: u for u in await uow.orgs.list_users(admin.org_id)}
    rows = await orgs_service.list_connections(uow.orgs, admin.org_id)
    # Active first, newest first within each: revoked ones stay listed for the record.
    ordered = sorted(rows, key=lambda c: (c.revoked_at is not None, -c.created_at.timestamp()))
    return [ConnectionRow(c, people.get(c.owner_id)) for c in ordered]


def parse_rate_limit(value: str | None) -> int | None:
    value = (value or "").strip()
    if not value:
        return None
    if not value.isdigit():
        raise ValidationFailed.for_field("rate_limit", "must be a whole number of calls per hour")
    return int(value)


async def create_connection(
    uow: AdminWork,
    box: SecretBox,
    settings: Settings,
    admin: OrgMember,
    *,
    name: str,
    owner: str,
    rate_limit: str,
    now: datetime,
) -> orgs_service.IssuedConnection:
    owner_user = await _active_user(uow, admin, owner) if owner else None
    if owner_user is None:
        owner_user = await _active_user(uow, admin, str(admin.user_id))
    return await orgs_service.create_connection(
        uow.orgs,
        box,
        settings,
        admin.org_id,
        owner=owner_user,
        name=name,
        rate_limit=parse_rate_limit(rate_limit),
        now=now,
        by=admin.user_id,
    )


async def connection(uow: AdminWork, admin: OrgMember, connection_id: str) -> Connection:
    return await orgs_service.get_connection(uow.orgs, admin.org_id, connection_id)


async def revoke_connection(
    uow: AdminWork, admin: OrgMember, connection_id: str, now: datetime
) -> Connection:
    found = await connection(uow, admin, connection_id)
    await orgs_service.revoke_connection(found, now, admin.user_id)
    return found


async def rotate_webhook_secret(
    uow: AdminWork, box: SecretBox, admin: OrgMember, connection_id: str, now: datetime
) -> tuple[Connection, str]:
    found = await _active_connection(uow, admin, connection_id)
    grace = timedelta(hours=DEFAULT_GRACE_HOURS)
    return found, await orgs_service.rotate_webhook_secret(found, box, grace, now, admin.user_id)


async def set_rate_limit(
    uow: AdminWork, settings: Settings, admin: OrgMember, connection_id: str, value: str
) -> Connection:
    found = await _active_connection(uow, admin, connection_id)
    limit = parse_rate_limit(value)
    if limit is None:
        raise ValidationFailed.for_field("rate_limit", "is required")
    orgs_service.set_rate_limit(found, limit, settings, utcnow(), admin.user_id)
    return found


async def transfer_connection(
    uow: AdminWork, admin: OrgMember, connection_id: str, owner: str
) -> tuple[Connection, User]:
    """The connection's key acts as ``owner`` (an active user of the org) from now on."""
    found = await connection(uow, admin, connection_id)
    if not owner.strip():
        raise ValidationFailed.for_field("owner", "is required")
    new_owner = await _active_user(uow, admin, owner)
    await orgs_service.transfer_connection(found, new_owner, utcnow(), admin.user_id)
    return found, new_owner


async def _active_connection(uow: AdminWork, admin: OrgMember, connection_id: str) -> Connection:
    found = await connection(uow, admin, connection_id)
    if found.revoked_at is not None:
        raise Conflict("This connection is revoked.")
    return found


# ---- users ----


def new_password() -> str:
    """An initial or reset password, shown once: 16 URL-safe characters (96 bits)."""
    return secrets.token_urlsafe(12)


async def users(uow: AdminWork, admin: OrgMember) -> Sequence[User]:
    return await orgs_service.list_users(uow.orgs, admin.org_id)


async def _user(uow: AdminWork, admin: OrgMember, user_id: str) -> User:
    parsed = _id(user_id)
    found = await uow.orgs.get_user(admin.org_id, parsed) if parsed else None
    if found is None:
        raise NotFound("No such user in this organization.")
    return found


async def _active_user(uow: AdminWork, admin: OrgMember, user_id: str) -> User:
    found = await _user(uow, admin, user_id)
    if found.deactivated_at is not None:
        raise ValidationFailed.for_field("owner", "is deactivated")
    return found


def _role(value: str) -> str:
    if value not in ROLES:
        raise ValidationFailed.for_field("role", "must be member or admin")
    return value


@dataclass(frozen=True)
class Handed:
    """How a person gets a password: a generated one, shown once to the admin (and to be
    replaced at first sign-in), or a one-time link mailed to them."""

    user: User
    password: str | None = None
    link: invitations.IssuedLink | None = None


async def add_user(
    uow: AdminWork,
    admin: OrgMember,
    settings: Settings,
    *,
    email: str,
    name: str,
    role: str,
    now: datetime,
    by_link: bool,
) -> Handed:
    """A new person: invited by a mailed link (``by_link``: SMTP is configured), else
    given a generated password they must replace when they first sign in."""
    password = None if by_link else new_password()
    user = await orgs_service.create_user(
        uow.orgs,
        admin.org_id,
        email=email,
        name=name,
        role="admin" if _role(role) == "admin" else "member",
        password=password,
        now=now,
        by=admin.user_id,
    )
    if by_link:
        return Handed(user, link=await invitations.issue_link(uow, user, "invite", settings, now))
    user.must_change_password = True
    return Handed(user, password=password)


def _not_self(admin: OrgMember, user: User, what: str) -> None:
    # The org would otherwise lose its last way in through this very page.
    if user.id == admin.user_id:
        raise Conflict(f"You cannot {what} yourself; ask another admin.")


async def change_role(uow: AdminWork, admin: OrgMember, user_id: str, role: str) -> User:
    user = await _user(uow, admin, user_id)
    _not_self(admin, user, "change the role of")
    before, user.role = user.role, _role(role)
    if user.role != before:
        change = {"user_id": str(user.id), "role": user.role, "was": before}
        audit_events.note(user, "user.role_changed", admin.user_id, change, utcnow())
    # Their sessions stay; every page reads the role afresh on each request.
    return user


async def deactivate_user(
    uow: AdminWork, admin: OrgMember, user_id: str, now: datetime
) -> tuple[User, Sequence[Connection]]:
    """``orgs.service.deactivate_user`` (as the CLI's), and the connections whose keys
    now act without the user's authority, to say so."""
    user = await _user(uow, admin, user_id)
    _not_self(admin, user, "deactivate")
    await orgs_service.deactivate_user(uow.oauth, user, now, admin.user_id)
    return user, await orgs_service.owned_connections(uow.orgs, user)


async def reactivate_user(uow: AdminWork, admin: OrgMember, user_id: str) -> User:
    user = await _user(uow, admin, user_id)
    orgs_service.reactivate_user(user, utcnow(), admin.user_id)
    return user


async def reset_password(
    uow: AdminWork,
    admin: OrgMember,
    settings: Settings,
    user_id: str,
    now: datetime,
    *,
    by_link: bool,
) -> Handed:
    """The old password stops working and the user's sessions end (it may be known).
    With ``by_link`` they get a mailed link to choose one (an invitation again, if they
    never had a password); else a generated one, to replace at their next sign-in."""
    user = await _user(uow, admin, user_id)
    await uow.oauth.delete_user_sessions(user.id, keep=None)
    if by_link:
        purpose: Purpose = "invite" if user.password_hash is None else "reset"
        user.password_hash = None
        user.must_change_password = False
        link = await invitations.issue_link(uow, user, purpose, settings, now)
        return Handed(user, link=link)
    password = new_password()
    user.password_hash = hash_password(password)
    user.must_change_password = True
    # A link mailed earlier would otherwise still set a password.
    await invitations.retire_links(uow, user.id, now)
    return Handed(user, password=password)


# ---- OAuth clients ----


@dataclass(frozen=True)
class ClientRow:
    client: OAuthClient
    connection_name: str


async def oauth_clients(uow: AdminWork, admin: OrgMember) -> list[ClientRow]:
    names = {c.id: c.name for c in await orgs_service.list_connections(uow.orgs, admin.org_id)}
    clients = await oauth_service.list_clients(uow.oauth, admin.org_id, None)
    return [ClientRow(c, names.get(c.connection_id, "")) for c in clients]


async def register_client(
    uow: AdminWork,
    settings: Settings,
    admin: OrgMember,
    *,
    name: str,
    redirect_uris: str,
    public: bool,
    connection_id: str,
    now: datetime,
    ciba: oauth_service.CibaRegistration = oauth_service.NO_CIBA,
) -> oauth_service.IssuedClient:
    try:
        owner = await connection(uow, admin, connection_id)
    except NotFound:
        raise ValidationFailed.for_field(
            "connection", "must be one of this organization's"
        ) from None
    return await oauth_service.register_client(
        uow.oauth,
        settings,
        owner,
        name=name,
        redirect_uris=[line for line in redirect_uris.splitlines() if line.strip()],
        public=public,
        now=now,
        ciba=ciba,
    )


async def delete_client(
    uow: AdminWork, admin: OrgMember, client_id: str, now: datetime
) -> OAuthClient:
    client = await oauth_service.get_client(uow.oauth, admin.org_id, client_id[:100])
    await oauth_service.delete_client(uow.oauth, client, now)
    return client


# ---- deliveries ----

DELIVERY_STATUSES = ("pending", "succeeded", "failed")


T = TypeVar("T")


@dataclass(frozen=True)
class Listing(Generic[T]):
    rows: Sequence[T]
    page: int
    has_next: bool


def page_number(value: str | None) -> int:
    return int(value) if value and value.isdigit() and 0 < int(value) < 100_000 else 1


def delivery_filters(query: dict[str, str]) -> DeliveryFilters:
    status = query.get("status") or None
    return DeliveryFilters(
        request_id=_id(query.get("request_id")),
        status=status if status in DELIVERY_STATUSES else None,
        connection_id=_id(query.get("connection_id")),
    )


async def deliveries(
    repo: AdminRepository, admin: OrgMember, filters: DeliveryFilters, page: int
) -> Listing[DeliveryRow]:
    rows = await repo.list_deliveries(admin.org_id, filters, (page - 1) * PAGE_SIZE, PAGE_SIZE + 1)
    return Listing(rows[:PAGE_SIZE], page, len(rows) > PAGE_SIZE)


@dataclass(frozen=True)
class DeliveryDetail:
    row: DeliveryRow
    attempts: Sequence[WebhookAttempt]


async def delivery(repo: AdminRepository, admin: OrgMember, delivery_id: str) -> DeliveryDetail:
    parsed = _id(delivery_id)
    row = await repo.get_delivery(admin.org_id, parsed) if parsed else None
    if row is None:
        raise NotFound("No delivery with this id.")
    return DeliveryDetail(row, await repo.attempts_of(row.delivery.id))


# ---- audit ----


def _day(value: str | None, field: str) -> datetime | None:
    if not value:
        return None
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValidationFailed.for_field(field, "must be a date (YYYY-MM-DD)") from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.now().astimezone().tzinfo)


def audit_filters(query: dict[str, str]) -> AuditFilters:
    """From the page's form; ``until`` is a day, included whole."""
    until = _day(query.get("until"), "until")
    if until is not None and len(query.get("until", "")) <= 10:
        until += timedelta(days=1)
    request = (query.get("request_id") or "").strip()
    number = number_searched(request)
    return AuditFilters(
        type=(query.get("type") or "").strip()[:64] or None,
        request_id=None if number else _id(request),
        request_number=number.number if number else None,
        actor_id=_id(query.get("actor_id")),
        since=_day(query.get("since"), "since"),
        until=until,
    )


async def audit(
    repo: AdminRepository, admin: OrgMember, filters: AuditFilters, page: int
) -> Listing[AuditRow]:
    rows = await repo.list_audit(admin.org_id, filters, (page - 1) * PAGE_SIZE, PAGE_SIZE + 1)
    return Listing(rows[:PAGE_SIZE], page, len(rows) > PAGE_SIZE)


# ---- emergency stop ----


@dataclass(frozen=True)
class StopState:
    active: bool
    since: datetime | None
    by_name: str | None
    operator_stop: bool


async def stop_state(uow: AdminWork, admin: OrgMember, settings: Settings) -> StopState:
    org = await uow.orgs.get_org(admin.org_id)
    if org is None:
        raise NotFound("No such organization.")
    by_id = org.emergency_stop_by
    by = await uow.orgs.get_user(admin.org_id, by_id) if by_id else None
    return StopState(
        org.emergency_stop,
        org.emergency_stop_at if org.emergency_stop else None,
        by.name if by and org.emergency_stop else None,
        settings.emergency_stop,
    )


async def set_stop(uow: AdminWork, admin: OrgMember, active: bool, now: datetime) -> None:
    await uow.orgs.set_emergency_stop(admin.org_id, active, admin.user_id, now)
