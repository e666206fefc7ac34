"""List pages are rendered by the database (approvals/json_in_sql.py): each item must equal
what ``request_to_dict`` makes of the stored row, the presenter of every other read.

Compared on both databases, with every kind of value a request can hold: absent and
present optional fields, each status (an unswept expired one included), text that JSON
must escape, and metadata of every JSON type.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import select, update

from signoff.approvals.json_answers import request_to_dict
from signoff.approvals.typed_rows import RequestRecord
from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.models import ApprovalRequest, Receipt
from tests.conftest import Org, create_approval
from tests.helpers import NO_SWEEP, backdate_expiry


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


AWKWARD_TEXT = "Quote \" backslash \\ newline \n tab \t bell \x07 apostrophe ' é 漢字 🚀"
EVERY_JSON_TYPE = {
    "string": AWKWARD_TEXT,
    "integer": 42,
    "negative": -7,
    "big": 2**53 + 1,
    "float": 0.1,
    "tiny": 1e-7,
    "true": True,
    "false": False,
    "null": None,
    "list": [1, "two", [3], {"four": 4}],
    "nested": {"deeper": {"deepest": ["ok"]}},
    "": "empty key",
}


async def _arrange_every_kind_of_request(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    member, admin = org.member, org.admin
    await create_approval(client, member)  # every optional field absent
    await create_approval(
        client,
        member,
        title=AWKWARD_TEXT,
        description=AWKWARD_TEXT * 3,
        priority="critical",
        action_type="deploy.production",
        source="ci",
        metadata=EVERY_JSON_TYPE,
        callback_url="https://hooks.example.com/signoff?a=1&b=2",
        idempotency_key="key-'\"-1",
        expires_at=_in(timedelta(days=30)),
        required_approvals=2,
    )
    for decision in ("approve", "reject"):
        created = await create_approval(client, member)
        response = await client.patch(
            f"/api/v1/approvals/{created['id']}",
            headers=admin.headers,
            json={"decision": decision, "comment": AWKWARD_TEXT},
        )
        assert response.status_code == 200, response.text
    cancelled = await create_approval(client, member)
    response = await client.delete(f"/api/v1/approvals/{cancelled['id']}", headers=member.headers)
    assert response.status_code == 200, response.text
    commented = await create_approval(client, member)
    for _ in range(2):
        response = await client.post(
            f"/api/v1/approvals/{commented['id']}/comments",
            headers=member.headers,
            json={"body": "noted"},
        )
        assert response.status_code == 201, response.text
    # Pending past its deadline, not yet swept: reads as expired at its deadline.
    unswept = await create_approval(client, member, expires_at=_in(timedelta(hours=1)))
    await backdate_expiry(ctx, unswept["id"])
    # Values the API does not write this way: a sequential flag without steps, and
    # metadata stored as a JSON null (reads show {}).
    for values in ({"is_sequential": True}, {"metadata_": None}):
        created = await create_approval(client, member)
        async with ctx.transaction() as uow:
            await uow.session.execute(
                update(ApprovalRequest)
                .where(ApprovalRequest.id == uuid.UUID(created["id"]))
                .values(**values)
            )


def record_of(entity: ApprovalRequest) -> RequestRecord:
    return RequestRecord(*(getattr(entity, name) for name in RequestRecord._fields))


def _in(delta: timedelta) -> str:
    return (utcnow() + delta).isoformat()


async def _presented_by_python(ctx: AppContext, org: Org) -> dict[str, dict[str, Any]]:
    now = utcnow()
    async with ctx.reading() as uow:
        uses = dict((await uow.session.execute(select(Receipt.request_id, Receipt.uses))).all())
        rows = await uow.session.scalars(
            select(ApprovalRequest).where(ApprovalRequest.org_id == uuid.UUID(org.id))
        )
        # Read through the ORM, apart from every prepared statement the API runs.
        return {
            str(row.id): request_to_dict(record_of(row), now)
            | {"receipt_issued": row.id in uses, "receipt_uses": uses.get(row.id, 0)}
            for row in rows
        }


async def test_a_list_item_is_what_every_other_read_presents(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await _arrange_every_kind_of_request(client, ctx, org)
    response = await client.get(
        "/api/v1/approvals", params={"page_size": 100}, headers=org.member.headers
    )
    assert response.status_code == 200, response.text
    listed = response.json()["data"]
    expected = await _presented_by_python(ctx, org)

    assert len(listed) == len(expected) == 9
    for item in listed:
        assert item == expected[item["id"]]
        # The same keys in the same order, and the same JSON types (True == 1 in Python).
        assert orjson.dumps(item) == orjson.dumps(expected[item["id"]])
    statuses = sorted(item["status"] for item in listed)
    assert statuses == sorted(["pending"] * 5 + ["approved", "rejected", "cancelled", "expired"])


async def test_a_list_item_matches_its_get(
    client: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    created = await create_approval(client, org.member, metadata=EVERY_JSON_TYPE)
    listed = (await client.get("/api/v1/approvals", headers=org.member.headers)).json()["data"]
    got = (
        await client.get(f"/api/v1/approvals/{created['id']}", headers=org.member.headers)
    ).json()
    assert listed == [{key: got[key] for key in listed[0]}]
