"""Every failure the client reports is a ``SignoffError``.

The hierarchy, in the manner of httpx's own::

    SignoffError
    +-- APIConnectionError          the server could not be reached (after retries)
    +-- APIError                    the server answered with an error envelope
    |   +-- ValidationError         400 VALIDATION_ERROR (``fields``)
    |   +-- Unauthorized            401
    |   +-- Forbidden               403 (``InsufficientScope``: ``required_scope``)
    |   +-- NotFound                404
    |   +-- Conflict                409 (RequestNotPending, StepNotPending, AlreadyVoted,
    |   |                                StepOutOfOrder, StepsLocked)
    |   +-- PayloadTooLarge         413
    |   +-- RateLimited             429 (``retry_after``)
    |   +-- ServerError             5xx (EmergencyStop, ServiceUnavailable)
    +-- WaitTimeout                 no decision within the time given
    +-- ApprovalRejected            ``@requires_approval``: not approved
    +-- InvalidSignature            ``verify_webhook``: not a genuine callback
    +-- InvalidReceipt              a receipt not to act on (``verify_receipt``, redeem)
        +-- ReceiptExpired          past its ``exp``
        +-- ArgumentsMismatch       other arguments than the ones approved
        +-- UnknownReceiptKey       its ``kid`` is not in the key set

The redeem call's refusals are both an ``APIError`` (status, code) and an
``InvalidReceipt``: ``ReceiptRefused`` (400 RECEIPT_INVALID), ``ReceiptUsedUp`` (409),
``RedeemExpired`` (410, a ``ReceiptExpired``) and ``RedeemArgumentsMismatch`` (400, an
``ArgumentsMismatch``). ``except InvalidReceipt`` catches every receipt problem.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from signoff_client._models import Approval


class SignoffError(Exception):
    """Base class of every error this package raises."""


class APIConnectionError(SignoffError):
    """The request never got an answer: refused, reset or timed out, after any retries."""


class APIError(SignoffError):
    """The server refused the call with ``{"error": {code, message, details}}``."""

    status_code: int = 0
    default_code: str = "ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        details: Mapping[str, Any] | None = None,
        status_code: int | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.details: dict[str, Any] = dict(details or {})
        if status_code is not None:
            self.status_code = status_code
        self.headers: dict[str, str] = dict(headers or {})

    @property
    def status(self) -> int:
        """The HTTP status (an alias of ``status_code``)."""
        return self.status_code

    def __str__(self) -> str:
        return f"{self.status_code} {self.code}: {self.message}"


class ValidationError(APIError):
    status_code = 400
    default_code = "VALIDATION_ERROR"

    @property
    def fields(self) -> list[dict[str, str]]:
        """``[{"field": ..., "message": ...}]``: what was wrong, field by field."""
        fields = self.details.get("fields")
        return list(fields) if isinstance(fields, list) else []


class Unauthorized(APIError):
    status_code = 401
    default_code = "UNAUTHORIZED"


class Forbidden(APIError):
    status_code = 403
    default_code = "FORBIDDEN"


class InsufficientScope(Forbidden):
    default_code = "INSUFFICIENT_SCOPE"

    @property
    def required_scope(self) -> str | None:
        value = self.details.get("required_scope")
        return str(value) if value is not None else None


class NotFound(APIError):
    status_code = 404
    default_code = "NOT_FOUND"


class Conflict(APIError):
    status_code = 409
    default_code = "CONFLICT"


class RequestNotPending(Conflict):
    default_code = "REQUEST_NOT_PENDING"

    @property
    def request_status(self) -> str | None:
        """What the request is now: approved, rejected, cancelled or expired."""
        value = self.details.get("status")
        return str(value) if value is not None else None


class StepNotPending(Conflict):
    default_code = "STEP_NOT_PENDING"


class AlreadyVoted(Conflict):
    default_code = "ALREADY_VOTED"


class StepOutOfOrder(Conflict):
    default_code = "STEP_OUT_OF_ORDER"


class StepsLocked(Conflict):
    default_code = "STEPS_LOCKED"


class PayloadTooLarge(APIError):
    status_code = 413
    default_code = "PAYLOAD_TOO_LARGE"


class RateLimited(APIError):
    status_code = 429
    default_code = "RATE_LIMITED"

    @property
    def retry_after(self) -> float:
        """Seconds to wait before the next call, from the ``Retry-After`` header."""
        return retry_after_seconds(self.headers) or 1.0


class ServerError(APIError):
    status_code = 500
    default_code = "INTERNAL_ERROR"


class EmergencyStop(ServerError):
    """The organization (or the whole service) refuses writes until the stop is lifted."""

    status_code = 503
    default_code = "EMERGENCY_STOP"


class ServiceUnavailable(ServerError):
    status_code = 503
    default_code = "SERVICE_UNAVAILABLE"


class WaitTimeout(SignoffError):
    """No decision within the time given. ``approval`` is the last state read, if any."""

    def __init__(self, message: str, approval: Approval | None = None) -> None:
        super().__init__(message)
        self.approval = approval


class ApprovalRejected(SignoffError):
    """The request a ``@requires_approval`` call made ended other than approved."""

    def __init__(self, approval: Approval) -> None:
        self.approval = approval
        self.status = approval.status
        self.comment = approval.decision_comment
        self.decided_by_name = approval.decided_by_name
        who = f" by {approval.decided_by_name}" if approval.decided_by_name else ""
        why = f": {approval.decision_comment}" if approval.decision_comment else ""
        super().__init__(f"approval request {approval.id} was {approval.status}{who}{why}")


class InvalidSignature(SignoffError):
    """The callback's signature (or its timestamp) does not check out."""


