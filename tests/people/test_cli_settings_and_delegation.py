"""``signoff org settings`` and ``signoff user delegation``: what the API's
``/api/v1/org/settings`` and ``/api/v1/me/delegation`` do, for an operator's shell, on
both databases; bad input is a clear error with exit code 1 and nothing changed."""

from __future__ import annotations

from datetime import timedelta

import httpx
import pytest

from signoff.common.time import format_timestamp, utcnow
from tests.app.test_cli_org import cli_env, run, run_json, said
from tests.conftest import Org
from tests.people.test_self_approval import settings_doc

pytestmark = pytest.mark.anyio
__all__ = ["cli_env"]  # fixture


async def test_show_and_change_the_org_settings(client: httpx.AsyncClient, org: Org) -> None:
    shown = await run_json("org", "settings", org.name)
    assert shown == settings_doc("allow", "off")
    changed = await run_json("org", "settings", org.id, "self_approval=forbid")
    assert changed["self_approval"] == "forbid"
    answer = await client.get("/api/v1/org/settings", headers=org.admin.headers)
    assert answer.json()["self_approval"] == "forbid"
    assert "self_approval: forbid" in said(await run("org", "settings", org.name))


async def test_bad_settings_are_refused_and_nothing_changes(
    client: httpx.AsyncClient, org: Org
) -> None:
    refused = await run("org", "settings", org.name, "self_approval=sometimes", expect=1)
    assert "self_approval" in said(refused) and "allow" in said(refused)
    refused = await run("org", "settings", org.name, "four_eyes=on", expect=1)
    assert "four_eyes" in said(refused)
    refused = await run("org", "settings", org.name, "self_approval", expect=1)
    assert "NAME=VALUE" in said(refused)
    answer = await client.get("/api/v1/org/settings", headers=org.admin.headers)
    assert answer.json()["self_approval"] == "allow"


async def test_set_show_and_clear_a_delegation(client: httpx.AsyncClient, org: Org) -> None:
    ann, bob = org.members[0], org.members[1]
    until = format_timestamp(utcnow() + timedelta(days=3))
    assert until is not None
    set_ = await run_json(
        "user", "delegation", ann.email, "--org", org.name, "--to", bob.email, "--until", until
    )
    assert (set_["delegate_id"], set_["away_now"]) == (bob.user_id, True)
    seen = await client.get("/api/v1/me/delegation", headers=ann.headers)
    assert seen.json()["delegate_id"] == bob.user_id
    assert bob.name in said(await run("user", "delegation", ann.email, "--org", org.name))
    cleared = await run_json("user", "delegation", ann.email, "--org", org.name, "--clear")
    assert cleared["delegate_id"] is None
    seen = await client.get("/api/v1/me/delegation", headers=ann.headers)
    assert seen.json()["delegate_id"] is None


async def test_loops_self_and_half_given_delegations_are_refused(org: Org) -> None:
    ann, bob = org.members[0], org.members[1]
    until = format_timestamp(utcnow() + timedelta(days=1))
    assert until is not None
    await run_json(
        "user", "delegation", ann.email, "--org", org.name, "--to", bob.email, "--until", until
    )
    loop = await run(
        "user", "delegation", bob.email, "--org", org.name, "--to", ann.email, "--until", until,
        expect=1,
    )  # fmt: skip
    assert "loop" in said(loop)
    itself = await run(
        "user", "delegation", ann.email, "--org", org.name, "--to", ann.email, "--until", until,
        expect=1,
    )  # fmt: skip
    assert "your own delegate" in said(itself)
    half = await run(
        "user", "delegation", ann.email, "--org", org.name, "--to", bob.email, expect=1
    )
    assert "--until" in said(half)
    # Bob's own delegation was never stored.
    shown = await run_json("user", "delegation", bob.email, "--org", org.name)
    assert shown["delegate_id"] is None
