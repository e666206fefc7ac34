"""The request page's activity list says when a policy decided, and why one did not."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from signoff.dashboard.activity import describe_event


@dataclass
class Event:
    type: str
    data: dict[str, Any]
    actor_id: uuid.UUID | None = None


def test_a_policy_decision_and_a_spent_budget_read_as_sentences() -> None:
    policy = {"rule": "small-refunds", "version": 3, "effect": "auto_approve"}
    approved = Event("request.approved", {"status": "approved", "policy": policy})
    assert describe_event(approved, {}, "shop") == (
        "Approved automatically by policy v3, rule small-refunds"
    )
    rejected = Event(
        "request.rejected", {"policy": {**policy, "effect": "auto_reject"}, "comment": "frozen"}
    )
    assert describe_event(rejected, {}, "shop").endswith("rule small-refunds: frozen")
    spent = Event(
        "policy.budget_exhausted",
        {**policy, "budget": "budget spent: at most 10 approvals per day"},
    )
    assert describe_event(spent, {}, "shop") == (
        "Left to people: policy v3 rule small-refunds would have approved it, but "
        "budget spent: at most 10 approvals per day"
    )
