"""The Python client of signoff: ask a human before acting, and get the answer.

    from signoff_client import SignoffClient

    with SignoffClient("https://signoff.example.com", "gk_...") as signoff:
        request = signoff.create_approval("Deploy v2", "Roll out billing", "high")
        decided = signoff.wait_for_decision(request.id, timeout=600)

An approval with ``arguments`` yields a signed receipt: ``verify_receipt`` checks it
offline, ``client.redeem_receipt`` spends it once (docs/receipts.md).

See docs/clients.md in the signoff repository for the whole tour.
"""

from signoff_client._calls import RetryPolicy
from signoff_client._client import AsyncSignoffClient, SignoffClient, __version__
from signoff_client._decorator import requires_approval
from signoff_client._errors import (
    AlreadyVoted,
    APIConnectionError,
    APIError,
    ApprovalRejected,
    ArgumentsMismatch,
    Conflict,
    EmergencyStop,
    Forbidden,
    InsufficientScope,
    InvalidReceipt,
    InvalidSignature,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ReceiptExpired,
    ReceiptRefused,
    ReceiptUsedUp,
    RedeemArgumentsMismatch,
    RedeemExpired,
    RequestNotPending,
    ServerError,
    ServiceUnavailable,
    SignoffError,
    StepNotPending,
    StepOutOfOrder,
    StepsLocked,
    Unauthorized,
    UnknownReceiptKey,
    ValidationError,
    WaitTimeout,
)
from signoff_client._models import (
    Approval,
    ApprovalPage,
    AuditEvent,
    Comment,
    Pagination,
    Redemption,
    Step,
    StepVote,
    Vote,
)
from signoff_client._receipts import Receipt, arguments_hash, verify_receipt
from signoff_client._webhooks import verify_webhook

__all__ = [
    "APIConnectionError",
    "APIError",
    "AlreadyVoted",
    "Approval",
    "ApprovalPage",
    "ApprovalRejected",
    "ArgumentsMismatch",
    "AsyncSignoffClient",
    "AuditEvent",
    "Comment",
    "Conflict",
    "EmergencyStop",
    "Forbidden",
    "InsufficientScope",
    "InvalidReceipt",
    "InvalidSignature",
    "NotFound",
    "Pagination",
    "PayloadTooLarge",
    "RateLimited",
    "Receipt",
    "ReceiptExpired",
    "ReceiptRefused",
    "ReceiptUsedUp",
    "RedeemArgumentsMismatch",
    "RedeemExpired",
    "Redemption",
    "RequestNotPending",
    "RetryPolicy",
    "ServerError",
    "ServiceUnavailable",
    "SignoffClient",
    "SignoffError",
    "Step",
    "StepNotPending",
    "StepOutOfOrder",
    "StepVote",
    "StepsLocked",
    "Unauthorized",
    "UnknownReceiptKey",
    "ValidationError",
    "Vote",
    "WaitTimeout",
    "__version__",
    "arguments_hash",
    "requires_approval",
    "verify_receipt",
    "verify_webhook",
]
