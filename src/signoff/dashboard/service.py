"""The dashboard's use cases, on the same services and repositories as the API.

Never commits: the endpoint's ``ctx.transaction()`` does. Nothing here speaks HTTP.
"""

from __future__ import annotations

import asyncio
import csv
import functools
import io
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.approvals import service as approvals
from signoff.approvals.json_answers import request_to_dict
from signoff.approvals.listing import (
    InboxFilters,
    ListFilters,
    bounded_total,
    read_inbox,
    read_page,
)
from signoff.approvals.repository import ApprovalRepository
from signoff.approvals.typed_rows import StepRecord, VoteRecord
from signoff.auth.principal import OrgMember
from signoff.auth.secrets import hash_password, verify_password
from signoff.common.time import utcnow
from signoff.errors import Conflict, NotFound, ValidationFailed
from signoff.models import AuditEvent, Comment, OAuthClient, User
from signoff.models.webhooks import WebhookAttempt
from signoff.notifications.planning.service import NotificationLine, notification_log
from signoff.notifications.repository import NotificationRepository
from signoff.oauth import credentials
from signoff.oauth.repository import OAuthRepository
from signoff.orgs import service as orgs
from signoff.orgs.repository import OrgRepository
from signoff.storage import QueryRunner
from signoff.webhooks.repository import WebhookRepository

PAGE_SIZE = 25
CSV_MAX_ROWS = 10_000
DECIDED_STATUSES = ("approved", "rejected", "expired", "cancelled")
PRIORITIES = ("critical", "high", "medium", "low")


# ---- first run ----


async def issue_setup_token(repo: OrgRepository, now: datetime) -> str | None:
    """A setup token if the database holds no organization yet, else None.

    It replaces the token of any earlier start: only the newest link works."""
    if await repo.any_org_exists():
        return None
    token = credentials.generate_session_token()
    await repo.replace_setup_link(credentials.hash_token(token), now)
    return token


class SetupDone(Conflict):
    """An organization exists: signoff is set up, and no setup link works any more."""

    default_message = "signoff is already set up: an organization exists."


class SetupLinkInvalid(NotFound):
    """Not the newest setup link (an earlier start's, or mistyped), and nothing is set up."""

    default_message = "This setup link is not valid."


async def check_setup_link(repo: OrgRepository, token: str) -> None:
    """Raise ``SetupDone`` or ``SetupLinkInvalid`` unless this link may set signoff up."""
    if await repo.any_org_exists():
        raise SetupDone()
    if not _plausible(token) or not await repo.setup_link_is(credentials.hash_token(token)):
        raise SetupLinkInvalid()


def _plausible(token: str) -> bool:
    return bool(token) and len(token) <= 100


@dataclass(frozen=True)
class SetupForm:
    org_name: str
    name: str
    email: str
    password: str
    # The org's ``self_approval`` setting: the setup page offers "forbid", checked.
    self_approval: str = "allow"


async def complete_setup(repo: OrgRepository, token: str, form: SetupForm, now: datetime) -> User:
    """Create the first organization and its admin; the link stops working.

    The claim comes first: it is a write on the setup link's one row, so of two
    submissions (of this process or any other) the database lets one through, and the
    other finds the link used once the first has committed. Only then is the absence of
    any organization read, so that read sees every organization committed before.
    """
    if not (_plausible(token) and await repo.claim_setup_link(credentials.hash_token(token), now)):
        await check_setup_link(repo, token)  # says which refusal it is
        raise SetupLinkInvalid()
    if await repo.any_org_exists():
        raise SetupDone()
    org = await orgs.create_org(repo, form.org_name, now)
    org.self_approval = form.self_approval  # written with the org, at the commit
    return await orgs.create_user(
        repo,
        org.id,
        email=form.email,
        name=form.name,
        role="admin",
        password=form.password,
        now=now,
    )


# ---- sign-in ----


async def check_sign_in(repo: OrgRepository, email: str, password: str) -> User | None:
    """The active user with this e-mail and password (of whichever org), or None.

    An unknown e-mail costs one argon2 verification too, so timing tells nothing.
    """
    candidates = await repo.find_active_users_by_email(email.strip().lower())
    hashes = [(user, user.password_hash) for user in candidates if user.password_hash]
    if not hashes:
        await asyncio.to_thread(_matches, _dummy_password_hash(), password)
        return None
    for user, stored in hashes:
        if await asyncio.to_thread(_matches, stored, password):
            return user
    return None


