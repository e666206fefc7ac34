"""Use cases of decision callbacks. Services never commit: the caller's transaction does.

The outbox
----------
``enqueue_decision_callback`` is called by ``approvals.effects`` for every final
transition of a request with a ``callback_url`` (its ``SendCallback`` effect): the
delivery row (its id, exact body bytes, URL and encrypted headers) is written in the
transaction of the state change, *claimed* by that transaction with a lease. Once it
commits, the unit of work (``AppContext.transaction``) starts attempt 1, as the
transaction's caller chose (``dispatcher.FirstAttempt``): at once, its outcome being
``callback_delivered`` (decide and cancel), or by the workers (batches: the expiry
sweep, the emergency stop). If the process dies in between, the lease runs out and any
worker takes over.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import httpx
import orjson
from sqlalchemy.ext.asyncio import AsyncSession

from signoff.common.ids import new_id
from signoff.common.time import format_timestamp
from signoff.crypto import SecretBox
from signoff.errors import ValidationFailed
from signoff.logs import current_request_id, new_request_id
from signoff.models.approvals import EMPTY_ARGUMENTS_HASH
from signoff.models.webhooks import WebhookAttempt
from signoff.webhooks.delivery import AttemptResult
from signoff.webhooks.repository import (
    CLAIMED_COLUMNS,
    ClaimedRow,
    ConnectionSecrets,
    WebhookRepository,
)
from signoff.webhooks.signing import SigningKeys
from signoff.webhooks.urlpolicy import AddressPolicy, refusal

EVENT_DECIDED = "approval.decided"
# The source of requests made by OpenID CIBA (``oauth.ciba``): their callback is CIBA's
# ping, ``{"auth_req_id": ...}`` with the client's bearer token, and nothing else.
CIBA_SOURCE = "openid-ciba"
OUTBOX_KEY = "signoff.outbox"
DEFAULT_LEASE_SECONDS = 30.0


@dataclass(frozen=True)
class ClaimedDelivery:
    """A delivery someone holds, with everything one attempt needs."""

    id: uuid.UUID
    token: uuid.UUID
    org_id: uuid.UUID
    request_id: uuid.UUID
    url: str
    target: str
    body: bytes
    headers_encrypted: str | None
    attempts: int  # made before this one
    secrets: ConnectionSecrets
    # Sent as X-Request-Id: the request that caused the callback (logs.py).
    request_id_header: str | None = None
    receipt_encrypted: str | None = None  # see ``body_to_send``

    @property
    def attempt_number(self) -> int:
        return self.attempts + 1


@dataclass
class Outbox:
    """Deliveries written by one transaction, held by it until its caller acts."""

    lease_seconds: float = DEFAULT_LEASE_SECONDS
    claimed: list[ClaimedDelivery] = field(default_factory=list)
    # Signing secrets by connection: a batch (an emergency stop) reads each once.
    secrets: dict[uuid.UUID, ConnectionSecrets] = field(default_factory=dict)

    @functools.cached_property
    def token(self) -> uuid.UUID:
        """Unique, not secret: the lease's owner. Drawn when the transaction first writes
        a callback: every write transaction has an outbox, few write a callback."""
        return new_id()


def start_outbox(session: AsyncSession, lease_seconds: float) -> Outbox:
    outbox = Outbox(lease_seconds=lease_seconds)
    session.info[OUTBOX_KEY] = outbox
    return outbox


def outbox_of(session: AsyncSession) -> Outbox:
    outbox = session.info.get(OUTBOX_KEY)
    if not isinstance(outbox, Outbox):
        outbox = Outbox()
        session.info[OUTBOX_KEY] = outbox
    return outbox


@dataclass(frozen=True)
class RetrySchedule:
    """Delays before retry 1, 2, 3 ... (seconds); attempts = 1 + len(delays)."""

    delays: tuple[float, ...] = (1.0, 2.0, 4.0)

    @property
    def max_attempts(self) -> int:
        return 1 + len(self.delays)

    def delay_after(self, attempt: int) -> float | None:
        """Seconds from the failure of ``attempt`` to the next one, None if it was the last."""
        return self.delays[attempt - 1] if attempt <= len(self.delays) else None


@dataclass(frozen=True)
class RecordedAttempt:
    attempt: int
    status: str  # the delivery's status after it
    result: AttemptResult
    row: dict[str, Any]  # its delivery log entry, as written

    @property
    def entry(self) -> WebhookAttempt:
        """The log entry as the API presents it (made only when asked: a worker records
        hundreds of attempts a second and presents none)."""
        return WebhookAttempt(**self.row)


def all_succeeded(attempts: Sequence[RecordedAttempt | None]) -> bool:
    """``callback_delivered``: there was a callback and its first attempt succeeded."""
    return bool(attempts) and all(a is not None and a.result.success for a in attempts)


@dataclass(frozen=True)
class FirstAttempts:
    """What became of the callbacks a committed transaction wrote (``UnitOfWork.
    first_attempts``): attempt 1 made at once, in the order written, and how many went to
    the delivery workers instead."""

    made: list[RecordedAttempt | None] = field(default_factory=list)
    handed_off: int = 0
    # Started without waiting for them (``dispatcher.FirstAttemptsInBackground``).
    in_background: int = 0

    @property
    def delivered(self) -> bool:
        """``callback_delivered``: there was a callback and its attempt 1 succeeded."""
        return all_succeeded(self.made)

    @property
    def count(self) -> int:
        """The callbacks the transaction wrote."""
        return len(self.made) + self.handed_off + self.in_background


# ---- payloads ----


class FirstAttempt(enum.Enum):
    """When the callbacks a committed transaction wrote get their attempt 1."""

    # Made by this process right after the commit, awaited: the caller's answer reports
    # its outcome (``callback_delivered``).
    NOW = "now"
    # Handed to the delivery workers, due at once: a batch (the expiry sweep, the
    # emergency stop) does not wait on receivers.
    BY_WORKERS = "by_workers"


@dataclass
class FirstAttemptsInBackground:
    """Attempt 1 made by this process without waiting for it, ``budget`` of them at most
    over every transaction that shares this policy; the rest go to the delivery workers
    (the CLI's emergency stop: attempts run while the next batches commit)."""

    budget: int
    handed_off: int = 0
    tasks: list[asyncio.Task[FirstAttempts]] = field(default_factory=list)

    async def outcomes(self) -> list[RecordedAttempt | None]:
        """The attempts started so far, once all have ended."""
        done = await asyncio.gather(*self.tasks)
        return [attempt for attempts in done for attempt in attempts.made]


FirstAttemptPolicy = FirstAttempt | FirstAttemptsInBackground


@dataclass(frozen=True)
class Decider:
    """Who decided, as the callback names them (interface.md 6.3, ``decided_by``)."""

    id: uuid.UUID
    email: str
    name: str

    def as_payload(self) -> dict[str, str]:
        return {"id": str(self.id), "email": self.email, "name": self.name}


@dataclass(frozen=True)
class DecisionFacts:
    """What a decision callback says and where it goes: plain data, so this domain needs
    nothing of the approvals domain's entities."""

    request_id: uuid.UUID
    org_id: uuid.UUID
    connection_id: uuid.UUID
    status: str
    title: str
    priority: str
    action_type: str | None
    decided_at: datetime | None
    decided_by: Decider | None  # None: expiry, or the operator acting for no user
    comment: str | None
    metadata: Mapping[str, Any]
    callback_url: str
    callback_headers_encrypted: str | None
    # What the action runs with; edited by an approver: the RFC 6902 patch from the
    # arguments as created (None when never edited).
    arguments: Mapping[str, Any] = field(default_factory=dict)
    arguments_hash: str = EMPTY_ARGUMENTS_HASH
    arguments_edited: bool = False
    arguments_patch: list[dict[str, Any]] | None = None
    # The approval's receipt, encrypted; put into the body only when an attempt is signed.
    receipt_encrypted: str | None = None
    # Who decided when no user did: a policy names itself and its version here.
    decided_by_name: str | None = None
    # Where the request came from: a CIBA request's callback is a ping (``CIBA_SOURCE``).
    source: str | None = None


def decision_payload(facts: DecisionFacts) -> dict[str, Any]:
    """interface.md 6.3, plus ``id``, ``decided_by_name`` and ``decision_comment`` (decisions.md
    section 13). Expiry and operator cancellations have no deciding user: ``decided_by`` null.
    """
    if facts.source == CIBA_SOURCE:
        # CIBA core section 10.2: the client learns only that it may fetch the result.
        return {"auth_req_id": str(facts.request_id)}
    decided_by = facts.decided_by.as_payload() if facts.decided_by else None
    payload: dict[str, Any] = {
        "event": EVENT_DECIDED,
        "id": str(facts.request_id),
        "request_id": str(facts.request_id),
        "status": facts.status,
        "title": facts.title,
        "priority": facts.priority,
        "action_type": facts.action_type,
        "decided_at": format_timestamp(facts.decided_at),
        "decided_by": decided_by,
        "decided_by_name": facts.decided_by.name if facts.decided_by else facts.decided_by_name,
        "comment": facts.comment,
        "decision_comment": facts.comment,
        "metadata": facts.metadata,
        "arguments": facts.arguments,
        "arguments_hash": facts.arguments_hash,
        "arguments_edited": facts.arguments_edited,
    }
    if facts.arguments_patch is not None:
        payload["arguments_patch"] = facts.arguments_patch
    return payload


def sample_payload(decider: Decider, now: datetime) -> dict[str, Any]:
    """What ``POST /api/v1/test-webhook`` sends: a decision that never happened."""
    request_id = str(new_id())
    return {
        "event": EVENT_DECIDED,
        "test": True,
        "id": request_id,
        "request_id": request_id,
        "status": "approved",
        "title": "Test callback from signoff",
        "priority": "low",
        "action_type": "signoff.test",
        "decided_at": format_timestamp(now),
        "decided_by": decider.as_payload(),
        "decided_by_name": decider.name,
        "comment": "This is a test delivery.",
        "decision_comment": "This is a test delivery.",
        "metadata": {},
        "arguments": {},
        "arguments_hash": EMPTY_ARGUMENTS_HASH,
        "arguments_edited": False,
    }


@functools.lru_cache(maxsize=4096)
def target_of(url: str) -> str:
    """The receiver (host:port) of a URL. Cached: an expiry sweep writes thousands of
    deliveries to a handful of URLs, and parsing one costs more than the rest of its row."""
    parsed = httpx.URL(url)
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    return f"{parsed.host}:{port}"[:300]


def signing_keys(box: SecretBox, secrets: ConnectionSecrets, now: datetime) -> SigningKeys:
    previous = None
    if (
        secrets.previous_encrypted is not None
        and secrets.previous_expires_at is not None
        and secrets.previous_expires_at > now
    ):
        previous = box.decrypt(secrets.previous_encrypted)
    return SigningKeys(box.decrypt(secrets.current_encrypted), previous)


def body_to_send(body: bytes, receipt: str | None) -> bytes:
    """The body an attempt sends and signs: as stored, with the approval's receipt (never
    stored in it: a bearer credential, signed as the attempt is made) as ``receipt`` when
    there is one."""
    if not receipt:
        return body
    payload = orjson.loads(body)
    payload["receipt"] = receipt
    return orjson.dumps(payload)


def callback_headers(box: SecretBox, encrypted: str | None) -> dict[str, str]:
    if not encrypted:
        return {}
    headers: dict[str, str] = orjson.loads(box.decrypt(encrypted))
    return headers


async def check_callback_url(policy: AddressPolicy, url: str, field: str = "callback_url") -> None:
    """Refuse (400) a URL callbacks may not reach: https only and SSRF in production."""
    reason = await refusal(url, policy, credentials_advice="use callback_headers instead")
    if reason is not None:
        raise ValidationFailed.for_field(field, reason)


# ---- writing the outbox (inside the state change's transaction) ----


async def enqueue_decision_callback(
    repo: WebhookRepository, facts: DecisionFacts, now: datetime
) -> ClaimedDelivery | None:
    """Store the callback of a final transition, claimed by the current transaction."""
    claimed = await enqueue_decision_callbacks(repo, [facts], now)
    return claimed[0] if claimed else None


async def enqueue_decision_callbacks(
    repo: WebhookRepository, facts: Sequence[DecisionFacts], now: datetime
) -> list[ClaimedDelivery]:
    """Store the callbacks of many final transitions (a batch of the expiry sweep, or one
    decision), claimed by the current transaction, in one statement.

    Every body is built before anything is written: one that cannot be (metadata no
    encoder takes) raises before the batch has written a delivery."""
    outbox = outbox_of(repo.session)
    deliveries: list[tuple[dict[str, Any], ConnectionSecrets]] = []
    for item in facts:
        secrets = await _secrets_of(repo, outbox, item.connection_id)
        if secrets is None:  # pragma: no cover - the foreign key keeps the connection
            continue
        deliveries.append((_new_delivery(item, outbox, now), secrets))
    await repo.add_deliveries([delivery for delivery, _ in deliveries])
    claimed = [
        _claimed(ClaimedRow(**{k: d[k] for k in CLAIMED_COLUMNS}), outbox.token, secrets)
        for d, secrets in deliveries
    ]
    outbox.claimed.extend(claimed)
    return claimed


async def _secrets_of(
    repo: WebhookRepository, outbox: Outbox, connection_id: uuid.UUID
) -> ConnectionSecrets | None:
    secrets = outbox.secrets.get(connection_id)
    if secrets is None:
        secrets = await repo.connection_secrets(connection_id)
        if secrets is not None:
            outbox.secrets[connection_id] = secrets
    return secrets


def _new_delivery(facts: DecisionFacts, outbox: Outbox, now: datetime) -> dict[str, Any]:
    """The delivery row of a decision callback, claimed by ``outbox``'s transaction: its
    column values, written past the ORM (a batch of the sweep writes hundreds)."""
    return {
        "id": new_id(),
        "org_id": facts.org_id,
        "request_id": facts.request_id,
        "connection_id": facts.connection_id,
        "event": EVENT_DECIDED,
        "url": facts.callback_url,
        "target": target_of(facts.callback_url),
        "body": orjson.dumps(decision_payload(facts)),
        "headers_encrypted": facts.callback_headers_encrypted,
        "receipt_encrypted": facts.receipt_encrypted,
        "request_id_header": current_request_id() or new_request_id(),
        "status": "pending",
        "attempts": 0,
        "due_at": now + timedelta(seconds=outbox.lease_seconds),
        "claim_token": outbox.token,
        "created_at": now,
        "updated_at": now,
    }


def _claimed(delivery: ClaimedRow, token: uuid.UUID, secrets: ConnectionSecrets) -> ClaimedDelivery:
    return ClaimedDelivery(
        id=delivery.id,
        token=token,
        org_id=delivery.org_id,
        request_id=delivery.request_id,
        url=delivery.url,
        target=delivery.target,
        body=delivery.body,
        headers_encrypted=delivery.headers_encrypted,
        receipt_encrypted=delivery.receipt_encrypted,
        attempts=delivery.attempts,
        secrets=secrets,
        request_id_header=delivery.request_id_header,
    )


# ---- claiming and recording (the dispatcher's transactions) ----


async def claim_due(
    repo: WebhookRepository,
    now: datetime,
    lease_seconds: float,
    limit: int,
    in_flight: Mapping[str, int],
    per_target: int | Callable[[str], int],
    held: Collection[str] = (),
) -> list[ClaimedDelivery]:
    """Lease up to ``limit`` due deliveries; ``per_target``: how many attempts a receiver
    may have in flight (one number for all, or each receiver's, receivers.py); ``held``:
    receivers whose deliveries come after the others' (receivers.py)."""
    token = uuid.uuid4()
    lease_until = now + timedelta(seconds=lease_seconds)
    cap = per_target if callable(per_target) else (lambda _target: per_target)
    ids = await repo.claim_due(token, now, lease_until, limit, in_flight, cap, held)
    return [_claimed(d, token, s) for d, s in await repo.get_claimed(ids, token)]


async def claim_for_manual_retry(
    repo: WebhookRepository,
    org_id: uuid.UUID,
    delivery_id: uuid.UUID,
    now: datetime,
    lease_seconds: float,
) -> ClaimedDelivery | None:
    """The delivery, held for one manual attempt; None if it is on its automatic schedule
    or another attempt holds it. Raises nothing: the caller tells the cases apart."""
    token = uuid.uuid4()
    lease_until = now + timedelta(seconds=lease_seconds)
    if not await repo.claim_for_manual_retry(org_id, delivery_id, token, now, lease_until):
        return None
    claimed = await repo.get_claimed([delivery_id], token)
    return _claimed(claimed[0][0], token, claimed[0][1]) if claimed else None


async def record_attempt(
    repo: WebhookRepository,
    claimed: ClaimedDelivery,
    result: AttemptResult,
    now: datetime,
    schedule: RetrySchedule,
    *,
    manual: bool = False,
) -> RecordedAttempt | None:
    """Log one attempt and move the delivery on: succeeded, retry later, or failed.

    A manual attempt never re-enters the automatic schedule. Returns None if the claim
    was lost meanwhile (another worker owns the delivery now and will log its own try).
    """
    [recorded] = await record_attempts(repo, [(claimed, result, manual)], now, schedule)
    return recorded


async def record_attempts(
    repo: WebhookRepository,
    attempts: Sequence[tuple[ClaimedDelivery, AttemptResult, bool]],
    now: datetime,
    schedule: RetrySchedule,
) -> list[RecordedAttempt | None]:
    """``record_attempt`` for many attempts (claimed, result, manual) in few statements.

    Attempts that move their deliveries the same way (same claim, same new status and due
    time) share one UPDATE; every log entry and audit event of the batch is one INSERT
    each. Under load that is what a record transaction costs the single SQLite writer.
    """
    groups: dict[tuple[uuid.UUID, str, datetime], list[int]] = {}
    statuses: list[str] = []
    for index, (claimed, result, manual) in enumerate(attempts):
        delay = None if manual or result.success else schedule.delay_after(claimed.attempt_number)
        if result.success:
            status, due_at = "succeeded", now
        elif delay is not None:
            status, due_at = "pending", now + timedelta(seconds=delay)
        else:
            status, due_at = "failed", now
        statuses.append(status)
        groups.setdefault((claimed.token, status, due_at), []).append(index)
    numbers: dict[uuid.UUID, int] = {}
    for (token, status, due_at), indexes in groups.items():
        values: dict[str, Any] = {
            "status": status,
            "due_at": due_at,
            "last_attempt_at": now,
            "updated_at": now,
        }
        if status == "succeeded":
            values["delivered_at"] = now
        numbers.update(
            await repo.finish_attempts([attempts[i][0].id for i in indexes], token, values)
        )
    recorded: list[RecordedAttempt | None] = []
    rows: list[dict[str, Any]] = []
    events: list[dict[str, Any]] = []
    for (claimed, result, _), status in zip(attempts, statuses, strict=True):
        number = numbers.get(claimed.id)
        if number is None:
            recorded.append(None)
            continue
        row = {
            "id": new_id(),
            "delivery_id": claimed.id,
            "org_id": claimed.org_id,
            "request_id": claimed.request_id,
            "url": claimed.url,
            "attempt": number,
            "status_code": result.status_code,
            "success": result.success,
            "duration_ms": result.duration_ms,
            "response_body": result.response_body,
            "error": result.error,
            "created_at": now,
        }
        rows.append(row)
        if status != "pending":
            events.append(
                {
                    "id": new_id(),
                    "org_id": claimed.org_id,
                    "request_id": claimed.request_id,
                    "type": "callback.delivered" if result.success else "callback.failed",
                    "actor_id": None,
                    "data": {
                        "delivery_id": str(claimed.id),
                        "attempt": number,
                        "status_code": result.status_code,
                        "error": result.error,
                        "url": claimed.url,
                    },
                    "created_at": now,
                }
            )
        recorded.append(RecordedAttempt(number, status, result, row))
    await repo.insert_attempts(rows)
    await repo.insert_events(events)
    if any(r is not None and r.status == "pending" for r in recorded):
        await repo.notify_workers()
    return recorded


async def list_attempts(
    repo: WebhookRepository, org_id: uuid.UUID, request_id: uuid.UUID | None, limit: int
) -> Sequence[WebhookAttempt]:
    return await repo.list_attempts(org_id, request_id, limit)
