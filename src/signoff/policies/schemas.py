"""Shapes of the policy endpoints (the OpenAPI document's schemas; docs/policies.md)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class BudgetIn(BaseModel):
    per: Literal["hour", "day"]
    scope: Literal["org", "connection", "action_type"] = "org"
    max_count: int | None = Field(None, ge=1, le=1_000_000)
    max_sum: float | None = Field(None, gt=0, le=1e12)
    sum_of: str | None = Field(None, description="The numeric argument `max_sum` caps.")


class GroupQuorum(BaseModel):
    group: str = Field(max_length=100, description="A group's name, ignoring case.")
    count: int = Field(1, ge=1, le=20, description="Distinct members who must approve.")


class PolicyRule(BaseModel):
    name: str = Field(max_length=100)
    condition: str = Field(max_length=2000, description="A CEL expression over `request`, `now`.")
    effect: Literal["auto_approve", "auto_reject", "require", "escalate"]
    reason: str | None = Field(None, description="`auto_reject`: why, told to the caller.")
    required_approvals: int | None = Field(None, ge=1, le=20, description="`require`.")
    priority: Literal["low", "medium", "high", "critical"] | None = Field(
        None, description="`escalate`: the priority to set."
    )
    expires_in_seconds: int | None = Field(None, description="`escalate`: the expiry to set.")
    budget: BudgetIn | None = Field(None, description="`auto_approve` only.")
    passkey: bool | None = Field(
        None, description="`require` or `escalate`: decisions need the approver's passkey."
    )
    groups: list[GroupQuorum] | None = Field(
        None,
        description="`require` instead of `required_approvals`: one chain step per group, "
        "approved by `count` distinct active members (docs/policies.md).",
    )
    order: Literal["parallel", "sequential"] | None = Field(
        None, description="`require` with `groups`: the steps at once (default) or in order."
    )


class PolicyDocumentIn(BaseModel):
    rules: list[PolicyRule] = Field(max_length=1000)


class Author(BaseModel):
    id: str
    name: str | None


class PolicyVersionOut(BaseModel):
    version: int
    author: Author | None
    created_at: str | None
    restored_from: int | None
    rule_count: int


class PolicyDocumentOut(PolicyVersionOut):
    rules: list[PolicyRule]


class PolicyVersionListOut(BaseModel):
    data: list[PolicyVersionOut]


class DryRunIn(PolicyDocumentIn):
    days: int = Field(30, ge=1, le=365)


class RuleCount(BaseModel):
    name: str
    effect: str
    matched: int


class Disagreement(BaseModel):
    request_id: str
    number: int | None
    title: str
    rule: str
    would_have: str
    actual_status: str
    created_at: str | None
    link: str


class BudgetExhausted(BaseModel):
    rule: str
    first_exhausted_at: str | None
    scope_key: str


class DryRunOut(BaseModel):
    days: int
    requests: int
    rules: list[RuleCount]
    decisions: dict[str, int]
    disagreement_count: int
    disagreements: list[Disagreement]
    budgets_exhausted: list[BudgetExhausted]