class InvalidReceipt(SignoffError):
    """The receipt is not one to act on: malformed, forged, for something else, or spent."""


class ReceiptExpired(InvalidReceipt):
    """The receipt is past its ``exp``: ask for approval again."""


class ArgumentsMismatch(InvalidReceipt):
    """The arguments at hand are not the ones the receipt approved."""


class UnknownReceiptKey(InvalidReceipt):
    """The receipt names a key (``kid``) the key set does not have."""


class ReceiptRefused(APIError, InvalidReceipt):
    """The server refused to redeem the receipt: its signature, type or algorithm."""

    status_code = 400
    default_code = "RECEIPT_INVALID"


class ReceiptUsedUp(ReceiptRefused, Conflict):
    """The receipt has been redeemed as many times as it allows."""

    status_code = 409
    default_code = "RECEIPT_USED_UP"


class RedeemExpired(ReceiptRefused, ReceiptExpired):
    status_code = 410
    default_code = "RECEIPT_EXPIRED"


class RedeemArgumentsMismatch(ReceiptRefused, ArgumentsMismatch):
    status_code = 400
    default_code = "ARGUMENTS_MISMATCH"


_BY_CODE: dict[str, type[APIError]] = {
    cls.default_code: cls
    for cls in (
        ValidationError,
        Unauthorized,
        Forbidden,
        InsufficientScope,
        NotFound,
        Conflict,
        RequestNotPending,
        StepNotPending,
        AlreadyVoted,
        StepOutOfOrder,
        StepsLocked,
        PayloadTooLarge,
        RateLimited,
        EmergencyStop,
        ServiceUnavailable,
        ReceiptRefused,
        ReceiptUsedUp,
        RedeemExpired,
        RedeemArgumentsMismatch,
    )
}
_BY_STATUS: dict[int, type[APIError]] = {
    400: ValidationError,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    429: RateLimited,
    503: ServiceUnavailable,
}


def error_for(status_code: int, body: Any, headers: Mapping[str, str]) -> APIError:
    """The typed error for an answer: by its code first, by its HTTP status otherwise."""
    envelope = body.get("error") if isinstance(body, dict) else None
    if not isinstance(envelope, dict):
        envelope = {}
    code = envelope.get("code")
    message = envelope.get("message") or f"HTTP {status_code}"
    details = envelope.get("details")
    cls = _BY_CODE.get(code) if isinstance(code, str) else None
    if cls is None:
        cls = _BY_STATUS.get(status_code) or (ServerError if status_code >= 500 else APIError)
    return cls(
        str(message),
        code=code if isinstance(code, str) else None,
        details=details if isinstance(details, dict) else None,
        status_code=status_code,
        headers=headers,
    )


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """``Retry-After`` in seconds (we send delta-seconds; an HTTP date is read as unknown)."""
    value = next((v for k, v in headers.items() if k.lower() == "retry-after"), None)
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
