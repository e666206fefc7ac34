"""An arguments_schema's regular expressions cannot hold a worker: matched by RE2 in
linear time, and refused (400 naming them) when they need backtracking or are too long."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Org, assert_error

# Exponential for a backtracking engine on a run of "a" followed by anything else.
CATASTROPHIC = "^(a+)+$"


async def create(client: httpx.AsyncClient, org: Org, **fields: Any) -> httpx.Response:
    body = {"title": "Deploy", "description": "Roll out", "priority": "high", **fields}
    return await client.post("/api/v1/approvals", json=body, headers=org.member.headers)


def fields_of(response: httpx.Response) -> list[str]:
    details = assert_error(response, 400, "VALIDATION_ERROR")
    return [field["field"] for field in details["fields"]]


async def test_a_catastrophic_pattern_answers_at_once(client: httpx.AsyncClient, org: Org) -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "pattern": CATASTROPHIC}}}
    hostile = {"s": "a" * 50_000 + "!"}
    response = await create(client, org, arguments=hostile, arguments_schema=schema)
    assert fields_of(response) == ["arguments/s"]
    fine = await create(client, org, arguments={"s": "aaaa"}, arguments_schema=schema)
    assert fine.status_code == 201, fine.text


async def test_a_catastrophic_pattern_property_answers_at_once(
    client: httpx.AsyncClient, org: Org
) -> None:
    schema = {
        "type": "object",
        "patternProperties": {CATASTROPHIC: {"type": "integer"}},
        "additionalProperties": False,
    }
    hostile = {"a" * 20_000 + "!": 1}
    assert fields_of(await create(client, org, arguments=hostile, arguments_schema=schema)) == [
        "arguments"
    ]
    matched = await create(client, org, arguments={"aaa": "x"}, arguments_schema=schema)
    assert fields_of(matched) == ["arguments/aaa"]
    fine = await create(client, org, arguments={"aaa": 1}, arguments_schema=schema)
    assert fine.status_code == 201, fine.text


@pytest.mark.parametrize(
    ("schema", "named"),
    [
        ({"properties": {"s": {"pattern": r"(a)\1"}}}, "arguments_schema/properties/s/pattern"),
        ({"properties": {"s": {"pattern": "(?=a)a"}}}, "arguments_schema/properties/s/pattern"),
        ({"properties": {"s": {"pattern": "a" * 1_001}}}, "arguments_schema/properties/s/pattern"),
        ({"patternProperties": {"(?<=x)y": {}}}, "arguments_schema/patternProperties/(?<=x)y"),
        ({"pattern": "x{1000}{1000}"}, "arguments_schema/pattern"),
        (
            {"patternProperties": {"^x": {}}, "unevaluatedProperties": False},
            "arguments_schema/unevaluatedProperties",
        ),
    ],
)
async def test_patterns_that_need_backtracking_or_are_too_big_are_refused(
    client: httpx.AsyncClient, org: Org, schema: dict[str, Any], named: str
) -> None:
    response = await create(client, org, arguments={"s": "a"}, arguments_schema=schema)
    assert named in fields_of(response)
