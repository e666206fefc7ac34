"""Use cases of policies: the document and its versions (admins), the verdict at a
request's create, and the dry run over history. Services never commit.

Order of evaluation at create (docs/policies.md): the emergency stop answers first (the
create never gets here), then the first matching rule, then people.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from signoff.audit import events as audit_events
from signoff.auth.principal import OrgMember, Principal
from signoff.common.time import format_timestamp
from signoff.errors import Forbidden, NotFound, ValidationFailed
from signoff.policies.document import Budget, CompiledDocument, Rule, compile_document
from signoff.policies.evaluator import RequestFacts, compiled_documents, first_match
from signoff.policies.repository import PolicyRepository, VersionRow


def require_admin(member: OrgMember) -> None:
    if not member.is_admin:
        raise Forbidden("Only an admin of the organization may read or change its policies.")


def _author(row: VersionRow) -> dict[str, Any] | None:
    if row.author_id is None:
        return None
    return {"id": str(row.author_id), "name": row.author_name}


def version_dict(row: VersionRow, *, with_rules: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {
        "version": row.version,
        "author": _author(row),
        "created_at": format_timestamp(row.created_at),
        "restored_from": row.restored_from,
        "rule_count": len(row.rules),
    }
    if with_rules:
        out["rules"] = row.rules
    return out


async def read_document(repo: PolicyRepository, member: OrgMember) -> dict[str, Any]:
    require_admin(member)
    return await document_of(repo, member.org_id)


async def document_of(repo: PolicyRepository, org_id: uuid.UUID) -> dict[str, Any]:
    """The version in force; version 0 with no rules when none was ever saved."""
    version = await repo.current_version(org_id)
    row = await repo.version(org_id, version) if version else None
    if row is None:
        empty: dict[str, Any] = {"version": 0, "rules": [], "author": None, "created_at": None}
        return empty | {"restored_from": None, "rule_count": 0}
    return version_dict(row)


async def save_document(
    repo: PolicyRepository,
    member: OrgMember,
    data: Any,
    now: datetime,
    restored_from: int | None = None,
) -> dict[str, Any]:
    """Check and compile the whole document, then store it as the next version (nothing
    is stored unless every rule is right)."""
    require_admin(member)
    author = (member.user_id, member.user_name)
    return await save_rules(repo, member.org_id, data, author, now, restored_from)


async def save_rules(
    repo: PolicyRepository,
    org_id: uuid.UUID,
    data: Any,
    author: tuple[uuid.UUID, str] | None,
    now: datetime,
    restored_from: int | None = None,
) -> dict[str, Any]:
    """Store ``data`` as the org's next version; ``author`` None: the operator (CLI)."""
    stored, document = compile_document(data)
    await _check_groups(repo, org_id, document)
    version = (await repo.current_version(org_id) or 0) + 1
    author_id, author_name = author if author else (None, None)
    await repo.add_version(org_id, version, stored, author_id, author_name, now, restored_from)
    await repo.put_in_force(org_id, version)
    change = {"version": version, "restored_from": restored_from}
    kind = "policy.restored" if restored_from else "policy.saved"
    await audit_events.record(repo.session, org_id, kind, author_id, change, now)
    row = await repo.version(org_id, version)
    assert row is not None  # written just now, in this transaction
    return version_dict(row)


async def _check_groups(
    repo: PolicyRepository, org_id: uuid.UUID, document: CompiledDocument
) -> None:
    """Refuse a ``require`` rule naming a group the org does not have."""
    names = sorted({name for rule in document.rules for name, _ in rule.groups})
    if not names:
        return
    known = await repo.group_ids(org_id, names)
    unknown = [
        {
            "field": f"rules.{index}.groups.{position}.group",
            "message": f"rule {rule.name!r} names no group of this organization",
        }
        for index, rule in enumerate(document.rules)
        for position, (name, _) in enumerate(rule.groups)
        if name.lower() not in known
    ]
    if unknown:
        raise ValidationFailed.for_fields(unknown)


async def list_versions(repo: PolicyRepository, member: OrgMember) -> list[dict[str, Any]]:
    require_admin(member)
    return [version_dict(row, with_rules=False) for row in await repo.versions(member.org_id)]


async def restore_version(
    repo: PolicyRepository, member: OrgMember, version: int, now: datetime
) -> dict[str, Any]:
    """Save an old version's rules as the newest version (history only grows)."""
    require_admin(member)
    row = await repo.version(member.org_id, version)
    if row is None:
        raise NotFound("No policy document with this version.")
    return await save_document(repo, member, {"rules": row.rules}, now, restored_from=version)


# ---- the verdict at create ----


@dataclass(frozen=True)
class CreateVerdict:
    """What the policies make of a new request: nothing (no rule matched), a decision
    (``decision``: approve or reject), or changes to its columns (``require``,
    ``escalate``); ``notes``: audit events to add, as (type, data)."""

    decision: str | None = None
    label: str | None = None
    reason: str | None = None
    data: dict[str, Any] = field(default_factory=dict)
    changes: dict[str, Any] = field(default_factory=dict)
    notes: tuple[tuple[str, dict[str, Any]], ...] = ()
    # ``require`` naming groups: a chain step per group, as (group id, count), in order.
    group_steps: tuple[tuple[uuid.UUID, int], ...] = ()


NO_VERDICT = CreateVerdict()


