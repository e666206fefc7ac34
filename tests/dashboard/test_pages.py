"""The dashboard over HTTP: first run, sign-in, CSRF, throttling, deciding without
JavaScript, conflicts, the history and the account, on SQLite and PostgreSQL."""

from __future__ import annotations

import csv
import io
import re
import uuid
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from signoff.common.time import utcnow
from signoff.context import AppContext
from signoff.dashboard import service as dashboard_service
from signoff.dashboard.web import CONTENT_SECURITY_POLICY
from signoff.models import User
from tests.conftest import Org, create_approval, create_org
from tests.dashboard.support import browser_client, csrf_of, post_form, sign_in, signed_in
from tests.helpers import NO_SWEEP
from tests.oauth.support import PASSWORD, authorize_params, pkce_pair, register_client


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return NO_SWEEP


# ---- first run ----


async def test_first_run_setup_link_creates_the_org_and_admin_once(
    ctx: AppContext, client: httpx.AsyncClient
) -> None:
    async with ctx.transaction() as uow:
        token = await dashboard_service.issue_setup_token(uow.orgs, utcnow())
    assert token
    assert (await client.get("/setup/not-the-token")).status_code == 404
    page = await client.get(f"/setup/{token}")
    assert page.status_code == 200 and "Set up your organization" in page.text

    short = await client.post(
        f"/setup/{token}",
        data={"org_name": "Acme", "name": "Ada", "email": "ada@acme.example", "password": "x"},
    )
    assert short.status_code == 400 and "at least 8 characters" in short.text

    done = await client.post(
        f"/setup/{token}",
        data={
            "org_name": "Acme",
            "name": "Ada Lovelace",
            "email": "Ada@Acme.example",
            "password": PASSWORD,
        },
    )
    assert done.status_code == 303 and done.headers["location"] == "/"
    inbox = await client.get("/")
    assert inbox.status_code == 200 and "Ada Lovelace" in inbox.text and "admin" in inbox.text

    # The link stops working, and no new one is issued once an org exists.
    used = await client.get(f"/setup/{token}")
    assert used.status_code == 409 and "Already set up" in used.text
    again = await client.post(
        f"/setup/{token}",
        data={"org_name": "Evil", "name": "E", "email": "e@evil.example", "password": PASSWORD},
    )
    assert again.status_code == 409 and "Already set up" in again.text
    async with ctx.transaction() as uow:
        assert await dashboard_service.issue_setup_token(uow.orgs, utcnow()) is None
        assert [org.name for org in await uow.orgs.list_orgs()] == ["Acme"]

    # The admin signs in again with the password they chose.
    other = browser_client(client._transport.app)  # type: ignore[attr-defined]
    async with other:
        assert (await sign_in(other, "ada@acme.example")).status_code == 303


async def test_a_setup_link_is_refused_once_an_org_exists(
    ctx: AppContext, client: httpx.AsyncClient
) -> None:
    async with ctx.transaction() as uow:
        token = await dashboard_service.issue_setup_token(uow.orgs, utcnow())
    assert token
    await create_org(ctx, "Cli", members=0)
    refused = await client.get(f"/setup/{token}")
    assert refused.status_code == 409 and "Already set up" in refused.text


# ---- sign-in ----


async def test_sign_in_and_out(ctx: AppContext, client: httpx.AsyncClient, org: Org) -> None:
    assert (await client.get("/")).headers["location"] == "/signin?next=%2F"
    signin = await client.get("/signin")
    assert "Email" in signin.text and "Password" in signin.text and "Sign in" in signin.text

    await signed_in(ctx, client, org.member)
    cookie = next(
        h for h in client.cookies.jar if h.name == "signoff_session"
    )  # the one session system of the OAuth pages
    assert cookie.has_nonstandard_attr("HttpOnly")
    inbox = await client.get("/")
    assert inbox.status_code == 200 and org.member.name in inbox.text

    signout = await client.post("/signout", data={"csrf_token": csrf_of(inbox.text)})
    assert signout.status_code == 303
    assert (await client.get("/")).status_code == 303


