"""The routing page's form editor over HTTP, as a browser without script submits it:
channels and rules as rows, the Admin tabs, problems on the rows they are about, masked
secrets kept (renames too), the parts the form does not edit kept, and the warning of an
e-mail channel without an SMTP server."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

import httpx
import pytest

from signoff.context import AppContext
from tests.conftest import Org
from tests.dashboard.support import signed_in

pytestmark = pytest.mark.anyio

PAGE = "/settings/notifications"
SLACK = "https://hooks.slack.example/services/T0/B0/secretsecretsecret"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def settings_overrides() -> dict[str, Any]:
    return {}  # no SMTP server: e-mail channels are saved with a warning


class _Fields(HTMLParser):
    """The fields the editor's form submits as they stand: text inputs, ticked boxes,
    chosen options and textareas (what a browser sends, without the button)."""

    def __init__(self, action: str) -> None:
        super().__init__()
        self.action = action
        self.inside = False
        self.fields: dict[str, str] = {}
        self.boxes: list[str] = []  # every checkbox's name, ticked or not
        self.select: str | None = None
        self.first_option: str | None = None
        self.textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if tag == "form":
            self.inside = values.get("action") == self.action and not self.fields
        if not self.inside:
            return
        name = values.get("name")
        if tag == "input" and name:
            if values.get("type") == "checkbox":
                self.boxes.append(name)
                if "checked" in values:
                    self.fields[name] = values.get("value") or "on"
            else:
                self.fields[name] = values.get("value", "")
        elif tag == "select":
            self.select, self.first_option = name, None
        elif tag == "option" and self.select:
            if self.first_option is None:
                self.first_option = values.get("value", "")
                self.fields[self.select] = self.first_option
            if "selected" in values:
                self.fields[self.select] = values.get("value", "")
        elif tag == "textarea" and name:
            self.textarea = name
            self.fields[name] = ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False
        elif tag == "select":
            self.select = None
        elif tag == "textarea":
            self.textarea = None

    def handle_data(self, data: str) -> None:
        if self.inside and self.textarea:
            self.fields[self.textarea] += data


def editor_of(html: str) -> _Fields:
    parser = _Fields(PAGE)
    parser.feed(html)
    assert "channel_count" in parser.fields, "no form editor on the page"
    return parser


async def submit(api: httpx.AsyncClient, **changes: str | None) -> httpx.Response:
    """Opens the page, changes fields (None: unticks a box), and saves the rows."""
    page = await api.get(PAGE)
    assert page.status_code == 200, page.text
    fields = editor_of(page.text).fields
    for name, value in changes.items():
        if value is None:
            fields.pop(name, None)
        else:
            fields[name] = value
    return await api.post(PAGE, data=fields)


async def routing(api: httpx.AsyncClient, org: Org) -> dict[str, Any]:
    answer = await api.get("/api/v1/routing", headers=org.admin.headers)
    assert answer.status_code == 200
    return dict(answer.json())


async def test_the_page_keeps_the_admin_tabs(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, api, org.admin)
    page = await api.get(PAGE)
    assert '<nav class="admin-tabs" aria-label="Admin">' in page.text
    for tab in ("/admin/connections", "/admin/users", "/admin/audit", "/admin/emergency-stop"):
        assert f'href="{tab}"' in page.text
    assert f'<a href="{PAGE}" aria-current="page">Notifications</a>' in page.text


async def test_channels_and_rules_are_added_as_rows_and_saved_like_the_api(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, api, org.admin)
    # One empty row of each to add: channel 0 and rule 0 on an empty routing.
    first = await submit(
        api,
        **{
            "channel-0-name": "team",
            "channel-0-type": "slack",
            "channel-0-address": SLACK,
        },
    )
    assert first.status_code == 303, first.text
    page = await api.get(PAGE)
    assert "Routing saved." in page.text
    assert SLACK not in page.text  # masked, in the form as in the document
    # Now the channel is there to pick: a rule with every field the form edits.
    saved = await submit(
        api,
        **{
            "channel-1-name": "mail",
            "channel-1-type": "email",
            "rule-0-name": "critical deploys",
            "rule-0-priority-critical": "on",
            "rule-0-priority-high": "on",
            "rule-0-action_type": "deploy.*",
            "rule-0-source": "github",
            "rule-0-has_steps": "no",
            "rule-0-channel-0": "team",
            "rule-0-audience": "users",
            "rule-0-users": "member1@acme.example, " + org.admin.email,
            "rule-0-reminder_minutes": "15",
            "rule-0-reminder_times": "2",
        },
    )
    assert saved.status_code == 303, saved.text
    document = await routing(api, org)
    assert document["channels"] == {
        "team": {"type": "slack", "webhook_url": "https://hooks.slack.example/…cret"},
        "mail": {"type": "email"},
    }
    assert document["rules"] == [
        {
            "name": "critical deploys",
            "match": {
                "priority": ["high", "critical"],
                "action_type": "deploy.*",
                "source": "github",
                "has_steps": False,
            },
            "channels": ["team"],
            "audience": {"users": ["member1@acme.example", org.admin.email]},
            "reminders": {"after_minutes": 15, "times": 2},
            "require_sign_in_for_critical": True,
        }
    ]
    # Saving the page untouched changes nothing, the masked secret included.
    assert (await submit(api)).status_code == 303
    assert await routing(api, org) == document
    # A remove box per row.
    fields = editor_of((await api.get(PAGE)).text).fields
    [mail] = [key for key, value in fields.items() if key.endswith("-name") and value == "mail"]
    removed = await submit(api, **{"rule-0-remove": "on", mail.replace("-name", "-remove"): "on"})
    assert removed.status_code == 303
    document = await routing(api, org)
    assert list(document["channels"]) == ["team"] and document["rules"] == []


async def test_every_problem_lands_on_its_row_and_nothing_is_saved(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, api, org.admin)
    before = {
        "channels": {"team": {"type": "slack", "webhook_url": SLACK}},
        "rules": [{"channels": ["team"]}],
    }
    assert (await api.put("/api/v1/routing", json=before, headers=org.admin.headers)).is_success
    stored = await routing(api, org)
    refused = await submit(
        api,
        **{
            "channel-0-address": "ftp://files.example/hook",
            "channel-1-name": "events",
            "channel-1-type": "webhook",
            "channel-1-address": "not a url",
            "channel-1-secret": "plain",
            "rule-0-audience": "users",
            "rule-0-users": "nobody@acme.example",
            "rule-1-name": "late",
            "rule-1-reminder_minutes": "soon",
        },
    )
    assert refused.status_code == 400
    html = refused.text
    assert "Not saved: fix what is marked below." in html
    for said in (
        "Address: must be an absolute http or https URL",  # the slack row, and the webhook's
        "Secret: must be whsec_ followed by base64",
        "People: is no active member",
        "Channels: List should have at least 1 item",  # rule 2 picked none
        "minutes: Input should be a valid integer",
    ):
        assert said in html, said
    # Each on its row, and in the summary at the top, which links to the row.
    assert html.count("Address: must be an absolute http or https URL") == 4
    for anchor in ('href="#channel-0">Channel team</a>', 'href="#channel-1">Channel events</a>'):
        assert f"{anchor}: Address: must be an absolute http or https URL" in html
    assert 'href="#rule-1">Rule 2 (late)</a>: Channels: List should have at least 1' in html
    # What was typed stays in the fields, for fixing.
    fields = editor_of(html).fields
    assert fields["channel-1-secret"] == "plain" and fields["rule-1-reminder_minutes"] == "soon"
    assert await routing(api, org) == stored


async def test_a_renamed_channel_keeps_its_secret_and_its_rules_follow(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, api, org.admin)
    before = {
        "channels": {"hook": {"type": "webhook", "url": "https://h.example/in", "secret": SECRET}},
        "rules": [
            {
                "channels": ["hook"],
                "escalation": {"after_minutes": 30, "audience": "admins", "channels": ["hook"]},
                "expiry_warning": {"at_fraction": 0.5},
                "require_sign_in_for_critical": False,
            }
        ],
    }
    assert (await api.put("/api/v1/routing", json=before, headers=org.admin.headers)).is_success
    page = await api.get(PAGE)
    assert SECRET not in page.text and "https://h.example/in" not in page.text
    assert "Also has an escalation, an expiry warning" in page.text
    saved = await submit(api, **{"channel-0-name": "events"})
    assert saved.status_code == 303, saved.text
    document = await routing(api, org)
    assert list(document["channels"]) == ["events"]
    [rule] = document["rules"]
    assert rule["channels"] == ["events"]
    assert rule["escalation"] == {"after_minutes": 30, "audience": "admins", "channels": ["events"]}
    assert rule["expiry_warning"] == {"at_fraction": 0.5}
    assert rule["require_sign_in_for_critical"] is False
    async with ctx.reading() as uow:
        from signoff.notifications.repository import NotificationRepository
        from signoff.notifications.routing.service import channel_settings

        repo = NotificationRepository(uow.session, uow.dialect)
        [channel] = await repo.channels(__import__("uuid").UUID(org.id))
    assert channel_settings(ctx.box, channel) == {"url": "https://h.example/in", "secret": SECRET}


async def test_an_email_channel_without_smtp_warns_on_the_page(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, api, org.admin)
    saved = await submit(api, **{"channel-0-name": "mail", "channel-0-type": "email"})
    assert saved.status_code == 303
    page = await api.get(PAGE)
    assert "Routing saved." in page.text
    assert "The saved routing cannot work yet" in page.text and "SIGNOFF_SMTP_URL" in page.text


async def test_the_advanced_document_names_every_problem(
    api: httpx.AsyncClient, ctx: AppContext, org: Org
) -> None:
    await signed_in(ctx, api, org.admin)
    text = (
        "channels:\n  team: {type: slack}\n  hook: {type: webhook, url: 'gopher://x', secret: s}\n"
        "rules:\n  - {channels: [team, nowhere], audience: everyone}\n"
        "  - {channels: [hook], match: {priority: [urgent]}}\n"
    )
    page = await api.get(PAGE)
    refused = await api.post(PAGE, data={**editor_of(page.text).fields, "document": text})
    assert refused.status_code == 400
    for field in (
        "channels.team.webhook_url",
        "channels.hook.url",
        "channels.hook.secret",
        "rules.0.channels.1",
        "rules.0.audience",
        "rules.1.match.priority.0",
    ):
        assert f"<code>{field}</code>" in refused.text, field
    assert '<details class="card card-pad advanced" id="advanced" open>' in refused.text
