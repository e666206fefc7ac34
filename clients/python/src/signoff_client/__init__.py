"""The Python client of signoff: ask a human before acting, and get the answer.

    from signoff_client import SignoffClient

    with SignoffClient("https://signoff.example.com", "gk_...") as signoff:
        request = signoff.create_approval("Deploy v2", "Roll out billing", "high")
        decided = signoff.wait_for_decision(request.id, timeout=600)

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
    Conflict,
    EmergencyStop,
    Forbidden,
    InsufficientScope,
    InvalidSignature,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    RequestNotPending,
    ServerError,
    ServiceUnavailable,
    SignoffError,
    StepNotPending,
    StepOutOfOrder,
    StepsLocked,
    Unauthorized,
    ValidationError,
    WaitTimeout,
)
from signoff_client._models import (
    Approval,
    ApprovalPage,
    AuditEvent,
    Comment,
    Pagination,
    Step,
    StepVote,
    Vote,
)
from signoff_client._webhooks import verify_webhook

__all__ = [
    "APIConnectionError",
    "APIError",
    "AlreadyVoted",
    "Approval",
    "ApprovalPage",
    "ApprovalRejected",
    "AsyncSignoffClient",
    "AuditEvent",
    "Comment",
    "Conflict",
    "EmergencyStop",
    "Forbidden",
    "InsufficientScope",
    "InvalidSignature",
    "NotFound",
    "Pagination",
    "PayloadTooLarge",
    "RateLimited",
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
    "ValidationError",
    "Vote",
    "WaitTimeout",
    "__version__",
    "requires_approval",
    "verify_webhook",
]