async def test_wrong_password_and_unknown_email_are_refused_alike(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    from tests.oauth.support import give_password

    await give_password(ctx, org.member)
    wrong = await sign_in(client, org.member.email, "not the password")
    unknown = await sign_in(client, "nobody@acme.example")
    assert wrong.status_code == unknown.status_code == 401
    assert "Wrong email or password." in wrong.text and "Wrong email or password." in unknown.text


async def test_session_cookie_attributes(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    from tests.oauth.support import give_password

    await give_password(ctx, org.member)
    response = await sign_in(client, org.member.email)
    header = next(
        v for k, v in response.headers.multi_items() if k == "set-cookie" and "session" in v
    )
    assert "HttpOnly" in header and "SameSite=lax" in header and "Path=/" in header


async def test_signing_in_on_the_dashboard_signs_in_the_oauth_pages(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await signed_in(ctx, client, org.admin)
    oauth_client = await register_client(ctx, org.admin)
    _, challenge = pkce_pair()
    consent = await client.get("/oauth/authorize", params=authorize_params(oauth_client, challenge))
    assert consent.status_code == 200
    assert org.admin.email in consent.text and 'name="decision"' in consent.text


async def test_forms_without_the_csrf_token_are_refused(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin)
    await signed_in(ctx, client, org.member)
    refused = await client.post(f"/requests/{request['id']}/decision", data={"decision": "approve"})
    assert refused.status_code == 403 and "Form expired" in refused.text
    forged = await client.post(
        f"/requests/{request['id']}/decision",
        data={"decision": "approve", "csrf_token": "forged"},
    )
    assert forged.status_code == 403
    comment = await client.post(f"/requests/{request['id']}/comments", data={"body": "hi"})
    assert comment.status_code == 403
    read = await client.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "pending" and read.json()["comments_count"] == 0
    # Signing in needs the anonymous session's token too (no login CSRF).
    other = browser_client(client._transport.app)  # type: ignore[attr-defined]
    async with other:
        blind = await other.post("/signin", data={"email": org.member.email, "password": PASSWORD})
        assert blind.status_code == 403


@pytest.mark.parametrize("settings_overrides", [{**NO_SWEEP, "login_attempts_per_hour": 3}])
async def test_sign_in_is_throttled_per_address_and_per_account(
    ctx: AppContext, app: Any, org: Org
) -> None:
    from tests.oauth.support import give_password

    await give_password(ctx, org.member)
    await give_password(ctx, org.admin)
    async with browser_client(app, "198.51.100.1") as first:
        for _ in range(3):
            assert (await sign_in(first, org.member.email, "wrong")).status_code == 401
        # The right password no longer helps from this address ...
        assert (await sign_in(first, org.admin.email)).status_code == 429
    # ... nor for this account from another address.
    async with browser_client(app, "198.51.100.2") as second:
        assert (await sign_in(second, org.member.email)).status_code == 429
        # Another account from a fresh address signs in.
        assert (await sign_in(second, org.admin.email)).status_code == 303


async def test_a_deactivated_users_sessions_end_at_once(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await signed_in(ctx, client, org.member)
    assert (await client.get("/")).status_code == 200
    async with ctx.transaction() as uow:
        await uow.session.execute(
            update(User)
            .where(User.id == uuid.UUID(org.member.user_id))
            .values(deactivated_at=utcnow())
        )
    assert (await client.get("/")).status_code == 303
    assert (await sign_in(client, org.member.email)).status_code == 401


async def test_pages_carry_strict_headers_and_static_files_are_cached(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await signed_in(ctx, client, org.member)
    page = await client.get("/")
    assert page.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY
    assert "frame-ancestors 'none'" in CONTENT_SECURITY_POLICY
    assert "unsafe-inline" not in CONTENT_SECURITY_POLICY
    assert page.headers["x-frame-options"] == "DENY"
    assert "<script>" not in page.text and " style=" not in page.text
    for url in re.findall(r'(?:href|src)="(/static/[^"]+)"', page.text):
        asset = await client.get(url)
        assert asset.status_code == 200
        assert "immutable" in asset.headers["cache-control"]
    assert (await client.get("/static/nothing.css")).status_code == 404


# ---- the inbox ----


async def test_inbox_lists_what_waits_for_me_most_urgent_first(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    low = await create_approval(client, org.admin, title="Low one", priority="low")
    critical = await create_approval(client, org.admin, title="Critical one", priority="critical")
    high_old = await create_approval(client, org.admin, title="High, older", priority="high")
    high_new = await create_approval(client, org.admin, title="High, newer", priority="high")
    voted = await create_approval(client, org.admin, title="Voted already", required_approvals=2)
    await client.patch(
        f"/api/v1/approvals/{voted['id']}",
        json={"decision": "approve"},
        headers=org.member.headers,
    )
    await signed_in(ctx, client, org.member)
    page = await client.get("/")
    titles = re.findall(r'class="row-link" href="/requests/[^"]+">([^<]+)</a>', page.text)
    assert titles == ["Critical one", "High, older", "High, newer", "Low one"]
    assert "<title>(4) Inbox" in page.text
    assert "1 of 2" not in page.text
    rows = await client.get("/inbox/rows", params={"priority": "high"})
    assert re.findall(r'class="row-link"[^>]*>([^<]+)<', rows.text) == [
        "High, older",
        "High, newer",
    ]
    found = await client.get("/", params={"search": "critical"})
    assert re.findall(r'class="row-link"[^>]*>([^<]+)<', found.text) == ["Critical one"]
    _ = (low, critical, high_old, high_new)


async def test_inbox_rows_show_the_facts_of_each_request(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await create_approval(
        client,
        org.admin,
        title="Refund <b>order</b>",
        source="zendesk",
        action_type="payments.refund",
        required_approvals=3,
        expires_at="2099-01-01T00:00:00Z",
    )
    await signed_in(ctx, client, org.member)
    page = (await client.get("/")).text
    assert "Refund &lt;b&gt;order&lt;/b&gt;" in page  # escaped, never HTML
    for shown in ("zendesk", "payments.refund", "0 of 3", "High"):
        assert shown in page


async def test_sequential_chain_reaches_each_approver_in_turn(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin, title="Chain", is_sequential=True)
    steps = [
        {"approver_id": member.user_id, "step_order": index + 1}
        for index, member in enumerate(org.members[:2])
    ]
    configured = await client.post(
        f"/api/v1/approvals/{request['id']}/steps", json={"steps": steps}, headers=org.admin.headers
    )
    assert configured.status_code == 201
    first, second = org.members[0], org.members[1]
    async with browser_client(client._transport.app) as http2:  # type: ignore[attr-defined]
        await signed_in(ctx, client, first)
        await signed_in(ctx, http2, second)
        assert "Chain" in (await client.get("/")).text
        assert "Chain" not in (await http2.get("/")).text
        decided = await post_form(
            client,
            f"/requests/{request['id']}",
            f"/requests/{request['id']}/decision",
            decision="approve",
        )
        assert decided.status_code == 303
        assert "Chain" not in (await client.get("/")).text
        assert "Chain" in (await http2.get("/")).text


# ---- the request page and deciding ----


async def test_request_page_shows_everything_in_order(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(
        client,
        org.admin,
        description="Line one\nLine <two>",
        metadata={"repo": "acme/api", "deploy": {"regions": ["eu", "us"]}},
        source="ci",
        action_type="deploy.production",
    )
    await signed_in(ctx, client, org.member)
    page = (await client.get(f"/requests/{request['id']}")).text
    assert "Line one\nLine &lt;two&gt;" in page
    order = [
        "request-title",
        "Line one",
        "Requested by",
        "Created",
        "Expires",
        "Metadata",
        "acme/api",
        "Votes",
        "Comments",
        "Activity",
        "Callback",
        ">Approve<",
        ">Reject<",
    ]
    positions = [page.index(marker) for marker in order]
    assert positions == sorted(positions)
    assert "Pending" in page and "conn-0" in page
    assert re.search(r'<span class="field-label">Comment</span>\s*<textarea', page)


async def test_decide_without_javascript_post_redirect_get(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin)
    await signed_in(ctx, client, org.member)
    url = f"/requests/{request['id']}"
    decided = await post_form(
        client, url, f"{url}/decision", decision="approve", comment="Looks good\nto me"
    )
    assert decided.status_code == 303 and decided.headers["location"] == url
    page = (await client.get(url)).text
    assert "You approved this request." in page
    assert "Approved" in page and org.member.name in page and "Looks good\nto me" in page
    read = (
        await client.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
    ).json()
    assert read["status"] == "approved"
    assert read["decided_by"] == org.member.user_id
    assert read["decision_comment"] == "Looks good\nto me"
    events = await client.get(
        f"/api/v1/approvals/{request['id']}/events", headers=org.admin.headers
    )
    assert "request.approved" in [e["type"] for e in events.json()["data"]]


async def test_reject_and_count_based_votes(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin, required_approvals=2)
    url = f"/requests/{request['id']}"
    await signed_in(ctx, client, org.member)
    voted = await post_form(client, url, f"{url}/decision", decision="approve")
    assert voted.status_code == 303
    page = (await client.get(url)).text
    assert "Your vote is recorded." in page and "1 of 2" in page and "Pending" in page
    assert "You approved this request. It needs 1 more approval." in page
    async with browser_client(client._transport.app) as other:  # type: ignore[attr-defined]
        await signed_in(ctx, other, org.members[1])
        rejected = await post_form(other, url, f"{url}/decision", decision="reject")
        assert rejected.status_code == 303
        assert "Rejected" in (await other.get(url)).text
    read = await client.get(f"/api/v1/approvals/{request['id']}", headers=org.admin.headers)
    assert read.json()["status"] == "rejected"


async def test_someone_else_decided_meanwhile(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin)
    url = f"/requests/{request['id']}"
    await signed_in(ctx, client, org.member)
    page = await client.get(url)  # the form is on screen ...
    other = org.members[1]
    patched = await client.patch(
        f"/api/v1/approvals/{request['id']}", json={"decision": "reject"}, headers=other.headers
    )
    assert patched.json()["status"] == "rejected"
    late = await client.post(
        f"{url}/decision", data={"csrf_token": csrf_of(page.text), "decision": "approve"}
    )  # ... and is sent after the other decision
    assert late.status_code == 303 and late.headers["location"] == url
    shown = await client.get(url)
    assert shown.status_code == 200
    assert "Someone decided this request before you." in shown.text
    assert f"by {other.name}" in shown.text and "Rejected" in shown.text


async def test_comments_are_added_as_plain_text(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin)
    url = f"/requests/{request['id']}"
    await signed_in(ctx, client, org.member)
    added = await post_form(client, url, f"{url}/comments", body="<script>x</script> ok")
    assert added.status_code == 303
    page = (await client.get(url)).text
    assert "&lt;script&gt;x&lt;/script&gt; ok" in page
    listed = await client.get(
        f"/api/v1/approvals/{request['id']}/comments", headers=org.admin.headers
    )
    assert [c["body"] for c in listed.json()["data"]] == ["<script>x</script> ok"]


async def test_emergency_stop_blocks_dashboard_decisions(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    request = await create_approval(client, org.admin)
    async with ctx.transaction() as uow:
        await uow.orgs.set_emergency_stop(uuid.UUID(org.id), True)
    await signed_in(ctx, client, org.member)
    url = f"/requests/{request['id']}"
    refused = await post_form(client, url, f"{url}/decision", decision="approve")
    assert refused.status_code == 303
    page = (await client.get(url)).text
    assert "emergency stop is on" in page.lower() and "Pending" in page


# ---- history and account ----


async def test_history_filters_and_csv_export(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    approved = await create_approval(client, org.admin, title="=cmd approved", priority="low")
    rejected = await create_approval(client, org.admin, title="Rejected one")
    await create_approval(client, org.admin, title="Still pending")
    for item, decision in ((approved, "approve"), (rejected, "reject")):
        await client.patch(
            f"/api/v1/approvals/{item['id']}",
            json={"decision": decision},
            headers=org.member.headers,
        )
    await signed_in(ctx, client, org.member)
    page = (await client.get("/history")).text
    assert "=cmd approved" in page and "Rejected one" in page and "Still pending" not in page
    only = (await client.get("/history", params={"status": "rejected"})).text
    assert "Rejected one" in only and "=cmd approved" not in only
    exported = await client.get("/history.csv", params={"priority": "low"})
    assert exported.headers["content-type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(exported.text)))
    assert [(r["title"], r["status"]) for r in rows] == [("'=cmd approved", "approved")]


async def test_history_of_a_search_past_its_bound_says_so(
    ctx: AppContext, client: httpx.AsyncClient, org: Org, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search's count stops one past a bound (``SEARCH_RANKED_UP_TO``, lowered here to a
    page's 25): the history's pagination says "25+", as the inbox says "1,000+", never the
    count's internal figure (26), and still offers the next page."""
    from signoff.approvals import listing
    from signoff.approvals.listing import paging

    monkeypatch.setattr(paging, "SEARCH_RANKED_UP_TO", 25)
    listing.page_queries.cache_clear()
    try:
        for i in range(27):
            made = await create_approval(client, org.admin, title=f"Firewall change {i}")
            cancelled = await client.delete(
                f"/api/v1/approvals/{made['id']}", headers=org.admin.headers
            )
            assert cancelled.status_code == 200
        await signed_in(ctx, client, org.member)
        page = (await client.get("/history", params={"search": "firewall"})).text
        assert "1–25 of 25+" in page and 'rel="next"' in page  # noqa: RUF001 - the page's dash
        assert "of 26" not in page and "of 27" not in page
    finally:
        listing.page_queries.cache_clear()


async def test_account_password_change_and_authorizations(
    ctx: AppContext, client: httpx.AsyncClient, org: Org
) -> None:
    await signed_in(ctx, client, org.admin)
    wrong = await post_form(
        client, "/account", "/account/password", current_password="nope", new_password="x" * 12
    )
    assert wrong.status_code == 303
    assert "is not correct" in (await client.get("/account")).text
    changed = await post_form(
        client,
        "/account",
        "/account/password",
        current_password=PASSWORD,
        new_password="a brand new password",
    )
    assert changed.status_code == 303
    assert (await client.get("/account")).status_code == 200  # this session stays
    async with browser_client(client._transport.app) as other:  # type: ignore[attr-defined]
        assert (await sign_in(other, org.admin.email)).status_code == 401
        assert (await sign_in(other, org.admin.email, "a brand new password")).status_code == 303

    from tests.oauth.support import grant

    oauth_client = await register_client(ctx, org.admin, name="Zap Studio")
    tokens = await grant(ctx, oauth_client, org.admin)
    page = (await client.get("/account")).text
    assert "Zap Studio" in page
    revoked = await post_form(
        client,
        "/account",
        f"/account/authorizations/{oauth_client.client_id}/revoke",
    )
    assert revoked.status_code == 303
    assert (
        "Zap Studio" not in (await client.get("/account")).text.split("Authorized applications")[1]
    )
    api = await client.get(
        "/api/v1/approvals", headers={"Authorization": f"Bearer {tokens['access_token']}"}
    )
    assert api.status_code == 401


async def test_pages_stay_light(ctx: AppContext, client: httpx.AsyncClient, org: Org) -> None:
    """No page over 100 KB before compression (HTML, CSS and script), user data aside."""
    request = await create_approval(client, org.admin, title="t", description="d")
    await signed_in(ctx, client, org.member)
    for url in ("/", f"/requests/{request['id']}", "/history", "/account"):
        page = await client.get(url)
        assert page.status_code == 200
        size = len(page.content)
        for asset in re.findall(r'(?:href|src)="(/static/[^"]+)"', page.text):
            size += len((await client.get(asset)).content)
        assert size < 100_000, (url, size)


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (42, "42 s"),
        (5 * 60, "5 min"),
        (4 * 3600 + 38 * 60, "4 h 38 min"),
        (2 * 86400 + 5 * 3600, "2 d 5 h"),
        (40 * 86400, "40 d"),
        (72 * 365 * 86400 + 3 * 86400, "72 y"),
    ],
)
def test_time_left_reads_as_a_person_would_say_it(seconds: int, words: str) -> None:
    """An expiry countdown: a deadline decades away reads in years, not as "26334 d"."""
    from signoff.dashboard.web import _duration

    assert _duration(seconds) == words
