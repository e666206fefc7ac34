"""Use cases of notifications. Services never commit: the caller's unit of work does.

The approval services call three hooks, each in the transaction of the change it reports,
and each makes one cheap write (planning and sending happen after the commit, in a worker):

- ``on_request_created`` and ``on_step_opened`` write a plan row, only where the org can
  notify anyone (it has a channel: ``repository.can_notify``, asked by the insert
  itself), and only a row written wakes the workers after the commit. A worker's
  ``plan_waiting`` then gives the first matching rule's channels and audience a
  ``created`` notification (or the opened steps' approvers a ``step_opened`` one) and
  schedules its reminders, escalation and expiry warning as rows with a later ``due_at``;
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

import asyncio
import dataclasses
import hashlib
import logging
import secrets
import uuid
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from signoff.auth.principal import OrgMember
from signoff.common.ids import new_id
from signoff.common.poison import PoisonedRows
from signoff.common.validation import validation_failed_from
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.errors import Forbidden, NotFound, ValidationFailed
from signoff.models.notifications import DecisionLink, NotificationChannel
from signoff.notifications.planning.repository import (
    ChannelRef,
    NotificationRepository,
    WaitingPlan,
)
from signoff.notifications.routing.document import (
    MASK,
    SECRET_KEYS,
    Audience,
    ChannelSpec,
    Member,
    RequestFacts,
    RoutingDocument,
    Rule,
    audience_members,
    first_matching_rule,
    link_expiry,
    schedule,
)
from signoff.webhooks.urlpolicy import AddressPolicy, refusal

# Why a pending notification was cancelled by a routing change (its ``error``).
CHANNEL_REMOVED = "channel removed from routing"
CHANNEL_CHANGED = "channel changed type in routing"
# The job name under which plans that fail alone are parked (common/poison.py).
PLAN_JOB = "notification_planning"

logger = logging.getLogger(__name__)


# ---- the routing document ----


def mask_secret(value: str) -> str:
    """Enough to recognise a secret, never enough to use it."""
    if "://" in value:
        scheme, _, rest = value.partition("://")
        host = rest.split("/", 1)[0].rsplit("@", 1)[-1]
        return f"{scheme}://{host}/{MASK}{value[-4:]}"
    return f"{value[:5]}{MASK}{value[-4:]}" if len(value) > 12 else MASK


def require_admin(member: OrgMember) -> None:
    if not member.is_admin:
        raise Forbidden("Only an admin of the organization may read or change its routing.")


Problem = dict[str, str]


@dataclass(frozen=True)
class RoutingChecks:
    """What saving routing checks against the server's settings: where URLs may lead
    (the callbacks' policy, ``webhooks/urlpolicy.py``) and whether e-mail can go out."""

    policy: AddressPolicy
    smtp_configured: bool

    @classmethod
    def from_settings(cls, settings: Settings) -> RoutingChecks:
        return cls(AddressPolicy.from_settings(settings), bool(settings.smtp_url))


@dataclass
class Draft:
    """What parsed of a document, and every problem found in it so far. The parts that
    did not parse are left out, so the checks of the rest still run and report too."""

    names: set[str]
    channels: dict[str, ChannelSpec]
    rules: list[tuple[int, Rule]]
    problems: list[Problem]

    def document(self) -> RoutingDocument:
        return RoutingDocument(channels=self.channels, rules=[rule for _, rule in self.rules])


def draft_document(data: Any) -> Draft:
    """Everything wrong with a document that needs nothing but the document."""
    if not isinstance(data, dict):
        raise ValidationFailed.for_field("", "the routing document must be a JSON object")
    data = {key: value for key, value in data.items() if key != "warnings"}  # read-only
    try:
        whole = RoutingDocument.model_validate(data)
    except ValidationError as exc:
        draft = _draft_in_parts(data, _tidy(validation_failed_from(exc).details["fields"]))
    else:
        draft = Draft(set(whole.channels), dict(whole.channels), list(enumerate(whole.rules)), [])
    draft.problems += [
        {"field": f"channels.{name}", "message": "a channel's name: letters, digits, - _ . only"}
        for name in sorted(draft.names)
        if not name.replace("-", "").replace("_", "").replace(".", "").isalnum()
    ]
    for name, spec in draft.channels.items():
        draft.problems += [
            {"field": f"channels.{name}.{key}", "message": message}
            for key, message in spec.problems()
        ]
    draft.problems += [
        {"field": field, "message": "names no channel of this document"}
        for field in _unknown_channels(data, draft.names)
    ]
    return draft


AUDIENCE_CHOICES = "must be all, admins, step_approvers, or {users: [e-mail or user id, ...]}"


def _tidy(problems: list[Problem]) -> list[Problem]:
    """One message per wrong audience, instead of one per shape it might have had: what
    is wrong inside ``{users: [...]}`` when a mapping was given, else the choices."""
    inside = {
        field.partition(".audience.UsersAudience.")[0]
        for problem in problems
        if ".audience.UsersAudience." in (field := problem["field"])
    }
    tidy: list[Problem] = []
    for problem in problems:
        head, marker, tail = problem["field"].partition(".audience.")
        if not marker or not tail.startswith(("literal[", "UsersAudience")):
            tidy.append(problem)
        elif head in inside and tail.startswith("UsersAudience."):
            tidy.append({**problem, "field": f"{head}.audience.{tail[len('UsersAudience.') :]}"})
        elif head not in inside:
            choices = {"field": f"{head}.audience", "message": AUDIENCE_CHOICES}
            if choices not in tidy:
                tidy.append(choices)
    return tidy


def _draft_in_parts(data: dict[str, Any], problems: list[Problem]) -> Draft:
    """The channels and rules that are right on their own, of a document that is not."""
    raw_channels = data.get("channels")
    raw_rules = data.get("rules")
    channels: dict[str, ChannelSpec] = {}
    names: set[str] = set()
    if isinstance(raw_channels, dict):
        names = {name for name in raw_channels if isinstance(name, str)}
        for name, spec in raw_channels.items():
            try:
                channels[name] = ChannelSpec.model_validate(spec)
            except ValidationError:
                continue
    rules: list[tuple[int, Rule]] = []
    if isinstance(raw_rules, list):
        for index, rule in enumerate(raw_rules):
            try:
                rules.append((index, Rule.model_validate(rule)))
            except ValidationError:
                continue
    return Draft(names, channels, rules, problems)


def _unknown_channels(data: dict[str, Any], names: set[str]) -> list[str]:
    """The fields (``rules.0.channels.1``) that name a channel the document lacks; read
    from the document as sent, so a rule wrong in another way is checked too."""
    rules = data.get("rules")
    wrong: list[str] = []
    for index, rule in enumerate(rules if isinstance(rules, list) else []):
        if not isinstance(rule, dict):
            continue
        escalation = rule.get("escalation")
        named = [(f"rules.{index}.channels", rule.get("channels"))]
        if isinstance(escalation, dict):
            named.append((f"rules.{index}.escalation.channels", escalation.get("channels")))
        for field, channels in named:
            if isinstance(channels, list):
                wrong += [
                    f"{field}.{n}"
                    for n, name in enumerate(channels)
                    if isinstance(name, str) and name not in names
                ]
    return wrong


def parse_document(data: Any) -> RoutingDocument:
    """The document, validated whole: 400 naming every wrong field (of the document
    alone; ``write_routing`` adds what needs the org and the server's settings)."""
    draft = draft_document(data)
    if draft.problems:
        raise ValidationFailed.for_fields(draft.problems)
    return draft.document()


async def read_routing(
    repo: NotificationRepository, box: SecretBox, org_id: uuid.UUID
) -> dict[str, Any]:
    """The document as GET shows it: channels with their secrets masked."""
    config = await repo.get_routing(org_id)
    channels: dict[str, Any] = {}
    for channel in await repo.channels(org_id):
        settings = channel_settings(box, channel)
        shown: dict[str, Any] = {"type": channel.type}
        for key, value in settings.items():
            shown[key] = mask_secret(value) if key in SECRET_KEYS else value
        channels[channel.name] = shown
    rules = (config.document if config else {}).get("rules", [])
    return {"channels": channels, "rules": rules}


def routing_warnings(document: dict[str, Any], checks: RoutingChecks) -> list[Problem]:
    """What a saved document cannot do yet on this server (it is saved all the same)."""
    warnings: list[Problem] = []
    if not checks.smtp_configured:
        warnings += [
            {
                "field": f"channels.{name}",
                "message": "SIGNOFF_SMTP_URL is not set on the server: nothing is mailed "
                "on this e-mail channel until it is",
            }
            for name, channel in document["channels"].items()
            if channel["type"] == "email"
        ]
    return warnings


def with_warnings(document: dict[str, Any], checks: RoutingChecks) -> dict[str, Any]:
    return {**document, "warnings": routing_warnings(document, checks)}


def channel_settings(box: SecretBox, channel: NotificationChannel) -> dict[str, str]:
    loaded: dict[str, str] = orjson.loads(box.decrypt(channel.config_encrypted))
    return loaded


async def write_routing(
    repo: NotificationRepository,
    box: SecretBox,
    checks: RoutingChecks,
    member: OrgMember | None,
    org_id: uuid.UUID,
    data: Any,
    now: datetime,
    renamed: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Replace the org's document (``PUT /api/v1/routing``, ``signoff routing set``, the
    dashboard), or change nothing and raise 400 naming every wrong field at once.

    A secret sent back masked, as GET showed it, keeps the stored value: of the channel
    of that name, or of the one it was renamed from (``renamed``: new name -> old name).
    Every URL is checked with the callbacks' policy; the answer carries ``warnings``.
    """
    draft = draft_document(data)
    problems = draft.problems + await _named_user_problems(repo, org_id, draft.rules)
    existing = {c.name: c for c in await repo.channels(org_id)}
    merged: dict[str, dict[str, str]] = {}
    for name, spec in draft.channels.items():
        source = existing.get((renamed or {}).get(name, name))
        settings, wrong = _merge_secrets(
            spec, channel_settings(box, source) if source else {}, name
        )
        problems += wrong
        merged[name] = settings
    problems += await _url_problems(checks.policy, draft.channels, merged)
    if problems:
        raise ValidationFailed.for_fields(problems)
    document = draft.document()
    for name, spec in document.channels.items():
        stored = existing.pop(name, None)
        encrypted = box.encrypt(orjson.dumps(merged[name]).decode())
        if stored is None:
            await repo.add_channel(
                NotificationChannel(
                    id=new_id(),
                    org_id=org_id,
                    name=name,
                    type=spec.type,
                    config_encrypted=encrypted,
                    created_at=now,
                    updated_at=now,
                )
            )
        else:
            if stored.type != spec.type:
                # What was planned for the channel as it was is not sent as another type.
                await repo.void_pending_of_channels([stored.id], now, CHANNEL_CHANGED)
            stored.type = spec.type
            stored.config_encrypted = encrypted
            stored.updated_at = now
    # A channel renamed or removed: what it sent stays in the log (each row keeps the
    # channel's name and type); what it was still to send is void, not deleted.
    await repo.void_pending_of_channels([c.id for c in existing.values()], now, CHANNEL_REMOVED)
    for gone in existing.values():
        await repo.delete_channel(gone)
    rules = [rule.model_dump(mode="json", exclude_none=True) for rule in document.rules]
    await repo.save_routing(org_id, {"rules": rules}, member.user_id if member else None, now)
    return with_warnings(await read_routing(repo, box, org_id), checks)


def _merge_secrets(
    spec: ChannelSpec, stored: dict[str, str], name: str
) -> tuple[dict[str, str], list[Problem]]:
    settings: dict[str, str] = {}
    wrong: list[Problem] = []
    for key, given in spec.secrets().items():
        if MASK in given and (key not in stored or mask_secret(stored[key]) != given):
            wrong.append(
                {
                    "field": f"channels.{name}.{key}",
                    "message": "is masked; send the whole value to change it",
                }
            )
        settings[key] = stored[key] if MASK in given and key in stored else given
    return settings, wrong


async def _url_problems(
    policy: AddressPolicy, channels: dict[str, ChannelSpec], merged: dict[str, dict[str, str]]
) -> list[Problem]:
    """Each channel URL checked with the callbacks' policy (its stored value where it came
    masked: a URL saved before may no longer pass), the host lookups side by side."""
    fields = [
        (f"channels.{name}.{key}", merged[name][key])
        for name, spec in channels.items()
        for key in spec.urls()
        if MASK not in merged[name][key]
    ]
    reasons = await asyncio.gather(
        *(
            refusal(url, policy, credentials_advice="a chat webhook's token goes in its path")
            for _, url in fields
        )
    )
    return [
        {"field": field, "message": reason}
        for (field, _), reason in zip(fields, reasons, strict=True)
        if reason is not None
    ]


async def _named_user_problems(
    repo: NotificationRepository, org_id: uuid.UUID, rules: Sequence[tuple[int, Rule]]
) -> list[Problem]:
    members = await repo.active_members(org_id)
    known = {m.email.lower() for m in members} | {str(m.id) for m in members}
    wrong = []
    for index, rule in rules:
        audiences: list[tuple[str, Audience | None]] = [(f"rules.{index}.audience", rule.audience)]
        if rule.escalation:
            audiences.append((f"rules.{index}.escalation.audience", rule.escalation.audience))
        for field, audience in audiences:
            if audience is None or isinstance(audience, str):
                continue
            for position, name in enumerate(audience.users):
                if name.lower() not in known:
                    wrong.append(
                        {"field": f"{field}.users.{position}", "message": "is no active member"}
                    )
    return wrong


# Parsed rules and channel references by (org, version): a document and its channels
# change together, only by ``write_routing`` (which gives the document a new version), so
# the sender reads them once per change, not once per planning round. A version of an
# org no longer current is never asked for again; the cache is emptied when full.
_PARSED: dict[tuple[uuid.UUID, datetime], RoutingDocument] = {}
_CHANNELS: dict[tuple[uuid.UUID, datetime], dict[str, ChannelRef]] = {}
_PARSED_MAX = 1024


async def load_document(repo: NotificationRepository, org_id: uuid.UUID) -> RoutingDocument | None:
    document, _ = await _load_versioned(repo, org_id)
    return document


async def _load_versioned(
    repo: NotificationRepository, org_id: uuid.UUID
) -> tuple[RoutingDocument | None, datetime | None]:
    stored = await repo.routing_rules(org_id)
    if stored is None or not stored[0]:
        return None, None
    rules, version = stored
    key = (org_id, version)
    document = _PARSED.get(key)
    if document is None:
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        document = _PARSED[key] = RoutingDocument.model_validate({"rules": rules})
    return document, version


async def load_routing(
    repo: NotificationRepository, org_id: uuid.UUID
) -> tuple[RoutingDocument | None, dict[str, ChannelRef]]:
    """The org's rules and its channels by name (none without rules)."""
    document, version = await _load_versioned(repo, org_id)
    if document is None or version is None:
        return None, {}
    key = (org_id, version)
    channels = _CHANNELS.get(key)
    if channels is None:
        if len(_CHANNELS) >= _PARSED_MAX:
            _CHANNELS.clear()
        channels = _CHANNELS[key] = await repo.channel_refs(org_id)
    return document, channels


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