@functools.cache
def _dummy_password_hash() -> str:
    return hash_password(credentials.generate_csrf_token())


def _matches(stored: str, password: str) -> bool:
    return verify_password(stored, password)


async def change_password(
    orgs_repo: OrgRepository,
    oauth_repo: OAuthRepository,
    user_id: uuid.UUID,
    session_id: uuid.UUID,
    current: str,
    new: str,
) -> None:
    """Set a new password; every other session of the person ends."""
    user = await orgs_repo.find_user(user_id)
    if user is None or not user.password_hash:
        raise ValidationFailed.for_field("current_password", "is not correct")
    if not await asyncio.to_thread(verify_password, user.password_hash, current):
        raise ValidationFailed.for_field("current_password", "is not correct")
    if len(new) < orgs.MIN_PASSWORD_LENGTH:
        raise ValidationFailed.for_field(
            "new_password", f"must be at least {orgs.MIN_PASSWORD_LENGTH} characters"
        )
    user.password_hash = await asyncio.to_thread(hash_password, new)
    await oauth_repo.delete_user_sessions(user.id, keep=session_id)


# ---- lists: the inbox and the history ----


@dataclass(frozen=True)
class ListView:
    """The filters of a list page, as the query string gives them."""

    status: str | None = None
    priority: str | None = None
    action_type: str | None = None
    source: str | None = None
    search: str | None = None
    page: int = 1

    @classmethod
    def from_query(cls, query: dict[str, str], statuses: Sequence[str]) -> ListView:
        def pick(name: str, allowed: Sequence[str] | None = None) -> str | None:
            value = (query.get(name) or "").strip()[:100]
            if not value or (allowed is not None and value not in allowed):
                return None
            return value

        try:
            page = max(1, min(10_000, int(query.get("page") or 1)))
        except ValueError:
            page = 1
        return cls(
            status=pick("status", statuses),
            priority=pick("priority", PRIORITIES),
            action_type=pick("action_type"),
            source=pick("source"),
            search=pick("search"),
            page=page,
        )

    def query(self, **changes: Any) -> str:
        """The query string of this view, with ``changes`` (for links and pagination)."""
        from urllib.parse import urlencode

        values = {
            "status": self.status,
            "priority": self.priority,
            "action_type": self.action_type,
            "source": self.source,
            "search": self.search,
            "page": self.page if self.page > 1 else None,
        }
        values.update(changes)
        return urlencode({k: v for k, v in values.items() if v not in (None, "")})

    @property
    def is_filtered(self) -> bool:
        return any((self.status, self.priority, self.action_type, self.source, self.search))


