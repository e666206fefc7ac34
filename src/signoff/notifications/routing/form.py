"""The dashboard's routing form: the document as rows of plain HTML fields, and back.

Channels and rules are rows; the page shows the saved ones plus one empty row of each to
add, and a remove box per row, so it works without script. What the form does not edit
(a rule's escalation, expiry warning, sign-in setting) rides along in a hidden field of
its row and is saved unchanged. The form builds a routing document that is saved
through the same service as the API (``service.write_routing``); its problems come back
onto the rows they are about. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, get_args

import orjson

from signoff.notifications.routing.document import (
    MAX_CHANNELS,
    MAX_RULES,
    ChannelType,
    NamedAudience,
    Priority,
)

CHANNEL_TYPES: tuple[str, ...] = get_args(ChannelType)
PRIORITIES: tuple[str, ...] = get_args(Priority)
AUDIENCES: tuple[str, ...] = (*get_args(NamedAudience), "users")
HAS_STEPS = {"": None, "yes": True, "no": False}
# What a rule has that the form does not edit: kept as it is, in a hidden field.
KEPT_KEYS = ("escalation", "expiry_warning", "require_sign_in_for_critical")
# The setting a channel's address is, by type (e-mail has none).
ADDRESS_KEY = {"slack": "webhook_url", "teams": "webhook_url", "discord": "webhook_url"}
ADDRESS_KEY["webhook"] = "url"
FIELD_WORDS = {
    "webhook_url": "Address",
    "url": "Address",
    "secret": "Secret",
    "bot_token": "Slack bot token",
    "signing_secret": "Slack signing secret",
    "type": "Type",
    "name": "Name",
    "match": "Match",
    "priority": "Priority",
    "action_type": "Action type",
    "source": "Source",
    "has_steps": "Steps",
    "channels": "Channels",
    "audience": "Audience",
    "users": "People",
    "reminders": "Reminders",
    "after_minutes": "minutes",
    "times": "times",
    "escalation": "Escalation (Advanced)",
    "expiry_warning": "Expiry warning (Advanced)",
}


@dataclass
class ChannelRow:
    name: str = ""
    type: str = "email"
    address: str = ""
    secret: str = ""
    bot_token: str = ""
    signing_secret: str = ""
    # The name saved before: a masked secret of a renamed channel keeps its value.
    was: str = ""
    remove: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def is_blank(self) -> bool:
        return not (self.name or self.address or self.secret or self.bot_token)


@dataclass
class RuleRow:
    name: str = ""
    priorities: list[str] = field(default_factory=list)
    action_type: str = ""
    source: str = ""
    has_steps: str = ""
    channels: list[str] = field(default_factory=list)
    audience: str = "all"
    users: str = ""
    reminder_minutes: str = ""
    reminder_times: str = ""
    kept: str = ""
    remove: bool = False
    errors: list[str] = field(default_factory=list)

    @property
    def is_blank(self) -> bool:
        return not (
            self.name
            or self.priorities
            or self.action_type
            or self.source
            or self.has_steps
            or self.channels
            or self.users
            or self.reminder_minutes
            or self.reminder_times
        )

    @property
    def kept_words(self) -> list[str]:
        """What the hidden part holds, said plainly on the row."""
        kept = _json_object(self.kept)
        words = []
        if "escalation" in kept:
            words.append("an escalation")
        if "expiry_warning" in kept:
            words.append("an expiry warning")
        if kept.get("require_sign_in_for_critical") is False:
            words.append("one-click links without sign-in for critical requests")
        return words


@dataclass
class RoutingForm:
    channels: list[ChannelRow]
    rules: list[RuleRow]
    # Problems no row is about (the document as a whole).
    errors: list[str] = field(default_factory=list)

    @property
    def channel_names(self) -> list[str]:
        """The names a rule may pick: every channel row that stays."""
        return [row.name for row in self.channels if row.name and not row.remove]


def form_of(document: Mapping[str, Any]) -> RoutingForm:
    """The rows of a document as ``service.read_routing`` shows it (secrets masked), plus
    an empty row of each kind to add one."""
    channels = [_channel_row(name, spec) for name, spec in document["channels"].items()]
    rules = [_rule_row(rule) for rule in document["rules"]]
    return RoutingForm([*channels, ChannelRow()], [*rules, RuleRow()])


def _channel_row(name: str, spec: Mapping[str, Any]) -> ChannelRow:
    kind = str(spec.get("type", ""))
    return ChannelRow(
        name=name,
        type=kind,
        address=str(spec.get(ADDRESS_KEY.get(kind, ""), "") or ""),
        secret=str(spec.get("secret", "") or ""),
        bot_token=str(spec.get("bot_token", "") or ""),
        signing_secret=str(spec.get("signing_secret", "") or ""),
        was=name,
    )


def _rule_row(rule: Mapping[str, Any]) -> RuleRow:
    match = rule.get("match") or {}
    audience = rule.get("audience", "all")
    reminders = rule.get("reminders") or {}
    has_steps = match.get("has_steps")
    kept = {key: rule[key] for key in KEPT_KEYS if key in rule}
    return RuleRow(
        name=str(rule.get("name") or ""),
        priorities=list(match.get("priority") or []),
        action_type=str(match.get("action_type") or ""),
        source=str(match.get("source") or ""),
        has_steps="" if has_steps is None else ("yes" if has_steps else "no"),
        channels=list(rule.get("channels") or []),
        audience=audience if isinstance(audience, str) else "users",
        users=", ".join(audience.get("users", [])) if isinstance(audience, dict) else "",
        reminder_minutes=str(reminders.get("after_minutes", "")),
        reminder_times=str(reminders.get("times", "")) if reminders else "",
        kept=orjson.dumps(kept).decode() if kept else "",
    )


# ---- the posted form ----


def _count(fields: Mapping[str, str], key: str, cap: int) -> int:
    try:
        return max(0, min(int(fields.get(key, "0")), cap))
    except ValueError:
        return 0


def form_from_fields(fields: Mapping[str, str]) -> RoutingForm:
    """The rows as posted (``channel-3-name``, ``rule-0-priority-high``, ...)."""

    def text(key: str) -> str:
        return fields.get(key, "").strip()

    channels = [
        ChannelRow(
            name=text(f"channel-{i}-name"),
            type=text(f"channel-{i}-type") or "email",
            address=text(f"channel-{i}-address"),
            secret=text(f"channel-{i}-secret"),
            bot_token=text(f"channel-{i}-bot_token"),
            signing_secret=text(f"channel-{i}-signing_secret"),
            was=text(f"channel-{i}-was"),
            remove=f"channel-{i}-remove" in fields,
        )
        for i in range(_count(fields, "channel_count", MAX_CHANNELS + 1))
    ]
    rules = []
    for i in range(_count(fields, "rule_count", MAX_RULES + 1)):
        prefix = f"rule-{i}-"
        picked = sorted(
            (int(key.rsplit("-", 1)[1]), value)
            for key, value in fields.items()
            if key.startswith(prefix + "channel-") and key.rsplit("-", 1)[1].isdigit()
        )
        rules.append(
            RuleRow(
                name=text(prefix + "name"),
                priorities=[p for p in PRIORITIES if f"{prefix}priority-{p}" in fields],
                action_type=text(prefix + "action_type"),
                source=text(prefix + "source"),
                has_steps=text(prefix + "has_steps"),
                channels=[value for _, value in picked],
                audience=text(prefix + "audience") or "all",
                users=text(prefix + "users"),
                reminder_minutes=text(prefix + "reminder_minutes"),
                reminder_times=text(prefix + "reminder_times"),
                kept=fields.get(prefix + "kept", ""),
                remove=prefix + "remove" in fields,
            )
        )
    return RoutingForm(channels, rules)


@dataclass(frozen=True)
class Built:
    """The document a form makes, and where each of its parts came from."""

    document: dict[str, Any]
    renamed: dict[str, str]  # new name -> saved name
    channel_rows: dict[str, int]  # channel name -> row
    rule_rows: list[int]  # the document's rule index -> row
    # A row the document cannot hold (no name, a name twice): its error is on the row
    # already, and nothing may be saved.
    blocked: bool = False


def build_document(form: RoutingForm) -> Built:
    """The routing document the rows say; blank and removed rows are left out."""
    channels: dict[str, Any] = {}
    renamed: dict[str, str] = {}
    channel_rows: dict[str, int] = {}
    blocked = False
    for index, row in enumerate(form.channels):
        if row.remove or row.is_blank:
            continue
        if not row.name or row.name in channels:
            row.errors.append(
                "Name: each channel needs a name of its own"
                if row.name
                else "Name: a channel needs a name"
            )
            blocked = True
            continue
        spec: dict[str, Any] = {"type": row.type}
        if row.address:
            spec[ADDRESS_KEY.get(row.type, "url" if row.type == "email" else "webhook_url")] = (
                row.address
            )
        for key in ("secret", "bot_token", "signing_secret"):
            if getattr(row, key):
                spec[key] = getattr(row, key)
        channels[row.name] = spec
        channel_rows[row.name] = index
        if row.was and row.was != row.name:
            renamed[row.name] = row.was
    follow = {old: new for new, old in renamed.items()}
    rules: list[dict[str, Any]] = []
    rule_rows: list[int] = []
    for index, rule_row in enumerate(form.rules):
        if rule_row.remove or rule_row.is_blank:
            continue
        rules.append(_rule_of(rule_row, follow))
        rule_rows.append(index)
    return Built({"channels": channels, "rules": rules}, renamed, channel_rows, rule_rows, blocked)


def _rule_of(row: RuleRow, follow: Mapping[str, str]) -> dict[str, Any]:
    """One rule; the channels a rename moved are followed to their new names."""
    rule: dict[str, Any] = {}
    if row.name:
        rule["name"] = row.name
    match: dict[str, Any] = {}
    if row.priorities:
        match["priority"] = row.priorities
    if row.action_type:
        match["action_type"] = row.action_type
    if row.source:
        match["source"] = row.source
    if row.has_steps in HAS_STEPS and HAS_STEPS[row.has_steps] is not None:
        match["has_steps"] = HAS_STEPS[row.has_steps]
    elif row.has_steps not in HAS_STEPS:
        match["has_steps"] = row.has_steps  # the checks name it
    if match:
        rule["match"] = match
    rule["channels"] = [follow.get(name, name) for name in row.channels]
    if row.audience == "users":
        rule["audience"] = {"users": [u.strip() for u in row.users.split(",") if u.strip()]}
    else:
        rule["audience"] = row.audience
    if row.reminder_minutes or row.reminder_times:
        rule["reminders"] = {
            "after_minutes": _number(row.reminder_minutes),
            "times": _number(row.reminder_times or "1"),
        }
    kept = _json_object(row.kept)
    escalation = kept.get("escalation")
    if isinstance(escalation, dict) and isinstance(escalation.get("channels"), list):
        escalation["channels"] = [follow.get(n, n) for n in escalation["channels"]]
    rule.update({key: kept[key] for key in KEPT_KEYS if key in kept})
    return rule


def _number(value: str) -> int | str:
    """A whole number, or the text as typed (the checks then say what is wrong)."""
    return int(value) if value.strip().lstrip("-").isdigit() else value


def _json_object(text: str) -> dict[str, Any]:
    try:
        loaded = orjson.loads(text) if text else {}
    except orjson.JSONDecodeError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


# ---- problems back onto their rows ----


def place_problems(form: RoutingForm, built: Built, problems: Sequence[Mapping[str, str]]) -> None:
    """Each problem of the document onto the row it is about, in the form's words."""
    for problem in problems:
        path, message = problem["field"], problem["message"]
        row, rest = _row_of(form, built, path)
        words = _words(rest)
        said = f"{words}: {message}" if words else message
        if row is None:
            form.errors.append(f"{path}: {message}" if path else message)
        else:
            row.errors.append(said)


def _row_of(form: RoutingForm, built: Built, path: str) -> tuple[ChannelRow | RuleRow | None, str]:
    if path.startswith("channels."):
        after = path.removeprefix("channels.")
        # Names may hold dots: the longest name that the path starts with is the one.
        for name in sorted(built.channel_rows, key=len, reverse=True):
            if after == name or after.startswith(name + "."):
                return form.channels[built.channel_rows[name]], after[len(name) + 1 :]
    if path.startswith("rules."):
        head, _, rest = path.removeprefix("rules.").partition(".")
        if head.isdigit() and int(head) < len(built.rule_rows):
            return form.rules[built.rule_rows[int(head)]], rest
    return None, path


def _words(rest: str) -> str:
    parts = [p for p in rest.split(".") if p and not p.isdigit()]
    return " ".join(FIELD_WORDS.get(p, p) for p in parts[-2:]) if parts else ""
