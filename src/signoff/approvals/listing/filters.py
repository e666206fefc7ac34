"""The filters of a list page (``ListFilters``) as SQL conditions, their values all
parameters: statuses as reads show them before the sweep has run, a decided window,
the requests awaiting a person's vote (also the inbox's test, ``votable_now``).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    and_,
    bindparam,
    exists,
    func,
    or_,
    select,
)
from sqlalchemy.orm import InstrumentedAttribute, aliased
from sqlalchemy.sql import operators
from sqlalchemy.sql.elements import UnaryExpression
from sqlalchemy.sql.selectable import FromClause

from signoff.approvals.json_in_sql import is_past_expiry as _is_past_expiry
from signoff.models import ApprovalRequest, ApprovalStep, GroupMember, Vote
from signoff.orgs.repository import stood_in_for


@dataclass(frozen=True)
class ListFilters:
    statuses: Sequence[str] | None = None
    priority: str | None = None
    action_type: str | None = None
    source: str | None = None
    search: str | None = None
    created_after: datetime | None = None
    created_before: datetime | None = None
    decided_after: datetime | None = None
    decided_before: datetime | None = None
    assigned_to: uuid.UUID | None = None
    # Keyset pagination: only requests after this one in list order (newest first).
    after: uuid.UUID | None = None
    # Every request but this one (a search for a number lists that request first, apart).
    excluded_id: uuid.UUID | None = None


# List filters compared with a value of their own, passed as a parameter of that name.
VALUE_FILTERS = (
    "priority",
    "action_type",
    "source",
    "created_after",
    "created_before",
    "decided_after",
    "decided_before",
    "assigned_to",
    "excluded_id",
)


def filter_params(org_id: uuid.UUID, filters: ListFilters, now: datetime) -> dict[str, Any]:
    """The parameters of a list query for ``filters`` but the search and the page."""
    params: dict[str, Any] = {"org_id": org_id, "now": now}
    params.update(
        (name, getattr(filters, name))
        for name in VALUE_FILTERS
        if getattr(filters, name) is not None
    )
    return params


def filter_conditions(
    statuses: tuple[str, ...],
    filters: frozenset[str],
    *,
    statuses_as: ColumnElement[bool] | None = None,
    decided_as: ColumnElement[bool] | None = None,
) -> list[ColumnElement[bool]]:
    """The filters' conditions. ``statuses_as``, ``decided_as``: the status filter's and
    the decided window's conditions written another way that chooses the same requests
    (SQLite reads those that are an OR of two sets of rows as the rowids of the sets:
    ``sqlite_planner``)."""
    conditions: list[ColumnElement[bool]] = []
    if statuses_as is not None:
        conditions.append(statuses_as)
    elif statuses:
        conditions.append(or_(*(status_condition(status) for status in statuses)))
    for name in ("priority", "action_type", "source"):
        if name in filters:
            conditions.append(getattr(ApprovalRequest, name) == bindparam(name))
    if "created_after" in filters:
        conditions.append(ApprovalRequest.created_at >= bindparam("created_after"))
    if "created_before" in filters:
        conditions.append(ApprovalRequest.created_at < bindparam("created_before"))
    if decided_as is not None:
        conditions.append(decided_as)
    elif "decided_after" in filters or "decided_before" in filters:
        conditions.append(decided_window(statuses, filters))
    if "assigned_to" in filters:
        conditions.append(_awaiting_vote_of(bindparam("assigned_to")))
    if "excluded_id" in filters:
        conditions.append(ApprovalRequest.id != bindparam("excluded_id"))
    return conditions


def decided_window(statuses: tuple[str, ...], filters: frozenset[str]) -> ColumnElement[bool]:
    """A decided window that agrees with reads before the sweep has run: a pending request
    past its deadline reads as decided at its ``expires_at``.

    Written as one range of ``decided_at`` (the org's index on it reads it) or one range of
    the pending deadlines (their partial index), since a pending request has no
    ``decided_at`` and a decided one is not pending; and as the first alone when the
    status filter keeps no request that may read as expired. As two ORs, one per bound,
    PostgreSQL could read only one bound through an index."""
    decided = and_(*decided_window_bounds(ApprovalRequest.decided_at, filters))
    if only_decided_statuses(statuses):
        if "decided_before" not in filters:
            return decided
        # Implied (a request is decided after it was created), and a range of the list's
        # order: a page walking the filter's index newest first starts at the window's end
        # instead of reading every later request first.
        return and_(decided, ApprovalRequest.created_at < bindparam("decided_before"))
    expiring = and_(
        ApprovalRequest.status == "pending",
        _is_past_expiry(),
        *decided_window_bounds(ApprovalRequest.expires_at, filters),
    )
    return or_(decided, expiring)


def only_decided_statuses(statuses: tuple[str, ...]) -> bool:
    """Whether a status filter keeps only requests that cannot read as expired."""
    return bool(statuses) and not {"pending", "expired"} & set(statuses)


def decided_window_bounds(
    moment: ColumnElement[Any] | InstrumentedAttribute[Any], filters: frozenset[str]
) -> list[ColumnElement[bool]]:
    """The decided window's bounds on ``moment`` (a decision's or a deadline's time)."""
    bounds = []
    if "decided_after" in filters:
        bounds.append(moment >= bindparam("decided_after"))
    if "decided_before" in filters:
        bounds.append(moment < bindparam("decided_before"))
    return bounds


def status_condition(status: str) -> ColumnElement[bool]:
    """A status filter that agrees with what reads show before the sweep has run."""
    if status == "pending":
        return and_(ApprovalRequest.status == "pending", ~_is_past_expiry())
    if status == "expired":
        return or_(
            ApprovalRequest.status == "expired",
            and_(ApprovalRequest.status == "pending", _is_past_expiry()),
        )
    return ApprovalRequest.status == status


def _awaiting_vote_of(user_id: BindParameter[Any]) -> ColumnElement[bool]:
    """Pending requests a user can vote on right now: the approver's inbox
    (``votable_now``), the steps of those they stand in for included."""
    return and_(
        status_condition("pending"),
        votable_now(user_id, ApprovalRequest.__table__, now=bindparam("now")),
    )


def votable_now(
    user_id: BindParameter[Any],
    rows: FromClause,
    dialect: str = "postgresql",
    now: BindParameter[Any] | None = None,
) -> ColumnElement[bool]:
    """Requests of ``rows`` the user can vote on now, if pending.

    Either a count-based request they have not voted on yet, or a pending step of theirs
    that is votable now (for a sequential chain: every lower step approved). Which of the
    two applies is one column (``has_steps``: steps exist only while it is set), tested
    first: a count-based request costs one lookup in the unique index of votes. On
    SQLite a request's steps are found by the request (``_not_indexed``): its planner,
    without statistics, would pick the approver's index, and read all of that person's
    pending steps for every request tested.

    With ``now``, the steps of the away people the user stands in for count too (out of
    office, ``orgs.repository.stood_in_for``): an uncorrelated subquery, read once per
    statement by either planner (two probes of ``ix_users_delegate_id``), never per row.
    """
    step, earlier = aliased(ApprovalStep), aliased(ApprovalStep)
    earlier_not_approved = exists().where(
        earlier.request_id == step.request_id,
        earlier.step_order < step.step_order,
        earlier.status != "approved",
    )
    keep_off_index: Callable[[Any], ColumnElement[Any]]
    keep_off_index = _not_indexed if dialect == "sqlite" else _as_column
    approver = keep_off_index(step.approver_id)
    mine = approver == user_id
    if now is not None:
        mine = or_(mine, approver.in_(stood_in_for(user_id, now)))
    # A group's step: the user is one of its members (an uncorrelated subquery on
    # ``ix_group_members_user_id``, read once per statement) and has not voted it yet.
    # Cast by the user, or for them by their delegate while they were away.
    voted_by_them = exists().where(
        Vote.step_id == step.id, or_(Vote.user_id == user_id, Vote.on_behalf_of == user_id)
    )
    theirs = and_(
        keep_off_index(step.group_id).in_(
            select(GroupMember.group_id).where(GroupMember.user_id == user_id)
        ),
        ~voted_by_them,
    )
    if now is not None:
        # Or a group's step with a member the user stands in for, whose vote (their own
        # or a delegate's for them) is not cast yet; the user casts one vote a step.
        away = aliased(GroupMember)
        counted = func.coalesce(Vote.on_behalf_of, Vote.user_id)
        stood_in = exists().where(
            away.group_id == step.group_id,
            away.user_id.in_(stood_in_for(user_id, now)),
            ~exists().where(Vote.step_id == step.id, counted == away.user_id),
        )
        theirs = or_(theirs, and_(stood_in, ~voted_by_them))
    votable_step = exists().where(
        step.request_id == rows.c.id,
        or_(mine, theirs),
        keep_off_index(step.status) == "pending",
        or_(rows.c.is_sequential.is_(False), ~earlier_not_approved),
    )
    not_yet_voted = ~exists().where(
        Vote.request_id == rows.c.id, Vote.user_id == user_id, Vote.step_id.is_(None)
    )
    return or_(
        and_(rows.c.has_steps.is_(False), not_yet_voted),
        and_(rows.c.has_steps.is_(True), votable_step),
    )


def _not_indexed(value: Any) -> ColumnElement[Any]:
    """SQLite's unary ``+``: the same value, which its planner will not look up by index."""
    return UnaryExpression(value, operator=operators.custom_op("+"), type_=value.type)


def _as_column(value: Any) -> ColumnElement[Any]:
    """PostgreSQL's: the value itself, typed as a column (its planner needs no hint)."""
    return cast("ColumnElement[Any]", value)