@dataclass(frozen=True)
class Page:
    rows: list[dict[str, Any]]
    total: int
    page: int
    page_size: int
    # False when counting stopped at a bound: ``total`` is that bound, and there may be
    # more pages than it makes (the inbox's "1,000+").
    total_is_exact: bool = True

    @property
    def pages(self) -> int:
        return max(1, -(-self.total // self.page_size))

    @property
    def has_next(self) -> bool:
        if self.page < self.pages:
            return True
        return not self.total_is_exact and len(self.rows) == self.page_size

    @property
    def total_text(self) -> str:
        return f"{self.total:,}" if self.total_is_exact else f"{self.total:,}+"

    @property
    def first_shown(self) -> int:
        return 0 if not self.rows else (self.page - 1) * self.page_size + 1

    @property
    def last_shown(self) -> int:
        return (self.page - 1) * self.page_size + len(self.rows)


async def _page(
    queries: QueryRunner, member: OrgMember, filters: ListFilters, view: ListView, page_size: int
) -> Page:
    rendered, total = await read_page(
        queries,
        member.org_id,
        filters,
        now=utcnow(),
        offset=(view.page - 1) * page_size,
        limit=page_size,
    )
    shown_total, exact = bounded_total(total, searched=view.search is not None)
    rows = [orjson.loads(item) for item in rendered]
    return Page(rows, shown_total, view.page, page_size, exact)


def _filters(view: ListView, statuses: Sequence[str]) -> ListFilters:
    return ListFilters(
        statuses=[view.status] if view.status else list(statuses),
        priority=view.priority,
        action_type=view.action_type,
        source=view.source,
        search=view.search,
    )


async def inbox(
    queries: QueryRunner, member: OrgMember, view: ListView, page_size: int = PAGE_SIZE
) -> Page:
    """What waits for this person's vote now, most urgent first; the total counts up to
    ``WAITING_COUNT_CAP`` (``Page.total_is_exact``)."""
    filters = InboxFilters(
        priority=view.priority,
        action_type=view.action_type,
        source=view.source,
        search=view.search,
        hide_own=member.forbids_self_approval,
    )
    found = await read_inbox(
        queries,
        member.org_id,
        member.user_id,
        filters,
        now=utcnow(),
        offset=(view.page - 1) * page_size,
        limit=page_size,
    )
    rows = [orjson.loads(item) for item in found.rendered]
    return Page(rows, found.total, view.page, page_size, found.total_is_exact)


async def history(
    queries: QueryRunner, member: OrgMember, view: ListView, page_size: int = PAGE_SIZE
) -> Page:
    """The org's finished requests (decided, expired, cancelled), newest first."""
    return await _page(queries, member, _filters(view, DECIDED_STATUSES), view, page_size)


CSV_COLUMNS = (
    "number",
    "id",
    "title",
    "status",
    "priority",
    "action_type",
    "source",
    "created_at",
    "decided_at",
    "decided_by_name",
    "decision_comment",
    "current_approvals",
    "required_approvals",
)


async def history_csv(queries: QueryRunner, member: OrgMember, view: ListView) -> str:
    """The filtered history (every page, up to ``CSV_MAX_ROWS``) as CSV."""
    whole = ListView(**{**view.__dict__, "page": 1})
    page = await history(queries, member, whole, page_size=CSV_MAX_ROWS)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(CSV_COLUMNS)
    for row in page.rows:
        writer.writerow([_csv_cell(row.get(name)) for name in CSV_COLUMNS])
    return out.getvalue()


def _csv_cell(value: Any) -> str:
    text = "" if value is None else str(value)
    # A spreadsheet runs a cell that starts like a formula: keep it text.
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


# ---- one request ----


@dataclass
class RequestPage:
    request: dict[str, Any]
    connection_name: str
    steps: Sequence[StepRecord]
    votes: Sequence[VoteRecord]
    comments: Sequence[Comment]
    events: Sequence[AuditEvent]
    attempts: Sequence[WebhookAttempt]
    names: dict[uuid.UUID, str]
    # What was sent about it, to whom (notifications/planning/service.notification_log).
    notifications: Sequence[NotificationLine] = ()
    # The step this person may vote on now (chains), if any.
    my_step: StepRecord | None = None
    # A group's step voted for an away member (out of office): whom the vote counts for.
    votes_for: uuid.UUID | None = None
    can_decide: bool = False
    already_voted: bool = False
    # The org forbids self-approval and the viewer owns the requesting connection: the
    # page explains why there are no buttons (approvals.service.refuse_self_approval).
    own_request: bool = False
    metadata_items: list[tuple[int, str, str | None]] = field(default_factory=list)
    argument_items: list[tuple[int, str, str | None]] = field(default_factory=list)
    # The request's arguments_schema (approve with edits), if it has one.
    schema: dict[str, Any] | None = None

    @property
    def has_schema(self) -> bool:
        return self.schema is not None

    @property
    def earlier_voters(self) -> list[str]:
        """Who has voted the (pending) request so far, by name: an edit dismisses every
        vote (a count-based approval, a person's step, a group step's votes)."""
        voters = dict.fromkeys(self.names.get(v.user_id, "a former user") for v in self.votes)
        return list(voters)

    @property
    def may_grant_standing(self) -> bool:
        """Whether "Don't ask again" is offered beside the approval: never for a
        critical request, one needing more than one approval, or one without an action
        type (``policies.standing.check_grant`` refuses those)."""
        q = self.request
        return (
            q["priority"] != "critical"
            and bool(q["action_type"])
            and q["required_approvals"] == 1
            and not self.steps
        )


# "Don't ask again" on the request's page: the choices of its select, as ``ttl_seconds``.
STANDING_TTLS = {"3600": 3600, "86400": 86400}


def standing_from_form(
    fields: dict[str, str], arguments: dict[str, Any] | None
) -> dict[str, Any] | None:
    """The ``standing`` of a decision made on the page: None when nothing was chosen,
    else the grant, checked like the API's (``StandingGrantIn``). ``arguments``: the
    request's, read only when "only with these same arguments" is ticked."""
    ttl = STANDING_TTLS.get(fields.get("standing_for", ""))
    uses_text = fields.get("standing_uses", "").strip()
    if ttl is None and not uses_text:
        return None
    standing: dict[str, Any] = {}
    if ttl is not None:
        standing["ttl_seconds"] = ttl
    if uses_text:
        standing["max_uses"] = int(uses_text) if uses_text.isdigit() else uses_text
    if fields.get("standing_same_arguments") and arguments:
        standing["arguments"] = {name: {"eq": value} for name, value in arguments.items()}
    return standing


class RequestPageWork(Protocol):
    """What a request's page reads: the request (approvals), its callbacks (webhooks),
    its notifications (through the session), and the org's names (orgs)."""

    @property
    def approvals(self) -> ApprovalRepository: ...

    @property
    def webhooks(self) -> WebhookRepository: ...

    @property
    def orgs(self) -> OrgRepository: ...

    @property
    def session(self) -> AsyncSession: ...

    @property
    def dialect(self) -> str: ...


async def request_page(
    uow: RequestPageWork, member: OrgMember, request_id: uuid.UUID
) -> RequestPage:
    now = utcnow()
    row = await approvals.get_request(uow.approvals, member, request_id)
    steps, votes = await approvals.steps_and_votes(uow.approvals, row)
    comments = await uow.approvals.list_comments(row.id)
    events = await uow.approvals.list_events(row.id)
    attempts = await uow.webhooks.list_attempts(member.org_id, row.id, 50)
    # The request is the member's org's (get_request): so is everyone its log names.
    sent = await notification_log(NotificationRepository(uow.session, uow.dialect), row.id)
    connection = await uow.orgs.get_connection(member.org_id, row.connection_id)
    names = {user.id: user.name for user in await uow.orgs.list_users(member.org_id)}
    # A group step shows its group's name (ids of users and groups never meet).
    names |= await approvals.group_names_of(uow.approvals, member.org_id, steps)
    body = request_to_dict(row, now)
    page = RequestPage(
        request=body,
        connection_name=connection.name if connection else "",
        steps=steps,
        votes=votes,
        comments=comments,
        events=events,
        attempts=attempts,
        names=names,
        notifications=sent,
        metadata_items=list(metadata_tree(body["metadata"])),
        argument_items=list(metadata_tree(body["arguments"])),
        schema=row.arguments_schema,
    )
    page.already_voted = any(v.user_id == member.user_id and v.step_id is None for v in votes)
    if body["status"] == "pending":
        stands_in_for = (
            await uow.approvals.stood_in_for(member.org_id, member.user_id, now) if steps else {}
        )
        groups = await approvals.groups_voting(uow.approvals, member, steps, votes, stands_in_for)
        page.my_step = approvals.votable_step(
            steps, member.user_id, row.is_sequential, stands_in_for, groups
        )
        page.votes_for = await approvals.group_vote_counts_for(
            uow.approvals, member, page.my_step, votes, stands_in_for
        )
        if steps:
            page.can_decide = page.my_step is not None or member.is_admin
        else:
            page.can_decide = not page.already_voted
        requester = (connection.id, connection.owner_id) if connection else None
        if approvals.is_self_approval(member, requester):
            page.own_request, page.can_decide, page.my_step = True, False, None
    return page


def metadata_tree(value: Any, depth: int = 0, key: str = "") -> Any:
    """``metadata`` as (depth, key, value or None for a branch) lines: a readable tree."""
    if isinstance(value, dict):
        if key:
            yield depth, key, None
        for name, item in value.items():
            yield from metadata_tree(item, depth + (1 if key else 0), str(name))
    elif isinstance(value, list):
        if key:
            yield depth, key, None
        for index, item in enumerate(value):
            yield from metadata_tree(item, depth + (1 if key else 0), f"[{index}]")
    else:
        shown = orjson.dumps(value).decode() if not isinstance(value, str) else value
        yield depth, key, shown


async def add_comment(
    repo: ApprovalRepository, member: OrgMember, request_id: uuid.UUID, body: str, now: datetime
) -> Comment:
    return await approvals.add_comment(repo, member, request_id, body, now)


# ---- account ----


@dataclass(frozen=True)
class Authorization:
    client: OAuthClient
    granted_at: datetime


async def authorizations(repo: OAuthRepository, user_id: uuid.UUID) -> list[Authorization]:
    return [
        Authorization(client, granted)
        for client, granted in await repo.list_user_authorizations(user_id, utcnow())
    ]


async def revoke_authorization(
    repo: OAuthRepository, user_id: uuid.UUID, client_id: str, now: datetime
) -> str:
    """End every token this person granted the client; answers the client's name."""
    client = await repo.find_client_anywhere(client_id)
    if client is None or await repo.revoke_user_client_tokens(user_id, client.id, now) == 0:
        raise NotFound("No such authorization.")
    return client.name
