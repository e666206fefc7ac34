"""Planning: who is told what, and when. Services never commit: the caller's unit of
work does.

The approval services call three hooks, each in the transaction of the change it reports,
and each makes one cheap write (planning and sending happen after the commit, in a worker):

- ``on_request_created`` and ``on_step_opened`` write a plan row, only where the org can
  notify anyone (it has a channel: ``planning/repository.can_notify``, asked by the insert
  itself), and only a row written wakes the workers after the commit. A worker's
  ``plan_waiting`` then gives the first matching rule's channels and audience a
  ``created`` notification (or the opened steps' approvers a ``step_opened`` one) and
  schedules its reminders, escalation and expiry warning as rows with a later ``due_at``;
- ``on_asked_again``: an edit of the arguments dismissed votes; a plan row names their
  voters, and planning tells those who may vote the request then and have not voted
  since (a ``step_opened`` notification: their approval is requested);
- ``on_requests_left_pending``: decisions, cancellations or expiries void what is
  scheduled.

When routing applies: whether a change is planned at all is decided by the routing
committed when the change is written (a request created, or its steps opened, while its
org had no channel is never planned, even once routing is saved); what a planned change
sends is decided by the rules in force when a worker plans it, moments later. So routing
saved applies to the requests created, and the steps opened, after it
(docs/notifications.md, *Delivery*).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from signoff.auth.principal import OrgMember
from signoff.common.ids import new_id
from signoff.common.poison import PoisonedRows
from signoff.errors import NotFound
from signoff.notifications.planning.repository import WaitingPlan
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing.document import (
    Audience,
    Member,
    RequestFacts,
    RoutingDocument,
    Rule,
    audience_members,
    facts_of,
    first_matching_rule,
    schedule,
)
from signoff.notifications.routing.repository import ChannelRef
from signoff.notifications.routing.service import load_routing

# The job name under which plans that fail alone are parked (common/poison.py).
PLAN_JOB = "notification_planning"

logger = logging.getLogger(__name__)


# ---- the hooks (each in the transaction of the change it reports) ----


async def on_request_created(
    repo: NotificationRepository, org_id: uuid.UUID, request_id: uuid.UUID, now: datetime
) -> None:
    """One row that says "plan this request's notifications", if its org can notify
    anyone; a worker plans them."""
    await repo.add_plan(org_id, request_id, "created", now)


async def on_step_opened(
    repo: NotificationRepository,
    org_id: uuid.UUID,
    request_id: uuid.UUID,
    approver_ids: Sequence[uuid.UUID],
    now: datetime,
) -> None:
    """Steps opened (the chain was configured, or a sequential chain moved on): their
    approvers are to be told, if the org can notify anyone; a worker plans it."""
    if approver_ids:
        await repo.add_plan(org_id, request_id, "step_opened", now, approver_ids)


async def on_asked_again(
    repo: NotificationRepository,
    org_id: uuid.UUID,
    request_id: uuid.UUID,
    user_ids: Sequence[uuid.UUID],
    now: datetime,
) -> None:
    """An edit of the arguments dismissed these people's votes: they are to be asked
    again (those who may vote the request when it is planned and have not voted since),
    if the org can notify anyone; a worker plans it."""
    if user_ids:
        await repo.add_plan(org_id, request_id, "asked_again", now, user_ids)


async def on_requests_left_pending(
    repo: NotificationRepository, request_ids: Collection[uuid.UUID], now: datetime
) -> None:
    """Reminders already planned are void. One not planned yet never will be: planning
    skips a request that is no longer pending. One being planned meanwhile that this
    write does not see (PostgreSQL's decision without a lock:
    ``ApprovalRepository.share_lock_pending``) is voided by the sender when it is due."""
    if request_ids:
        await repo.cancel_scheduled(request_ids, now)


# ---- planning (in a worker's claim transaction: ``NotificationSender._claim``) ----


async def plan_waiting(
    repo: NotificationRepository, now: datetime, limit: int, poisoned: PoisonedRows
) -> int:
    """Plan up to ``limit`` waiting changes: the first matching rule's channels and
    audience get their rows, reminders and escalation get rows due later, and the plans
    are deleted, all in the caller's transaction. Answers the plans taken.

    A request no longer pending when its plan is taken (decided or cancelled within
    moments of its create) notifies nobody: the message would ask for a decision that
    has been made.

    The batch is planned in a savepoint; if it fails, each plan is planned in a savepoint
    of its own, and one that fails alone is parked (common/poison.py): it must not hold
    up the other plans, nor the sending of what is already due, which shares this
    transaction."""
    plans = await repo.take_plans(limit, skip=poisoned.parked(PLAN_JOB))
    if not plans:
        return 0
    try:
        async with repo.savepoint():
            await _plan(repo, plans, now)
    except Exception:
        for plan in plans:
            try:
                async with repo.savepoint():
                    await _plan(repo, [plan], now)
            except Exception as exc:
                poisoned.park(PLAN_JOB, plan.id, exc)
    return len(plans)


async def _plan(repo: NotificationRepository, plans: Sequence[WaitingPlan], now: datetime) -> None:
    # As they are now, not locked (``share_lock_pending`` below).
    requests = {
        r.id: r for r in await repo.approvals.notified_requests({p.request_id for p in plans})
    }
    steps = {p.request_id for p in plans if p.kind == "step_opened"}
    waiting_steps = await repo.approvals.pending_step_approvers(steps)
    asked = {p.request_id for p in plans if p.kind == "asked_again"}
    open_voters = await repo.approvals.open_step_voters(asked)
    count_voters = await repo.approvals.count_based_voters_of(asked - open_voters.keys())
    orgs: dict[uuid.UUID, _OrgRouting] = {}
    rows: list[dict[str, Any]] = []
    for plan in plans:
        found = requests.get(plan.request_id)
        if found is None or found.status != "pending":
            continue
        request = facts_of(found)
        if plan.kind == "created":
            # Matched as created: steps come later (configuring them opens a step,
            # planned on its own), so a create has none.
            request = replace(request, has_steps=False)
        org = orgs.get(request.org_id)
        if org is None:
            org = orgs[request.org_id] = await _OrgRouting.load(repo, request.org_id)
        rule = first_matching_rule(org.document, request) if org.document else None
        if rule is None:
            continue
        if plan.kind == "created":
            rows += await _plan_created(repo, org, rule, request, now)
        elif plan.kind == "asked_again":
            # Asked again after an edit: those who may vote it now and have not since.
            chain = open_voters.get(request.id)
            voted = count_voters.get(request.id, frozenset())
            approvers = [
                u
                for u in plan.approver_ids
                if (u in chain if chain is not None else u not in voted)
            ]
            rows += await _plan_step_opened(repo, org, rule, request, approvers, now)
        else:
            # A step's approver, or its group's members (a group step), still to vote.
            waiting = (waiting_steps.get((request.id, a), ()) for a in plan.approver_ids)
            approvers = list(dict.fromkeys(u for who in waiting for u in who))
            rows += await _plan_step_opened(repo, org, rule, request, approvers, now)
    if rows:
        # Locked only now, and only those that notify someone: a lock taken with the
        # first read was held through the whole planning, and the chain's next vote (or
        # any decision) on a request waited for it, even when nothing was to be sent
        # (docs/decisions/0015-notifications-planned-by-the-sender.md).
        pending = await repo.approvals.share_lock_pending({row["request_id"] for row in rows})
        rows = [row for row in rows if row["request_id"] in pending]
    if rows:
        await repo.insert_notifications(rows)
        await repo.notify_workers()
    await repo.delete_plans([p.id for p in plans])


@dataclass
class _OrgRouting:
    """One org's rules, channels and (when a plan needs them) active members, read once
    per planning transaction."""

    document: RoutingDocument | None
    channels: dict[str, ChannelRef]
    members: list[Member] | None = None

    @classmethod
    async def load(cls, repo: NotificationRepository, org_id: uuid.UUID) -> _OrgRouting:
        try:
            document, channels = await load_routing(repo, org_id)
        except ValidationError:
            # A stored document this version no longer accepts must not hold up every
            # other org's plans: this org notifies nobody until an admin saves it again.
            logger.warning("org %s: its stored routing document is not valid; skipped", org_id)
            document, channels = None, {}
        return cls(document, channels)

    async def people(
        self, repo: NotificationRepository, org_id: uuid.UUID, rule: Rule
    ) -> list[Member] | None:
        # People are read only when someone is mailed, or an audience may be empty.
        needs_people = any(c.type == "email" for c in self.channels.values()) or not (
            rule.audience == "all"
            and (rule.escalation is None or rule.escalation.audience in (None, "all"))
        )
        if needs_people and self.members is None:
            self.members = [
                Member(u.id, u.email, u.name, u.role == "admin")
                for u in await repo.orgs.active_users(org_id)
            ]
        return self.members if needs_people else None


async def _plan_created(
    repo: NotificationRepository,
    org: _OrgRouting,
    rule: Rule,
    request: RequestFacts,
    now: datetime,
) -> list[dict[str, Any]]:
    plan = _Planner(request, rule, org.channels, now, await org.people(repo, request.org_id, rule))
    plan.add("created", now, rule.channels, rule.audience)
    # Later messages count from the create, not from when it was planned.
    for scheduled in schedule(rule, request, request.created_at):
        channels, audience = rule.channels, rule.audience
        if scheduled.kind == "escalated" and rule.escalation:
            channels = rule.escalation.channels or rule.channels
            audience = rule.escalation.audience or rule.audience
        plan.add(scheduled.kind, scheduled.due_at, channels, audience)
    return plan.rows


async def _plan_step_opened(
    repo: NotificationRepository,
    org: _OrgRouting,
    rule: Rule,
    request: RequestFacts,
    approvers: Sequence[uuid.UUID],
    now: datetime,
) -> list[dict[str, Any]]:
    if not approvers:
        return []  # each has decided since: nobody to tell
    people = await org.people(repo, request.org_id, rule)
    # Out of office: whoever stands in for an away approver is told as well.
    approvers = [*approvers, *await repo.orgs.stand_ins(request.org_id, approvers, now)]
    plan = _Planner(request, rule, org.channels, now, people, approvers)
    plan.add("step_opened", now, rule.channels, "step_approvers")
    return plan.rows


@dataclass
class _Planner:
    """The rows of one plan: one per person for e-mail, one per chat or webhook."""

    request: RequestFacts
    rule: Rule
    channels: dict[str, ChannelRef]
    now: datetime
    members: list[Member] | None
    approvers: Sequence[uuid.UUID] = ()
    rows: list[dict[str, Any]] = dataclasses.field(default_factory=list)

    def _people(self, audience: Audience) -> list[Member] | None:
        if self.members is None:
            return None  # everyone, not read: no e-mail channel needs their addresses
        return audience_members(audience, self.members, self.approvers)

    def add(
        self, kind: str, due_at: datetime, channel_names: Sequence[str], audience: Audience
    ) -> None:
        sign_in = self.rule.require_sign_in_for_critical and self.request.priority == "critical"
        people = self._people(audience)
        for name in channel_names:
            channel = self.channels.get(name)
            if channel is None:  # pragma: no cover - PUT refuses rules naming no channel
                continue
            targets: list[tuple[str, uuid.UUID | None]]
            if channel.type == "email":
                targets = [(p.email, p.id) for p in people or ()]
            else:
                # A channel is told once; whoever opens its links signs in (see links),
                # so its row keeps only the rule's setting: a Slack app's message reads
                # it to know whether its buttons may decide in place.
                targets = [(name, None)] if people is None or people else []
            self.rows += [
                {
                    "id": new_id(),
                    "org_id": self.request.org_id,
                    "request_id": self.request.id,
                    "channel_id": channel.id,
                    "channel_name": name,
                    "channel_type": channel.type,
                    "kind": kind,
                    "recipient": recipient,
                    "recipient_user_id": user_id,
                    "require_sign_in": sign_in,
                    "status": "pending",
                    "attempts": 0,
                    "due_at": due_at,
                    "claim_token": None,
                    "created_at": self.now,
                    "updated_at": self.now,
                    "sent_at": None,
                    "last_error": None,
                }
                for recipient, user_id in targets
            ]


# ---- what was told (the log of a request's notifications) ----


@dataclass(frozen=True)
class NotificationLine:
    """One notification about a request as people are shown it: no channel secret."""

    id: uuid.UUID
    kind: str
    channel: str
    channel_type: str
    # An e-mail address (and the person's id) for e-mail, the channel's name otherwise.
    recipient: str
    recipient_user_id: uuid.UUID | None
    status: str
    attempts: int
    due_at: datetime
    sent_at: datetime | None
    updated_at: datetime
    error: str | None


async def notification_log(
    repo: NotificationRepository, request_id: uuid.UUID
) -> list[NotificationLine]:
    """What was (or will be) sent about a request the caller may see, oldest due first."""
    return [
        NotificationLine(
            id=n.id,
            kind=n.kind,
            channel=n.channel_name,
            channel_type=n.channel_type,
            recipient=n.recipient,
            recipient_user_id=n.recipient_user_id,
            status=n.status,
            attempts=n.attempts,
            due_at=n.due_at,
            sent_at=n.sent_at,
            updated_at=n.updated_at,
            error=n.last_error,
        )
        for n in await repo.list_for_request(request_id)
    ]


async def notifications_of_request(
    repo: NotificationRepository, member: OrgMember, request_id: uuid.UUID
) -> list[dict[str, Any]]:
    """``GET /api/v1/approvals/:id/notifications``: what was (or will be) sent to whom."""
    found = await repo.approvals.find_in_org(member.org_id, request_id)
    if found is None:
        raise NotFound("No approval request with this id.")
    return [
        {
            "id": str(line.id),
            "kind": line.kind,
            "channel": line.channel,
            "channel_type": line.channel_type,
            "recipient": line.recipient,
            "status": line.status,
            "attempts": line.attempts,
            "due_at": _iso(line.due_at),
            "sent_at": _iso(line.sent_at),
            "error": line.error,
        }
        for line in await notification_log(repo, request_id)
    ]


def _iso(value: datetime | None) -> str | None:
    return value.strftime("%Y-%m-%dT%H:%M:%S.%fZ") if value else None
