"""Which scope each ``/api/v1`` endpoint needs (decisions.md section 11), checked two ways.

``SCOPE_TABLE`` is the one place that says it. The first test walks the app's routes:
every ``/api/v1`` endpoint must have a line here and declare exactly that dependency, so
an endpoint added later fails until its scope is decided. The second calls every
endpoint with OAuth tokens of each scope set: 2xx when the scope was granted, else 403
INSUFFICIENT_SCOPE naming the scope it needs.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest

from signoff.auth.principal import ALL_SCOPES
from signoff.common.time import format_timestamp, utcnow
from signoff.context import AppContext
from signoff.middleware import PUBLIC_API_PATHS
from tests.conftest import Member, Org, approval_body, create_approval
from tests.oauth.support import bearer, grant, register_client

READ, WRITE, COMMENTS = "approvals:read", "approvals:write", "comments:write"
ANY = "any authenticated caller"
ADMIN_API_KEY = "admins with an API key"
PUBLIC = "no authentication"

# decisions.md section 11: GETs approvals:read; create, decide, cancel, steps and votes
# approvals:write; comments comments:write; delivery logs and test-webhook approvals:write.
SCOPE_TABLE: dict[tuple[str, str], str] = {
    ("GET", "/api/v1/me"): ANY,
    ("GET", "/api/v1/approvals"): READ,
    ("POST", "/api/v1/approvals"): WRITE,
    ("GET", "/api/v1/approvals/{}"): READ,
    ("PATCH", "/api/v1/approvals/{}"): WRITE,
    ("DELETE", "/api/v1/approvals/{}"): WRITE,
    ("GET", "/api/v1/approvals/{}/comments"): READ,
    ("POST", "/api/v1/approvals/{}/comments"): COMMENTS,
    ("GET", "/api/v1/approvals/{}/events"): READ,
    ("GET", "/api/v1/approvals/{}/steps"): READ,
    ("POST", "/api/v1/approvals/{}/steps"): WRITE,
    ("PATCH", "/api/v1/approvals/{}/steps/{}"): WRITE,
    ("GET", "/api/v1/webhooks"): WRITE,
    ("POST", "/api/v1/webhooks/{}/retry"): WRITE,
    ("POST", "/api/v1/test-webhook"): WRITE,
    ("GET", "/api/v1/emergency-stop"): READ,
    ("PUT", "/api/v1/emergency-stop"): WRITE,
    ("GET", "/api/v1/team/members"): READ,
    ("GET", "/api/v1/org/action-types"): READ,
    ("POST", "/api/v1/oauth-clients"): ADMIN_API_KEY,
    ("GET", "/api/v1/oauth-clients"): ADMIN_API_KEY,
    ("GET", "/api/v1/oauth-clients/{}"): ADMIN_API_KEY,
    ("DELETE", "/api/v1/oauth-clients/{}"): ADMIN_API_KEY,
    ("POST", "/api/v1/oauth/token"): PUBLIC,
    ("GET", "/api/v1/routing"): READ,
    ("PUT", "/api/v1/routing"): WRITE,
    ("GET", "/api/v1/policies"): READ,
    ("PUT", "/api/v1/policies"): WRITE,
    ("GET", "/api/v1/policies/versions"): READ,
    ("POST", "/api/v1/policies/versions/{}/restore"): WRITE,
    ("POST", "/api/v1/policies/dry-run"): WRITE,
    ("GET", "/api/v1/standing-approvals"): READ,
    ("DELETE", "/api/v1/standing-approvals/{}"): WRITE,
    ("GET", "/api/v1/groups"): READ,
    ("POST", "/api/v1/groups"): WRITE,
    ("GET", "/api/v1/groups/{}"): READ,
    ("PATCH", "/api/v1/groups/{}"): WRITE,
    ("DELETE", "/api/v1/groups/{}"): WRITE,
    ("PUT", "/api/v1/groups/{}/members"): WRITE,
    ("POST", "/api/v1/groups/{}/members"): WRITE,
    ("DELETE", "/api/v1/groups/{}/members/{}"): WRITE,
    ("GET", "/api/v1/audit/export"): READ,
    # The executor redeems the receipt of what it is about to do: a write.
    ("POST", "/api/v1/receipts/redeem"): WRITE,
    ("GET", "/api/v1/approvals/{}/notifications"): READ,
    ("POST", "/api/v1/connections/{}/transfer"): ADMIN_API_KEY,
    ("GET", "/api/v1/org/settings"): READ,
    # An OAuth token, however broad, cannot loosen four-eyes.
    ("PATCH", "/api/v1/org/settings"): ADMIN_API_KEY,
    ("GET", "/api/v1/me/delegation"): READ,
    ("PUT", "/api/v1/me/delegation"): WRITE,
    ("DELETE", "/api/v1/me/delegation"): WRITE,
}

DEPENDENCY_OF = {
    READ: "require_approvals_read",
    WRITE: "require_approvals_write",
    COMMENTS: "require_comments_write",
    ADMIN_API_KEY: "require_admin_api_key",
}


def _key(method: str, path: str) -> tuple[str, str]:
    return method, re.sub(r"\{[^}]*\}", "{}", path)


def api_routes(app: Any) -> Iterator[tuple[str, str, Any]]:
    """(method, path, route) of every /api/v1 endpoint, through included routers."""

    def walk(routes: list[Any]) -> Iterator[Any]:
        for route in routes:
            contexts = getattr(route, "effective_route_contexts", None)
            yield from contexts() if contexts else [route]

    for entry in walk(app.routes):
        route = getattr(entry, "original_route", entry)
        path = getattr(entry, "path", "")
        if not path.startswith("/api/v1/") or not hasattr(route, "dependant"):
            continue
        for method in sorted(route.methods - {"HEAD"}):
            yield method, path, route


def _dependency_names(dependant: Any) -> set[str]:
    names: set[str] = set()
    for dependency in dependant.dependencies:
        names.add(getattr(dependency.call, "__name__", ""))
        names |= _dependency_names(dependency)
    return names


async def test_every_api_route_declares_the_scope_of_the_table(app: Any) -> None:
    problems = []
    seen = 0
    for method, path, route in api_routes(app):
        seen += 1
        required = SCOPE_TABLE.get(_key(method, path))
        declared = _dependency_names(route.dependant) & set(DEPENDENCY_OF.values())
        if required is None:
            problems.append(f"{method} {path}: no line in SCOPE_TABLE (decisions.md 11)")
        elif required == PUBLIC:
            if path not in PUBLIC_API_PATHS:
                problems.append(f"{method} {path}: public in the table, guarded by middleware")
        elif required == ANY:
            if declared:
                problems.append(f"{method} {path}: open to any caller, but declares {declared}")
        elif declared != {DEPENDENCY_OF[required]}:
            problems.append(f"{method} {path}: needs {required}, declares {declared or 'nothing'}")
    assert seen >= 20
    assert not problems, "\n".join(problems)


# ---- calling every endpoint ----


@pytest.fixture
async def receiver() -> AsyncIterator[str]:
    """A callback receiver on loopback that answers 200 to everything."""

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        length = re.search(rb"(?i)content-length:\s*(\d+)", head)
        if length:
            await reader.readexactly(int(length.group(1)))
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        yield f"http://127.0.0.1:{port}/hook"


@dataclass
class Env:
    client: httpx.AsyncClient
    org: Org
    receiver: str

    @property
    def admin(self) -> Member:
        return self.org.admin

    async def pending(self) -> str:
        return str((await create_approval(self.client, self.admin))["id"])


Call = tuple[str, str, dict[str, Any] | None]
Builder = Callable[[Env], Awaitable[Call]]


async def _vote(env: Env) -> Call:
    rid = await env.pending()
    steps = await env.client.post(
        f"/api/v1/approvals/{rid}/steps",
        headers=env.admin.headers,
        json={"steps": [{"approver_id": env.admin.user_id, "step_order": 1}]},
    )
    assert steps.status_code == 201, steps.text
    step_id = steps.json()["data"][0]["id"]
    return "PATCH", f"/api/v1/approvals/{rid}/steps/{step_id}", {"decision": "approve"}


async def _retry(env: Env) -> Call:
    created = await create_approval(env.client, env.admin, callback_url=env.receiver)
    decided = await env.client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=env.admin.headers,
        json={"decision": "approve"},
    )
    assert decided.status_code == 200, decided.text
    log = await env.client.get(
        "/api/v1/webhooks", params={"request_id": created["id"]}, headers=env.admin.headers
    )
    assert log.status_code == 200 and log.json()["data"], log.text
    return "POST", f"/api/v1/webhooks/{log.json()['data'][0]['delivery_id']}/retry", None


async def _restore_policy(env: Env) -> Call:
    """A version to restore: saved by the admin's key first."""
    saved = await env.client.put("/api/v1/policies", json={"rules": []}, headers=env.admin.headers)
    return "POST", f"/api/v1/policies/versions/{saved.json()['version']}/restore", None


