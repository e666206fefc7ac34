"""The org's settings document: ``GET/PATCH /api/v1/org/settings`` and the dashboard's
settings page read and write it through here.

The document is a flat JSON object, one key per setting, each a string out of a closed
set of values: ``{"self_approval": "allow"}``. A setting is added by adding a line to
``SETTINGS`` and a column of that name to ``organizations``: the API, its validation,
the page's form and the docs' table all follow from it.

One key holds an object instead, checked by its own domain: ``standing_approvals``, the
admins' caps on standing approvals (``policies.standing.parse_caps``), stored in
``organizations.standing_approval_caps``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from signoff.errors import ValidationFailed
from signoff.models import Organization
from signoff.policies.standing import caps_of, parse_caps

STANDING_APPROVALS = "standing_approvals"
# Where a setting is stored when its column is not named as it is.
COLUMN_OF_SETTING = {STANDING_APPROVALS: "standing_approval_caps"}


@dataclass(frozen=True)
class Setting:
    name: str
    values: tuple[str, ...]
    default: str
    # One line for the dashboard and the docs.
    description: str


SETTINGS: dict[str, Setting] = {
    setting.name: setting
    for setting in (
        Setting(
            "self_approval",
            ("allow", "forbid"),
            "allow",
            "Whether the person who owns a request's connection (or its API key) may "
            "decide it. `forbid` asks for a second person: four-eyes.",
        ),
        Setting(
            "passkey_for",
            ("off", "critical", "all"),
            "off",
            "Which decisions need the approver's passkey, signed on the request's page: "
            "none, those of critical requests, or all (docs/passkeys.md).",
        ),
    )
}


# Problems named at most in one answer.
MAX_NAMED = 20


def settings_of(org: Organization) -> dict[str, Any]:
    """The org's whole settings document."""
    document: dict[str, Any] = {name: getattr(org, name) for name in SETTINGS}
    document[STANDING_APPROVALS] = caps_of(org.standing_approval_caps).as_dict()
    return document


def columns_of(changes: Mapping[str, Any]) -> dict[str, Any]:
    """``changes`` (``parse_changes``) by the columns that store them."""
    return {COLUMN_OF_SETTING.get(name, name): value for name, value in changes.items()}


def parse_changes(body: Any) -> dict[str, Any]:
    """The settings a PATCH changes, checked: a JSON object of known settings, each with
    one of its values. Every problem is named at once; nothing is stored on any."""
    if not isinstance(body, Mapping):
        raise ValidationFailed("The body must be a JSON object of settings.")
    problems: list[dict[str, str]] = []
    changes = dict(body)
    for name, value in body.items():
        setting = SETTINGS.get(name)
        if name == STANDING_APPROVALS:
            try:
                changes[name] = parse_caps(value)
            except ValidationFailed as refused:
                problems.extend(refused.details.get("fields", []))
        elif setting is None:
            problems.append({"field": str(name)[:100], "message": "is not a setting"})
        elif not isinstance(value, str) or value not in setting.values:
            allowed = ", ".join(f'"{v}"' for v in setting.values)
            problems.append({"field": name, "message": f"must be one of {allowed}"})
    if problems:
        # A hostile body of many keys is named in part: the first ones are enough.
        raise ValidationFailed.for_fields(problems[:MAX_NAMED])
    return changes
