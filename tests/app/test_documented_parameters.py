"""Query parameters are documented with their real types and limits, yet still read and
checked by the handlers: a wrong value is a 400 VALIDATION_ERROR naming the parameter,
never FastAPI's 422."""

from __future__ import annotations

from typing import Any

import httpx

from tests.conftest import Org, assert_error, create_approval


def _typed_query_parameters(document: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            if method != "get" or not path.startswith("/api/v1/"):
                continue
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "query" and parameter["schema"].get("type") in (
                    "integer",
                    "number",
                ):
                    found.append((path, parameter))
    return found


async def test_numeric_query_parameters_refuse_other_values_with_400(
    client: httpx.AsyncClient, org: Org
) -> None:
    document = (await client.get("/api/v1/openapi.json")).json()
    request_id = (await create_approval(client, org.admin))["id"]
    typed = _typed_query_parameters(document)
    assert {parameter["name"] for _, parameter in typed} >= {"page", "page_size", "wait", "limit"}
    for path, parameter in typed:
        url = path.replace("{request_id}", request_id)
        schema = parameter["schema"]
        values = ["abc"]
        if "maximum" in schema:
            values.append(str(schema["maximum"] + 1))
        if "minimum" in schema:
            values.append(str(schema["minimum"] - 1))
        for value in values:
            response = await client.get(
                url, params={parameter["name"]: value}, headers=org.admin.headers
            )
            details = assert_error(response, 400, "VALIDATION_ERROR")
            fields = {f["field"] for f in details["fields"]}
            # `limit` on the list is page_size's alias, and is reported under that name.
            assert fields & {parameter["name"], "page_size"}, (url, parameter["name"], value)
