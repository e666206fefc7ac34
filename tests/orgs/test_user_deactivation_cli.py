"""``signoff user deactivate`` / ``reactivate`` and ``signoff connection transfer``: what the
dashboard's Users and Connections pages do, from an operator's shell, on SQLite and
PostgreSQL."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from typer.testing import CliRunner

from signoff.cli import app as cli_app
from signoff.config import get_settings
from tests.conftest import SECRET_KEY, Member, Org, assert_error, create_approval


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI reads its settings from the environment, like an operator's shell."""
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", database_url)
    monkeypatch.setenv("SIGNOFF_SECRET_KEY", SECRET_KEY)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


async def run(*args: str) -> Any:
    def invoke() -> Any:
        return CliRunner().invoke(cli_app, list(args), catch_exceptions=False)

    # The CLI runs its own event loop (asyncio.run): give it a thread.
    return await anyio.to_thread.run_sync(invoke)


async def run_json(*args: str) -> dict[str, Any]:
    result = await run(*args, "--json")
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


async def decide(client: httpx.AsyncClient, org: Org, who: Member) -> httpx.Response:
    request = await create_approval(client, org.members[1])
    return await client.patch(
        f"/api/v1/approvals/{request['id']}", json={"decision": "approve"}, headers=who.headers
    )


async def test_deactivate_transfer_and_reactivate_from_the_command_line(
    client: httpx.AsyncClient, org: Org, cli_env: None
) -> None:
    member = org.member
    assert (await decide(client, org, member)).status_code == 200

    gone = await run_json("user", "deactivate", member.email, "--org", org.name)
    assert gone["id"] == member.user_id and gone["deactivated_at"]
    assert gone["connections"] == [member.connection_id]
    assert_error(await decide(client, org, member), 403, "OWNER_DEACTIVATED")
    # The integration goes on.
    await create_approval(client, member)
    listed = await run_json("user", "list", "--org", org.id)
    states = {u["email"]: u["deactivated_at"] for u in listed["data"]}
    assert states[member.email] and states[org.admin.email] is None

    back = await run_json("user", "reactivate", member.user_id, "--org", org.id)
    assert back["deactivated_at"] is None
    assert (await decide(client, org, member)).status_code == 200

    await run_json("user", "deactivate", member.user_id, "--org", org.id)
    moved = await run_json(
        "connection", "transfer", member.connection_id, "--org", org.id, "--owner", org.admin.email
    )
    assert (moved["id"], moved["owner_id"]) == (member.connection_id, org.admin.user_id)
    decided = await decide(client, org, member)
    assert decided.status_code == 200, decided.text
    assert decided.json()["decided_by"] == org.admin.user_id


async def test_deactivating_says_which_connections_to_transfer(org: Org, cli_env: None) -> None:
    result = await run("user", "deactivate", org.member.email, "--org", org.id)
    assert result.exit_code == 0, result.output
    said = " ".join(result.stdout.split())  # as wrapped to the terminal's width
    assert "their connections (conn-1) keep working without their authority" in said
    assert "signoff connection transfer ID --org ORG --owner USER" in said


async def test_a_transfer_refuses_a_deactivated_or_unknown_owner(org: Org, cli_env: None) -> None:
    await run_json("user", "deactivate", org.members[2].email, "--org", org.id)
    connection = org.member.connection_id
    for owner, said in (
        (org.members[2].email, "deactivated"),
        ("nobody@acme.example", "No user"),
    ):
        result = await run("connection", "transfer", connection, "--org", org.id, "--owner", owner)
        assert result.exit_code == 1, result.output
        assert said in result.output
    unknown = await run("user", "deactivate", "nobody@acme.example", "--org", org.id)
    assert unknown.exit_code == 1 and "No user" in unknown.output
