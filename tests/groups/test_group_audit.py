"""Changes to groups join the org's hash chain: exported and verified like any event."""

from __future__ import annotations

import json

import httpx
import pytest

from signoff.audit import chain
from signoff.context import AppContext
from tests.audit.test_org_events import _exported
from tests.conftest import Org

pytestmark = pytest.mark.anyio


async def test_group_changes_are_chained_exported_and_verified(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    setup = len([r for r in await _exported(ctx, org) if r["kind"] == "event"])
    headers, a = org.admin.headers, org.member.user_id
    made = await client.post("/api/v1/groups", json={"name": "Finance"}, headers=headers)
    gid = made.json()["id"]
    for method, path, body in (
        ("PATCH", f"/api/v1/groups/{gid}", {"name": "Money"}),
        ("POST", f"/api/v1/groups/{gid}/members", {"user_id": a}),
        ("DELETE", f"/api/v1/groups/{gid}/members/{a}", None),
        ("DELETE", f"/api/v1/groups/{gid}", None),
    ):
        answer = await client.request(method, path, json=body, headers=headers)
        assert answer.status_code in (200, 204), (path, answer.text)
    records = await _exported(ctx, org)
    events = [r for r in records if r["kind"] == "event"][setup:]
    assert [e["type"] for e in events] == [
        "group.created",
        "group.renamed",
        "group.members_changed",
        "group.members_changed",
        "group.deleted",
    ]
    assert all(e["request_id"] is None for e in events)
    assert {e["actor_id"] for e in events} == {org.admin.user_id}
    assert events[2]["data"] == {"group_id": gid, "name": "Money", "added": [a], "removed": []}
    result = chain.verify(chain.parse_lines(json.dumps(r) for r in records), None)
    assert result.ok, result.problem
