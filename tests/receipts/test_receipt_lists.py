"""List items say whether a receipt was issued and how often it was used, never the receipt."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Org, create_approval
from tests.receipts.test_receipts import ARGS, approved_receipt, redeem


async def listed(client: httpx.AsyncClient, org: Org) -> dict[str, dict[str, Any]]:
    response = await client.get("/api/v1/approvals", headers=org.member.headers)
    assert response.status_code == 200, response.text
    return {item["id"]: item for item in response.json()["data"]}


async def test_list_items_carry_receipt_issued_and_uses_not_the_receipt(
    client: httpx.AsyncClient, org: Org
) -> None:
    approved, token = await approved_receipt(client, org, arguments=ARGS)
    pending = await create_approval(client, org.member)

    items = await listed(client, org)
    assert items[approved["id"]]["receipt_issued"] is True
    assert items[approved["id"]]["receipt_uses"] == 0
    assert items[pending["id"]]["receipt_issued"] is False
    assert items[pending["id"]]["receipt_uses"] == 0
    assert all("receipt" not in item for item in items.values())

    assert (await redeem(client, org.member, token, arguments=ARGS)).status_code == 200
    assert (await listed(client, org))[approved["id"]]["receipt_uses"] == 1


async def test_a_list_item_and_its_read_agree_on_the_receipt(
    client: httpx.AsyncClient, org: Org
) -> None:
    approved, _ = await approved_receipt(client, org)
    pending = await create_approval(client, org.member)
    items = await listed(client, org)
    for request_id in (approved["id"], pending["id"]):
        got = await client.get(f"/api/v1/approvals/{request_id}", headers=org.member.headers)
        for key in ("receipt_issued", "receipt_uses"):
            assert items[request_id][key] == got.json()[key]
