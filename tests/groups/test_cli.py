"""``signoff group list|create|rename|delete|add|remove`` as an operator runs them."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import Org
from tests.webhooks.test_cli import signoff

pytestmark = pytest.mark.anyio


async def test_create_list_rename_add_remove_delete(
    client: httpx.AsyncClient, org: Org, database_url: str
) -> None:
    a, b = org.members[0], org.members[1]
    code, made, err = await signoff(
        database_url, "group", "create", "Finance", "--org", "Acme",
        "--member", a.email, "--member", b.user_id, "--json",
    )  # fmt: skip
    assert code == 0 and made is not None, err
    assert made["name"] == "Finance"
    assert {m["email"] for m in made["members"]} == {a.email, b.email}
    # What the CLI made, the API reads.
    read = await client.get(f"/api/v1/groups/{made['id']}", headers=org.member.headers)
    assert read.json()["member_count"] == 2

    code, listed, err = await signoff(database_url, "group", "list", "--org", org.id, "--json")
    assert code == 0 and listed is not None, err
    assert [(g["name"], g["member_count"]) for g in listed["data"]] == [("Finance", 2)]

    code, renamed, err = await signoff(
        database_url, "group", "rename", "finance", "Money", "--org", "Acme", "--json"
    )
    assert code == 0 and renamed is not None and renamed["name"] == "Money", err

    code, removed, err = await signoff(
        database_url, "group", "remove", made["id"], a.email, "--org", "Acme", "--json"
    )
    assert code == 0 and removed is not None, err
    assert [m["email"] for m in removed["members"]] == [b.email]

    code, added, err = await signoff(
        database_url, "group", "add", "Money", org.admin.email, "--org", "Acme", "--json"
    )
    assert code == 0 and added is not None, err
    assert {m["email"] for m in added["members"]} == {b.email, org.admin.email}

    code, _, err = await signoff(
        database_url, "group", "delete", "Money", "--org", "Acme", "--json"
    )
    assert code == 0, err
    assert (await client.get("/api/v1/groups", headers=org.admin.headers)).json()["data"] == []


async def test_refusals_are_one_line_errors(org: Org, other_org: Org, database_url: str) -> None:
    code, _, err = await signoff(database_url, "group", "create", "Ops", "--org", "Acme", "--json")
    assert code == 0, err
    code, _, err = await signoff(database_url, "group", "create", "OPS", "--org", "Acme")
    assert code == 1 and "already exists" in err
    code, _, err = await signoff(
        database_url, "group", "create", "Sec", "--org", "Acme", "--member", other_org.admin.email
    )
    assert code == 1 and "No user" in err
    code, _, err = await signoff(database_url, "group", "remove", "Ops", org.member.email,
                                 "--org", "Acme")  # fmt: skip
    assert code == 1 and "not a member" in err
    code, _, err = await signoff(database_url, "group", "delete", "Nope", "--org", "Acme")
    assert code == 1 and "No group 'Nope'" in err
    code, _, err = await signoff(database_url, "group", "create", "x" * 101, "--org", "Acme")
    assert code == 1 and "at most 100" in err
    code, listed, err = await signoff(database_url, "group", "list", "--org", "Acme", "--json")
    assert listed is not None and [g["name"] for g in listed["data"]] == ["Ops"]
