"""Standing approvals ("don't ask again for..."): granted beside an approval, matched at
a later request's create, listed and revoked (docs/policies.md, *Standing approvals*).
Services never commit.

A standing approval approves, at once, later requests of the same connection and action
type whose arguments meet its constraints (per argument name ``{"eq": value}`` or
``{"max": number}``), until it expires or its uses are spent. At create it comes after
the policies and before people; a critical request, or one that needs more than one
approval, never matches one and never grants one.
"""

from __future__ import annotations

import functools
import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import orjson

from signoff.approvals.typed_rows import RequestRecord
from signoff.audit import events as audit_events
from signoff.auth.principal import OrgMember
from signoff.common.ids import new_id
from signoff.common.time import format_timestamp
from signoff.errors import Forbidden, NotFound, ValidationFailed
from signoff.policies.standing_repository import (
    StandingApprovalRepository,
    StandingCandidate,
    StandingRow,
)

if TYPE_CHECKING:
    from signoff.policies.schemas import StandingGrantIn

GRANTED_EVENT = "standing_approval.granted"
REVOKED_EVENT = "standing_approval.revoked"

# The service's own limits, whatever an admin allows (``StandingGrantIn`` holds them too).
MAX_TTL_SECONDS = 366 * 24 * 3600
MAX_USES = 1_000_000
MAX_CONSTRAINTS = 20
MAX_EQ_BYTES = 1000
MAX_NUMBER = 1e15
MAX_FORBIDDEN_TYPES = 100
# Listed at most in one answer.
LIST_LIMIT = 500


# ---- the admins' caps (org settings ``standing_approvals``) ----


@dataclass(frozen=True)
class Caps:
    max_ttl_seconds: int | None = None
    max_uses: int | None = None
    forbidden_action_types: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "max_ttl_seconds": self.max_ttl_seconds,
            "max_uses": self.max_uses,
            "forbidden_action_types": list(self.forbidden_action_types),
        }


NO_CAPS = Caps()


def caps_of(stored: Mapping[str, Any] | None) -> Caps:
    """The caps as stored (checked when written, ``parse_caps``); None: none."""
    if not stored:
        return NO_CAPS
    return Caps(
        stored.get("max_ttl_seconds"),
        stored.get("max_uses"),
        tuple(stored.get("forbidden_action_types") or ()),
    )