async def on_requests_left_pending(
    repo: NotificationRepository, request_ids: Collection[uuid.UUID], now: datetime
) -> None:
    """Reminders already planned are void. One not planned yet never will be: planning
    skips a request that is no longer pending. One being planned meanwhile that this
    write does not see (PostgreSQL's decision without a lock:
    ``NotificationRepository.lock_pending``) is voided by the sender when it is due."""
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
    requests = await repo.requests_to_plan({p.request_id for p in plans})
    steps = {p.request_id for p in plans if p.kind == "step_opened"}
    waiting_steps = await repo.pending_step_approvers(steps)
    orgs: dict[uuid.UUID, _OrgRouting] = {}
    rows: list[dict[str, Any]] = []
    for plan in plans:
        found = requests.get(plan.request_id)
        if found is None or found.status != "pending":
            continue
        request = found.facts
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
        else:
            approvers = [a for a in plan.approver_ids if (request.id, a) in waiting_steps]
            rows += await _plan_step_opened(repo, org, rule, request, approvers, now)
    if rows:
        # Locked only now, and only those that notify someone: a lock taken with the
        # first read was held through the whole planning, and the chain's next vote (or
        # any decision) on a request waited for it, even when nothing was to be sent
        # (docs/decisions/0015-notifications-planned-by-the-sender.md).
        pending = await repo.lock_pending({row["request_id"] for row in rows})
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
            self.members = await repo.active_members(org_id)
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


# ---- one-click links ----


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
    found = await repo.request_facts(member.org_id, request_id)
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
