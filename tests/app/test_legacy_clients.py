"""SIGNOFF_COMPAT_LEGACY_CLIENTS: on, older clients get what they expect; off (the
default), the interface holds word for word."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.conftest import Org, approval_body, assert_error, create_approval


@pytest.fixture(params=[False, True], ids=["interface", "legacy"])
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    return {"compat_legacy_clients": request.param}


def legacy(overrides: dict[str, Any]) -> bool:
    return bool(overrides["compat_legacy_clients"])


async def test_single_objects_carry_data_only_when_on(
    client: httpx.AsyncClient, org: Org, settings_overrides: dict[str, Any]
) -> None:
    created = await client.post(
        "/api/v1/approvals", json=approval_body(), headers=org.member.headers
    )
    assert created.status_code == 201
    body = created.json()
    request_id = body["id"]
    read = (await client.get(f"/api/v1/approvals/{request_id}", headers=org.member.headers)).json()
    decided = await client.patch(
        f"/api/v1/approvals/{request_id}",
        json={"decision": "approve"},
        headers=org.admin.headers,
    )
    me = (await client.get("/api/v1/me", headers=org.member.headers)).json()
    listed = (await client.get("/api/v1/approvals", headers=org.member.headers)).json()

    for single in (body, read, decided.json(), me):
        if legacy(settings_overrides):
            envelope = single.pop("data")
            assert envelope == single
        else:
            assert "data" not in single
    # Lists keep their shape either way; errors keep the envelope either way.
    assert [item["id"] for item in listed["data"]] == [request_id]
    assert "data" not in listed["data"][0]
    missing = await client.get(
        "/api/v1/approvals/00000000-0000-0000-0000-000000000000", headers=org.member.headers
    )
    assert_error(missing, 404, "NOT_FOUND")
    assert int(decided.headers["content-length"]) == len(decided.content)


async def test_a_create_without_priority_or_description(
    client: httpx.AsyncClient, org: Org, settings_overrides: dict[str, Any]
) -> None:
    answer = await client.post(
        "/api/v1/approvals", json={"title": "Publish the post"}, headers=org.member.headers
    )
    if not legacy(settings_overrides):
        details = assert_error(answer, 400, "VALIDATION_ERROR")
        assert {f["field"] for f in details["fields"]} == {"priority", "description"}
        return
    assert answer.status_code == 201, answer.text
    assert (answer.json()["priority"], answer.json()["description"]) == ("medium", "")
    # Given ones are kept; a blank title is still refused.
    kept = await create_approval(client, org.member, priority="low", description="Why")
    assert (kept["priority"], kept["description"]) == ("low", "Why")
    blank = await client.post("/api/v1/approvals", json={"title": " "}, headers=org.member.headers)
    assert_error(blank, 400, "VALIDATION_ERROR")


async def test_teams_and_templates(
    client: httpx.AsyncClient, org: Org, settings_overrides: dict[str, Any]
) -> None:
    for path in ("/api/v1/teams", "/api/v1/templates"):
        answer = await client.get(path, headers=org.member.headers)
        if legacy(settings_overrides):
            assert answer.status_code == 200
            assert answer.json() == {"data": []}
            assert_error(await client.get(path), 401, "UNAUTHORIZED")
        else:
            assert_error(answer, 404, "NOT_FOUND")


async def test_the_openapi_document_is_the_interface_either_way(
    client: httpx.AsyncClient, settings_overrides: dict[str, Any]
) -> None:
    document = (await client.get("/api/v1/openapi.json")).json()
    assert "data" not in document
    assert not {"/api/v1/teams", "/api/v1/templates"} & set(document["paths"])
