"""Bodies and answers of ``/api/v1/approvals/:id/steps`` (interface.md 4.7)."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from signoff.approvals.schemas import StepSummaryOut as StepOut
from signoff.approvals.state import RequestStatus
from signoff.common.openapi_declarations import default_setting, schema_only
from signoff.common.validation import Count, settings_from

# Orders are positions, not ids: room for gaps (10, 20, 30), and within every integer column.
MAX_STEP_ORDER = 1_000_000
# A group step's quorum: at most the group's active members, checked against them.
MAX_QUORUM = 10_000


class StepIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    # Required unless the step names a group (``_group_step`` fills it in with null).
    approver_id: Annotated[str | None, schema_only(format="uuid")] = Field(
        description="A user of the organization; null or absent when `group_id` is given."
    )
    group_id: Annotated[str | None, schema_only(format="uuid")] = Field(
        default=None,
        description="A group of the organization instead of a person: any "
        "`required_approvals` of its active members approve the step (a quorum).",
    )
    required_approvals: Annotated[Count | None, schema_only(minimum=1, maximum=MAX_QUORUM)] = Field(
        default=None,
        description="With `group_id`: how many distinct members must approve (default 1, "
        "at most the group's active members).",
    )
    step_order: Annotated[Count, schema_only(minimum=1, maximum=MAX_STEP_ORDER)] = Field(
        description="Position in the chain; distinct positive integers."
    )

    @field_validator("approver_id")
    @classmethod
    def _approver_id(cls, value: str | None) -> str | None:
        try:
            value is None or uuid.UUID(value)
        except ValueError:
            raise ValueError("is not a user of this organization") from None
        return value

    @field_validator("group_id")
    @classmethod
    def _group_id(cls, value: str | None) -> str | None:
        try:
            value is None or uuid.UUID(value)
        except ValueError:
            raise ValueError("is not a group of this organization") from None
        return value

    @field_validator("required_approvals")
    @classmethod
    def _required_approvals(cls, value: int | None) -> int | None:
        if value is not None and not 1 <= value <= MAX_QUORUM:
            raise ValueError(f"must be an integer from 1 to {MAX_QUORUM}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _group_step(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("group_id") is not None:
            return {"approver_id": None, **data}
        return data

    @model_validator(mode="after")
    def _one_approver(self) -> StepIn:
        if (self.approver_id is None) == (self.group_id is None):
            raise ValueError("give exactly one of approver_id and group_id")
        if self.group_id is None and self.required_approvals not in (None, 1):
            raise ValueError("required_approvals applies to a group step only")
        return self

    @field_validator("step_order")
    @classmethod
    def _step_order(cls, value: int) -> int:
        if not 1 <= value <= MAX_STEP_ORDER:
            raise ValueError(f"must be an integer from 1 to {MAX_STEP_ORDER}")
        return value


class SetSteps(BaseModel):
    """Body of ``POST /api/v1/approvals/:id/steps``: replaces the whole chain."""

    model_config = ConfigDict(extra="ignore")

    steps: Annotated[
        list[StepIn], schema_only(minItems=1, maxItems=default_setting("max_steps"))
    ] = Field(
        description="Only an org admin, or the connection that created the request, may set "
        "steps; only an admin may set fewer than the request's `required_approvals`."
    )

    @field_validator("steps")
    @classmethod
    def _steps(cls, value: list[StepIn], info: ValidationInfo) -> list[StepIn]:
        limit = settings_from(info.context).max_steps
        if not 1 <= len(value) <= limit:
            raise ValueError(f"must hold 1 to {limit} steps")
        orders = [step.step_order for step in value]
        if len(set(orders)) != len(orders):
            raise ValueError("step_order values must be distinct")
        return value


class ConfiguredStepOut(BaseModel):
    id: uuid.UUID
    step_order: int
    approver_id: uuid.UUID | None
    status: Literal["pending"]
    group_id: uuid.UUID | None = Field(default=None, description="A group step only.")
    group_name: str | None = Field(default=None, description="A group step only.")
    required_approvals: int | None = Field(default=None, description="A group step only.")
    current_approvals: int | None = Field(default=None, description="A group step only.")


class StepListOut(BaseModel):
    data: list[StepOut]


class ConfiguredStepListOut(BaseModel):
    data: list[ConfiguredStepOut]


class StepVoteOut(StepOut):
    # A group step's quorum (its own counts; the request's are below).
    step_required_approvals: int | None = Field(default=None, description="A group step only.")
    step_current_approvals: int | None = Field(default=None, description="A group step only.")
    request_status: RequestStatus
    current_approvals: int
    required_approvals: int
    receipt_issued: bool = Field(
        description="This vote approved the request and issued its receipt (docs/receipts.md)."
    )
    receipt: None = Field(
        default=None,
        description="Always null: the receipt is signed on read, shown by "
        "`GET /api/v1/approvals/:id` (and its long poll), the callback, the client library "
        "and the MCP tools, never by a vote's answer.",
    )
    callback_delivered: bool
