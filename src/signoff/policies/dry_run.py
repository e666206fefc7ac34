"""The dry run: a draft document replayed over the org's decided requests of the last
``days``, in the order they were created, budgets counted as they would have been.

It answers how many requests each rule would have matched, what it would have decided,
the disagreements with what happened (an auto-approval of what a person rejected, an
auto-rejection of what a person approved), with links, and when each budget would have
run out. Nothing is stored.
"""

from __future__ import annotations

import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from signoff.auth.principal import OrgMember
from signoff.common.time import format_timestamp
from signoff.policies.document import CompiledDocument, Rule, compile_document
from signoff.policies.evaluator import RequestFacts, first_match
from signoff.policies.repository import PastRequest, PolicyRepository
from signoff.policies.service import budget_amount, require_admin, scope_key, window_start

# Disagreements listed in full; past that only counted.
MAX_LISTED = 100


@dataclass
class _Spent:
    count: int = 0
    total: float = 0.0


@dataclass
class _Replay:
    document: CompiledDocument
    matched: Counter[str] = field(default_factory=Counter)
    decided: Counter[str] = field(default_factory=Counter)
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    disagreement_count: int = 0
    spent: dict[tuple[str, str, datetime], _Spent] = field(default_factory=dict)
    exhausted: dict[str, dict[str, Any]] = field(default_factory=dict)
    memo: dict[bytes, Rule | None] = field(default_factory=dict)


async def dry_run(
    repo: PolicyRepository, member: OrgMember, data: Any, days: int, now: datetime
) -> dict[str, Any]:
    require_admin(member)
    return await replay_history(repo, member.org_id, data, days, now)


async def replay_history(
    repo: PolicyRepository, org_id: uuid.UUID, data: Any, days: int, now: datetime
) -> dict[str, Any]:
    _, document = compile_document(data)
    fields = document.request_fields
    sums = any(rule.budget is not None and rule.budget.sum_of for rule in document.rules)
    history = await repo.decided_since(
        org_id,
        now - timedelta(days=days),
        with_metadata=fields is None or "metadata" in fields,
        with_arguments=fields is None or "arguments" in fields or sums,
    )
    names = await repo.connection_names(org_id)
    replay = _Replay(document)
    for past in history:
        _replay_one(replay, past, names)
    return _answer(replay, len(history), days)


def _facts(past: PastRequest, names: dict[Any, str]) -> RequestFacts:
    return RequestFacts(
        action_type=past.action_type,
        source=past.source,
        priority=past.priority,
        title=past.title,
        metadata=past.metadata or {},
        arguments=past.arguments or {},
        connection_id=past.connection_id,
        connection_name=names.get(past.connection_id),
    )


def _replay_one(replay: _Replay, past: PastRequest, names: dict[Any, str]) -> None:
    facts = _facts(past, names)
    rule = first_match(replay.document, facts, past.created_at, replay.memo)
    if rule is None:
        replay.decided["people"] += 1
        return
    replay.matched[rule.name] += 1
    outcome = _outcome(replay, rule, facts, past)
    replay.decided[outcome] += 1
    person_decided = not past.auto_approved
    if person_decided and (
        (outcome == "auto_approve" and past.status == "rejected")
        or (outcome == "auto_reject" and past.status == "approved")
    ):
        replay.disagreement_count += 1
        if len(replay.disagreements) < MAX_LISTED:
            replay.disagreements.append(_disagreement(rule, outcome, past))


def _outcome(replay: _Replay, rule: Rule, facts: RequestFacts, past: PastRequest) -> str:
    """What the rule would have done; an auto-approval past its budget goes to people."""
    if rule.effect != "auto_approve" or rule.budget is None:
        return rule.effect
    budget = rule.budget
    amount = budget_amount(budget, facts.arguments)
    key = (rule.name, scope_key(budget, facts), window_start(budget, past.created_at))
    spent = replay.spent.setdefault(key, _Spent())
    fits = amount is not None and (
        (budget.max_count is None or spent.count + 1 <= budget.max_count)
        and (budget.max_sum is None or spent.total + amount <= budget.max_sum)
    )
    if not fits:
        replay.exhausted.setdefault(
            rule.name,
            {
                "rule": rule.name,
                "first_exhausted_at": format_timestamp(past.created_at),
                "scope_key": key[1],
            },
        )
        return "people"
    spent.count += 1
    spent.total += amount or 0.0
    return "auto_approve"


def _disagreement(rule: Rule, outcome: str, past: PastRequest) -> dict[str, Any]:
    return {
        "request_id": str(past.id),
        "number": past.number,
        "title": past.title,
        "rule": rule.name,
        "would_have": outcome,
        "actual_status": past.status,
        "created_at": format_timestamp(past.created_at),
        "link": f"/requests/{past.id}",
    }


def _answer(replay: _Replay, total: int, days: int) -> dict[str, Any]:
    rules = [
        {"name": rule.name, "effect": rule.effect, "matched": replay.matched[rule.name]}
        for rule in replay.document.rules
    ]
    return {
        "days": days,
        "requests": total,
        "rules": rules,
        "decisions": {
            key: replay.decided[key]
            for key in ("auto_approve", "auto_reject", "require", "escalate", "people")
        },
        "disagreement_count": replay.disagreement_count,
        "disagreements": replay.disagreements,
        "budgets_exhausted": list(replay.exhausted.values()),
    }
