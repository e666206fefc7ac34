"""What an empty inbox shows a new admin: the next steps to a first request.

Until the organization has its first request, an admin's empty inbox says what to do:
create a connection (its API key is shown once, at creation), then send a request with
``curl``. The command names the public address and reads the key from an environment
variable (the page never holds a secret), so it runs as copied.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from signoff.auth.principal import OrgMember
from signoff.dashboard.admin_repository import AdminRepository
from signoff.orgs.repository import OrgRepository

KEY_VARIABLE = "SIGNOFF_API_KEY"
FIRST_REQUEST = {
    "title": "My first request",
    "description": "Sent with curl, to try signoff out",
    "priority": "medium",
}


@dataclass(frozen=True)
class FirstSteps:
    connections: list[str]  # the names of the org's active connections
    curl: str


def first_request_curl(public_url: str) -> str:
    # The body over two lines (JSON allows it) keeps each line short enough to read.
    fields = [f"{json.dumps(key)}: {json.dumps(value)}" for key, value in FIRST_REQUEST.items()]
    body = "{" + ", ".join(fields[:1] + fields[2:]) + ",\n      " + fields[1] + "}"
    url = shlex.quote(f"{public_url.rstrip('/')}/api/v1/approvals")
    return "\n".join(
        [
            f"curl -sS -X POST {url} \\",
            f'  -H "Authorization: Bearer ${KEY_VARIABLE}" \\',
            "  -H 'Content-Type: application/json' \\",
            f"  -d {shlex.quote(body)}",
        ]
    )


class FirstStepsWork(Protocol):
    """What the first steps read: the org's connections, and whether it has requests."""

    @property
    def session(self) -> AsyncSession: ...

    @property
    def orgs(self) -> OrgRepository: ...


async def first_steps(uow: FirstStepsWork, member: OrgMember, public_url: str) -> FirstSteps | None:
    """The steps for an admin of an org without any request yet; ``None`` otherwise."""
    if not member.is_admin or await AdminRepository(uow.session).has_requests(member.org_id):
        return None
    connections = await uow.orgs.list_connections(member.org_id)
    names = [c.name for c in connections if c.revoked_at is None]
    return FirstSteps(names, first_request_curl(public_url))
