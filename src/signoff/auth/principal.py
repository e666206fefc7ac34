"""Who is calling: the identity every ``/api/v1`` call acts as."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from signoff.auth.actor import Actor

if TYPE_CHECKING:
    from signoff.models import Organization, User

ALL_SCOPES: tuple[str, ...] = ("approvals:read", "approvals:write", "comments:write")


@dataclass(frozen=True)
class OrgMember:
    """A person acting in their org: what deciding, voting and commenting need.

    A person signed in to the dashboard is one as they are; an API call is one through
    a connection (``Principal``). Use cases that need no connection take this type, so
    both reach them the same way.
    """

    org_id: uuid.UUID
    org_name: str
    org_emergency_stop: bool
    user_id: uuid.UUID
    user_email: str
    user_name: str
    role: Literal["admin", "member"]
    # The org's ``self_approval`` setting (orgs/settings.py): "allow" or "forbid".
    org_self_approval: str = field(default="allow", kw_only=True)
    # The org's policy document in force (``policies``): 0 when it has none.
    org_policy_version: int = field(default=0, kw_only=True)
    # The org's ``passkey_for`` setting: which decisions need the person's passkey.
    org_passkey_for: str = field(default="off", kw_only=True)
    # Standing approvals the org ever granted (``policies.standing``): 0, none to match.
    org_standing_approvals: int = field(default=0, kw_only=True)

    @classmethod
    def of(cls, user: User, org: Organization) -> OrgMember:
        """The person ``user`` of ``org`` (any role but admin acts as a member)."""
        return cls(
            org_id=org.id,
            org_name=org.name,
            org_emergency_stop=org.emergency_stop,
            user_id=user.id,
            user_email=user.email,
            user_name=user.name,
            role="admin" if user.role == "admin" else "member",
            org_self_approval=org.self_approval,
            org_policy_version=org.policy_version,
            org_passkey_for=org.passkey_for,
            org_standing_approvals=org.standing_approvals_granted,
        )

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

    @property
    def forbids_self_approval(self) -> bool:
        return self.org_self_approval == "forbid"

    @property
    def actor(self) -> Actor:
        return Actor(user_id=self.user_id, is_admin=self.is_admin, connection_id=None)


@dataclass(frozen=True)
class Principal(OrgMember):
    """A call with an API key acts as the connection's owner with every scope
    (decisions.md section 1); an OAuth token narrows the user and the scopes."""

    connection_id: uuid.UUID
    connection_name: str
    rate_limit_per_hour: int
    scopes: tuple[str, ...] = ALL_SCOPES
    auth_method: Literal["api_key", "oauth"] = "api_key"
    # An API key whose connection's owner is deactivated: the integration goes on, the
    # person's authority does not (``auth.authority``). Never set for an OAuth token,
    # which acts as the person who granted it and ends when they are deactivated.
    owner_deactivated: bool = False
    # Whether the org had a notification channel when this principal was read, and
    # ``storage.channel_presence``'s epoch before that read (-1: not to be trusted). A
    # SQLite create writes no plan row while both still hold (``approvals.service``).
    org_has_channels: bool = True
    channels_epoch: int = -1

    @property
    def is_admin(self) -> bool:
        return self.role == "admin" and not self.owner_deactivated

    @property
    def actor(self) -> Actor:
        # An OAuth token acts as its user, not as the connection that owns its client.
        connection = self.connection_id if self.auth_method == "api_key" else None
        return Actor(
            user_id=self.user_id,
            is_admin=self.is_admin,
            connection_id=connection,
            owner_deactivated=self.owner_deactivated,
        )


class StalePrincipal(Exception):
    """The principal a call began with is no longer what the database says (revoked, a
    new rate limit, an emergency stop, a renamed user...): the call wrote nothing, and is
    answered afresh with the principal read now (``middleware.ApiGuard``)."""


@dataclass
class PrincipalCheck:
    """A principal taken from this process's memory (PostgreSQL), not yet confirmed by
    the database: the call's first statement confirms it, in the same snapshot as what
    it reads or writes (``orgs.repository.principal_guard``), so that a revoked key is
    refused at once on every replica without a round trip of its own.

    ``confirmed`` is set by that statement; until it is, nothing may be answered
    (``ApiGuard`` reads the principal afresh first, say for a 404)."""

    principal: Principal
    confirmed: bool = False

    def confirm(self, live: bool) -> None:
        """The guard's answer: the principal is as remembered, or the call starts over."""
        if not live:
            raise StalePrincipal()
        self.confirmed = True
