"""The group API on SQLite and PostgreSQL: create, read, rename, delete, members; who may
do what; hostile input; races; the audit events; and the two reads a quorum or a chain
step naming a group will make."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import select

from signoff.context import AppContext
from signoff.dashboard import admin_service
from signoff.groups.repository import GroupRepository
from signoff.models import AuditEvent
from tests.conftest import Org, assert_error
from tests.passkeys.test_passkey_decisions import member_of

pytestmark = pytest.mark.anyio

API = "/api/v1/groups"


async def create(
    api: httpx.AsyncClient, org: Org, name: str, member_ids: list[str] | None = None
) -> httpx.Response:
    body: dict[str, Any] = {"name": name}
    if member_ids is not None:
        body["member_ids"] = member_ids
    return await api.post(API, json=body, headers=org.admin.headers)


async def group_events(ctx: AppContext, org: Org) -> list[tuple[str, dict[str, Any]]]:
    async with ctx.reading() as uow:
        rows = await uow.session.execute(
            select(AuditEvent.type, AuditEvent.data, AuditEvent.actor_id)
            .where(AuditEvent.org_id == uuid.UUID(org.id), AuditEvent.type.like("group.%"))
            .order_by(AuditEvent.created_at, AuditEvent.id)
        )
        return [(t, d | {"actor": str(a)}) for t, d, a in rows]


async def test_create_read_rename_and_delete(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    first, second = org.members[0], org.members[1]
    made = await create(client, org, "  Finance  team ", [first.user_id, second.user_id])
    assert made.status_code == 201, made.text
    group = made.json()
    assert group["name"] == "Finance team" and group["member_count"] == 2
    assert {m["id"] for m in group["members"]} == {first.user_id, second.user_id}
    assert group["members"][0] == {
        "id": first.user_id,
        "email": first.email,
        "name": first.name,
        "active": True,
    }
    gid = group["id"]
    # Every member of the org may read.
    listed = await client.get(API, headers=first.headers)
    assert listed.status_code == 200, listed.text
    assert [(g["name"], g["member_count"]) for g in listed.json()["data"]] == [("Finance team", 2)]
    read = await client.get(f"{API}/{gid}", headers=first.headers)
    assert read.status_code == 200 and read.json()["members"] == group["members"]

    renamed = await client.patch(
        f"{API}/{gid}", json={"name": "Finance"}, headers=org.admin.headers
    )
    assert renamed.status_code == 200, renamed.text
    assert renamed.json()["name"] == "Finance"
    assert renamed.json()["updated_at"] >= group["updated_at"]

    gone = await client.delete(f"{API}/{gid}", headers=org.admin.headers)
    assert gone.status_code == 204, gone.text
    assert_error(await client.get(f"{API}/{gid}", headers=first.headers), 404, "NOT_FOUND")
    assert (await client.get(API, headers=first.headers)).json()["data"] == []

    events = await group_events(ctx, org)
    assert [t for t, _ in events] == ["group.created", "group.renamed", "group.deleted"]
    assert events[0][1] == {
        "group_id": gid,
        "name": "Finance team",
        "member_ids": [first.user_id, second.user_id],
        "actor": org.admin.user_id,
    }
    assert events[1][1]["from"] == "Finance team" and events[1][1]["to"] == "Finance"
    assert events[2][1]["name"] == "Finance"


async def test_groups_are_listed_by_name_with_counts(client: httpx.AsyncClient, org: Org) -> None:
    for name, members in (("security", [org.member.user_id]), ("Audit", []), ("finance", None)):
        assert (await create(client, org, name, members)).status_code == 201
    listed = (await client.get(API, headers=org.admin.headers)).json()["data"]
    assert [(g["name"], g["member_count"]) for g in listed] == [
        ("Audit", 0),
        ("finance", 0),
        ("security", 1),
    ]


async def test_members_replace_add_and_remove(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    a, b, c = (m.user_id for m in org.members)
    gid = (await create(client, org, "Security", [a])).json()["id"]
    url = f"{API}/{gid}/members"
    replaced = await client.put(url, json={"user_ids": [b, c, b]}, headers=org.admin.headers)
    assert replaced.status_code == 200, replaced.text
    assert {m["id"] for m in replaced.json()["members"]} == {b, c}
    added = await client.post(url, json={"user_id": a}, headers=org.admin.headers)
    assert added.status_code == 200 and added.json()["member_count"] == 3
    again = await client.post(url, json={"user_id": a}, headers=org.admin.headers)
    assert again.status_code == 200 and again.json()["member_count"] == 3
    removed = await client.delete(f"{url}/{b}", headers=org.admin.headers)
    assert removed.status_code == 204, removed.text
    assert_error(await client.delete(f"{url}/{b}", headers=org.admin.headers), 404, "NOT_FOUND")
    assert_error(
        await client.delete(f"{url}/not-a-uuid", headers=org.admin.headers), 404, "NOT_FOUND"
    )
    final = (await client.get(f"{API}/{gid}", headers=org.admin.headers)).json()
    assert {m["id"] for m in final["members"]} == {a, c}

    changes = [d for t, d in await group_events(ctx, org) if t == "group.members_changed"]
    # The replace, the add, the removal; adding someone already in changes nothing.
    assert [(d["added"], d["removed"]) for d in changes] == [
        (sorted([b, c], key=[b, c].index), [a]),
        ([a], []),
        ([], [b]),
    ]


async def test_members_may_read_but_not_change(client: httpx.AsyncClient, org: Org) -> None:
    gid = (await create(client, org, "Finance")).json()["id"]
    headers = org.member.headers
    for method, url, body in (
        ("POST", API, {"name": "Mine"}),
        ("PATCH", f"{API}/{gid}", {"name": "Mine"}),
        ("DELETE", f"{API}/{gid}", None),
        ("PUT", f"{API}/{gid}/members", {"user_ids": [org.member.user_id]}),
        ("POST", f"{API}/{gid}/members", {"user_id": org.member.user_id}),
        ("DELETE", f"{API}/{gid}/members/{org.member.user_id}", None),
    ):
        answer = await client.request(method, url, json=body, headers=headers)
        assert_error(answer, 403, "FORBIDDEN")
    assert (await client.get(f"{API}/{gid}", headers=headers)).json()["members"] == []


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("", "must not be empty"),
        ("   ", "must not be empty"),
        ("x" * 101, "at most 100"),
        ("bad\u0007name", "control characters"),
        (7, "string"),
    ],
)
async def test_bad_names_are_refused(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, name: Any, problem: str
) -> None:
    details = assert_error(
        await client.post(API, json={"name": name}, headers=org.admin.headers),
        400,
        "VALIDATION_ERROR",
    )
    assert details["fields"][0]["field"] == "name"
    assert problem in details["fields"][0]["message"]
    gid = (await create(client, org, "Kept")).json()["id"]
    renamed = await client.patch(f"{API}/{gid}", json={"name": name}, headers=org.admin.headers)
    assert_error(renamed, 400, "VALIDATION_ERROR")
    listed = (await client.get(API, headers=org.admin.headers)).json()["data"]
    assert [g["name"] for g in listed] == ["Kept"]
    assert [t for t, _ in await group_events(ctx, org)] == ["group.created"]


async def test_a_name_is_unique_in_the_org_ignoring_case(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    assert (await create(client, org, "Finance")).status_code == 201
    assert_error(await create(client, org, "FINANCE"), 409, "CONFLICT")
    other = (await create(client, org, "Security")).json()["id"]
    taken = await client.patch(
        f"{API}/{other}", json={"name": "finance"}, headers=org.admin.headers
    )
    assert_error(taken, 409, "CONFLICT")
    # A change of case alone is a rename of the group itself.
    own = await client.patch(f"{API}/{other}", json={"name": "SECURITY"}, headers=org.admin.headers)
    assert own.status_code == 200 and own.json()["name"] == "SECURITY"
    # Another org may have its own "Finance".
    assert (await create(client, other_org, "Finance")).status_code == 201


async def test_users_must_be_active_users_of_the_org(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, other_org: Org
) -> None:
    a, gone = org.members[0].user_id, org.members[2].user_id
    admin = await member_of(ctx, org.admin)
    async with ctx.transaction() as uow:
        from signoff.common.time import utcnow

        await admin_service.deactivate_user(uow, admin, gone, utcnow())
    stranger, unknown = other_org.admin.user_id, str(uuid.uuid4())
    made = await create(client, org, "Finance", [a, stranger, "nope", gone, unknown])
    details = assert_error(made, 400, "VALIDATION_ERROR")
    assert details["fields"] == [
        {"field": "member_ids.1", "message": "no such user in this organization"},
        {"field": "member_ids.2", "message": "no such user in this organization"},
        {"field": "member_ids.3", "message": "the user is deactivated"},
        {"field": "member_ids.4", "message": "no such user in this organization"},
    ]
    # Another org's user is refused in the very words of an unknown id.
    assert (await client.get(API, headers=org.admin.headers)).json()["data"] == []
    gid = (await create(client, org, "Finance", [a])).json()["id"]
    for method, url, body in (
        ("PUT", f"{API}/{gid}/members", {"user_ids": [a, stranger]}),
        ("POST", f"{API}/{gid}/members", {"user_id": stranger}),
        ("POST", f"{API}/{gid}/members", {"user_id": gone}),
        ("PUT", f"{API}/{gid}/members", {"user_ids": "everyone"}),
        ("POST", f"{API}/{gid}/members", {}),
    ):
        answer = await client.request(method, url, json=body, headers=org.admin.headers)
        assert_error(answer, 400, "VALIDATION_ERROR")
    members = (await client.get(f"{API}/{gid}", headers=org.admin.headers)).json()["members"]
    assert [m["id"] for m in members] == [a]


async def test_another_orgs_group_is_not_found(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    theirs = (await create(client, other_org, "Finance")).json()["id"]
    headers = org.admin.headers
    for method, url, body in (
        ("GET", f"{API}/{theirs}", None),
        ("PATCH", f"{API}/{theirs}", {"name": "Ours"}),
        ("DELETE", f"{API}/{theirs}", None),
        ("PUT", f"{API}/{theirs}/members", {"user_ids": []}),
        ("POST", f"{API}/{theirs}/members", {"user_id": org.member.user_id}),
        ("DELETE", f"{API}/{theirs}/members/{other_org.admin.user_id}", None),
        ("GET", f"{API}/{uuid.uuid4()}", None),
        ("GET", f"{API}/not-an-id", None),
    ):
        answer = await client.request(method, url, json=body, headers=headers)
        assert_error(answer, 404, "NOT_FOUND")
    still = (await client.get(f"{API}/{theirs}", headers=other_org.admin.headers)).json()
    assert still["name"] == "Finance"


async def test_concurrent_creates_of_one_name_make_one_group(
    client: httpx.AsyncClient, org: Org
) -> None:
    answers = await asyncio.gather(*(create(client, org, f"Ops{'!' * 0}") for _ in range(6)))
    codes = sorted(a.status_code for a in answers)
    assert codes == [201, 409, 409, 409, 409, 409], [a.text for a in answers]
    assert len((await client.get(API, headers=org.admin.headers)).json()["data"]) == 1


async def test_concurrent_member_changes_leave_one_consistent_set(
    client: httpx.AsyncClient, org: Org
) -> None:
    ids = [m.user_id for m in org.members]
    gid = (await create(client, org, "Ops")).json()["id"]
    url = f"{API}/{gid}/members"
    sets = [[ids[0]], [ids[1], ids[2]], [ids[2]], [ids[0], ids[1]]]
    answers = await asyncio.gather(
        *(client.put(url, json={"user_ids": s}, headers=org.admin.headers) for s in sets)
    )
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    final = {
        m["id"]
        for m in (await client.get(f"{API}/{gid}", headers=org.admin.headers)).json()["members"]
    }
    assert final in [set(s) for s in sets]


async def test_active_members_and_a_users_groups(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, other_org: Org
) -> None:
    a, b, c = (uuid.UUID(m.user_id) for m in org.members)
    finance = uuid.UUID((await create(client, org, "Finance", [str(a), str(b)])).json()["id"])
    security = uuid.UUID((await create(client, org, "Security", [str(b), str(c)])).json()["id"])
    theirs = uuid.UUID((await create(client, other_org, "Finance")).json()["id"])
    admin = await member_of(ctx, org.admin)
    async with ctx.transaction() as uow:
        from signoff.common.time import utcnow

        await admin_service.deactivate_user(uow, admin, str(c), utcnow())
    org_id, other_id = uuid.UUID(org.id), uuid.UUID(other_org.id)
    async with ctx.reading() as uow:
        repo = GroupRepository(uow.session, uow.dialect)
        assert set(await repo.active_member_ids(org_id, finance)) == {a, b}
        assert await repo.active_member_ids(org_id, security) == [b]
        assert await repo.active_member_ids(other_id, finance) == []
        assert await repo.active_member_ids(org_id, theirs) == []
        assert set(await repo.groups_of_user(org_id, b)) == {finance, security}
        assert await repo.groups_of_user(org_id, a) == [finance]
        assert await repo.groups_of_user(other_id, a) == []
    # The deactivated member is still listed, marked inactive.
    shown = (await client.get(f"{API}/{security}", headers=org.admin.headers)).json()
    assert {m["id"]: m["active"] for m in shown["members"]} == {str(b): True, str(c): False}