async def document_in_force(
    repo: PolicyRepository, org_id: uuid.UUID, version: int
) -> CompiledDocument | None:
    """The org's compiled document of ``version`` (the principal's ``org_policy_version``,
    which the create's first statement confirms), from the cache by (org, version): no
    read at all without a document, the rules only on a cache miss. A save on any
    replica raises the org's version, so a remembered principal goes stale at once."""
    if not version:
        return None
    compiled = compiled_documents.get(org_id, version)
    if compiled is None:
        rules = await repo.rules_of(org_id, version)
        compiled = compiled_documents.get(org_id, version, rules or [])
    return compiled if compiled is not None and compiled.rules else None


async def verdict_for_create(
    repo: PolicyRepository, principal: Principal, facts: RequestFacts, now: datetime
) -> CreateVerdict:
    document = await document_in_force(repo, principal.org_id, principal.org_policy_version)
    if document is None:
        return NO_VERDICT
    rule = first_match(document, facts, now)
    if rule is None:
        return NO_VERDICT
    data = {"rule": rule.name, "version": document.version, "effect": rule.effect}
    label = f"policy v{document.version}: {rule.name}"
    if rule.effect == "auto_reject":
        await repo.begin()
        return CreateVerdict("reject", label, rule.reason, data)
    if rule.effect == "require" and rule.groups:
        return await _group_verdict(repo, principal.org_id, rule, data)
    if rule.effect == "require":
        changes = {"required_approvals": rule.required_approvals} | _passkey(rule)
        return CreateVerdict(data=data, changes=changes)
    if rule.effect == "escalate":
        return CreateVerdict(data=data, changes=_escalation(rule, now) | _passkey(rule))
    await repo.begin()
    refused = await _spend_budget(repo, principal.org_id, rule, facts, now)
    if refused is not None:
        note = data | {"budget": refused}
        return CreateVerdict(data=data, notes=(("policy.budget_exhausted", note),))
    return CreateVerdict("approve", label, None, data)


async def _group_verdict(
    repo: PolicyRepository, org_id: uuid.UUID, rule: Rule, data: dict[str, Any]
) -> CreateVerdict:
    """``require`` naming groups: the request goes to a chain of group steps (a group
    deleted since the document was saved is left out; none left: one approval)."""
    ids = await repo.group_ids(org_id, [name for name, _ in rule.groups])
    steps = tuple((ids[name.lower()], count) for name, count in rule.groups if name.lower() in ids)
    changes = {"is_sequential": rule.group_order == "sequential"} | _passkey(rule)
    return CreateVerdict(data=data, changes=changes, group_steps=steps)


def _passkey(rule: Rule) -> dict[str, Any]:
    return {"passkey_required": True} if rule.passkey else {}


def _escalation(rule: Rule, now: datetime) -> dict[str, Any]:
    changes: dict[str, Any] = {}
    if rule.priority is not None:
        changes["priority"] = rule.priority
    if rule.expires_in_seconds is not None:
        changes["expires_at"] = now + timedelta(seconds=rule.expires_in_seconds)
    return changes


def window_start(budget: Budget, now: datetime) -> datetime:
    if budget.per == "hour":
        return now.replace(minute=0, second=0, microsecond=0)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def scope_key(budget: Budget, facts: RequestFacts) -> str:
    if budget.scope == "connection":
        return str(facts.connection_id or "")
    if budget.scope == "action_type":
        return facts.action_type or ""
    return ""


def budget_amount(budget: Budget, arguments: Any) -> float | None:
    """The amount an approval spends of ``budget.max_sum``: 0 without a sum; None when
    the argument is missing or not a number (the request then goes to people)."""
    if budget.sum_of is None:
        return 0.0
    value = (arguments or {}).get(budget.sum_of) if isinstance(arguments, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        return None
    return float(value)


def _budget_text(budget: Budget) -> str:
    caps = []
    if budget.max_count is not None:
        caps.append(f"{budget.max_count} approvals")
    if budget.max_sum is not None:
        caps.append(f"{budget.max_sum:g} of arguments.{budget.sum_of}")
    scope = "" if budget.scope == "org" else f" per {budget.scope}"
    return f"at most {' and '.join(caps)} per {budget.per}{scope}"


async def _spend_budget(
    repo: PolicyRepository, org_id: uuid.UUID, rule: Rule, facts: RequestFacts, now: datetime
) -> str | None:
    """Spend the rule's budget for this approval: None when it fits (or there is no
    budget), else why the request goes to people."""
    budget = rule.budget
    if budget is None:
        return None
    amount = budget_amount(budget, facts.arguments)
    if amount is None:
        return f"no numeric arguments.{budget.sum_of} to count against the budget"
    max_count = budget.max_count if budget.max_count is not None else 2**31 - 1
    max_sum = budget.max_sum if budget.max_sum is not None else 1e300
    if amount > max_sum or not await repo.spend(
        org_id, rule.name, scope_key(budget, facts), window_start(budget, now), amount,
        max_count, max_sum,
    ):  # fmt: skip
        return f"budget spent: {_budget_text(budget)}"
    return None


def check_days(days: Any) -> int:
    if days is None:
        return 30
    if isinstance(days, bool) or not isinstance(days, int) or not 1 <= days <= 365:
        raise ValidationFailed.for_field("days", "an integer 1 to 365")
    return days


# The longest budget window is a day: a window that started two days ago is spent.
SPENT_WINDOW_AGE = timedelta(days=2)


async def purge_spent_budgets(repo: PolicyRepository, now: datetime) -> int:
    """Forget budget windows no create can spend in any more (the worker, hourly); how
    many were deleted."""
    return await repo.purge_spent_windows(now - SPENT_WINDOW_AGE)
