"""Every table, imported in one place so Alembic and the app see the same metadata."""

from signoff.models.activity import AuditEvent, Comment
from signoff.models.approvals import ApprovalRequest, ApprovalStep, Vote
from signoff.models.audit import AuditChainHead, AuditChainLink, AuditCheckpoint, AuditUnsealed
from signoff.models.base import Base
from signoff.models.groups import Group, GroupMember
from signoff.models.notifications import (
    DecisionLink,
    Notification,
    NotificationAttempt,
    NotificationChannel,
    NotificationPlan,
    RoutingConfig,
)
from signoff.models.oauth import (
    DashboardSession,
    OAuthAuthorizationCode,
    OAuthBackchannelRequest,
    OAuthClient,
    OAuthToken,
)
from signoff.models.orgs import Connection, Organization, SetupLink, User
from signoff.models.passkeys import DecisionAssertion, Passkey, PasskeyChallenge
from signoff.models.passwords import PasswordLink
from signoff.models.policies import PolicyBudgetUsage, PolicyDocument, StandingApproval
from signoff.models.receipts import Receipt, SigningKey, StoredReceiptToken
from signoff.models.webhooks import WebhookAttempt, WebhookDelivery

__all__ = [
    "ApprovalRequest",
    "ApprovalStep",
    "AuditChainHead",
    "AuditChainLink",
    "AuditCheckpoint",
    "AuditEvent",
    "AuditUnsealed",
    "Base",
    "Comment",
    "Connection",
    "DashboardSession",
    "DecisionAssertion",
    "DecisionLink",
    "Group",
    "GroupMember",
    "Notification",
    "NotificationAttempt",
    "NotificationChannel",
    "NotificationPlan",
    "OAuthAuthorizationCode",
    "OAuthBackchannelRequest",
    "OAuthClient",
    "OAuthToken",
    "Organization",
    "Passkey",
    "PasskeyChallenge",
    "PasswordLink",
    "PolicyBudgetUsage",
    "PolicyDocument",
    "Receipt",
    "RoutingConfig",
    "SetupLink",
    "SigningKey",
    "StandingApproval",
    "StoredReceiptToken",
    "User",
    "Vote",
    "WebhookAttempt",
    "WebhookDelivery",
]
