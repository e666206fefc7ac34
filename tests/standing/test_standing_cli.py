"""``signoff standing list|revoke --org ORG`` as an operator runs them, on both databases."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org
from tests.standing.support import grant, org_events, request, standing_list
from tests.webhooks.test_cli import SECRET_KEY, signoff

pytestmark = pytest.mark.anyio


async def test_list_shows_what_stands_and_revoke_ends_it(
    client: httpx.AsyncClient, ctx: AppContext, org: Org, database_url: str
) -> None:
    requester, approver = org.members[0], org.admin
    sid = await grant(client, requester, approver)

    code, listed, err = await signoff(database_url, "standing", "list", "--org", "Acme", "--json")
    assert code == 0 and listed is not None, err
    (item,) = listed["data"]
    assert item["id"] == sid
    assert item["granted_by"] == {"id": approver.user_id, "name": approver.name}
    assert item["connection_id"] == requester.connection_id
    assert item["connection_name"]
    assert item["action_type"] == "deploy.staging"
    assert item["arguments"] == {"env": {"eq": "staging"}, "replicas": {"max": 5}}
    assert (item["uses"], item["max_uses"]) == (0, None)
    assert item["expires_at"] is not None

    # The table a person reads names the same things.
    table = (await _stdout(database_url, "standing", "list", "--org", org.id)).replace("\n", " ")
    for text in (approver.name, "deploy.staging", 'env = "staging"', "replicas <= 5", "0/∞"):
        assert text in table, table

    code, revoked, err = await signoff(
        database_url, "standing", "revoke", sid, "--org", "Acme", "--json"
    )
    assert code == 0 and revoked is not None, err
    assert revoked["id"] == sid and revoked["revoked_at"] is not None
    # The API sees it gone, and the next request goes to people.
    assert await standing_list(client, requester) == []
    assert (await request(client, requester))["status"] == "pending"
    (event,) = await org_events(ctx, org.id, "standing_approval.revoked")
    assert event.actor_id is None and event.data["standing_approval_id"] == sid

    # Revoking it again changes nothing and records nothing.
    code, again, err = await signoff(
        database_url, "standing", "revoke", sid, "--org", "Acme", "--json"
    )
    assert code == 0 and again is not None and again["revoked_at"] == revoked["revoked_at"], err
    assert len(await org_events(ctx, org.id, "standing_approval.revoked")) == 1
    code, listed, err = await signoff(database_url, "standing", "list", "--org", "Acme", "--json")
    assert code == 0 and listed == {"data": []}, err


async def test_revoke_refuses_unknown_ids_and_other_orgs(
    client: httpx.AsyncClient, org: Org, other_org: Org, database_url: str
) -> None:
    sid = await grant(client, org.members[0], org.admin)
    unknown = str(uuid.uuid4())

    async def run(*args: str) -> tuple[int, str]:
        code, _, err = await signoff(database_url, "standing", *args)
        return code, " ".join(err.split())  # rich wraps long lines

    code, err = await run("revoke", unknown, "--org", "Acme")
    assert code == 1 and f"No standing approval {unknown} in this organization" in err
    code, err = await run("revoke", sid, "--org", "Globex")
    assert code == 1 and f"No standing approval {sid} in this organization" in err
    code, err = await run("revoke", "nope", "--org", "Acme")
    assert code == 1 and "'nope' is not a standing approval id" in err
    code, err = await run("list", "--org", "Nowhere")
    assert code == 1 and "Nowhere" in err
    # Nothing was revoked.
    assert [s["id"] for s in await standing_list(client, org.admin)] == [sid]


async def _stdout(database_url: str, *args: str) -> str:
    """The command's printed table (``signoff`` reads a --json object), wide enough."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SIGNOFF_")}
    env.update({"SIGNOFF_DATABASE_URL": database_url, "SIGNOFF_SECRET_KEY": SECRET_KEY})
    env["COLUMNS"] = "250"
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "signoff.cli", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, _ = await asyncio.wait_for(process.communicate(), 60)
    return out.decode()
