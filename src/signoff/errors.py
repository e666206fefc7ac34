"""The error hierarchy: every refusal the service makes is one of these.

One handler (``app.py``) renders them as ``{"error": {code, message, details}}`` with the
status they carry, so endpoints and services only ever *raise*.
"""

from __future__ import annotations

from typing import Any, ClassVar


class AppError(Exception):
    status_code: ClassVar[int] = 500
    code: ClassVar[str] = "INTERNAL_ERROR"
    default_message: ClassVar[str] = "Internal server error."

    def __init__(
        self,
        message: str | None = None,
        details: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        self.message = message or self.default_message
        self.details = details or {}
        self.headers = headers or {}
        super().__init__(self.message)

    def to_body(self) -> dict[str, Any]:
        return {"error": {"code": self.code, "message": self.message, "details": self.details}}


class ValidationFailed(AppError):
    status_code = 400
    code = "VALIDATION_ERROR"
    default_message = "The request is not valid."

    @classmethod
    def for_field(cls, field: str, message: str) -> ValidationFailed:
        return cls(f"{field}: {message}", {"fields": [{"field": field, "message": message}]})

    @classmethod
    def for_fields(cls, fields: list[dict[str, str]]) -> ValidationFailed:
        summary = "; ".join(f"{f['field']}: {f['message']}" for f in fields[:5])
        return cls(summary or cls.default_message, {"fields": fields})


class Unauthorized(AppError):
    status_code = 401
    code = "UNAUTHORIZED"
    default_message = "Missing or invalid authentication."


class Forbidden(AppError):
    status_code = 403
    code = "FORBIDDEN"
    default_message = "You are not allowed to do this."


class PasskeyRequired(AppError):
    """The request's decision must be signed with the approver's passkey, which only its
    page in the dashboard can do: an API key, a token, a mail link or Slack cannot."""

    status_code = 403
    code = "PASSKEY_REQUIRED"
    default_message = (
        "This request needs the approver's passkey: decide it on its page in the dashboard."
    )

    def __init__(self, request_id: str, url: str | None = None) -> None:
        details = {"request_id": request_id}
        if url is not None:
            details["url"] = url
        super().__init__(None, details)


class InsufficientScope(AppError):
    status_code = 403
    code = "INSUFFICIENT_SCOPE"

    def __init__(self, required_scope: str) -> None:
        super().__init__(
            f"This call needs the scope {required_scope}.", {"required_scope": required_scope}
        )


class OwnerDeactivated(AppError):
    """A connection whose owner is deactivated keeps doing its integration's work (create,
    read, comment on and cancel its own requests), but no longer carries that person's
    authority: deciding, voting and admin acts need an active owner."""

    status_code = 403
    code = "OWNER_DEACTIVATED"
    default_message = (
        "The owner of this connection is deactivated: it may create, read, comment on and "
        "cancel its own requests, but not decide, vote or act as an admin. An admin can "
        "transfer the connection to an active user."
    )


class SelfApprovalForbidden(AppError):
    """The org asks for a second person (``self_approval: forbid``): whoever owns the
    connection that made a request, or its API key, may not decide it."""

    status_code = 403
    code = "SELF_APPROVAL_FORBIDDEN"
    default_message = (
        "This organization forbids self-approval: the person who owns the requesting "
        "connection (or its API key) may not decide this request. Another approver must."
    )


class NotFound(AppError):
    status_code = 404
    code = "NOT_FOUND"
    default_message = "Not found."


class MethodNotAllowed(AppError):
    status_code = 405
    code = "METHOD_NOT_ALLOWED"
    default_message = "Method not allowed."


class Conflict(AppError):
    status_code = 409
    code = "CONFLICT"
    default_message = "The request conflicts with the current state."


class RequestNotPending(Conflict):
    code = "REQUEST_NOT_PENDING"

    def __init__(self, status: str) -> None:
        super().__init__(f"The request is {status}, not pending.", {"status": status})


class StepNotPending(Conflict):
    code = "STEP_NOT_PENDING"

    def __init__(self, status: str) -> None:
        super().__init__(f"The step is {status}, not pending.", {"status": status})


class AlreadyVoted(Conflict):
    code = "ALREADY_VOTED"
    default_message = "You have already voted on this request."


class StepOutOfOrder(Conflict):
    code = "STEP_OUT_OF_ORDER"
    default_message = "Earlier steps of this sequential chain must be approved first."


class StepsLocked(Conflict):
    code = "STEPS_LOCKED"
    default_message = "The steps can no longer be replaced."


class ReceiptInvalid(AppError):
    status_code = 400
    code = "RECEIPT_INVALID"
    default_message = "The receipt is not one this server signed."


class ArgumentsMismatch(AppError):
    status_code = 400
    code = "ARGUMENTS_MISMATCH"
    default_message = "These arguments are not the ones the receipt was issued for."


class EditsNotAllowed(AppError):
    status_code = 400
    code = "EDITS_NOT_ALLOWED"
    default_message = (
        "This request has no arguments_schema: its arguments cannot be edited, only "
        "approved or rejected as they are."
    )


class ReceiptUsedUp(Conflict):
    code = "RECEIPT_USED_UP"
    default_message = "The receipt has been used as many times as it may be."


class ReceiptExpired(AppError):
    status_code = 410
    code = "RECEIPT_EXPIRED"
    default_message = "The receipt has expired."


class PayloadTooLarge(AppError):
    status_code = 413
    code = "PAYLOAD_TOO_LARGE"
    default_message = "The request body is too large."


class RateLimited(AppError):
    status_code = 429
    code = "RATE_LIMITED"
    default_message = "Rate limit exceeded."


class EmergencyStopActive(AppError):
    status_code = 503
    code = "EMERGENCY_STOP"
    default_message = "Emergency stop is active: writes are refused until it is turned off."


class ServiceUnavailable(AppError):
    status_code = 503
    code = "SERVICE_UNAVAILABLE"
    default_message = "The service is not ready."
