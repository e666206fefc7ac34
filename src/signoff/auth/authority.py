"""What a connection may still do once its owner is deactivated.

An API key acts as its connection's owner (decisions.md section 1). When that person is
deactivated, the integration must keep running, but the person's authority must not
outlive them: the connection goes on creating, reading, commenting on and cancelling its
own requests, and everything else (deciding, voting, every admin act) is refused with
403 OWNER_DEACTIVATED until an admin transfers it to an active user.

This table is the one place that says it, by route: every ``/api/v1`` call resolves its
caller through ``common.http.principal_of``, which asks ``check_authority``. A route not
listed is refused, so a route added later carries no deactivated person's authority
until it is listed here. The state machine holds the same line for status changes
(``approvals.state``: decisions and votes refused, cancelling limited to the
connection's own requests), and comments are limited to its own requests
(``approvals.service.add_comment``).
"""

from __future__ import annotations

import uuid
from typing import Literal

from signoff.auth.principal import OrgMember, Principal
from signoff.errors import OwnerDeactivated

# "all": as for any member's connection; "own": on the requests the connection created.
Reach = Literal["all", "own"]

WITHOUT_ACTIVE_OWNER: dict[tuple[str, str], Reach] = {
    ("GET", "/api/v1/me"): "all",
    ("POST", "/api/v1/approvals"): "all",
    ("GET", "/api/v1/approvals"): "all",
    ("GET", "/api/v1/approvals/{request_id}"): "all",
    ("DELETE", "/api/v1/approvals/{request_id}"): "own",
    ("GET", "/api/v1/approvals/{request_id}/comments"): "all",
    ("POST", "/api/v1/approvals/{request_id}/comments"): "own",
    ("GET", "/api/v1/approvals/{request_id}/events"): "all",
    ("GET", "/api/v1/approvals/{request_id}/steps"): "all",
    # Only the creating connection (or an admin) may, and never fewer steps than the
    # request needs without an admin: the state machine's rules, as for any member.
    ("POST", "/api/v1/approvals/{request_id}/steps"): "all",
    ("GET", "/api/v1/approvals/{request_id}/notifications"): "all",
    ("GET", "/api/v1/webhooks"): "all",
    ("POST", "/api/v1/test-webhook"): "all",
    ("GET", "/api/v1/emergency-stop"): "all",
    ("GET", "/api/v1/team/members"): "all",
    ("GET", "/api/v1/org/action-types"): "all",
    ("GET", "/api/v1/org/settings"): "all",
    # Served only for older clients (compat/), which fill pickers from them.
    ("GET", "/api/v1/teams"): "all",
    ("GET", "/api/v1/templates"): "all",
}


def reach_without_owner(method: str, route_path: str) -> Reach | None:
    """What a connection with a deactivated owner may do on this route; None: nothing."""
    return WITHOUT_ACTIVE_OWNER.get((method, route_path))


def check_authority(principal: Principal, method: str, route_path: str) -> None:
    """Refuse a call the principal may not make because its owner is deactivated."""
    if principal.owner_deactivated and reach_without_owner(method, route_path) is None:
        raise refusal(principal)


def refusal(principal: Principal, message: str | None = None) -> OwnerDeactivated:
    return OwnerDeactivated(
        message,
        {"connection_id": str(principal.connection_id), "owner_id": str(principal.user_id)},
    )


def check_own_request(member: OrgMember, created_by: uuid.UUID | None) -> None:
    """On a route of reach "own": refuse a request the connection did not create."""
    if (
        isinstance(member, Principal)
        and member.owner_deactivated
        and created_by != member.connection_id
    ):
        raise refusal(
            member,
            "The owner of this connection is deactivated: it may act only on the requests "
            "it created.",
        )
