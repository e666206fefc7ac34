"""Response shapes of the notification endpoints (the OpenAPI document's schemas)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from signoff.notifications.routing.document import RoutingDocument, RoutingWarning


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


class RoutingOut(RoutingDocument):
    """The document as GET and PUT answer it: secrets masked, and ``warnings``."""

    warnings: list[RoutingWarning] = Field(
        description="What the document cannot do yet on this server, though saved: an "
        "e-mail channel while `SIGNOFF_SMTP_URL` is unset. Empty when all is well."
    )
