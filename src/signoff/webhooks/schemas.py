"""Bodies, queries and answers of the delivery-log API (decisions.md section 9)."""

from __future__ import annotations

import uuid
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from signoff.common.time import format_timestamp
from signoff.common.validation import MAX_URL_LENGTH, Count, settings_from, validate_callback_url
from signoff.models.webhooks import WebhookAttempt

MAX_LOG_LIMIT = 100


class ListDeliveriesQuery(BaseModel):
    """Query of ``GET /api/v1/webhooks``; unknown parameters are ignored."""

    model_config = ConfigDict(extra="ignore")

    request_id: uuid.UUID | None = None
    limit: Count = 20

    @model_validator(mode="before")
    @classmethod
    def _absent_means_default(cls, data: Any) -> Any:
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if v not in (None, "")}
        return data

    @field_validator("limit")
    @classmethod
    def _limit(cls, value: int) -> int:
        if not 1 <= value <= MAX_LOG_LIMIT:
            raise ValueError(f"must be between 1 and {MAX_LOG_LIMIT}")
        return value


class TestWebhook(BaseModel):
    """Body of ``POST /api/v1/test-webhook``."""

    model_config = ConfigDict(extra="ignore")

    url: str = Field(
        description="http or https (https only in production); private and loopback "
        "addresses are refused in production.",
        json_schema_extra={"format": "uri", "maxLength": MAX_URL_LENGTH},
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str, info: ValidationInfo) -> str:
        return validate_callback_url(value, https_only=settings_from(info.context).is_production)


class DeliveryAttemptOut(BaseModel):
    """A delivery log entry: interface.md 2.4 plus ``delivery_id``, ``response_body`` and
    ``error``. ``status_code`` is 0 when no HTTP answer came back (``error`` says why)."""

    id: uuid.UUID
    delivery_id: uuid.UUID
    request_id: uuid.UUID
    url: str
    status_code: int
    attempt: int
    success: bool
    duration_ms: int
    response_body: str | None
    error: str | None
    created_at: str


class DeliveryAttemptListOut(BaseModel):
    data: list[DeliveryAttemptOut]


class RetryOut(DeliveryAttemptOut):
    delivery_status: Literal["pending", "succeeded", "failed"]


class TestWebhookOut(BaseModel):
    success: bool
    status_code: int
    duration_ms: int
    error: str | None
    response_body: str | None


def attempt_to_dict(row: WebhookAttempt) -> dict[str, Any]:
    return {
        "id": str(row.id),
        "delivery_id": str(row.delivery_id),
        "request_id": str(row.request_id),
        "url": row.url,
        "status_code": row.status_code,
        "attempt": row.attempt,
        "success": row.success,
        "duration_ms": row.duration_ms,
        "response_body": row.response_body,
        "error": row.error,
        "created_at": format_timestamp(row.created_at),
    }