async def _revoke_standing(env: Env) -> Call:
    """A standing approval to revoke: granted by the admin's key beside an approval."""
    created = await create_approval(env.client, env.org.members[0], action_type="deploy.staging")
    decided = await env.client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=env.admin.headers,
        json={"decision": "approve", "standing": {"max_uses": 1}},
    )
    assert decided.status_code == 200, decided.text
    listed = await env.client.get("/api/v1/standing-approvals", headers=env.admin.headers)
    return "DELETE", f"/api/v1/standing-approvals/{listed.json()['data'][0]['id']}", None


async def _group_id(env: Env) -> str:
    """A fresh group of the org with a member, made by the admin's key."""
    created = await env.client.post(
        "/api/v1/groups",
        headers=env.admin.headers,
        json={"name": f"Matrix {uuid.uuid4()}", "member_ids": [env.admin.user_id]},
    )
    assert created.status_code == 201, created.text
    return str(created.json()["id"])


async def _on_group(env: Env, method: str, tail: str, body: dict[str, Any] | None) -> Call:
    return method, f"/api/v1/groups/{await _group_id(env)}{tail}", body


async def _redeem(env: Env) -> Call:
    created = await create_approval(env.client, env.admin, arguments={"replicas": 3})
    decided = await env.client.patch(
        f"/api/v1/approvals/{created['id']}",
        headers=env.admin.headers,
        json={"decision": "approve"},
    )
    # The decision only says a receipt was issued; the creator's read signs it.
    assert decided.status_code == 200 and decided.json()["receipt_issued"], decided.text
    read = await env.client.get(f"/api/v1/approvals/{created['id']}", headers=env.admin.headers)
    assert read.status_code == 200 and read.json()["receipt"], read.text
    return "POST", "/api/v1/receipts/redeem", {"receipt": read.json()["receipt"]}


