"""The routing document of an org, and the pure decisions made from it.

The document (docs/notifications.md) has named ``channels`` and ordered ``rules``. The
first rule whose ``match`` fits a request applies; an org without rules notifies nobody.
Everything here is pure: matching, the audience, the schedule of reminders. No I/O, so
every case is unit-tested in milliseconds.
"""

from __future__ import annotations

import base64
import binascii
import fnmatch
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

Priority = Literal["low", "medium", "high", "critical"]
ChannelType = Literal["email", "slack", "teams", "discord", "webhook"]
NamedAudience = Literal["all", "admins", "step_approvers"]
CHAT_TYPES = ("slack", "teams", "discord")
# The keys of a channel's settings that are credentials: stored encrypted, shown masked.
SECRET_KEYS = ("webhook_url", "url", "bot_token", "signing_secret", "secret")
# The keys that are URLs messages are sent to: one policy with callback URLs.
URL_KEYS = ("webhook_url", "url")
# How a secret shows masked (``service.mask_secret``); a masked one sent back keeps its value.
MASK = "…"
# Rules and channels an org may have: enough for any team, few enough to match quickly.
MAX_RULES = 100
MAX_CHANNELS = 50
SEVEN_DAYS = timedelta(days=7)


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class UsersAudience(_Strict):
    """Named people, by e-mail address or user id."""

    users: list[Annotated[str, Field(min_length=1, max_length=320)]] = Field(min_length=1)


Audience = NamedAudience | UsersAudience


class Match(_Strict):
    priority: list[Priority] | None = Field(
        None, description="Any of these priorities; all when absent."
    )
    action_type: str | None = Field(
        None, max_length=200, description="A glob on action_type, e.g. `deploy.*`."
    )
    source: str | None = Field(None, max_length=200, description="A glob on source.")
    has_steps: bool | None = Field(
        None,
        description="Only requests with (true) or without (false) a chain of steps. A "
        "chain is configured after the create, so `true` applies from its first step on.",
    )


class Reminders(_Strict):
    after_minutes: int = Field(ge=1, le=60 * 24 * 30)
    times: int = Field(1, ge=1, le=20)


class Escalation(_Strict):
    after_minutes: int = Field(ge=1, le=60 * 24 * 30)
    audience: Audience | None = Field(None, description="Defaults to the rule's audience.")
    channels: list[str] | None = Field(None, description="Defaults to the rule's channels.")


class ExpiryWarning(_Strict):
    at_fraction: float = Field(
        0.8, gt=0, lt=1, description="Share of the time from create to expires_at."
    )


class Rule(_Strict):
    name: str | None = Field(None, max_length=100)
    match: Match = Field(default_factory=Match)
    channels: list[Annotated[str, Field(min_length=1, max_length=100)]] = Field(min_length=1)
    audience: Audience = "all"
    reminders: Reminders | None = None
    escalation: Escalation | None = None
    expiry_warning: ExpiryWarning | None = None
    require_sign_in_for_critical: bool = Field(
        True,
        description="One-click links of critical requests also need the person signed in, "
        "and a Slack app's buttons open the request page instead of deciding in place.",
    )


