"""Use cases of groups: create, rename, delete, change members (admins), read (every
member of the org). Services never commit; each change is an audit event of the org.

Users named as members must be active users of the org: an id of another org's user is
refused exactly as an unknown one, so nothing tells that it exists.
"""

from __future__ import annotations

import unicodedata
import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy.exc import IntegrityError

from signoff.audit import events as audit_events
from signoff.auth.principal import OrgMember
from signoff.common.ids import parse_id
from signoff.common.time import format_timestamp
from signoff.errors import Conflict, Forbidden, NotFound, ValidationFailed
from signoff.groups.repository import GroupRepository, GroupRow, MemberRow
from signoff.models import Group

MAX_NAME_LENGTH = 100
MAX_MEMBERS = 1000
MAX_GROUPS = 500

CREATED = "group.created"
RENAMED = "group.renamed"
DELETED = "group.deleted"
MEMBERS_CHANGED = "group.members_changed"


def require_admin(member: OrgMember) -> None:
    if not member.is_admin:
        raise Forbidden("Only an admin of the organization may change its groups.")


def check_name(value: Any, field: str = "name") -> str:
    if not isinstance(value, str):
        raise ValidationFailed.for_field(field, "must be a string")
    name = " ".join(value.split())
    if not name:
        raise ValidationFailed.for_field(field, "must not be empty")
    if len(name) > MAX_NAME_LENGTH:
        raise ValidationFailed.for_field(field, f"must be at most {MAX_NAME_LENGTH} characters")
    if any(unicodedata.category(c).startswith("C") for c in name):
        raise ValidationFailed.for_field(field, "must not hold control characters")
    return name


def _summary(row: GroupRow) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "name": row.name,
        "member_count": row.member_count,
        "created_at": format_timestamp(row.created_at),
        "updated_at": format_timestamp(row.updated_at),
    }


def _member(row: MemberRow) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "email": row.email,
        "name": row.name,
        "active": row.deactivated_at is None,
    }


async def list_groups(repo: GroupRepository, org_id: uuid.UUID) -> list[dict[str, Any]]:
    return [_summary(row) for row in await repo.list_groups(org_id)]


async def group_dict(repo: GroupRepository, group: Group) -> dict[str, Any]:
    members = await repo.members(group.id)
    row = GroupRow(group.id, group.name, len(members), group.created_at, group.updated_at)
    return _summary(row) | {"members": [_member(m) for m in members]}


async def _group(repo: GroupRepository, org_id: uuid.UUID, group_id: uuid.UUID) -> Group:
    group = await repo.get(org_id, group_id)
    if group is None:
        raise NotFound("No group with this id.")
    return group


async def read_group(
    repo: GroupRepository, org_id: uuid.UUID, group_id: uuid.UUID
) -> dict[str, Any]:
    return await group_dict(repo, await _group(repo, org_id, group_id))


async def resolve_group(repo: GroupRepository, org_id: uuid.UUID, reference: str) -> Group:
    """A group of the org by id, or by name ignoring case (the CLI's ``ID``)."""
    group_id = parse_id(reference)
    group = await repo.get(org_id, group_id) if group_id else None
    group = group or await repo.find_by_name(org_id, " ".join(reference.split()))
    if group is None:
        raise NotFound(f"No group {reference!r} in this organization.")
    return group


async def _check_users(
    repo: GroupRepository, org_id: uuid.UUID, values: Any, field: str, *, one: bool = False
) -> list[uuid.UUID]:
    """``values`` as user ids, each an active user of the org; a 400 naming every other
    one (unknown and another org's alike)."""
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValidationFailed.for_field(field, "must be a list of user ids")
    if len(values) > MAX_MEMBERS:
        raise ValidationFailed.for_field(field, f"at most {MAX_MEMBERS} users")
    parsed = [parse_id(v) for v in values]
    known = await repo.users_of_org(org_id, {p for p in parsed if p is not None})
    problems = []
    for index, user_id in enumerate(parsed):
        state = known.get(user_id) if user_id is not None else None
        where = field if one else f"{field}.{index}"
        if state is None:
            problems.append({"field": where, "message": "no such user in this organization"})
        elif state.deactivated_at is not None:
            problems.append({"field": where, "message": "the user is deactivated"})
    if problems:
        raise ValidationFailed.for_fields(problems)
    return list(dict.fromkeys(p for p in parsed if p is not None))


async def _name_is_free(
    repo: GroupRepository, org_id: uuid.UUID, name: str, but: uuid.UUID | None = None
) -> None:
    same = await repo.find_by_name(org_id, name)
    if same is not None and same.id != but:
        raise _taken(same.name)


def _taken(name: str) -> Conflict:
    return Conflict(f"A group named {name!r} already exists.")


