"""Shapes of the policy endpoints (the OpenAPI document's schemas; docs/policies.md)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from signoff.policies.standing import MAX_TTL_SECONDS, MAX_USES, check_constraint_shapes


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


class StandingGrantIn(BaseModel):
    """``standing`` beside an approval: approve later requests of the same connection
    and action type whose arguments meet ``arguments``, for ``ttl_seconds`` and/or
    ``max_uses`` of them (at least one; docs/policies.md, *Standing approvals*)."""

    model_config = ConfigDict(extra="forbid")

    ttl_seconds: int | None = Field(
        None, strict=True, ge=1, le=MAX_TTL_SECONDS, description="How long it stands."
    )
    max_uses: int | None = Field(
        None, strict=True, ge=1, le=MAX_USES, description="How many requests it approves."
    )
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        description='Per argument name `{"eq": value}` or `{"max": number}`; each must '
        "hold for the request approved now, and for every request it approves.",
    )

    @field_validator("arguments", mode="before")
    @classmethod
    def _arguments(cls, value: Any) -> Any:
        return check_constraint_shapes({} if value is None else value)

    @model_validator(mode="after")
    def _bounded(self) -> StandingGrantIn:
        if self.ttl_seconds is None and self.max_uses is None:
            raise ValueError("give ttl_seconds, max_uses or both: a standing approval ends")
        return self


class StandingApprovalOut(BaseModel):
    id: str
    connection_id: str
    action_type: str
    arguments: dict[str, Any]
    expires_at: str | None
    max_uses: int | None
    uses: int
    granted_by: dict[str, str]
    request_id: str
    created_at: str
    revoked_at: str | None


class StandingApprovalListOut(BaseModel):
    data: list[StandingApprovalOut]
