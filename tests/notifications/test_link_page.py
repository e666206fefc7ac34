"""The one-click confirmation page: the product's layout, whose vote it records, the
metadata under its own heading, and once the link is spent, what was decided, by whom
and when, for the organization's members only."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from signoff.app import create_app
from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.dashboard.support import browser_client, signed_in
from tests.notifications.support import MailBox

pytestmark = pytest.mark.anyio

MAIL_TO_MEMBER1 = {
    "channels": {"mail": {"type": "email"}},
    "rules": [{"channels": ["mail"], "audience": {"users": ["member1@acme.example"]}}],
}
METADATA = {"repo": "acme/billing", "sha": "9f2c1e7"}


@pytest.fixture
async def app(ctx: AppContext, wiring: Wiring) -> AsyncIterator[Any]:
    """The app without its background loops: the tests run the sender's rounds."""
    application = create_app(ctx.settings, wiring=wiring, background=False)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def api(app: Any) -> AsyncIterator[httpx.AsyncClient]:
    async with browser_client(app) as http:
        yield http


async def mailed_link(
    api: httpx.AsyncClient,
    wiring: Wiring,
    org: Org,
    mailbox: MailBox,
    **request: Any,
) -> tuple[str, dict[str, Any]]:
    """A request mailed to member1, and the path of the mail's Approve link."""
    routed = await api.put("/api/v1/routing", json=MAIL_TO_MEMBER1, headers=org.admin.headers)
    assert routed.status_code == 200, routed.text
    created = await create_approval(api, org.member, metadata=METADATA, **request)
    await wiring.notifications.run_once()
    return urlsplit(mailbox.mails[-1].link("Approve")).path, created


def section(html: str, css_class: str) -> str:
    found = re.search(rf'<section class="{css_class}".*?</section>', html, re.S)
    assert found, f"no {css_class} on the page"
    return found.group(0)


async def test_the_page_says_whose_vote_and_nests_the_metadata(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    path, _ = await mailed_link(api, wiring, org, mailbox)
    page = await api.get(path)
    assert page.status_code == 200
    html = page.text
    # The product's layout for a visitor who is not signed in: the bar, a way to sign in.
    assert 'class="topbar topbar-guest"' in html and "Sign in</a>" in html
    assert 'aria-label="Main"' not in html
    voter = org.members[0]
    assert re.search(
        rf"Confirming records the vote of <strong>{voter.name}</strong>\s*"
        rf'<span class="muted">\({voter.email}\)</span>',
        html,
    )
    metadata = section(html, "link-metadata")
    assert ">Metadata</h3>" in metadata
    for key, value in METADATA.items():
        assert f"<dt>{key}</dt><dd>{value}</dd>" in metadata
    facts = re.search(r'<dl class="facts">.*?</dl>', html, re.S)
    assert facts and "repo" not in facts.group(0)
    assert html.index('class="link-metadata"') < html.index('class="decide-confirm"')


async def test_signed_in_the_vote_is_the_signed_in_person_s(
    app: Any, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with browser_client(app) as api:
        path, _ = await mailed_link(api, wiring, org, mailbox)
        await signed_in(ctx, api, org.members[0])
        page = await api.get(path)
    assert page.status_code == 200
    assert f"the vote of <strong>{org.members[0].name}</strong>" in page.text
    assert 'aria-label="Main"' in page.text  # the signed-in navigation


async def test_a_used_link_tells_members_what_was_decided_by_whom_and_when(
    app: Any, ctx: AppContext, wiring: Wiring, org: Org, other_org: Org, mailbox: MailBox
) -> None:
    async with browser_client(app) as anonymous:
        path, created = await mailed_link(anonymous, wiring, org, mailbox, title="Rotate keys")
        done = await anonymous.post(path)
        assert done.status_code == 200 and "You approved this request" in done.text
        assert f"Recorded as the vote of <strong>{org.members[0].name}</strong>" in done.text
        read = await anonymous.get(f"/api/v1/approvals/{created['id']}", headers=org.admin.headers)
        decided_at = read.json()["decided_at"]

        # Anybody else with the link: a neutral word, nothing of the request.
        spent = await anonymous.get(path)
        assert spent.status_code == 410
        assert "This link has been used" in spent.text and "Sign in" in spent.text
        for secret in ("Rotate keys", "acme/billing", org.members[0].name, "data-outcome"):
            assert secret not in spent.text

    async with browser_client(app) as stranger:
        await signed_in(ctx, stranger, other_org.admin)
        page = await stranger.get(path)
        assert page.status_code == 410 and "This link has been used" in page.text
        assert "Rotate keys" not in page.text and "data-outcome" not in page.text

    async with browser_client(app) as colleague:
        await signed_in(ctx, colleague, org.members[2])
        page = await colleague.get(path)
    assert page.status_code == 410 and "Rotate keys" in page.text
    outcome = re.search(r"<div class=\"link-outcome\" data-outcome>(.*?)</div>", page.text, re.S)
    assert outcome, page.text
    assert "Approved</span>" in outcome.group(1)
    assert f"by <strong>{org.members[0].name}</strong>" in outcome.group(1)
    assert f'<time datetime="{decided_at[:19]}Z"' in outcome.group(1)
    assert "This link to approve was used on <time" in page.text


async def test_a_request_decided_elsewhere_shows_its_outcome_to_members_only(
    app: Any, ctx: AppContext, wiring: Wiring, org: Org, mailbox: MailBox
) -> None:
    async with browser_client(app) as anonymous:
        path, created = await mailed_link(anonymous, wiring, org, mailbox, title="Rotate keys")
        rejected = await anonymous.patch(
            f"/api/v1/approvals/{created['id']}",
            json={"decision": "reject"},
            headers=org.admin.headers,
        )
        assert rejected.status_code == 200, rejected.text
        page = await anonymous.get(path)
        assert page.status_code == 409 and "no longer waiting for a decision" in page.text
        assert "Rotate keys" not in page.text and "data-outcome" not in page.text

        await signed_in(ctx, anonymous, org.members[1])
        page = await anonymous.get(path)
    assert page.status_code == 409 and "Rotate keys" in page.text
    assert "Rejected</span>" in page.text
    assert f"by <strong>{org.admin.name}</strong>" in page.text
