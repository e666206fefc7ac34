"""Response shapes of the notification endpoints (the OpenAPI document's schemas)."""

from __future__ import annotations

from pydantic import BaseModel


class NotificationOut(BaseModel):
    id: str
    kind: str  # created | step_opened | reminder | escalated | expiry_warning
    channel: str
    channel_type: str  # email | slack | teams | discord | webhook
    recipient: str
    status: str  # pending | sent | failed | cancelled
    attempts: int
    due_at: str | None
    sent_at: str | None
    error: str | None


class NotificationListOut(BaseModel):
    data: list[NotificationOut]
