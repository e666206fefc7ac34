"""Writers of one request racing each other: comments, votes and cancels at once."""

from __future__ import annotations

import asyncio

import httpx

from tests.conftest import Org, create_approval


async def test_comments_and_decisions_racing_on_one_request(
    client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin, required_approvals=3)
    url = f"/api/v1/approvals/{request['id']}"
    calls = []
    for i in range(10):
        who = org.members[i % 3]
        calls.append(client.post(f"{url}/comments", headers=who.headers, json={"body": f"c{i}"}))
    calls += [
        client.patch(url, headers=m.headers, json={"decision": "approve", "comment": "ok"})
        for m in org.members
    ]
    responses = await asyncio.gather(*calls)
    assert sorted(r.status_code for r in responses) == [200] * 3 + [201] * 10
    final = (await client.get(url, headers=org.admin.headers)).json()
    assert final["status"] == "approved"
    assert final["current_approvals"] == 3
    # Ten comments plus the three decision comments, counted exactly.
    assert final["comments_count"] == 13
    comments = (await client.get(f"{url}/comments", headers=org.admin.headers)).json()["data"]
    assert len(comments) == 13
