"""Bodies and answers of ``/api/v1/approvals/:id/steps`` (interface.md 4.7)."""

from __future__ import annotations

import uuid
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from signoff.approvals.schemas import StepSummaryOut as StepOut
from signoff.approvals.state import RequestStatus
from signoff.common.openapi_declarations import default_setting, schema_only
from signoff.common.validation import Count, settings_from

# Orders are positions, not ids: room for gaps (10, 20, 30), and within every integer column.
MAX_STEP_ORDER = 1_000_000


class StepIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    approver_id: Annotated[str, schema_only(format="uuid")] = Field(
        description="A user of the organization."
    )
    step_order: Annotated[Count, schema_only(minimum=1, maximum=MAX_STEP_ORDER)] = Field(
        description="Position in the chain; distinct positive integers."
    )

    @field_validator("approver_id")
    @classmethod
    def _approver_id(cls, value: str) -> str:
        try:
            uuid.UUID(value)
        except ValueError:
            raise ValueError("is not a user of this organization") from None
        return value

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
    approver_id: uuid.UUID
    status: Literal["pending"]


class StepListOut(BaseModel):
    data: list[StepOut]


class ConfiguredStepListOut(BaseModel):
    data: list[ConfiguredStepOut]


class StepVoteOut(StepOut):
    request_status: RequestStatus
    current_approvals: int
    required_approvals: int
    callback_delivered: bool