async def create_group(
    repo: GroupRepository,
    org_id: uuid.UUID,
    name: Any,
    member_ids: Any,
    actor_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    checked = check_name(name)
    members = await _check_users(repo, org_id, member_ids, "member_ids")
    await _name_is_free(repo, org_id, checked)
    if await repo.count_groups(org_id) >= MAX_GROUPS:
        raise ValidationFailed.for_field("name", f"an org has at most {MAX_GROUPS} groups")
    group = Group(org_id=org_id, name=checked, created_at=now, updated_at=now)
    try:
        await repo.add(group)
    except IntegrityError:
        # Two creates racing for one name meet the unique index: the loser's
        # transaction is refused with the 409 of a name found taken.
        raise _taken(checked) from None
    await repo.add_members(group.id, members, now)
    data = {"group_id": str(group.id), "name": checked, "member_ids": [str(m) for m in members]}
    await audit_events.record(repo.session, org_id, CREATED, actor_id, data, now)
    return await group_dict(repo, group)


async def rename_group(
    repo: GroupRepository,
    org_id: uuid.UUID,
    group_id: uuid.UUID,
    name: Any,
    actor_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    checked = check_name(name)
    group = await _group(repo, org_id, group_id)
    before = group.name
    if checked != before:
        await _name_is_free(repo, org_id, checked, but=group.id)
        try:
            await repo.rename(group, checked, now)
        except IntegrityError:
            raise _taken(checked) from None
        data = {"group_id": str(group.id), "from": before, "to": checked}
        await audit_events.record(repo.session, org_id, RENAMED, actor_id, data, now)
    return await group_dict(repo, group)


async def delete_group(
    repo: GroupRepository,
    org_id: uuid.UUID,
    group_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    now: datetime,
) -> Group:
    group = await _group(repo, org_id, group_id)
    data = {"group_id": str(group.id), "name": group.name}
    await repo.delete(group)
    await audit_events.record(repo.session, org_id, DELETED, actor_id, data, now)
    return group


async def _change_members(
    repo: GroupRepository,
    org_id: uuid.UUID,
    group_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    now: datetime,
    *,
    add: Sequence[uuid.UUID] = (),
    remove: Sequence[uuid.UUID] | None = None,
    replace: bool = False,
) -> Group:
    """The one path of every change to members: the group's row first (so changes to
    one group run one after the other), then the rows, then one audit event naming who
    came and who left. ``replace``: everyone not in ``add`` leaves."""
    if not await repo.lock(org_id, group_id, now):
        raise NotFound("No group with this id.")
    group = await _group(repo, org_id, group_id)
    current = await repo.member_ids(group.id)
    added = [u for u in add if u not in current]
    leaving = [u for u in current if u not in set(add)] if replace else list(remove or ())
    removed = [u for u in leaving if u in current]
    await repo.remove_members(group.id, removed)
    await repo.add_members(group.id, added, now)
    if added or removed:
        data = {
            "group_id": str(group.id),
            "name": group.name,
            "added": [str(u) for u in added],
            "removed": [str(u) for u in sorted(removed)],
        }
        await audit_events.record(repo.session, org_id, MEMBERS_CHANGED, actor_id, data, now)
    return group


async def replace_members(
    repo: GroupRepository,
    org_id: uuid.UUID,
    group_id: uuid.UUID,
    user_ids: Any,
    actor_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    await _group(repo, org_id, group_id)  # 404 before a 400 about its members
    members = await _check_users(repo, org_id, user_ids, "user_ids")
    group = await _change_members(repo, org_id, group_id, actor_id, now, add=members, replace=True)
    return await group_dict(repo, group)


async def add_member(
    repo: GroupRepository,
    org_id: uuid.UUID,
    group_id: uuid.UUID,
    user_id: Any,
    actor_id: uuid.UUID | None,
    now: datetime,
) -> dict[str, Any]:
    await _group(repo, org_id, group_id)
    if not isinstance(user_id, str):
        raise ValidationFailed.for_field("user_id", "must be a user id")
    (member,) = await _check_users(repo, org_id, [user_id], "user_id", one=True)
    group = await _change_members(repo, org_id, group_id, actor_id, now, add=[member])
    return await group_dict(repo, group)


async def remove_member(
    repo: GroupRepository,
    org_id: uuid.UUID,
    group_id: uuid.UUID,
    user_id: uuid.UUID,
    actor_id: uuid.UUID | None,
    now: datetime,
) -> Group:
    """404 when the user is not a member (of this group, or of this org)."""
    await _group(repo, org_id, group_id)
    if user_id not in await repo.member_ids(group_id):
        raise NotFound("This user is not a member of the group.")
    return await _change_members(repo, org_id, group_id, actor_id, now, remove=[user_id])
