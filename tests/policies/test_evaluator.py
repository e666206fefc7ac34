"""The evaluator alone: first match, run-time failures, the variables it converts."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

from signoff.policies.document import compile_document
from signoff.policies.evaluator import RequestFacts, activation, first_match

NOW = datetime(2026, 11, 28, 14, 30, tzinfo=UTC)  # a Saturday
FACTS = RequestFacts(
    action_type="refund.issue",
    source="shop",
    priority="low",
    title="Refund #12",
    metadata={"team": "ops"},
    arguments={"amount": 12},
    connection_id=uuid.UUID(int=7),
    connection_name="shop-bot",
)


def test_first_true_condition_applies_and_failures_do_not_match() -> None:
    doc = compile_document(
        {
            "rules": [
                {
                    "name": "missing",
                    "condition": "request.arguments.nope > 1",
                    "effect": "auto_approve",
                },
                {"name": "not-bool", "condition": "request.title", "effect": "auto_approve"},
                {
                    "name": "weekend",
                    "condition": "now.weekday >= 6 && now.hour == 14",
                    "effect": "auto_approve",
                },
                {"name": "later", "condition": "true", "effect": "auto_approve"},
            ]
        },
        1,
    )[1]
    rule = first_match(doc, FACTS, NOW)
    assert rule is not None and rule.name == "weekend"


def test_only_the_fields_read_are_converted_unless_request_is_used_otherwise() -> None:
    doc = compile_document(
        {
            "rules": [
                {"name": "a", "condition": 'request.source == "shop"', "effect": "auto_approve"}
            ]
        }
    )[1]
    assert activation(FACTS, NOW, doc) == {"request": {"source": "shop"}, "now": {}}
    indexed = compile_document(
        {
            "rules": [
                {
                    "name": "a",
                    "condition": 'request["connection"].name == "shop-bot"',
                    "effect": "auto_approve",
                }
            ]
        }
    )[1]
    assert set(activation(FACTS, NOW, indexed)["request"]) >= {"connection", "title"}
    assert first_match(indexed, FACTS, NOW) is not None


def test_a_memo_gives_the_same_answers() -> None:
    doc = compile_document(
        {
            "rules": [
                {
                    "name": "a",
                    "condition": "request.arguments.amount <= 50",
                    "effect": "auto_approve",
                }
            ]
        }
    )[1]
    memo: dict[bytes, object] = {}
    big = dataclasses.replace(FACTS, arguments={"amount": 99})
    assert first_match(doc, FACTS, NOW, memo) is not None  # type: ignore[arg-type]
    assert first_match(doc, FACTS, NOW, memo) is not None  # type: ignore[arg-type]
    assert first_match(doc, big, NOW, memo) is None  # type: ignore[arg-type]
    assert len(memo) == 2
