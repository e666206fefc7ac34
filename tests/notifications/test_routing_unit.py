"""Unit tests of the routing decisions: which rule, who is told, what is scheduled, and
how a burst becomes one digest per channel. Pure functions, no I/O."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from signoff.errors import ValidationFailed
from signoff.notifications.routing.document import (
    Member,
    RequestFacts,
    RoutingDocument,
    Rule,
    UsersAudience,
    audience_members,
    first_matching_rule,
    link_expiry,
    plan_chat_messages,
    schedule,
)
from signoff.notifications.routing.service import mask_secret, parse_document

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)


def facts(**overrides: Any) -> RequestFacts:
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "org_id": uuid.uuid4(),
        "title": "t",
        "description": "d",
        "priority": "high",
        "action_type": "deploy.production",
        "source": "github",
        "metadata": {},
        "has_steps": False,
        "created_at": NOW,
        "expires_at": None,
    }
    values.update(overrides)
    return RequestFacts(**values)


def document(*rules: dict[str, Any]) -> RoutingDocument:
    return RoutingDocument.model_validate(
        {"channels": {"c": {"type": "email"}}, "rules": [{"channels": ["c"], **r} for r in rules]}
    )


@pytest.mark.parametrize(
    ("match", "request_fields", "expected"),
    [
        ({}, {}, True),
        ({"priority": ["high", "critical"]}, {"priority": "high"}, True),
        ({"priority": ["critical"]}, {"priority": "high"}, False),
        ({"action_type": "deploy.*"}, {"action_type": "deploy.production"}, True),
        ({"action_type": "deploy.*"}, {"action_type": "billing.refund"}, False),
        ({"action_type": "deploy.*"}, {"action_type": None}, False),
        ({"source": "git*"}, {"source": "github"}, True),
        ({"source": "github"}, {"source": "gitlab"}, False),
        ({"has_steps": True}, {"has_steps": False}, False),
        ({"has_steps": False}, {"has_steps": False}, True),
        ({"priority": ["high"], "action_type": "deploy.*", "source": "x"}, {}, False),
    ],
)
def test_a_rule_matches_on_every_condition_it_names(
    match: dict[str, Any], request_fields: dict[str, Any], expected: bool
) -> None:
    rule = first_matching_rule(document({"match": match}), facts(**request_fields))
    assert (rule is not None) is expected


def test_the_first_matching_rule_applies() -> None:
    doc = document(
        {"name": "critical", "match": {"priority": ["critical"]}},
        {"name": "deploys", "match": {"action_type": "deploy.*"}},
        {"name": "everything else"},
    )
    assert first_matching_rule(doc, facts(priority="critical")).name == "critical"  # type: ignore[union-attr]
    assert first_matching_rule(doc, facts()).name == "deploys"  # type: ignore[union-attr]
    assert first_matching_rule(doc, facts(action_type=None)).name == "everything else"  # type: ignore[union-attr]
    assert first_matching_rule(RoutingDocument(), facts()) is None


ADA = Member(uuid.uuid4(), "ada@acme.example", "Ada", is_admin=True)
BOB = Member(uuid.uuid4(), "bob@acme.example", "Bob", is_admin=False)
CY = Member(uuid.uuid4(), "cy@acme.example", "Cy", is_admin=False)
MEMBERS = [ADA, BOB, CY]


def test_audiences() -> None:
    assert audience_members("all", MEMBERS, ()) == MEMBERS
    assert audience_members("admins", MEMBERS, ()) == [ADA]
    assert audience_members(UsersAudience(users=["BOB@acme.example", str(CY.id)]), MEMBERS, ()) == [
        BOB,
        CY,
    ]
    assert audience_members("step_approvers", MEMBERS, [CY.id]) == [CY]
    # Without a chain every member may vote, so every member is told.
    assert audience_members("step_approvers", MEMBERS, ()) == MEMBERS


def test_reminders_escalation_and_expiry_warning_are_planned_before_the_expiry() -> None:
    rule = Rule.model_validate(
        {
            "channels": ["c"],
            "reminders": {"after_minutes": 30, "times": 3},
            "escalation": {"after_minutes": 60, "audience": "admins"},
            "expiry_warning": {"at_fraction": 0.8},
        }
    )
    request = facts(expires_at=NOW + timedelta(minutes=100))
    planned = [(p.kind, p.due_at - NOW) for p in schedule(rule, request, NOW)]
    assert planned == [
        ("reminder", timedelta(minutes=30)),
        ("reminder", timedelta(minutes=60)),
        ("reminder", timedelta(minutes=90)),
        ("escalated", timedelta(minutes=60)),
        ("expiry_warning", timedelta(minutes=80)),
    ]
    soon = facts(expires_at=NOW + timedelta(minutes=45))
    assert [p.kind for p in schedule(rule, soon, NOW)] == ["reminder", "expiry_warning"]


def test_links_last_as_long_as_the_request_and_seven_days_at_most() -> None:
    assert link_expiry(facts(), NOW) == NOW + timedelta(days=7)
    assert link_expiry(facts(expires_at=NOW + timedelta(hours=2)), NOW) == NOW + timedelta(hours=2)
    far = facts(expires_at=NOW + timedelta(days=30))
    assert link_expiry(far, NOW) == NOW + timedelta(days=7)


def test_a_burst_becomes_one_message_per_channel_per_interval() -> None:
    slack, teams = uuid.uuid4(), uuid.uuid4()
    burst = [(uuid.uuid4(), slack) for _ in range(50)] + [(uuid.uuid4(), teams) for _ in range(3)]
    messages, held = plan_chat_messages(burst, {}, now=100.0, interval=1.0)
    assert [(m.channel_id, len(m.notification_ids)) for m in messages] == [(slack, 50), (teams, 3)]
    assert held == []
    assert messages[0].is_digest
    # Within the interval, the next ones wait for the channel's next message.
    later = [(uuid.uuid4(), slack), (uuid.uuid4(), teams)]
    messages, held = plan_chat_messages(later, {slack: 100.0}, now=100.4, interval=1.0)
    assert [m.channel_id for m in messages] == [teams]
    assert held == [later[0][0]]
    messages, held = plan_chat_messages(later[:1], {slack: 100.0}, now=101.0, interval=1.0)
    assert len(messages) == 1 and not messages[0].is_digest and held == []


def test_the_document_is_validated_whole() -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_document(
            {
                "channels": {"s": {"type": "slack"}},
                "rules": [{"channels": ["s", "t"], "audience": "everyone"}],
            }
        )
    fields = {f["field"] for f in caught.value.details["fields"]}
    assert "channels.s.webhook_url" in fields
    assert any(f.startswith("rules.0.audience") for f in fields)
    # The rule that did not parse (its audience) still has its channels checked.
    assert "rules.0.channels.1" in fields
    with pytest.raises(ValidationError):
        RoutingDocument.model_validate({"rules": [{"channels": ["c"], "extra": 1}]})
    with pytest.raises(ValidationFailed) as caught:
        parse_document({"channels": {"c": {"type": "email"}}, "rules": [{"channels": ["x"]}]})
    assert caught.value.details["fields"][0]["field"] == "rules.0.channels.0"


def test_secrets_are_masked_beyond_use() -> None:
    url = "https://hooks.slack.com/services/T0/B0/XXXXXXXXXXXXsecret"
    assert mask_secret(url) == "https://hooks.slack.com/…cret"
    assert mask_secret("xoxb-1234567890-abcdef") == "xoxb-…cdef"
    assert mask_secret("short") == "…"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("smtp://relay.local", ("relay.local", 25, None, None, False, False)),
        (
            "smtp://me%40acme:p%40ss@mail.acme:587?starttls=true",
            ("mail.acme", 587, "me@acme", "p@ss", False, True),
        ),
        ("smtps://u:p@mail.acme", ("mail.acme", 465, "u", "p", True, False)),
    ],
)
def test_smtp_urls(url: str, expected: tuple[object, ...]) -> None:
    from signoff.notifications.sending.channels import SmtpServer

    server = SmtpServer.from_url(url)
    assert (
        server.host,
        server.port,
        server.username,
        server.password,
        server.implicit_tls,
        server.starttls,
    ) == expected


def test_an_smtp_url_must_be_one() -> None:
    from signoff.notifications.sending.channels import SmtpServer

    with pytest.raises(ValueError, match="SIGNOFF_SMTP_URL"):
        SmtpServer.from_url("http://mail.acme")


def test_the_senders_wait_grows_during_a_burst_and_not_for_a_lone_create() -> None:
    from signoff.worker.notifications import (
        BURST_GATHER_SECONDS,
        WAKEUP_GATHER_SECONDS,
        next_gather,
    )

    # A lone create (one plan a round) keeps the short wait: its mail is not held back.
    assert next_gather(WAKEUP_GATHER_SECONDS, 1) == WAKEUP_GATHER_SECONDS
    assert next_gather(WAKEUP_GATHER_SECONDS, 0) == WAKEUP_GATHER_SECONDS
    # Rounds of several creates: the wait doubles, up to its ceiling.
    gather = WAKEUP_GATHER_SECONDS
    waits = []
    for _ in range(5):
        gather = next_gather(gather, 8)
        waits.append(gather)
    assert waits[0] == 2 * WAKEUP_GATHER_SECONDS
    assert waits == sorted(waits) and waits[-1] == BURST_GATHER_SECONDS
    # The burst over, back to the short wait at once.
    assert next_gather(gather, 1) == WAKEUP_GATHER_SECONDS
