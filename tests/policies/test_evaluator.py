"""The evaluator alone: first match, run-time failures, the variables it converts."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import UTC, datetime

from signoff.policies.document import AnswerMemo, compile_document
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


def test_answers_are_kept_by_the_variables_read_and_stay_right() -> None:
    """A create under many rules looks its answer up by what the conditions read: the
    same inputs get the rule evaluated before, others are evaluated; time counts when a
    condition reads it."""
    doc = compile_document(
        {
            "rules": [
                {
                    "name": "office-hours-refunds",
                    "condition": 'request.action_type == "refund.issue" && now.hour < 17',
                    "effect": "auto_approve",
                },
                *(
                    {
                        "name": f"kind-{n}",
                        "condition": f'request.action_type == "kind.{n}"',
                        "effect": "auto_reject",
                        "reason": "no",
                    }
                    for n in range(50)
                ),
            ]
        },
        1,
    )[1]
    refund, other = FACTS, dataclasses.replace(FACTS, action_type="kind.42")
    evening = NOW.replace(hour=18)
    answers = [
        first_match(doc, facts, at)
        for facts, at in ((refund, NOW), (other, NOW), (refund, NOW), (refund, evening))
    ]
    assert [rule.name if rule else None for rule in answers] == [
        "office-hours-refunds",
        "kind-42",
        "office-hours-refunds",
        None,
    ]
    assert len(doc.answers) == 3  # refund at 14h, kind.42, refund at 18h


def test_the_kept_answers_are_bounded_in_count_and_key_size() -> None:
    memo = AnswerMemo(size=2)
    for key in (b"a", b"b", b"c"):
        memo.keep(key, None)
    assert list(memo) == [b"b", b"c"]
    memo.keep(b"x" * (AnswerMemo.MAX_KEY_BYTES + 1), None)
    assert list(memo) == [b"b", b"c"]
