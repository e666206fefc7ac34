"""The OpenAPI document at /api/v1/openapi.json tells the truth, and the docs
page needs nothing from the internet. In process, no database, no network."""

from __future__ import annotations

import re
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from signoff.app import create_app
from signoff.approvals.state import REQUEST_STATUSES
from signoff.common.openapi_declarations import all_error_codes
from signoff.config import Settings
from tests.conftest import make_settings

WRITES = {"post", "put", "patch", "delete"}
RATE_LIMIT_HEADERS = {"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"}
DEFAULTS = Settings.model_construct()


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    # Never opened: serving the document and the docs page touches no database.
    unopened = Path(tempfile.gettempdir()) / "signoff-openapi-test.db"
    app = create_app(make_settings(f"sqlite+aiosqlite:///{unopened}"), background=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
        yield c


@pytest.fixture
async def document(client: httpx.AsyncClient) -> dict[str, Any]:
    response = await client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    data: dict[str, Any] = response.json()
    return data


def _api_operations(document: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, operations in document["paths"].items():
        if path.startswith("/api/v1/"):
            for method, operation in operations.items():
                yield method, path, operation


def _codes(response: dict[str, Any]) -> list[str]:
    """The codes an error response documents, read from its schema."""
    schema = response["content"]["application/json"]["schema"]
    envelope, narrowed = schema["allOf"]
    assert envelope == {"$ref": "#/components/schemas/Error"}
    codes: list[str] = narrowed["properties"]["error"]["properties"]["code"]["enum"]
    return codes


def _schema(document: dict[str, Any], name: str) -> dict[str, Any]:
    schemas: dict[str, Any] = document["components"]["schemas"]
    return schemas.get(name) or schemas[f"{name}-Output"]


def _string_branch(prop: dict[str, Any]) -> dict[str, Any]:
    """The string schema of a property that may also be null."""
    return next(s for s in prop.get("anyOf", [prop]) if s.get("type") == "string")


def _parameter(operation: dict[str, Any], name: str) -> dict[str, Any]:
    found: dict[str, Any] = next(p for p in operation["parameters"] if p["name"] == name)
    return found


async def test_no_operation_documents_the_422_it_never_answers(document: dict[str, Any]) -> None:
    assert '"422"' not in str(document).replace("'", '"')
    assert "HTTPValidationError" not in document["components"]["schemas"]


async def test_every_error_answer_is_the_envelope_with_the_codes_it_can_carry(
    document: dict[str, Any],
) -> None:
    envelope = document["components"]["schemas"]["Error"]
    assert envelope["required"] == ["error"]
    body = document["components"]["schemas"]["ErrorBody"]
    assert set(body["required"]) == {"code", "message", "details"}
    known = set(all_error_codes())
    operations = list(_api_operations(document))
    assert len(operations) >= 20
    for method, path, operation in operations:
        responses = operation["responses"]
        errors = {status: r for status, r in responses.items() if status >= "400"}
        where = f"{method.upper()} {path}"
        assert {"401", "429"} <= set(errors), where
        for status, response in errors.items():
            codes = _codes(response)
            assert codes and set(codes) <= known, (where, status, codes)
            for code in codes:
                assert code in response["description"], (where, status, code)
        assert "Retry-After" in responses["429"]["headers"], where
        for status, response in responses.items():
            assert set(response["headers"]) >= RATE_LIMIT_HEADERS, (where, status)
        if method in WRITES and path != "/api/v1/emergency-stop":
            # An approval's 503 may also be SERVICE_UNAVAILABLE: its receipt cannot be
            # signed (docs/receipts.md).
            expected = ["EMERGENCY_STOP"]
            if method == "patch" and path.startswith("/api/v1/approvals/"):
                expected.append("SERVICE_UNAVAILABLE")
            assert sorted(_codes(responses["503"])) == expected, where
        if "requestBody" in operation:
            assert "PAYLOAD_TOO_LARGE" in _codes(responses["413"]), where
            assert "VALIDATION_ERROR" in _codes(responses["400"]), where


async def test_operations_document_their_own_refusals_and_the_idempotent_replay(
    document: dict[str, Any],
) -> None:
    paths = document["paths"]
    create = paths["/api/v1/approvals"]["post"]["responses"]
    assert {"200", "201"} <= set(create)
    assert create["200"]["headers"]["Idempotent-Replayed"]["required"] is True
    assert create["200"]["content"] == create["201"]["content"]
    decide = paths["/api/v1/approvals/{request_id}"]["patch"]["responses"]
    assert set(_codes(decide["409"])) == {"REQUEST_NOT_PENDING", "ALREADY_VOTED"}
    assert "FORBIDDEN" in _codes(decide["403"])
    assert _codes(decide["404"]) == ["NOT_FOUND"]
    steps = paths["/api/v1/approvals/{request_id}/steps"]["post"]["responses"]
    assert set(_codes(steps["409"])) == {"REQUEST_NOT_PENDING", "STEPS_LOCKED"}
    assert "FORBIDDEN" in _codes(steps["403"])
    vote = paths["/api/v1/approvals/{request_id}/steps/{step_id}"]["patch"]["responses"]
    assert set(_codes(vote["409"])) == {
        "REQUEST_NOT_PENDING",
        "STEP_NOT_PENDING",
        "STEP_OUT_OF_ORDER",
    }
    read = paths["/api/v1/approvals/{request_id}"]["get"]["responses"]
    assert set(read) == {"200", "400", "401", "403", "404", "429"}
    assert "503" not in paths["/api/v1/emergency-stop"]["put"]["responses"]


async def test_schemas_carry_the_enums(document: dict[str, Any]) -> None:
    request = _schema(document, "ApprovalRequestOut")["properties"]
    assert request["status"]["enum"] == list(REQUEST_STATUSES)
    priorities = ["low", "medium", "high", "critical"]
    assert request["priority"]["enum"] == priorities
    create = _schema(document, "CreateApprovalRequest")["properties"]
    assert create["priority"]["enum"] == priorities
    decide = _schema(document, "DecideApprovalRequest")["properties"]
    assert decide["decision"]["enum"] == ["approve", "reject"]
    step = _schema(document, "StepSummaryOut")["properties"]
    assert step["status"]["enum"] == ["pending", "approved", "rejected", "skipped"]
    listing = document["paths"]["/api/v1/approvals"]["get"]
    assert _parameter(listing, "status")["schema"]["items"]["enum"] == list(REQUEST_STATUSES)
    assert _parameter(listing, "priority")["schema"]["enum"] == priorities


async def test_schemas_carry_the_default_limits(document: dict[str, Any]) -> None:
    create = _schema(document, "CreateApprovalRequest")["properties"]
    assert create["title"]["maxLength"] == DEFAULTS.max_title_length == 200
    assert create["description"]["maxLength"] == DEFAULTS.max_description_length
    action_type = _string_branch(create["action_type"])
    assert action_type["maxLength"] == DEFAULTS.max_label_length
    assert re.fullmatch(action_type["pattern"], "deploy.production")
    assert _string_branch(create["source"])["maxLength"] == DEFAULTS.max_label_length
    key = _string_branch(create["idempotency_key"])
    assert key["maxLength"] == DEFAULTS.max_idempotency_key_length
    approvals = create["required_approvals"]
    assert (approvals["minimum"], approvals["maximum"]) == (1, DEFAULTS.max_required_approvals)
    comment = _schema(document, "AddComment")["properties"]["body"]
    assert comment["maxLength"] == DEFAULTS.max_comment_length
    decide = _schema(document, "DecideApprovalRequest")["properties"]
    assert _string_branch(decide["comment"])["maxLength"] == DEFAULTS.max_comment_length
    steps = _schema(document, "SetSteps")["properties"]["steps"]
    assert (steps["minItems"], steps["maxItems"]) == (1, DEFAULTS.max_steps)

    listing = document["paths"]["/api/v1/approvals"]["get"]
    page_size = _parameter(listing, "page_size")["schema"]
    assert (page_size["type"], page_size["minimum"], page_size["maximum"]) == ("integer", 1, 100)
    assert _parameter(listing, "page")["schema"]["type"] == "integer"
    read = document["paths"]["/api/v1/approvals/{request_id}"]["get"]
    wait = _parameter(read, "wait")["schema"]
    assert (wait["minimum"], wait["maximum"]) == (0, DEFAULTS.long_poll_max_seconds)
    log = document["paths"]["/api/v1/webhooks"]["get"]
    limit = _parameter(log, "limit")["schema"]
    assert (limit["minimum"], limit["maximum"]) == (1, 100)


async def test_the_docs_page_loads_swagger_ui_from_the_app_itself(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/api/v1/docs")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(source.startswith("/") for source in sources), sources
    assert "/api/v1/openapi.json" in page.text
    policy = page.headers["content-security-policy"]
    assert "script-src 'self' 'sha256-" in policy
    for source in sources:
        asset = await client.get(source)
        assert asset.status_code == 200, source
        assert asset.content, source
