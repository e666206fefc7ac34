"""``signoff org create | list | rename | delete`` as an operator runs them, on SQLite
and PostgreSQL: a duplicate name is a clear error with exit code 1, and deleting an org
with requests takes ``--with-data`` and its name typed (or ``--confirm NAME``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest
from click.testing import Result
from typer.testing import CliRunner

from signoff.cli import app as cli_app
from signoff.config import get_settings
from signoff.context import AppContext
from tests.conftest import SECRET_KEY, Org, create_approval
from tests.dashboard.test_setup_link import _form, _issue


@pytest.fixture(autouse=True)
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI reads its settings from the environment, like an operator's shell."""
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", database_url)
    monkeypatch.setenv("SIGNOFF_SECRET_KEY", SECRET_KEY)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


async def run(*args: str, expect: int = 0, typed: str | None = None) -> Result:
    def invoke() -> Result:
        return CliRunner().invoke(cli_app, list(args), input=typed, catch_exceptions=False)

    # The CLI runs its own event loop (asyncio.run): give it a thread.
    result = await anyio.to_thread.run_sync(invoke)
    assert result.exit_code == expect, result.output
    return result


def said(result: Result) -> str:
    """What the command printed, on one line (Rich wraps long lines)."""
    return " ".join(result.output.split())


async def run_json(*args: str) -> Any:
    return json.loads((await run(*args, "--json")).stdout)


async def org_names() -> list[str]:
    return [o["name"] for o in (await run_json("org", "list"))["data"]]


async def test_a_duplicate_name_is_an_error_and_exit_1(ctx: AppContext) -> None:
    created = await run_json("org", "create", "Acme")
    refused = await run("org", "create", "ACME", expect=1)
    assert "error: An organization named 'ACME' exists already" in said(refused)
    assert "ignoring case" in said(refused)
    assert await org_names() == ["Acme"]
    # --org takes the name in any case.
    user = await run_json(
        "user", "create", "--org", "acme", "--email", "ann@acme.example", "--name", "Ann"
    )
    assert user["org_id"] == created["id"]


async def test_the_cli_after_the_setup_link_finds_the_org_made_there(
    ctx: AppContext, client: httpx.AsyncClient
) -> None:
    """The first hour as the README told it: the browser, then `org create "Acme"`."""
    token = await _issue(ctx)
    assert (await client.post(f"/setup/{token}", data=_form("Acme"))).status_code == 303
    refused = await run("org", "create", "Acme", expect=1)
    assert "exists already" in said(refused)
    listed = await run_json("org", "list")
    assert [o["name"] for o in listed["data"]] == ["Acme"]
    assert set(listed["data"][0]) == {"id", "name", "emergency_stop", "created_at"}


async def test_rename(ctx: AppContext, org: Org, other_org: Org) -> None:
    renamed = await run_json("org", "rename", "acme", "Acme Industries")
    assert renamed == {**renamed, "id": org.id, "name": "Acme Industries"}
    refused = await run("org", "rename", org.id, other_org.name.lower(), expect=1)
    assert "exists already" in said(refused)
    missing = await run("org", "rename", "Initech", "Initrode", expect=1)
    assert "No organization 'Initech'" in said(missing)
    assert await org_names() == ["Acme Industries", other_org.name]


async def test_delete_an_empty_org(ctx: AppContext, org: Org) -> None:
    await run("org", "create", "Acme Copy")
    deleted = await run_json("org", "delete", "acme copy")
    assert deleted["name"] == "Acme Copy" and deleted["deleted"] is True
    assert await org_names() == [org.name]


async def test_delete_an_org_with_requests_takes_with_data_and_its_name(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    await create_approval(client, org.member)
    refused = await run("org", "delete", org.name, expect=1)
    assert "has approval requests" in said(refused) and "--with-data" in said(refused)
    # The name typed at the prompt, or given with --confirm, must be the org's.
    wrong = await run("org", "delete", org.id, "--with-data", typed="Globex\n", expect=1)
    assert "Type its name to confirm" in said(wrong)
    assert "does not match; nothing was deleted" in said(wrong)
    await run("org", "delete", org.id, "--with-data", "--confirm", "acme", expect=1)
    # No answer at all (a script without --confirm) deletes nothing either.
    await run("org", "delete", org.id, "--with-data", typed="", expect=1)
    assert await org_names() == [org.name, other_org.name]

    typed = await run("org", "delete", "ACME", "--with-data", typed=f"{org.name}\n")
    assert f"deleted organization {org.id} ({org.name})" in said(typed)
    assert await org_names() == [other_org.name]
    gone = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert gone.status_code == 401

    await create_approval(client, other_org.member)
    scripted = await run_json(
        "org", "delete", other_org.name, "--with-data", "--confirm", other_org.name
    )
    assert scripted["id"] == other_org.id
    assert await org_names() == []
