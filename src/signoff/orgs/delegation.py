"""Out of office: "away from … until …, my delegate is …" (issue 36).

While a person is away, their delegate stands in for them: the inbox shows the delegate
the steps assigned to the away person, the delegate may vote them ("Bob for Ann"), and
notifications of those steps reach the delegate too. A delegate who is away as well
passes it on, one hop further at most (``MAX_HOPS``): Ann → Bob (away) → Carl lets Carl
vote for Ann; a third hop is never followed, whatever is stored.

Refused with a 400, nothing stored: oneself as delegate, someone not of the org or
deactivated, a window that ends before it starts or lasts longer than ``MAX_AWAY``, and a
loop (the delegate's own delegation, followed while the windows overlap, leads back).
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field

from signoff.common.time import format_timestamp
from signoff.errors import ValidationFailed
from signoff.models import User
from signoff.orgs.repository import OrgRepository

# How far a stand-in is passed on: Ann's delegate, and that delegate's delegate.
MAX_HOPS = 2
# The longest absence one delegation covers: a forgotten one ends on its own.
MAX_AWAY = timedelta(days=366)
# How far the loop check follows stored delegations (they are short chains in practice).
LOOP_SEARCH = 16


class DelegationIn(BaseModel):
    """``PUT /api/v1/me/delegation``: away from ``away_from`` (default: now) until
    ``away_until``, with ``delegate_id`` standing in."""

    model_config = ConfigDict(extra="forbid")

    away_from: AwareDatetime | None = Field(
        None, description="RFC 3339 with a time zone; default now."
    )
    away_until: AwareDatetime = Field(
        description="RFC 3339 with a time zone; after `away_from`, within 366 days of now."
    )
    delegate_id: uuid.UUID = Field(description="An active user of the org, not oneself.")


class DelegationOut(BaseModel):
    away_from: datetime | None
    away_until: datetime | None
    delegate_id: str | None
    delegate_name: str | None
    away_now: bool = Field(description="Whether the window holds now.")


def is_away(user: User, now: datetime) -> bool:
    return (
        user.delegate_id is not None
        and user.away_from is not None
        and user.away_until is not None
        and user.away_from <= now < user.away_until
    )


async def set_delegation(
    repo: OrgRepository, user: User, payload: DelegationIn, now: datetime
) -> User:
    """Store ``user``'s delegation, checked; returns the delegate."""
    start = payload.away_from or now
    end = payload.away_until
    if end <= start:
        raise ValidationFailed.for_field("away_until", "must be after away_from")
    if end <= now:
        raise ValidationFailed.for_field("away_until", "must be in the future")
    if end - now > MAX_AWAY:
        raise ValidationFailed.for_field("away_until", "must be within 366 days of now")
    if payload.delegate_id == user.id:
        raise ValidationFailed.for_field("delegate_id", "you cannot be your own delegate")
    # Both rows locked, in one order (PostgreSQL): two people naming each other at once
    # are checked one after the other, and the second sees the loop.
    locked = await repo.lock_users(user.org_id, {user.id, payload.delegate_id})
    delegate = locked.get(payload.delegate_id)
    if delegate is None:
        raise ValidationFailed.for_field("delegate_id", "is not a user of this organization")
    if not delegate.is_active:
        raise ValidationFailed.for_field("delegate_id", "is deactivated")
    await _refuse_loop(repo, user, delegate, start, end)
    user.away_from, user.away_until, user.delegate_id = start, end, delegate.id
    return delegate


async def _refuse_loop(
    repo: OrgRepository, user: User, delegate: User, start: datetime, end: datetime
) -> None:
    """Follow the delegate's own delegations, while their windows overlap this one's: a
    path back to ``user`` is a loop."""
    current = delegate
    for _ in range(LOOP_SEARCH):
        if current.delegate_id is None or not _overlaps(current, start, end):
            return
        if current.delegate_id == user.id:
            raise ValidationFailed.for_field(
                "delegate_id",
                f"{delegate.name} already delegates back to you (a loop): choose someone else",
            )
        following = await repo.get_user(user.org_id, current.delegate_id)
        if following is None:
            return
        current = following


def _overlaps(user: User, start: datetime, end: datetime) -> bool:
    assert user.away_from is not None and user.away_until is not None
    return user.away_from < end and start < user.away_until


def clear_delegation(user: User) -> None:
    user.away_from = user.away_until = user.delegate_id = None


def delegation_to_dict(user: User, delegate: User | None, now: datetime) -> dict[str, Any]:
    if user.delegate_id is None:
        return {
            "away_from": None,
            "away_until": None,
            "delegate_id": None,
            "delegate_name": None,
            "away_now": False,
        }
    return {
        "away_from": format_timestamp(user.away_from),
        "away_until": format_timestamp(user.away_until),
        "delegate_id": str(user.delegate_id),
        "delegate_name": delegate.name if delegate else None,
        "away_now": is_away(user, now),
    }