async def _oauth_client_id(env: Env) -> str:
    created = await env.client.post(
        "/api/v1/oauth-clients",
        headers=env.admin.headers,
        json={"name": "Matrix", "redirect_uris": ["https://matrix.example/cb"]},
    )
    assert created.status_code == 201, created.text
    return str(created.json()["client_id"])


async def _with(env: Env, method: str, template: str, body: dict[str, Any] | None) -> Call:
    return method, template.format(rid=await env.pending()), body


BUILDERS: dict[tuple[str, str], Builder] = {
    ("GET", "/api/v1/me"): lambda env: _plain("GET", "/api/v1/me"),
    ("GET", "/api/v1/team/members"): lambda env: _plain("GET", "/api/v1/team/members"),
    ("GET", "/api/v1/org/action-types"): lambda env: _plain("GET", "/api/v1/org/action-types"),
    ("GET", "/api/v1/approvals"): lambda env: _plain("GET", "/api/v1/approvals"),
    ("POST", "/api/v1/approvals"): lambda env: _plain("POST", "/api/v1/approvals", approval_body()),
    ("GET", "/api/v1/approvals/{}"): lambda env: _with(env, "GET", "/api/v1/approvals/{rid}", None),
    ("PATCH", "/api/v1/approvals/{}"): lambda env: _with(
        env, "PATCH", "/api/v1/approvals/{rid}", {"decision": "approve"}
    ),
    ("DELETE", "/api/v1/approvals/{}"): lambda env: _with(
        env, "DELETE", "/api/v1/approvals/{rid}", None
    ),
    ("GET", "/api/v1/approvals/{}/comments"): lambda env: _with(
        env, "GET", "/api/v1/approvals/{rid}/comments", None
    ),
    ("POST", "/api/v1/approvals/{}/comments"): lambda env: _with(
        env, "POST", "/api/v1/approvals/{rid}/comments", {"body": "Looks fine."}
    ),
    ("GET", "/api/v1/approvals/{}/events"): lambda env: _with(
        env, "GET", "/api/v1/approvals/{rid}/events", None
    ),
    ("GET", "/api/v1/approvals/{}/steps"): lambda env: _with(
        env, "GET", "/api/v1/approvals/{rid}/steps", None
    ),
    ("POST", "/api/v1/approvals/{}/steps"): lambda env: _with(
        env,
        "POST",
        "/api/v1/approvals/{rid}/steps",
        {"steps": [{"approver_id": env.admin.user_id, "step_order": 1}]},
    ),
    ("PATCH", "/api/v1/approvals/{}/steps/{}"): _vote,
    ("GET", "/api/v1/webhooks"): lambda env: _plain("GET", "/api/v1/webhooks?limit=5"),
    ("POST", "/api/v1/webhooks/{}/retry"): _retry,
    ("POST", "/api/v1/test-webhook"): lambda env: _plain(
        "POST", "/api/v1/test-webhook", {"url": env.receiver}
    ),
    ("GET", "/api/v1/emergency-stop"): lambda env: _plain("GET", "/api/v1/emergency-stop"),
    ("PUT", "/api/v1/emergency-stop"): lambda env: _plain(
        "PUT", "/api/v1/emergency-stop", {"active": False}
    ),
    ("POST", "/api/v1/oauth-clients"): lambda env: _plain(
        "POST",
        "/api/v1/oauth-clients",
        {"name": "Matrix", "redirect_uris": ["https://matrix.example/cb"]},
    ),
    ("GET", "/api/v1/oauth-clients"): lambda env: _plain("GET", "/api/v1/oauth-clients"),
    ("GET", "/api/v1/oauth-clients/{}"): lambda env: _client_call(env, "GET"),
    ("DELETE", "/api/v1/oauth-clients/{}"): lambda env: _client_call(env, "DELETE"),
    ("GET", "/api/v1/routing"): lambda env: _plain("GET", "/api/v1/routing"),
    ("GET", "/api/v1/audit/export"): lambda env: _plain("GET", "/api/v1/audit/export"),
    ("PUT", "/api/v1/routing"): lambda env: _plain(
        "PUT", "/api/v1/routing", {"channels": {}, "rules": []}
    ),
    ("GET", "/api/v1/policies"): lambda env: _plain("GET", "/api/v1/policies"),
    ("PUT", "/api/v1/policies"): lambda env: _plain("PUT", "/api/v1/policies", {"rules": []}),
    ("GET", "/api/v1/policies/versions"): lambda env: _plain("GET", "/api/v1/policies/versions"),
    ("POST", "/api/v1/policies/versions/{}/restore"): _restore_policy,
    ("POST", "/api/v1/policies/dry-run"): lambda env: _plain(
        "POST", "/api/v1/policies/dry-run", {"rules": [], "days": 1}
    ),
    ("GET", "/api/v1/standing-approvals"): lambda env: _plain("GET", "/api/v1/standing-approvals"),
    ("DELETE", "/api/v1/standing-approvals/{}"): _revoke_standing,
    ("GET", "/api/v1/groups"): lambda env: _plain("GET", "/api/v1/groups"),
    ("POST", "/api/v1/groups"): lambda env: _plain(
        "POST", "/api/v1/groups", {"name": f"Matrix {uuid.uuid4()}"}
    ),
    ("GET", "/api/v1/groups/{}"): lambda env: _on_group(env, "GET", "", None),
    ("PATCH", "/api/v1/groups/{}"): lambda env: _on_group(
        env, "PATCH", "", {"name": f"Matrix {uuid.uuid4()}"}
    ),
    ("DELETE", "/api/v1/groups/{}"): lambda env: _on_group(env, "DELETE", "", None),
    ("PUT", "/api/v1/groups/{}/members"): lambda env: _on_group(
        env, "PUT", "/members", {"user_ids": [env.admin.user_id]}
    ),
    ("POST", "/api/v1/groups/{}/members"): lambda env: _on_group(
        env, "POST", "/members", {"user_id": env.org.members[0].user_id}
    ),
    ("DELETE", "/api/v1/groups/{}/members/{}"): lambda env: _on_group(
        env, "DELETE", f"/members/{env.admin.user_id}", None
    ),
    ("POST", "/api/v1/receipts/redeem"): _redeem,
    ("GET", "/api/v1/approvals/{}/notifications"): lambda env: _with(
        env, "GET", "/api/v1/approvals/{rid}/notifications", None
    ),
    ("POST", "/api/v1/connections/{}/transfer"): lambda env: _plain(
        "POST",
        f"/api/v1/connections/{env.org.members[-1].connection_id}/transfer",
        {"owner_id": env.admin.user_id},
    ),
    ("GET", "/api/v1/org/settings"): lambda env: _plain("GET", "/api/v1/org/settings"),
    ("PATCH", "/api/v1/org/settings"): lambda env: _plain(
        "PATCH", "/api/v1/org/settings", {"self_approval": "allow"}
    ),
    ("GET", "/api/v1/me/delegation"): lambda env: _plain("GET", "/api/v1/me/delegation"),
    ("PUT", "/api/v1/me/delegation"): lambda env: _plain(
        "PUT",
        "/api/v1/me/delegation",
        {
            "away_until": format_timestamp(utcnow() + timedelta(days=7)),
            "delegate_id": env.org.members[-1].user_id,
        },
    ),
    ("DELETE", "/api/v1/me/delegation"): lambda env: _plain("DELETE", "/api/v1/me/delegation"),
}


