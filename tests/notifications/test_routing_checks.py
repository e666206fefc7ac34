"""What saving routing checks: channel URLs under the callbacks' policy (at save and again
at send), every mistake of a document named at once with nothing stored, and the
``warnings`` of a document saved that cannot work yet (e-mail without an SMTP server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench.receiver import Receiver

from signoff.app import create_app
from signoff.wiring import Wiring
from tests.conftest import Org, assert_error, create_approval, make_settings
from tests.webhooks.test_ssrf import PRODUCTION, REFUSED_URLS

pytestmark = pytest.mark.anyio

SLACK = "https://hooks.slack.example/services/T0/B0/secretsecretsecret"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
STORED = {
    "channels": {"team": {"type": "slack", "webhook_url": SLACK}},
    "rules": [{"name": "all", "channels": ["team"]}],
}
# Refused in every mode: never an absolute http(s) URL, or one that carries credentials.
NEVER_SENDABLE = [
    "not a url",
    "ftp://files.example.com/hook",
    "file:///etc/passwd",
    "gopher://example.com:70/_hook",
    "https://user:password@hooks.example.com/hook",
    "//hooks.example.com/no-scheme",
]


def channels_at(*urls: str) -> dict[str, Any]:
    """Every URL twice: as a chat channel's webhook_url and as a webhook channel's url."""
    channels: dict[str, Any] = {}
    for n, url in enumerate(urls):
        channels[f"chat{n}"] = {"type": "teams", "webhook_url": url}
        channels[f"hook{n}"] = {"type": "webhook", "url": url, "secret": SECRET}
    return {"channels": channels, "rules": [{"channels": sorted(channels)}]}


async def put(api: httpx.AsyncClient, org: Org, document: dict[str, Any]) -> httpx.Response:
    return await api.put("/api/v1/routing", json=document, headers=org.admin.headers)


async def refused_fields(api: httpx.AsyncClient, org: Org, document: dict[str, Any]) -> set[str]:
    """The fields a refused PUT names; the document stored before is left as it was."""
    before = (await api.get("/api/v1/routing", headers=org.admin.headers)).json()
    details = assert_error(await put(api, org, document), 400, "VALIDATION_ERROR")
    after = (await api.get("/api/v1/routing", headers=org.admin.headers)).json()
    assert after == before
    return {field["field"] for field in details["fields"]}


async def test_urls_that_can_never_be_sent_to_are_refused_in_any_mode(
    api: httpx.AsyncClient, org: Org
) -> None:
    assert (await put(api, org, STORED)).status_code == 200
    fields = await refused_fields(api, org, channels_at(*NEVER_SENDABLE))
    assert fields == {
        f"channels.{kind}{n}.{key}"
        for n in range(len(NEVER_SENDABLE))
        for kind, key in (("chat", "webhook_url"), ("hook", "url"))
    }
    # Development allows plain http and loopback, as it does for callbacks.
    allowed = channels_at("http://127.0.0.1:9/hook", "http://localhost:9/hook")
    assert (await put(api, org, allowed)).status_code == 200


@pytest.fixture
def settings_overrides(request: pytest.FixtureRequest) -> dict[str, Any]:
    return dict(getattr(request, "param", {}))


@pytest.mark.parametrize("settings_overrides", [PRODUCTION], indirect=True)
async def test_production_refuses_every_internal_or_plain_http_channel_url_at_once(
    api: httpx.AsyncClient, org: Org
) -> None:
    assert (await put(api, org, STORED)).status_code == 200
    urls = [*REFUSED_URLS, *NEVER_SENDABLE]
    fields = await refused_fields(api, org, channels_at(*urls))
    assert fields == {
        f"channels.{kind}{n}.{key}"
        for n in range(len(urls))
        for kind, key in (("chat", "webhook_url"), ("hook", "url"))
    }
    details = assert_error(
        await put(api, org, channels_at("https://169.254.169.254/latest/meta-data")),
        400,
        "VALIDATION_ERROR",
    )
    assert "169.254.169.254 is a loopback, private, link-local or reserved address" in str(details)


@pytest.mark.parametrize(
    "settings_overrides",
    [{**PRODUCTION, "callback_allowed_cidrs": ["127.0.0.0/8", "10.9.0.0/16"]}],
    indirect=True,
)
async def test_the_callbacks_allowlist_admits_channel_urls_too(
    api: httpx.AsyncClient, org: Org
) -> None:
    allowed = channels_at("https://127.0.0.1:8443/hook", "https://10.9.1.2/hook")
    assert (await put(api, org, allowed)).status_code == 200, (await put(api, org, allowed)).text
    assert await refused_fields(api, org, channels_at("https://10.8.0.1/hook")) == {
        "channels.chat0.webhook_url",
        "channels.hook0.url",
    }


@asynccontextmanager
async def production_app(database_url: str) -> AsyncIterator[tuple[Wiring, httpx.AsyncClient]]:
    """Another app process over the same database, in production mode."""
    wiring = Wiring.from_settings(make_settings(database_url, **PRODUCTION))
    application = create_app(wiring.ctx.settings, wiring=wiring, background=False)
    try:
        async with application.router.lifespan_context(application):
            transport = httpx.ASGITransport(app=application)
            async with httpx.AsyncClient(transport=transport, base_url="http://signoff.test") as c:
                yield wiring, c
    finally:
        await wiring.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"], ids=["address", "name"])
async def test_a_channel_url_is_checked_again_when_sent(
    api: httpx.AsyncClient, org: Org, database_url: str, host: str
) -> None:
    """A URL saved earlier (in development, before an allowlist shrank, or while its name
    resolved elsewhere) is never dialled once the policy refuses it."""
    async with Receiver() as receiver:
        url = f"https://{host}:{receiver.port}/hook"
        document = {
            "channels": {"team": {"type": "slack", "webhook_url": url}},
            "rules": [{"channels": ["team"]}],
        }
        assert (await put(api, org, document)).status_code == 200
        created = await create_approval(api, org.member)
        async with production_app(database_url) as (production, client):
            await production.notifications.run_once()
            log = await client.get(
                f"/api/v1/approvals/{created['id']}/notifications", headers=org.admin.headers
            )
        assert receiver.connections == 0
    [row] = log.json()["data"]
    assert row["channel"] == "team" and row["status"] == "pending"
    assert row["error"] == "address not allowed"


async def test_a_document_with_several_mistakes_names_them_all(
    api: httpx.AsyncClient, org: Org
) -> None:
    assert (await put(api, org, STORED)).status_code == 200
    shown = (await api.get("/api/v1/routing", headers=org.admin.headers)).json()
    document = {
        "channels": {
            "team": {"type": "slack", "webhook_url": "https://hooks.slack.example/…XXXX"},
            "chat": {"type": "teams"},
            "hook": {"type": "webhook", "url": "ftp://x.example/h", "secret": "plain"},
            "odd one": {"type": "email"},
            "fax": {"type": "fax"},
        },
        "rules": [
            {"channels": ["team", "nowhere"], "audience": "everyone"},
            {"channels": ["chat"], "audience": {"users": ["nobody@acme.example"]}},
            {"channels": ["hook"], "match": {"priority": ["urgent"]}, "reminders": {}},
        ],
        "colour": "blue",
    }
    assert shown["channels"]["team"]["webhook_url"] != document["channels"]["team"]["webhook_url"]
    assert await refused_fields(api, org, document) == {
        "channels.team.webhook_url",  # masked, but not as the stored value shows
        "channels.chat.webhook_url",  # missing
        "channels.hook.url",  # not http(s)
        "channels.hook.secret",  # not a Standard Webhooks secret
        "channels.odd one",  # the name
        "channels.fax.type",
        "rules.0.channels.1",  # no such channel, in a rule wrong in another way too
        "rules.0.audience",
        "rules.1.audience.users.0",  # not a member
        "rules.2.match.priority.0",
        "rules.2.reminders.after_minutes",
        "colour",
    }


async def test_an_email_channel_without_smtp_is_saved_with_a_warning(
    api: httpx.AsyncClient, org: Org
) -> None:
    document = {
        "channels": {"mail": {"type": "email"}, "team": {"type": "slack", "webhook_url": SLACK}},
        "rules": [{"channels": ["mail", "team"]}],
    }
    saved = await put(api, org, document)
    assert saved.status_code == 200
    [warning] = saved.json()["warnings"]
    assert warning["field"] == "channels.mail" and "SIGNOFF_SMTP_URL" in warning["message"]
    shown = await api.get("/api/v1/routing", headers=org.admin.headers)
    assert shown.json()["warnings"] == [warning]
    # GET's answer, warnings included, goes back as it is.
    again = await put(api, org, shown.json())
    assert again.status_code == 200 and again.json() == shown.json()
    without_mail = {"channels": {"team": document["channels"]["team"]}, "rules": []}
    assert (await put(api, org, without_mail)).json()["warnings"] == []


@pytest.mark.parametrize("settings_overrides", [{"smtp_url": "smtp://127.0.0.1:9"}], indirect=True)
async def test_no_warning_once_smtp_is_set(api: httpx.AsyncClient, org: Org) -> None:
    document = {"channels": {"mail": {"type": "email"}}, "rules": [{"channels": ["mail"]}]}
    assert (await put(api, org, document)).json()["warnings"] == []


async def test_the_warnings_are_in_the_openapi_document(api: httpx.AsyncClient) -> None:
    schema = (await api.get("/api/v1/openapi.json")).json()
    for method in ("get", "put"):
        answer = schema["paths"]["/api/v1/routing"][method]["responses"]["200"]
        ref = answer["content"]["application/json"]["schema"]["$ref"]
        out = schema["components"]["schemas"][ref.rsplit("/", 1)[1]]
        assert "warnings" in out["required"]
        assert out["properties"]["warnings"]["items"] == {
            "$ref": "#/components/schemas/RoutingWarning"
        }
    assert set(schema["components"]["schemas"]["RoutingWarning"]["required"]) == {
        "field",
        "message",
    }


async def test_the_cli_refuses_the_same_urls_and_prints_the_warnings(
    org: Org, database_url: str, tmp_path: Path
) -> None:
    from tests.webhooks.test_cli import signoff

    path = tmp_path / "routing.yaml"
    path.write_text(
        "channels:\n  hook: {type: webhook, url: 'file:///etc/passwd', secret: s}\n"
        "rules: [{channels: [hook, gone]}]\n"
    )
    code, _, err = await signoff(
        database_url, "routing", "set", "--org", "Acme", "--file", str(path)
    )
    assert code == 1
    for field in ("channels.hook.url", "channels.hook.secret", "rules.0.channels.1"):
        assert field in err, err
    path.write_text("channels:\n  mail: {type: email}\nrules: [{channels: [mail]}]\n")
    code, _, err = await signoff(
        database_url, "routing", "set", "--org", "Acme", "--file", str(path)
    )
    assert code == 0, err
    assert "warning: channels.mail: SIGNOFF_SMTP_URL is not set" in err
    code, shown, err = await signoff(database_url, "routing", "show", "--org", "Acme")
    assert shown is not None and set(shown) == {"channels", "rules"}  # a file to set again
    assert shown["channels"] == {"mail": {"type": "email"}}
    assert "warning: channels.mail" in err
