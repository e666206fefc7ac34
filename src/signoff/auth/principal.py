"""Who is calling: the identity every ``/api/v1`` call acts as."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

from signoff.approvals.state import Actor

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

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"

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

    @property
    def actor(self) -> Actor:
        # An OAuth token acts as its user, not as the connection that owns its client.
        connection = self.connection_id if self.auth_method == "api_key" else None
        return Actor(user_id=self.user_id, is_admin=self.is_admin, connection_id=connection)
