"""The emergency stop (decisions.md section 8): per org by an admin, or for everyone by
the operator; writes answer 503 while reads go on, and nothing is lost."""

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
from signoff.context import AppContext
from tests.conftest import SECRET_KEY, Member, Org, assert_error, create_approval
from tests.helpers import stored_request

STOP = "/api/v1/emergency-stop"


async def _set_stop(client: httpx.AsyncClient, who: Member, **body: Any) -> httpx.Response:
    return await client.put(STOP, headers=who.headers, json=body)


async def _writes(client: httpx.AsyncClient, who: Member, request_id: str) -> list[httpx.Response]:
    url = f"/api/v1/approvals/{request_id}"
    return [
        await client.post(
            "/api/v1/approvals",
            headers=who.headers,
            json={"title": "t", "description": "d", "priority": "low"},
        ),
        await client.patch(url, headers=who.headers, json={"decision": "approve"}),
        await client.post(f"{url}/comments", headers=who.headers, json={"body": "hi"}),
        await client.delete(url, headers=who.headers),
    ]


async def _reads(client: httpx.AsyncClient, who: Member, request_id: str) -> list[httpx.Response]:
    url = f"/api/v1/approvals/{request_id}"
    return [
        await client.get("/api/v1/approvals", headers=who.headers),
        await client.get(url, headers=who.headers),
        await client.get(f"{url}/comments", headers=who.headers),
        await client.get(f"{url}/events", headers=who.headers),
        await client.get("/api/v1/me", headers=who.headers),
        await client.get(STOP, headers=who.headers),
    ]


def _assert_stopped(responses: list[httpx.Response]) -> None:
    for response in responses:
        assert_error(response, 503, "EMERGENCY_STOP")
        assert "x-ratelimit-remaining" in response.headers


async def test_state_starts_off(client: httpx.AsyncClient, org: Org) -> None:
    response = await client.get(STOP, headers=org.member.headers)
    assert response.json() == {
        "org_id": org.id,
        "active": False,
        "operator_stop": False,
        "cancelled": 0,
    }


async def test_admin_stop_blocks_writes_keeps_reads_and_loses_nothing(
    client: httpx.AsyncClient, org: Org, other_org: Org, ctx: AppContext
) -> None:
    waiting = await create_approval(client, org.member, required_approvals=2)
    await client.patch(
        f"/api/v1/approvals/{waiting['id']}",
        headers=org.member.headers,
        json={"decision": "approve"},
    )
    on = await _set_stop(client, org.admin, active=True)
    assert on.status_code == 200, on.text
    assert on.json() == {"org_id": org.id, "active": True, "operator_stop": False, "cancelled": 0}

    for who in (org.admin, org.members[1]):
        _assert_stopped(await _writes(client, who, waiting["id"]))
        assert [r.status_code for r in await _reads(client, who, waiting["id"])] == [200] * 6
    assert (await client.get(STOP, headers=org.member.headers)).json()["active"] is True
    me = (await client.get("/api/v1/me", headers=org.member.headers)).json()
    assert me["org"]["emergency_stop"] is True
    # No pending request can be decided: the refused vote did not count.
    stored = await stored_request(ctx, waiting["id"])
    assert (stored.status, stored.current_approvals, stored.comments_count) == ("pending", 1, 0)
    # Other orgs go on.
    theirs = await create_approval(client, other_org.member)
    assert theirs["status"] == "pending"

    off = await _set_stop(client, org.admin, active=False)
    assert off.json()["active"] is False
    decided = await client.patch(
        f"/api/v1/approvals/{waiting['id']}",
        headers=org.members[1].headers,
        json={"decision": "approve"},
    )
    assert decided.json()["status"] == "approved"
    assert decided.json()["current_approvals"] == 2
    listing = (await client.get("/api/v1/approvals", headers=org.admin.headers)).json()
    assert listing["total"] == 1  # the create refused during the stop never happened


async def test_members_may_not_toggle_it(client: httpx.AsyncClient, org: Org) -> None:
    for active in (True, False):
        response = await _set_stop(client, org.member, active=active, cancel_pending=True)
        assert_error(response, 403, "FORBIDDEN")
    assert (await client.get(STOP, headers=org.member.headers)).json()["active"] is False
    await _set_stop(client, org.admin, active=True)
    # Nor turn it off while it is on.
    assert_error(await _set_stop(client, org.member, active=False), 403, "FORBIDDEN")
    assert (await client.get(STOP, headers=org.member.headers)).json()["active"] is True


async def test_invalid_bodies_are_400(client: httpx.AsyncClient, org: Org) -> None:
    for body in ({}, {"active": "maybe"}, {"active": None}, {"active": True, "cancel_pending": 3}):
        response = await client.put(STOP, headers=org.admin.headers, json=body)
        assert_error(response, 400, "VALIDATION_ERROR")
    assert (await client.get(STOP, headers=org.admin.headers)).json()["active"] is False


