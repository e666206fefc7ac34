"""OAuth 2.0 clients, authorization codes, tokens and dashboard sign-in sessions.

Every credential we hand out (client secret, code, access and refresh token, session
cookie) is stored as its SHA-256 only: they are long random strings, so a fast hash is
enough, and a leaked table grants nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from signoff.common.ids import new_id
from signoff.common.time import utcnow
from signoff.models.base import Base, JSONType


class OAuthClient(Base):
    """An integration registered under a connection; its calls count against that
    connection's rate limit (decisions.md section 1)."""

    __tablename__ = "oauth_clients"
    __table_args__ = (Index(None, "connection_id", "created_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    # The public identifier the client sends; random, not the row id.
    client_id: Mapped[str] = mapped_column(String(64), unique=True)
    org_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    connection_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("connections.id", ondelete="CASCADE")
    )
    name: Mapped[str] = mapped_column(String(200))
    redirect_uris: Mapped[list[str]] = mapped_column(JSONType)
    is_public: Mapped[bool] = mapped_column(Boolean, default=False)
    # Null for public clients, which cannot keep a secret.
    secret_hash: Mapped[str | None] = mapped_column(String(64), default=None)
    secret_prefix: Mapped[str | None] = mapped_column(String(16), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Deleted clients stay for the record; their tokens stop working at once.
    deleted_at: Mapped[datetime | None] = mapped_column(default=None)
    # OpenID CIBA: whether it may ask for a person's approval out of band, and how it
    # learns of the decision ("poll" or "ping"; ping POSTs to the notification endpoint).
    ciba_enabled: Mapped[bool] = mapped_column(Boolean, default=False)
    ciba_delivery_mode: Mapped[str | None] = mapped_column(String(10), default=None)
    ciba_notification_endpoint: Mapped[str | None] = mapped_column(Text, default=None)


class OAuthAuthorizationCode(Base):
    __tablename__ = "oauth_authorization_codes"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    code_hash: Mapped[str] = mapped_column(String(64), unique=True)
    client_pk: Mapped[uuid.UUID] = mapped_column(ForeignKey("oauth_clients.id", ondelete="CASCADE"))
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    redirect_uri: Mapped[str] = mapped_column(Text)
    # Whether the authorization request named redirect_uri: then the token request must too.
    redirect_uri_explicit: Mapped[bool] = mapped_column(Boolean, default=True)
    scope: Mapped[str] = mapped_column(String(200))
    code_challenge: Mapped[str | None] = mapped_column(String(128), default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    # Set by the one exchange that wins; a second presentation is a replay.
    used_at: Mapped[datetime | None] = mapped_column(default=None)


class OAuthToken(Base):
    """An access or refresh token.

    ``family_id`` is the id of the authorization code the chain started from: every token
    obtained from that code, and from refreshes of those, shares it, so a replayed code or
    a replayed (already rotated) refresh token revokes the whole family at once.
    """

    __tablename__ = "oauth_tokens"
    # user_id: a person's authorizations (the account page), and every token of theirs
    # revoked at once when they are deactivated.
    __table_args__ = (Index(None, "family_id"), Index(None, "client_pk"), Index(None, "user_id"))

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    kind: Mapped[str] = mapped_column(String(10))  # "access" or "refresh"
    client_pk: Mapped[uuid.UUID] = mapped_column(ForeignKey("oauth_clients.id", ondelete="CASCADE"))
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    scope: Mapped[str] = mapped_column(String(200))
    family_id: Mapped[uuid.UUID] = mapped_column()
    # The refresh token this one was issued in exchange for (null for the first pair).
    parent_id: Mapped[uuid.UUID | None] = mapped_column(default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    # Refresh tokens only: when it was exchanged. Presenting it again is a replay.
    rotated_at: Mapped[datetime | None] = mapped_column(default=None)


class OAuthBackchannelRequest(Base):
    """An OpenID CIBA authentication request: the approval request it created (whose id is
    the ``auth_req_id``), the client that may poll for it, and what the poll needs.

    Keyed by the approval request's id, so a poll is one primary-key lookup. The pace
    between polls (``slow_down``) is kept by the rate limiter's store, not here: a poll
    writes nothing.
    """

    __tablename__ = "oauth_backchannel_requests"

    request_id: Mapped[uuid.UUID] = mapped_column(
        ForeignKey("approval_requests.id", ondelete="CASCADE"), primary_key=True
    )
    client_pk: Mapped[uuid.UUID] = mapped_column(ForeignKey("oauth_clients.id", ondelete="CASCADE"))
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"))
    scope: Mapped[str] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
    # Set by the one token request that wins: a token is issued once per auth_req_id.
    token_issued_at: Mapped[datetime | None] = mapped_column(default=None)


class DashboardSession(Base):
    """A browser session of the sign-in and consent pages.

    Anonymous (``user_id`` null) until the person signs in; signing in issues a new
    session id, so a session id planted before sign-in is worth nothing after it.
    """

    __tablename__ = "dashboard_sessions"
    __table_args__ = (Index(None, "expires_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    user_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("users.id", ondelete="CASCADE"), default=None
    )
    # Compared with the hidden form field on every POST; never leaves this session.
    csrf_token: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column()
