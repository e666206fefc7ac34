"""Edit and approve in the dashboard, without JavaScript, on SQLite and PostgreSQL: the
form the schema generates, its errors, the diff to confirm (nothing saved until then),
the confirm's POST with CSRF deciding through the one decide, and no edit offered where
the request has no schema."""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from signoff.context import AppContext
from signoff.dashboard import argument_form
from signoff.receipts.arguments import arguments_hash
from tests.conftest import Org, create_approval
from tests.dashboard.support import post_form, signed_in
from tests.oauth.support import forms_of

SCHEMA = {
    "type": "object",
    "properties": {
        "service": {"type": "string", "description": "Which service"},
        "replicas": {"type": "integer", "minimum": 1},
        "ratio": {"type": "number"},
        "dry_run": {"type": "boolean"},
        "region": {"enum": ["eu", "us"]},
        "tags": {"type": "array", "items": {"type": "string"}},
        "limits": {"type": "object"},
    },
    "required": ["service", "replicas"],
}
ARGS = {"service": "billing", "replicas": 3, "ratio": 0.5, "dry_run": True, "region": "eu",
        "tags": ["a", "b"], "limits": {"cpu": 2}}  # fmt: skip


async def api_read(client: httpx.AsyncClient, org: Org, request_id: str) -> dict[str, Any]:
    response = await client.get(f"/api/v1/approvals/{request_id}", headers=org.admin.headers)
    body: dict[str, Any] = response.json()
    return body


def form_fields(**changes: str) -> dict[str, str]:
    """The edit form as a browser posts it: every field filled with ARGS, then changes."""
    fields = {
        "arg:service": "billing",
        "arg:replicas": "3",
        "arg:ratio": "0.5",
        "arg:dry_run": "true",
        "arg:region": '"eu"',
        "arg:tags": "a\nb",
        "arg:limits": '{"cpu": 2}',
    }
    fields.update(changes)
    return {k: v for k, v in fields.items() if v != "<absent>"}


async def test_edit_review_confirm_without_javascript(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    created = await create_approval(client, org.admin, arguments=ARGS, arguments_schema=SCHEMA)
    url = f"/requests/{created['id']}"
    await signed_in(ctx, client, org.member)
    page = (await client.get(url)).text
    assert f'href="{url}/edit">Edit and approve<' in page
    form_page = await client.get(f"{url}/edit")
    assert form_page.status_code == 200
    for name in ("arg:service", "arg:replicas", "arg:ratio", "arg:dry_run", "arg:region"):
        assert f'name="{name}"' in form_page.text
    assert "Which service" in form_page.text and "one string a line" in form_page.text

    # Outside the schema: the form again, naming the field; nothing saved.
    refused = await post_form(
        client, f"{url}/edit", f"{url}/edit", **form_fields(**{"arg:replicas": "0"})
    )
    assert refused.status_code == 400 and "replicas" in refused.text and "minimum" in refused.text
    wrong = await post_form(
        client, f"{url}/edit", f"{url}/edit", **form_fields(**{"arg:limits": "{nope"})
    )
    assert wrong.status_code == 400 and "is not valid JSON" in wrong.text

    review = await post_form(
        client, f"{url}/edit", f"{url}/edit",
        **form_fields(**{"arg:replicas": "5", "arg:dry_run": "<absent>", "arg:tags": "a"}),
    )  # fmt: skip
    assert review.status_code == 200
    assert "Confirm your edit" in review.text and "/replicas" in review.text
    assert (
        '<del class="arg-old">3</del>' in review.text
        and '<ins class="arg-new">5</ins>' in review.text
    )
    assert (await api_read(client, org, created["id"]))["status"] == "pending"

    confirm = next(f for f in forms_of(review.text) if f["action"] == f"{url}/decision")
    forged = await client.post(f"{url}/decision", data={**confirm["fields"], "csrf_token": "x"})
    assert forged.status_code == 403
    decided = await client.post(f"{url}/decision", data=confirm["fields"])
    assert decided.status_code == 303
    edited = {**ARGS, "replicas": 5, "dry_run": False, "tags": ["a"]}
    body = await api_read(client, org, created["id"])
    assert body["status"] == "approved" and body["arguments"] == edited
    assert body["arguments_edited"] and body["arguments_hash"] == arguments_hash(edited)
    page = (await client.get(url)).text
    assert "You edited the arguments." in page and "counts as their approval" in page
    assert "Edited" in page and body["original_arguments_hash"] in page


async def test_no_edit_without_a_schema_or_the_right_to_decide(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    plain = await create_approval(client, org.admin, arguments=ARGS)
    await signed_in(ctx, client, org.member)
    assert "Edit and approve" not in (await client.get(f"/requests/{plain['id']}")).text
    assert (await client.get(f"/requests/{plain['id']}/edit")).status_code == 404
    # A forged confirm on a request without schema: refused with the API's code, as a flash.
    forms = forms_of((await client.get(f"/requests/{plain['id']}")).text)
    decide = next(f for f in forms if f["action"] == f"/requests/{plain['id']}/decision")
    answer = await client.post(
        f"/requests/{plain['id']}/decision",
        data={**decide["fields"], "decision": "approve", "arguments": orjson.dumps(ARGS).decode()},
    )
    assert answer.status_code == 303
    assert (await api_read(client, org, plain["id"]))["status"] == "pending"


def test_the_form_reads_back_what_it_shows() -> None:
    form = argument_form.build_form(SCHEMA, ARGS)
    kinds = {f.name: f.kind for f in form.fields}
    assert kinds == {"service": "string", "replicas": "integer", "ratio": "number",
                     "dry_run": "boolean", "region": "enum", "tags": "array",
                     "limits": "json"}  # fmt: skip
    posted = {f.input_name: f.value for f in form.fields if f.kind != "boolean"}
    posted["arg:dry_run"] = "true"
    edited, _ = argument_form.read_form(SCHEMA, ARGS, posted)
    assert edited == ARGS
    whole, form = argument_form.read_form({"type": "array"}, {}, {"arguments_json": "[1]"})
    assert whole is None and form.whole and form.fields[0].error == "must be a JSON object"
