"""Invitations and password resets by one-time link, and the password a person must
replace. Never commits.

- With SMTP configured, the dashboard's Add user and Reset password mail a link
  (``issue_link``) instead of showing a generated password. The link opens a page where
  its owner chooses a password (``redeem_link``), which signs them in.
- Without SMTP, the dashboard shows a generated password, and flags its owner
  (``User.must_change_password``): after signing in they choose their own
  (``choose_password``) before any other page opens.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from sqlalchemy.ext.asyncio import AsyncSession

from signoff.auth.principal import OrgMember
from signoff.auth.secrets import hash_password, verify_password
from signoff.config import Settings
from signoff.errors import NotFound, ValidationFailed
from signoff.invitations.mail import LinkMail, Purpose, link_message, message_id_domain
from signoff.invitations.repository import PasswordLinkRepository
from signoff.models import PasswordLink, User
from signoff.notifications.sending.channels import SmtpServer, send_mail
from signoff.oauth import credentials
from signoff.oauth.repository import OAuthRepository
from signoff.orgs.repository import OrgRepository
from signoff.orgs.service import MIN_PASSWORD_LENGTH
from signoff.webhooks.delivery import AttemptResult

logger = logging.getLogger(__name__)
# Longer than any password a person types; argon2 hashes what it is given.
MAX_PASSWORD_LENGTH = 1024


class LinkWork(Protocol):
    """What issuing, opening and redeeming links needs of a unit of work: the session
    their repository runs in, the orgs' repository for their users, and OAuth's for the
    sessions a new password ends."""

    @property
    def session(self) -> AsyncSession: ...

    @property
    def orgs(self) -> OrgRepository: ...

    @property
    def oauth(self) -> OAuthRepository: ...


class LinkGone(NotFound):
    default_message = "This link has been used or has expired."


@dataclass(frozen=True)
class IssuedLink:
    """A new link: its URL is readable only now (only its hash is stored)."""

    user: User
    purpose: Purpose
    url: str
    expires_at: datetime


async def send_link(
    smtp: SmtpServer, settings: Settings, issued: IssuedLink, by: OrgMember, now: datetime
) -> AttemptResult:
    """Mail the link to its person, now, through the notification channels' SMTP sender.
    Call it after the commit: no transaction waits on the mail server."""
    mail = LinkMail(
        purpose=issued.purpose,
        to_name=issued.user.name,
        to_email=issued.user.email,
        org_name=by.org_name,
        by_name=by.user_name,
        url=issued.url,
        expires_at=issued.expires_at,
    )
    message = link_message(
        mail,
        sender=settings.mail_from,
        now=now,
        domain=message_id_domain(settings.mail_from, settings.public_url),
    )
    result = await send_mail(smtp, message, settings.notification_timeout_seconds)
    if not result.success:
        logger.warning("%s link not mailed: %s", issued.purpose, result.error)
    return result


def link_url(settings: Settings, token: str) -> str:
    return f"{settings.public_url}/password/{token}"


async def issue_link(
    uow: LinkWork, user: User, purpose: Purpose, settings: Settings, now: datetime
) -> IssuedLink:
    """A one-time link for ``user`` to choose a password; their earlier links stop
    working (only the newest one of a person works)."""
    repo = PasswordLinkRepository(uow.session)
    await repo.retire_open_links(user.id, now)
    token = secrets.token_urlsafe(32)
    expires_at = now + timedelta(hours=settings.invitation_ttl_hours)
    await repo.add(
        PasswordLink(
            token_hash=credentials.hash_token(token),
            user_id=user.id,
            purpose=purpose,
            created_at=now,
            expires_at=expires_at,
        )
    )
    return IssuedLink(user, purpose, link_url(settings, token), expires_at)


async def invited_user_ids(uow: LinkWork, org_id: uuid.UUID, now: datetime) -> set[uuid.UUID]:
    return await PasswordLinkRepository(uow.session).invited_user_ids(org_id, now)


async def retire_links(uow: LinkWork, user_id: uuid.UUID, now: datetime) -> None:
    await PasswordLinkRepository(uow.session).retire_open_links(user_id, now)


def _token_hash(token: str) -> str | None:
    # Our tokens are 43 characters; anything far longer is not one of ours.
    return credentials.hash_token(token) if 0 < len(token) <= 100 else None


async def open_link(uow: LinkWork, token: str, now: datetime) -> tuple[PasswordLink, User]:
    """The link and its person, while it works (looking does not spend it: mail scanners
    open links)."""
    token_hash = _token_hash(token)
    repo = PasswordLinkRepository(uow.session)
    found = await repo.find_open(token_hash, now) if token_hash else None
    if found is None:
        raise LinkGone()
    return found


async def checked_password_hash(new: str, repeated: str) -> str:
    """The argon2 hash of a password a person chose, once it is acceptable. Hashing is
    slow on purpose: call it before the write transaction, not inside it."""
    if len(new) < MIN_PASSWORD_LENGTH:
        raise ValidationFailed.for_field(
            "new_password", f"must be at least {MIN_PASSWORD_LENGTH} characters"
        )
    if len(new) > MAX_PASSWORD_LENGTH:
        raise ValidationFailed.for_field(
            "new_password", f"must be at most {MAX_PASSWORD_LENGTH} characters"
        )
    if new != repeated:
        raise ValidationFailed.for_field("repeat_password", "does not match the new password")
    return await asyncio.to_thread(hash_password, new)


async def redeem_link(uow: LinkWork, token: str, password_hash: str, now: datetime) -> User:
    """Spend the link and give its person the password: every session of theirs ends
    (the caller starts the new one). ``LinkGone`` when it was used, expired, or its
    person deactivated; of two uses at once, one wins and the other gets ``LinkGone``."""
    token_hash = _token_hash(token)
    repo = PasswordLinkRepository(uow.session)
    user_id = await repo.redeem(token_hash, now) if token_hash else None
    user = await uow.orgs.find_user(user_id) if user_id is not None else None
    if user is None or user.deactivated_at is not None:
        raise LinkGone()
    user.password_hash = password_hash
    user.must_change_password = False
    await uow.oauth.delete_user_sessions(user.id, keep=None)
    return user


async def refuse_given_password(user: User, new: str) -> None:
    """The generated password cannot be chosen again: an admin has seen it."""
    if user.password_hash is None:
        return
    if await asyncio.to_thread(verify_password, user.password_hash, new):
        raise ValidationFailed.for_field(
            "new_password", "must differ from the password you were given"
        )


async def choose_password(
    uow: LinkWork, user_id: uuid.UUID, session_id: uuid.UUID, password_hash: str
) -> User:
    """A flagged person's own password replaces the generated one; their other sessions
    end (someone else may have signed in with the generated one)."""
    user = await uow.orgs.find_user(user_id)
    if user is None or user.deactivated_at is not None:
        raise NotFound("No such user.")
    user.password_hash = password_hash
    user.must_change_password = False
    await uow.oauth.delete_user_sessions(user.id, keep=session_id)
    return user