async def test_cancel_pending_cancels_every_pending_request(
    client: httpx.AsyncClient, org: Org, other_org: Org
) -> None:
    pending = [(await create_approval(client, org.members[i % 3]))["id"] for i in range(4)]
    approved = await create_approval(client, org.member)
    await client.patch(
        f"/api/v1/approvals/{approved['id']}",
        headers=org.admin.headers,
        json={"decision": "approve"},
    )
    theirs = await create_approval(client, other_org.member)

    response = await _set_stop(client, org.admin, active=True, cancel_pending=True)
    assert response.status_code == 200
    assert response.json()["cancelled"] == 4
    for request_id in pending:
        body = await client.get(f"/api/v1/approvals/{request_id}", headers=org.member.headers)
        read = body.json()
        assert read["status"] == "cancelled"
        assert read["decided_by"] == org.admin.user_id
        assert read["cancelled_at"] is not None
        events = await client.get(
            f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers
        )
        assert [e["type"] for e in events.json()["data"]][-1] == "request.cancelled"
    approved_now = await client.get(
        f"/api/v1/approvals/{approved['id']}", headers=org.admin.headers
    )
    assert approved_now.json()["status"] == "approved"
    theirs_now = await client.get(
        f"/api/v1/approvals/{theirs['id']}", headers=other_org.member.headers
    )
    assert theirs_now.json()["status"] == "pending"


async def test_cancel_pending_without_turning_it_on_does_nothing(
    client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.member)
    response = await _set_stop(client, org.admin, active=False, cancel_pending=True)
    assert response.json()["cancelled"] == 0
    read = await client.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending"


async def test_the_operators_stop_holds_every_org(
    client: httpx.AsyncClient, org: Org, other_org: Org, ctx: AppContext
) -> None:
    created = await create_approval(client, org.member)
    # SIGNOFF_EMERGENCY_STOP=true: the operator's switch, read from the settings.
    ctx.settings = ctx.settings.model_copy(update={"emergency_stop": True})
    request_id = created["id"]
    for who in (org.member, org.admin):
        _assert_stopped(await _writes(client, who, request_id))
        assert [r.status_code for r in await _reads(client, who, request_id)] == [200] * 6
    other = await client.post(
        "/api/v1/approvals",
        headers=other_org.member.headers,
        json={"title": "t", "description": "d", "priority": "low"},
    )
    assert_error(other, 503, "EMERGENCY_STOP")
    state = (await client.get(STOP, headers=org.member.headers)).json()
    assert (state["active"], state["operator_stop"]) == (False, True)
    me = (await client.get("/api/v1/me", headers=org.member.headers)).json()
    assert me["org"]["emergency_stop"] is True
    # An org admin cannot lift the operator's stop.
    off = await _set_stop(client, org.admin, active=False)
    assert off.json()["operator_stop"] is True
    _assert_stopped(await _writes(client, org.admin, request_id))
    assert (await stored_request(ctx, request_id)).status == "pending"


# ---- the command line ----


@pytest.fixture
def cli_env(database_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The CLI reads its settings from the environment, like an operator's shell."""
    monkeypatch.setenv("SIGNOFF_DATABASE_URL", database_url)
    monkeypatch.setenv("SIGNOFF_SECRET_KEY", SECRET_KEY)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


async def _cli(*args: str) -> dict[str, Any]:
    def invoke() -> Any:
        return CliRunner().invoke(cli_app, list(args), catch_exceptions=False)

    # The CLI runs its own event loop (asyncio.run): give it a thread.
    result = await anyio.to_thread.run_sync(invoke)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads(result.stdout)
    return data


async def test_cli_on_with_cancel_pending_then_off(
    client: httpx.AsyncClient, org: Org, other_org: Org, cli_env: None
) -> None:
    pending = [(await create_approval(client, org.member))["id"] for _ in range(2)]
    theirs = await create_approval(client, other_org.member)

    result = await _cli("emergency-stop", "on", "--org", org.id, "--cancel-pending", "--json")
    assert result == {"org_id": org.id, "active": True, "cancelled": 2}
    for request_id in pending:
        read = await client.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
        body = read.json()
        assert body["status"] == "cancelled"
        # The operator acted for no user.
        assert body["decided_by"] is None
        events = await client.get(
            f"/api/v1/approvals/{request_id}/events", headers=org.admin.headers
        )
        last = events.json()["data"][-1]
        assert (last["type"], last["actor_id"]) == ("request.cancelled", None)
    _assert_stopped(await _writes(client, org.admin, pending[0]))
    theirs_now = await client.get(
        f"/api/v1/approvals/{theirs['id']}", headers=other_org.member.headers
    )
    assert theirs_now.json()["status"] == "pending"

    result = await _cli("emergency-stop", "off", "--org", "Acme", "--json")
    assert result == {"org_id": org.id, "active": False, "cancelled": 0}
    assert (await create_approval(client, org.admin))["status"] == "pending"