def _bounded_int(value: Any, upper: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= upper


def parse_caps(value: Any, field: str = "standing_approvals") -> dict[str, Any]:
    """An admin's caps, checked: ``{"max_ttl_seconds", "max_uses",
    "forbidden_action_types"}``, each optional (absent or null: no cap). Every problem is
    named; the caps as they will be stored."""
    if not isinstance(value, Mapping):
        raise ValidationFailed.for_field(field, "must be a JSON object")
    problems: list[dict[str, str]] = []
    known = {"max_ttl_seconds": MAX_TTL_SECONDS, "max_uses": MAX_USES}
    for name in value:
        if name not in (*known, "forbidden_action_types"):
            problems.append({"field": f"{field}.{str(name)[:100]}", "message": "is not a cap"})
    for name, upper in known.items():
        cap = value.get(name)
        if cap is not None and not _bounded_int(cap, upper):
            problems.append({"field": f"{field}.{name}", "message": f"an integer 1 to {upper}"})
    forbidden = value.get("forbidden_action_types")
    if forbidden is None:
        forbidden = []
    if (
        not isinstance(forbidden, list)
        or len(forbidden) > MAX_FORBIDDEN_TYPES
        or not all(isinstance(t, str) and 0 < len(t) <= 100 for t in forbidden)
    ):
        problems.append(
            {
                "field": f"{field}.forbidden_action_types",
                "message": f"a list of at most {MAX_FORBIDDEN_TYPES} action types "
                "(strings of 1 to 100 characters)",
            }
        )
    if problems:
        raise ValidationFailed.for_fields(problems[:20])
    caps = Caps(
        value.get("max_ttl_seconds"), value.get("max_uses"), tuple(dict.fromkeys(forbidden))
    )
    return caps.as_dict()


# ---- argument constraints ----


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: ``true`` is not ``1``, ``1`` is ``1.0``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if _number(a) and _number(b):
        return bool(a == b)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and bool(a == b)


def constraints_hold(constraints: Mapping[str, Any], arguments: Mapping[str, Any] | None) -> bool:
    """Whether ``arguments`` meet every constraint: each named argument present, equal to
    its ``eq`` or a number at most its ``max``."""
    arguments = arguments or {}
    for name, constraint in constraints.items():
        if name not in arguments:
            return False
        value = arguments[name]
        if "eq" in constraint:
            if not json_equal(value, constraint["eq"]):
                return False
        elif not _number(value) or value > constraint["max"]:
            return False
    return True


def check_constraint_shapes(arguments: Any) -> dict[str, dict[str, Any]]:
    """The constraints as given, checked for shape alone (``StandingGrantIn``): an object
    of at most ``MAX_CONSTRAINTS`` argument names, each ``{"eq": any JSON value}`` or
    ``{"max": a finite number}``. Raises ``ValueError`` naming the first problem."""
    if not isinstance(arguments, dict):
        raise ValueError("must be an object of argument names")
    if len(arguments) > MAX_CONSTRAINTS:
        raise ValueError(f"at most {MAX_CONSTRAINTS} argument constraints")
    for name, constraint in arguments.items():
        if not name or len(name) > 100:
            raise ValueError("argument names are 1 to 100 characters")
        if not isinstance(constraint, dict) or len(constraint) != 1:
            raise ValueError(f'{name}: must be {{"eq": value}} or {{"max": number}}')
        if "eq" in constraint:
            try:
                size = len(orjson.dumps(constraint["eq"]))
            except (TypeError, orjson.JSONEncodeError):  # pragma: no cover - parsed JSON
                size = MAX_EQ_BYTES + 1
            if size > MAX_EQ_BYTES:
                raise ValueError(f"{name}: eq's value is at most {MAX_EQ_BYTES} bytes of JSON")
        elif "max" in constraint:
            cap = constraint["max"]
            if not _number(cap) or abs(cap) > MAX_NUMBER:
                raise ValueError(f"{name}: max must be a number of at most {MAX_NUMBER:g}")
        else:
            raise ValueError(f'{name}: must be {{"eq": value}} or {{"max": number}}')
    return arguments


# ---- granting ----


def check_grant(
    spec: StandingGrantIn, row: RequestRecord, arguments: Mapping[str, Any] | None, caps: Caps
) -> None:
    """Refuse a grant the request or the admins' caps do not allow (400, nothing stored,
    the decision not made). ``arguments``: the request's as approved (an edit's)."""
    problems: list[dict[str, str]] = []

    def refuse(field: str, message: str) -> None:
        problems.append({"field": f"standing.{field}" if field else "standing", "message": message})

    if row.priority == "critical":
        refuse("", "a critical request never grants a standing approval")
    if row.required_approvals > 1 or row.has_steps:
        refuse("", "only a request one approval decides grants a standing approval")
    if not row.action_type:
        refuse("", "a standing approval names an action type; this request has none")
    elif row.action_type in caps.forbidden_action_types:
        refuse("", f"the org's admins forbid standing approvals of {row.action_type}")
    if caps.max_ttl_seconds is not None and (
        spec.ttl_seconds is None or spec.ttl_seconds > caps.max_ttl_seconds
    ):
        refuse("ttl_seconds", f"at most {caps.max_ttl_seconds} (the org's cap)")
    if caps.max_uses is not None and (spec.max_uses is None or spec.max_uses > caps.max_uses):
        refuse("max_uses", f"at most {caps.max_uses} (the org's cap)")
    given = arguments or {}
    for name, constraint in spec.arguments.items():
        if name not in given:
            refuse(f"arguments.{name}", "the request has no such argument")
        elif "max" in constraint and not _number(given[name]):
            refuse(f"arguments.{name}", "max applies to a number; this argument is not one")
        elif not constraints_hold({name: constraint}, given):
            refuse(f"arguments.{name}", "must hold for the request it is granted on")
    if problems:
        raise ValidationFailed.for_fields(problems)


async def grant(
    repo: StandingApprovalRepository,
    member: OrgMember,
    spec: StandingGrantIn,
    request: RequestRecord,
    now: datetime,
) -> StandingRow:
    """Store the grant beside the approval of ``request`` (checked by ``check_grant``),
    with its audit event, in the decision's transaction."""
    values: dict[str, Any] = {
        "id": new_id(),
        "org_id": member.org_id,
        "connection_id": request.connection_id,
        "action_type": request.action_type,
        "arguments": dict(spec.arguments),
        "expires_at": now + timedelta(seconds=spec.ttl_seconds) if spec.ttl_seconds else None,
        "max_uses": spec.max_uses,
        "uses": 0,
        "granted_by": member.user_id,
        "granted_by_name": member.user_name,
        "request_id": request.id,
        "created_at": now,
        "revoked_at": None,
        "revoked_by": None,
    }
    await repo.add(values)
    written = StandingRow(**values)
    await audit_events.record(
        repo.session, member.org_id, GRANTED_EVENT, member.user_id, _event_data(written), now
    )
    return written


def _event_data(row: StandingRow) -> dict[str, Any]:
    return {
        "standing_approval_id": str(row.id),
        "request_id": str(row.request_id),
        "connection_id": str(row.connection_id),
        "action_type": row.action_type,
        "arguments": row.arguments,
        "expires_at": format_timestamp(row.expires_at) if row.expires_at else None,
        "max_uses": row.max_uses,
    }


# ---- matching at create ----


@dataclass(frozen=True)
class Match:
    """The standing approval that approves a new request, its use taken: ``label``, the
    request's ``decided_by_name``; ``data``, what the decision's event names of it."""

    row: StandingCandidate
    uses: int
    label: str
    data: dict[str, Any]
    # The use is still to be taken by the create's own statement (PostgreSQL:
    # ``StandingApprovalRepository.use_taken_by_create``).
    by_create: bool = False


@functools.lru_cache(maxsize=1024)
def _names(
    standing_id: uuid.UUID, granted_by: uuid.UUID, granted_by_name: str
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """What every hit of one standing approval names of it, made once: its label, and
    the first items of its event data (``Match``)."""
    label = f"standing approval {standing_id} (granted by {granted_by_name})"
    named = (("id", str(standing_id)), ("granted_by", str(granted_by)))
    return label, (*named, ("granted_by_name", granted_by_name))


def _match(row: StandingCandidate, uses: int, by_create: bool) -> Match:
    label, named = _names(row.id, row.granted_by, row.granted_by_name)
    data: dict[str, Any] = dict(named)
    data["uses"] = uses
    data["max_uses"] = row.max_uses
    return Match(row, uses, label, data, by_create)


def may_match(
    granted: int, priority: str, required_approvals: int, action_type: str | None
) -> bool:
    """Whether a new request may be approved by a standing approval at all (no read):
    the org granted one once, and the request is not critical, needs one approval (after
    the policies' ``require``), and names an action type."""
    return (
        bool(granted) and priority != "critical" and required_approvals == 1 and bool(action_type)
    )


async def match(
    repo: StandingApprovalRepository,
    org_id: uuid.UUID,
    connection_id: uuid.UUID,
    action_type: str,
    arguments: Mapping[str, Any] | None,
    now: datetime,
    *,
    taking: bool = False,
) -> Match | None:
    """The first live standing approval whose constraints hold, its use taken in the
    caller's transaction (one lookup on its index; the use by the request's insert on
    SQLite, by the create's statement on PostgreSQL, ``Match.by_create``; ``taking``:
    by a conditional UPDATE of its own, after the create's was lost:
    ``StandingApprovalRepository.use``); None: the request goes to people."""
    by_create = repo.use_taken_by_create and not taking
    for row in await repo.candidates(org_id, connection_id, action_type, now):
        if not constraints_hold(row.arguments, arguments):
            continue
        uses = await repo.use(row, now, taking=taking)
        if uses is not None:
            return _match(row, uses, by_create)
    return None


# ---- listing and revoking ----


def standing_to_dict(row: StandingRow) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "connection_id": str(row.connection_id),
        "action_type": row.action_type,
        "arguments": row.arguments,
        "expires_at": format_timestamp(row.expires_at) if row.expires_at else None,
        "max_uses": row.max_uses,
        "uses": row.uses,
        "granted_by": {"id": str(row.granted_by), "name": row.granted_by_name},
        "request_id": str(row.request_id),
        "created_at": format_timestamp(row.created_at),
        "revoked_at": format_timestamp(row.revoked_at) if row.revoked_at else None,
    }


async def list_live(
    repo: StandingApprovalRepository, member: OrgMember, now: datetime
) -> list[dict[str, Any]]:
    """What stands in the member's org: every member may see it, as they see requests."""
    return await list_of_org(repo, member.org_id, now)


async def list_of_org(
    repo: StandingApprovalRepository, org_id: uuid.UUID, now: datetime
) -> list[dict[str, Any]]:
    """What stands in the org, newest first (the operator's CLI reads it whole)."""
    return [standing_to_dict(row) for row in await repo.live(org_id, now, LIST_LIMIT)]


async def _find(
    repo: StandingApprovalRepository, org_id: uuid.UUID, standing_id: uuid.UUID
) -> StandingRow:
    row = await repo.get(org_id, standing_id)
    if row is None:
        raise NotFound(f"No standing approval {standing_id} in this organization.")
    return row


async def revoke(
    repo: StandingApprovalRepository, member: OrgMember, standing_id: uuid.UUID, now: datetime
) -> dict[str, Any]:
    """Revoke a standing approval: its grantor or an admin (else 403); revoking one
    revoked already changes nothing (and records nothing)."""
    row = await _find(repo, member.org_id, standing_id)
    if not (member.is_admin or member.user_id == row.granted_by):
        raise Forbidden("Only its grantor or an admin may revoke a standing approval.")
    return await _revoke_row(repo, row, member.user_id, now)


async def revoke_by_operator(
    repo: StandingApprovalRepository, org_id: uuid.UUID, standing_id: uuid.UUID, now: datetime
) -> dict[str, Any]:
    """The CLI's revoke: the operator may revoke any of the org's, and the audit event has
    no actor, as every change made from the CLI."""
    return await _revoke_row(repo, await _find(repo, org_id, standing_id), None, now)


async def _revoke_row(
    repo: StandingApprovalRepository, row: StandingRow, by: uuid.UUID | None, now: datetime
) -> dict[str, Any]:
    if row.revoked_at is None and await repo.revoke(row.id, by, now):
        row = row._replace(revoked_at=now, revoked_by=by)
        data = {"standing_approval_id": str(row.id), "uses": row.uses}
        await audit_events.record(repo.session, row.org_id, REVOKED_EVENT, by, data, now)
    return standing_to_dict(row)