async def _plain(method: str, url: str, body: dict[str, Any] | None = None) -> Call:
    return method, url, body


async def _client_call(env: Env, method: str) -> Call:
    return method, f"/api/v1/oauth-clients/{await _oauth_client_id(env)}", None


SCOPE_SETS: dict[str, tuple[str, ...]] = {
    "none": (),
    "read": (READ,),
    "write": (WRITE,),
    "comments": (COMMENTS,),
    "read+write": (READ, WRITE),
    "read+comments": (READ, COMMENTS),
    "all": ALL_SCOPES,
}


@pytest.mark.parametrize("granted", [*SCOPE_SETS, "api key"])
async def test_every_endpoint_answers_as_its_scope_says(
    app: Any,
    client: httpx.AsyncClient,
    ctx: AppContext,
    org: Org,
    receiver: str,
    granted: str,
) -> None:
    env = Env(client, org, receiver)
    if granted == "api key":
        headers, scopes, method_ = org.admin.headers, ALL_SCOPES, "api_key"
    else:
        registered = await register_client(ctx, org.admin)
        tokens = await grant(ctx, registered, org.admin, SCOPE_SETS[granted])
        headers, scopes, method_ = bearer(tokens["access_token"]), SCOPE_SETS[granted], "oauth"

    problems: list[str] = []
    called = 0
    for method, path, _ in api_routes(app):
        key = _key(method, path)
        required = SCOPE_TABLE.get(key)
        if required in (None, PUBLIC):
            continue  # a missing line fails the test above
        builder = BUILDERS.get(key)
        if builder is None:
            problems.append(f"{method} {path}: no request builder in BUILDERS")
            continue
        verb, url, body = await builder(env)
        answer = await client.request(verb, url, headers=headers, json=body)
        called += 1
        if required == ADMIN_API_KEY and method_ == "oauth":
            expected = "403 FORBIDDEN"
            ok = answer.status_code == 403 and answer.json()["error"]["code"] == "FORBIDDEN"
        elif required in (ANY, ADMIN_API_KEY) or required in scopes:
            expected = "2xx"
            ok = 200 <= answer.status_code < 300
        else:
            expected = f"403 INSUFFICIENT_SCOPE {required}"
            ok = answer.status_code == 403 and answer.json()["error"] == {
                "code": "INSUFFICIENT_SCOPE",
                "message": f"This call needs the scope {required}.",
                "details": {"required_scope": required},
            }
        if not ok:
            problems.append(
                f"{verb} {url}: expected {expected}, got {answer.status_code} {answer.text}"
            )
    assert called >= 18
    assert not problems, "\n".join(problems)
