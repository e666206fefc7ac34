"""The routing document: read with its secrets masked, validated whole, written with its
channels (``PUT /api/v1/routing``, ``signoff routing set``, the dashboard's editor); and
read, cached by version, for planning."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from pydantic import ValidationError

from signoff.audit import events as audit_events
from signoff.auth.principal import OrgMember
from signoff.common.ids import new_id
from signoff.common.validation import validation_failed_from
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.errors import Forbidden, ValidationFailed
from signoff.models.notifications import NotificationChannel
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing.document import (
    MASK,
    SECRET_KEYS,
    Audience,
    ChannelSpec,
    RoutingDocument,
    Rule,
)
from signoff.notifications.routing.repository import ChannelRef
from signoff.webhooks.urlpolicy import AddressPolicy, refusal

# Why a pending notification was cancelled by a routing change (its ``error``).
CHANNEL_REMOVED = "channel removed from routing"
CHANNEL_CHANGED = "channel changed type in routing"


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
    actor = member.user_id if member else None
    await repo.save_routing(org_id, {"rules": rules}, actor, now)
    change = {"rules": len(rules), "channels": sorted(document.channels)}
    await audit_events.record(repo.session, org_id, "routing.saved", actor, change, now)
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
    members = await repo.orgs.active_users(org_id)
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