class ChannelSpec(_Strict):
    """A channel as the document states it. Secrets may be given masked (as GET shows
    them): the stored value is then kept."""

    type: ChannelType
    webhook_url: str | None = Field(None, max_length=2000)
    url: str | None = Field(None, max_length=2000, description="webhook channels")
    secret: str | None = Field(
        None, max_length=200, description="webhook channels: whsec_ + base64 (Standard Webhooks)"
    )
    bot_token: str | None = Field(None, max_length=500, description="Slack app (optional)")
    signing_secret: str | None = Field(None, max_length=200, description="Slack app")

    def problems(self) -> list[tuple[str, str]]:
        """What the channel lacks or has wrong for its type: (setting, message) pairs, every
        one of them (the URLs' form and reach are checked apart, with the server's policy)."""
        found: list[tuple[str, str]] = []
        if self.type in CHAT_TYPES and not self.webhook_url:
            found.append(("webhook_url", f"a {self.type} channel needs webhook_url"))
        if self.type == "webhook":
            found += [
                (key, f"a webhook channel needs {key}")
                for key in ("url", "secret")
                if not getattr(self, key)
            ]
        if self.type == "email":
            found += [
                (key, "an e-mail channel takes no address: each person of the audience is mailed")
                for key in URL_KEYS
                if getattr(self, key) is not None
            ]
        elif self.webhook_url is not None and self.type not in CHAT_TYPES:
            found.append(("webhook_url", "only slack, teams and discord channels take it"))
        for key in ("url", "secret"):
            said = key == "url" and self.type == "email"  # just above
            if getattr(self, key) is not None and self.type != "webhook" and not said:
                found.append((key, "only webhook channels take it"))
        if self.secret and MASK not in self.secret and not _is_standard_secret(self.secret):
            found.append(("secret", "must be whsec_ followed by base64 (Standard Webhooks)"))
        if self.bot_token is not None and self.type != "slack":
            found.append(("bot_token", "only slack channels take a bot_token"))
        if self.signing_secret is not None and self.type != "slack":
            found.append(("signing_secret", "only slack channels take a signing_secret"))
        if self.type == "slack" and (self.bot_token is None) != (self.signing_secret is None):
            missing = "signing_secret" if self.signing_secret is None else "bot_token"
            found.append((missing, "bot_token and signing_secret go together (a Slack app)"))
        return found

    def urls(self) -> dict[str, str]:
        """The setting this type sends to, if given (another is refused by ``problems``)."""
        key = (
            "url" if self.type == "webhook" else "webhook_url" if self.type in CHAT_TYPES else None
        )
        value = getattr(self, key) if key else None
        return {key: value} if key and value is not None else {}

    def secrets(self) -> dict[str, str]:
        return {key: value for key in SECRET_KEYS if (value := getattr(self, key)) is not None}


def _is_standard_secret(secret: str) -> bool:
    if not secret.startswith("whsec_"):
        return False
    try:
        return len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) >= 16
    except (binascii.Error, ValueError):
        return False


class RoutingWarning(_Strict):
    """Saved, but not working yet: e.g. an e-mail channel while no SMTP server is set."""

    field: str = Field(description="The part of the document it is about, e.g. `channels.mail`.")
    message: str


class RoutingDocument(_Strict):
    channels: dict[Annotated[str, Field(min_length=1, max_length=100)], ChannelSpec] = Field(
        default_factory=dict, max_length=MAX_CHANNELS
    )
    rules: list[Rule] = Field(default_factory=list, max_length=MAX_RULES)
    warnings: list[RoutingWarning] | None = Field(
        None,
        description="Read-only: what GET and PUT answer. Ignored when sent, so GET's answer "
        "can be PUT back as it is.",
    )


# ---- the facts a decision is made from ----


@dataclass(frozen=True)
class RequestFacts:
    """What notifications need of a request: plain data, no ORM entity."""

    id: uuid.UUID
    org_id: uuid.UUID
    title: str
    description: str
    priority: str
    action_type: str | None
    source: str | None
    metadata: dict[str, Any]
    has_steps: bool
    created_at: datetime
    expires_at: datetime | None
    # Its number in the org (``#1234``): None for the routing page's test sample.
    number: int | None = None
    # What the approver should look at ({"kind", "content"}), if the request has one.
    preview: dict[str, Any] | None = None
    # A policy rule asked that it be decided with a passkey (docs/passkeys.md).
    passkey_required: bool = False


def facts_of(row: Any) -> RequestFacts:
    """A request's facts from any row with ``ApprovalRequest``'s fields."""
    return RequestFacts(
        id=row.id,
        org_id=row.org_id,
        title=row.title,
        description=row.description,
        priority=row.priority,
        action_type=row.action_type,
        source=row.source,
        metadata=dict(row.metadata_ or {}),
        has_steps=bool(row.has_steps),
        created_at=row.created_at,
        expires_at=row.expires_at,
        number=row.number,
        preview=row.preview or None,
        passkey_required=row.passkey_required,
    )


