"""One-click decisions that link scanners cannot trigger.

A link's GET only *looks* (``inspect_link``): it never uses the token and never
decides, so any number of scanners and previews leave the request pending and the link
valid. Only the POST of the confirmation page decides (``use_link``), through the same
services as the API and the dashboard, recording ``via`` in the audit event.
"""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Literal

from signoff.approvals import service as approvals
from signoff.approvals.schemas import RelayedDecision
from signoff.auth.principal import OrgMember
from signoff.common.ids import new_id
from signoff.models import ApprovalRequest
from signoff.models.notifications import DecisionLink
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing.document import RequestFacts, facts_of, link_expiry
from signoff.passkeys.rule import passkey_needed
from signoff.unit_of_work import UnitOfWork

LinkState = Literal[
    "ready", "unknown", "used", "expired", "decided", "sign_in", "foreign", "stopped", "passkey"
]


def hash_link_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class IssuedLinks:
    approve: str
    reject: str


def issue_links(
    repo: NotificationRepository,
    request: RequestFacts,
    user_id: uuid.UUID | None,
    via: str,
    require_sign_in: bool,
    now: datetime,
) -> IssuedLinks:
    """A fresh approve and reject token for one message; only their hashes are kept."""
    tokens = {decision: secrets.token_urlsafe(32) for decision in ("approve", "reject")}
    repo.add_links(
        [
            DecisionLink(
                id=new_id(),
                token_hash=hash_link_token(token),
                org_id=request.org_id,
                request_id=request.id,
                user_id=user_id,
                decision=decision,
                via=via,
                require_sign_in=require_sign_in,
                expires_at=link_expiry(request, now),
                created_at=now,
            )
            for decision, token in tokens.items()
        ]
    )
    return IssuedLinks(tokens["approve"], tokens["reject"])


@dataclass(frozen=True)
class Person:
    """The person whose vote a link records."""

    name: str
    email: str


@dataclass(frozen=True)
class Outcome:
    """What became of the request, for the page of a link that can no longer decide.
    The page shows it to members of the request's organization only."""

    status: str
    decided_by: str | None
    decided_at: datetime | None
    current_approvals: int
    required_approvals: int


@dataclass(frozen=True)
class LinkView:
    state: LinkState
    link: DecisionLink | None = None
    request: RequestFacts | None = None
    status: str | None = None
    person: Person | None = None
    outcome: Outcome | None = None


async def inspect_link(
    repo: NotificationRepository,
    token: str,
    viewer: OrgMember | None,
    now: datetime,
    *,
    emergency_stop: bool = False,
) -> LinkView:
    """What the link may do now, for this visitor; changes nothing."""
    link = await repo.find_link(hash_link_token(token)) if 20 <= len(token) <= 100 else None
    if link is None:
        return LinkView("unknown")
    row = await repo.approvals.find_in_org(link.org_id, link.request_id)
    if row is None:
        return LinkView("unknown")
    view = LinkView(
        "ready", link, facts_of(row), row.status, await _person_of(repo, link), _outcome_of(row)
    )
    if link.used_at is not None:
        return _with(view, "used")
    if row.status != "pending" or (row.expires_at is not None and row.expires_at <= now):
        return _with(view, "decided")
    if link.expires_at <= now:
        return _with(view, "expired")
    org = await repo.orgs.get_org(link.org_id)
    if emergency_stop or (org is not None and org.emergency_stop):
        return _with(view, "stopped")
    if org is not None and passkey_needed(org.passkey_for, row.priority, row.passkey_required):
        # Only the request's page can sign the decision with the person's passkey.
        return _with(view, "passkey")
    if viewer is not None and (
        viewer.org_id != link.org_id or (link.user_id and viewer.user_id != link.user_id)
    ):
        return _with(view, "foreign")
    if viewer is None and (link.require_sign_in or link.user_id is None):
        return _with(view, "sign_in")
    return view


def _with(view: LinkView, state: LinkState) -> LinkView:
    return replace(view, state=state)


async def _person_of(repo: NotificationRepository, link: DecisionLink) -> Person | None:
    if link.user_id is None:
        return None  # a channel's link: the vote is the signed-in person's
    user = await repo.orgs.get_user(link.org_id, link.user_id)
    return Person(user.name, user.email) if user is not None else None


def _outcome_of(row: ApprovalRequest) -> Outcome:
    return Outcome(
        status=row.status,
        decided_by=row.decided_by_name,
        decided_at=row.decided_at or row.cancelled_at,
        current_approvals=row.current_approvals,
        required_approvals=row.required_approvals,
    )


async def use_link(
    uow: UnitOfWork,
    token: str,
    viewer: OrgMember | None,
    now: datetime,
    *,
    emergency_stop: bool = False,
) -> LinkView:
    """The confirmation's POST: decide once, as the link's person (or the signed-in one).

    The link is marked used in the same transaction as the decision: if deciding is
    refused, neither happens.
    """
    repo = NotificationRepository(uow.session, uow.dialect)
    view = await inspect_link(repo, token, viewer, now, emergency_stop=emergency_stop)
    if view.state != "ready":
        return view
    link = view.link
    assert link is not None
    member = viewer or await _member_of_link(repo, link)
    if member is None:
        return _with(view, "unknown")
    if not await repo.use_link(link.id, now):
        return _with(view, "used")  # another click won the race
    payload = RelayedDecision(decision=link.decision, via=link.via)
    await approvals.decide(uow, member, link.request_id, payload, now, on="my_step")
    return view


async def _member_of_link(repo: NotificationRepository, link: DecisionLink) -> OrgMember | None:
    if link.user_id is None:
        return None
    user = await repo.orgs.get_user(link.org_id, link.user_id)
    org = await repo.orgs.get_org(link.org_id)
    if user is None or org is None or not user.is_active:
        return None
    return OrgMember.of(user, org)


def request_id_of(view: LinkView) -> uuid.UUID | None:
    return view.request.id if view.request else None