@dataclass(frozen=True)
class Member:
    id: uuid.UUID
    email: str
    name: str
    is_admin: bool


def _glob(pattern: str | None, value: str | None) -> bool:
    return pattern is None or (value is not None and fnmatch.fnmatchcase(value, pattern))


def matches(rule: Rule, request: RequestFacts) -> bool:
    m = rule.match
    return (
        (m.priority is None or request.priority in m.priority)
        and _glob(m.action_type, request.action_type)
        and _glob(m.source, request.source)
        and (m.has_steps is None or m.has_steps == request.has_steps)
    )


def first_matching_rule(document: RoutingDocument, request: RequestFacts) -> Rule | None:
    return next((rule for rule in document.rules if matches(rule, request)), None)


def audience_members(
    audience: Audience, members: Sequence[Member], step_approvers: Iterable[uuid.UUID]
) -> list[Member]:
    """Who the audience is among the org's active members.

    ``step_approvers``: the approvers whose vote is awaited now. A request without a
    chain has none named: then every member may vote, so every member is told.
    """
    if audience == "all":
        return list(members)
    if audience == "admins":
        return [m for m in members if m.is_admin]
    if audience == "step_approvers":
        wanted = set(step_approvers)
        return [m for m in members if m.id in wanted] if wanted else list(members)
    named = {name.lower() for name in audience.users}
    return [m for m in members if m.email.lower() in named or str(m.id) in named]


@dataclass(frozen=True)
class Scheduled:
    kind: Literal["reminder", "escalated", "expiry_warning"]
    due_at: datetime


def schedule(rule: Rule, request: RequestFacts, now: datetime) -> list[Scheduled]:
    """The later messages a rule plans for a request, from ``now`` (its create or the
    opening of a step); none falls at or after the request's expiry."""
    planned: list[Scheduled] = []
    if rule.reminders:
        step = timedelta(minutes=rule.reminders.after_minutes)
        planned += [
            Scheduled("reminder", now + step * n) for n in range(1, rule.reminders.times + 1)
        ]
    if rule.escalation:
        planned.append(
            Scheduled("escalated", now + timedelta(minutes=rule.escalation.after_minutes))
        )
    if rule.expiry_warning and request.expires_at is not None:
        span = request.expires_at - request.created_at
        planned.append(
            Scheduled("expiry_warning", request.created_at + span * rule.expiry_warning.at_fraction)
        )
    return [p for p in planned if request.expires_at is None or p.due_at < request.expires_at]


def link_expiry(request: RequestFacts, now: datetime) -> datetime:
    """A one-click link lasts as long as the request, and 7 days at most."""
    cap = now + SEVEN_DAYS
    return min(cap, request.expires_at) if request.expires_at else cap


# ---- the digest ----


@dataclass(frozen=True)
class Outgoing:
    """One chat message: a single notification, or a digest of several."""

    channel_id: uuid.UUID
    notification_ids: tuple[uuid.UUID, ...]

    @property
    def is_digest(self) -> bool:
        return len(self.notification_ids) > 1


def plan_chat_messages(
    due: Sequence[tuple[uuid.UUID, uuid.UUID]],
    last_sent: dict[uuid.UUID, float],
    now: float,
    interval: float,
) -> tuple[list[Outgoing], list[uuid.UUID]]:
    """Group due chat notifications (id, channel id) into messages, one per channel.

    A channel that got a message less than ``interval`` seconds ago gets nothing now: its
    notifications are put back (the second list) and go out together in the next
    message, a digest. So a burst becomes at most one message per channel per interval.
    """
    by_channel: dict[uuid.UUID, list[uuid.UUID]] = {}
    for notification_id, channel_id in due:
        by_channel.setdefault(channel_id, []).append(notification_id)
    messages: list[Outgoing] = []
    held: list[uuid.UUID] = []
    for channel_id, ids in by_channel.items():
        if now - last_sent.get(channel_id, float("-inf")) < interval:
            held += ids
        else:
            messages.append(Outgoing(channel_id, tuple(ids)))
    return messages, held
