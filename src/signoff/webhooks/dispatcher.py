"""The process's callback machinery: it owns the transactions around each HTTP attempt.

An attempt is three steps, and only the middle one talks to the receiver:
1. a claim (a transaction that leases the delivery to us, or the state change itself,
   whose transaction wrote the delivery already claimed);
2. the POST, outside any transaction;
3. the record (a transaction that logs the attempt and moves the delivery on), which only
   the holder of the claim can make.

Every process that writes state changes has one (``AppContext.webhooks``): API replicas
make attempt 1 of their own decisions; workers (``worker/deliveries.py``) claim the rest.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import datetime

import orjson
from sqlalchemy.exc import SQLAlchemyError

from signoff import metrics
from signoff.common.ids import new_id
from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.errors import Conflict, NotFound
from signoff.logs import current_request_id, request_id_scope
from signoff.receipts import service as receipts
from signoff.receipts.keys import KeyRing
from signoff.storage import Database
from signoff.webhooks import service
from signoff.webhooks.delivery import AttemptResult, ClientPool, send_attempt
from signoff.webhooks.receivers import ReceiverRecord
from signoff.webhooks.repository import WebhookRepository
from signoff.webhooks.service import (
    ClaimedDelivery,
    FirstAttempt,
    FirstAttemptPolicy,
    FirstAttempts,
    FirstAttemptsInBackground,
    Outbox,
    RecordedAttempt,
    RetrySchedule,
)
from signoff.webhooks.signing import signed_headers
from signoff.webhooks.urlpolicy import AddressPolicy

logger = logging.getLogger(__name__)

DELIVERY_JOB = "delivery"
# Attempt records written at once per process (each holds a connection briefly).
RECORD_CONCURRENCY = 8
RECORD_RETRY_PAUSES = (0.2, 1.0, 3.0)
# At most this many attempts share one record transaction (it holds SQLite's writer).
RECORD_BATCH_SIZE = 50


@dataclass(frozen=True)
class Claim:
    """What a worker's claim took, and (when it took fewer than it could) the seconds until
    the next delivery it could take falls due (0: overdue; None: nothing pending), leaving
    out the receivers ``full`` after the claim."""

    claimed: list[ClaimedDelivery]
    next_due_seconds: float | None
    full: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class _Record:
    claimed: ClaimedDelivery
    result: AttemptResult
    manual: bool


class _RecordBatcher:
    """Gathers the records of attempts that end while a record transaction runs, and
    writes them together in the next: one commit for many attempts under load, no wait
    at all when idle (the first record starts a transaction at once)."""

    def __init__(self, dispatcher: WebhookDispatcher) -> None:
        self.dispatcher = dispatcher
        self._waiting: list[tuple[_Record, asyncio.Future[RecordedAttempt | None]]] = []
        self._flusher: asyncio.Task[None] | None = None

    async def submit(self, item: _Record) -> RecordedAttempt | None:
        future: asyncio.Future[RecordedAttempt | None] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, future))
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        while self._waiting:
            batch = self._waiting[:RECORD_BATCH_SIZE]
            del self._waiting[:RECORD_BATCH_SIZE]
            try:
                outcomes = await self.dispatcher._record([item for item, _ in batch])
            except Exception as exc:
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
            else:
                for (_, future), outcome in zip(batch, outcomes, strict=True):
                    if not future.done():
                        future.set_result(outcome)


class WebhookDispatcher:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        box: SecretBox,
        poisoned: PoisonedRows,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self.settings = settings
        self.poisoned = poisoned
        self.db = db
        self.box = box
        # The keys that sign the receipts callbacks carry (on send, as on every read).
        self.receipt_keys = KeyRing(db, box, settings.signing_key_refresh_seconds)
        # What "now" is for claims, records and due times: tests step a retry schedule
        # with a clock of their own instead of waiting it out.
        self.clock = clock
        self.policy = AddressPolicy.from_settings(settings)
        self.schedule = RetrySchedule(tuple(settings.delivery_retry_delays_seconds))
        # Set when this process makes a delivery due (a retry scheduled, a hand-off), so
        # a worker loop in this process re-reads the next due time at once.
        self.wakeup = asyncio.Event()
        # While this process's worker loop sleeps: the loop time it will look again anyway.
        # A retry scheduled for later than that needs no wake-up (a wake-up costs a claim,
        # a write transaction, that would find nothing due yet).
        self.worker_sleeps_until: float | None = None
        self.clients = ClientPool(self.policy)
        self._record_slots = asyncio.Semaphore(RECORD_CONCURRENCY)
        self._batcher = _RecordBatcher(self)
        # Which receivers answered their last attempt from this process (receivers.py).
        self.receivers = ReceiverRecord(settings.delivery_per_target_concurrency)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[WebhookRepository]:
        async with self.db.write_transaction() as session:
            yield WebhookRepository(session, self.db.dialect)

    # ---- attempts ----

    async def attempt(
        self,
        claimed: ClaimedDelivery,
        *,
        manual: bool = False,
        batched: bool = False,
        answered: Callable[[], None] | None = None,
    ) -> RecordedAttempt | None:
        """Make one attempt of a delivery we hold and record it.

        ``batched``: the record may share a transaction with other attempts that end at
        about the same time: one commit for many attempts under load, and no wait when
        idle (a manual retry records alone; its caller waits for nothing else).
        ``answered``: called once the receiver is done with the attempt (answered, failed
        or timed out), before it is recorded.

        The attempt's log lines carry the request id the delivery was written with.
        """
        with request_id_scope(claimed.request_id_header):
            return await self._attempt(claimed, manual=manual, batched=batched, answered=answered)

    async def _receipt(self, claimed: ClaimedDelivery) -> str | None:
        """The receipt the attempt carries: signed now from the receipt's row, as every
        read of it (receipts/service.py), or a token stored encrypted before 0048."""
        held = claimed.receipt_encrypted
        if not held:
            return None
        if held != receipts.SIGNED_ON_SEND:
            return self.box.decrypt(held)
        async with self.db.read_session() as session:
            return await receipts.token_of_request(
                session, self.receipt_keys, self.box, claimed.request_id
            )

    async def _attempt(
        self,
        claimed: ClaimedDelivery,
        *,
        manual: bool,
        batched: bool,
        answered: Callable[[], None] | None,
    ) -> RecordedAttempt | None:
        body = claimed.body
        try:
            body = service.body_to_send(claimed.body, await self._receipt(claimed))
            headers = signed_headers(
                service.signing_keys(self.box, claimed.secrets, self.clock()),
                delivery_id=str(claimed.id),
                attempt=claimed.attempt_number,
                timestamp=int(time.time()),
                body=body,
                extra=service.callback_headers(self.box, claimed.headers_encrypted),
                request_id=claimed.request_id_header,
            )
        except Exception as exc:
            # A delivery that cannot even be signed (a secret that no longer decrypts after
            # SIGNOFF_SECRET_KEY changed, headers that do not decode): the attempt fails and
            # says why, so the delivery ends as failed on its schedule instead of looping.
            self.poisoned.park(DELIVERY_JOB, claimed.id, exc)
            result = AttemptResult(False, 0, 0, None, "signing failed")
        else:
            result = await send_attempt(
                self.clients,
                claimed.target,
                claimed.url,
                body,
                headers,
                policy=self.policy,
                timeout=self.settings.delivery_timeout_seconds,
                read_cap=self.settings.delivery_response_read_bytes,
            )
        self.receivers.note(
            claimed.target, success=result.success, seconds=result.duration_ms / 1000
        )
        if answered is not None:
            answered()
        metrics.count_callback_attempt(result.error or "success", result.duration_ms)
        item = _Record(claimed, result, manual)
        if batched:
            return await self._batcher.submit(item)
        [recorded] = await self._record([item])
        return recorded

    async def _record(self, items: Sequence[_Record]) -> list[RecordedAttempt | None]:
        """Log attempts and move their deliveries on, in one transaction."""
        # Records are short, but hundreds of attempts may end at once: they queue here
        # rather than each take a database connection (the pool is shared with the API).
        async with self._record_slots:
            for pause in (*RECORD_RETRY_PAUSES, None):
                try:
                    async with self._transaction() as repo:
                        now = self.clock()
                        recorded = await service.record_attempts(
                            repo,
                            [(i.claimed, i.result, i.manual) for i in items],
                            now,
                            self.schedule,
                        )
                    break
                except (SQLAlchemyError, OSError):
                    # Unrecorded, an attempt would be made again after its lease: a
                    # duplicate. A database blip is worth a few short retries first.
                    if pause is None:
                        raise
                    logger.warning("recording %d attempts failed; retrying", len(items))
                    await asyncio.sleep(pause)
        for item, outcome in zip(items, recorded, strict=True):
            if outcome is None:
                logger.warning(
                    "delivery %s: lease lost during attempt %s; another worker owns it now",
                    item.claimed.id,
                    item.claimed.attempt_number,
                )
            elif outcome.status == "pending":
                self.due_in(self.schedule.delay_after(outcome.attempt) or 0.0)
            else:
                metrics.count_finished_delivery(outcome.status)
        return recorded

    def due_in(self, seconds: float) -> None:
        """A delivery falls due in ``seconds``: wake the worker loop unless it will look
        again by then anyway (while it works, always: it may have read the next due time
        before this delivery was rescheduled)."""
        until = self.worker_sleeps_until
        if until is None or asyncio.get_running_loop().time() + seconds < until:
            self.wakeup.set()

    async def after_commit(self, outbox: Outbox, how: FirstAttemptPolicy) -> FirstAttempts:
        """Start attempt 1 of every delivery a committed transaction wrote, as ``how``
        says (``AppContext.transaction`` calls it, once per transaction)."""
        claimed = list(outbox.claimed)
        outbox.claimed.clear()
        if not claimed:
            return FirstAttempts()
        if how is FirstAttempt.BY_WORKERS:
            await self._hand_off(outbox.token, claimed)
            return FirstAttempts(handed_off=len(claimed))
        if isinstance(how, FirstAttemptsInBackground):
            return await self._in_background(outbox.token, claimed, how)
        return await self._attempt_now(outbox.token, claimed)

    async def _attempt_now(self, token: uuid.UUID, claimed: list[ClaimedDelivery]) -> FirstAttempts:
        """Attempt 1 of every delivery, concurrently, awaited."""
        if len(claimed) == 1:
            # Batched: under load, the records of concurrent decisions share a transaction.
            return FirstAttempts([await self.attempt(claimed[0], batched=True)])
        # A large batch is not all attempted from here at once: what exceeds one worker's
        # concurrency goes to the workers straight away.
        now_count = self.settings.delivery_concurrency
        later = claimed[now_count:]
        if later:
            await self._hand_off(token, later)
        made = await asyncio.gather(*(self.attempt(c, batched=True) for c in claimed[:now_count]))
        return FirstAttempts(list(made), handed_off=len(later))

    async def _in_background(
        self, token: uuid.UUID, claimed: list[ClaimedDelivery], how: FirstAttemptsInBackground
    ) -> FirstAttempts:
        """Attempt 1 of what ``how``'s budget still allows, started and not awaited; the
        rest handed to the workers."""
        now, later = claimed[: how.budget], claimed[how.budget :]
        if later:
            how.handed_off += len(later)
            await self._hand_off(token, later)
        if now:
            how.budget -= len(now)
            how.tasks.append(asyncio.create_task(self._attempt_now(token, now)))
        return FirstAttempts(handed_off=len(later), in_background=len(now))

    async def _hand_off(self, token: uuid.UUID, claimed: Sequence[ClaimedDelivery]) -> None:
        """Give a committed transaction's deliveries to the workers, due at once."""
        async with self._transaction() as repo:
            await repo.release([c.id for c in claimed], token, self.clock())
            await repo.notify_workers()
        self.wakeup.set()

    async def release(self, claimed: Sequence[ClaimedDelivery]) -> int:
        """Hand deliveries this process holds back to any worker, due at once (a worker
        shutting down mid-attempt). A delivery whose attempt was recorded meanwhile is no
        longer held and is left alone. Answers how many were handed back."""
        by_token: dict[uuid.UUID, list[uuid.UUID]] = {}
        for delivery in claimed:
            by_token.setdefault(delivery.token, []).append(delivery.id)
        released = 0
        async with self._transaction() as repo:
            now = utcnow()
            for token, ids in by_token.items():
                released += await repo.release(ids, token, now)
            await repo.notify_workers()
        return released

    # ---- what workers and operators ask for ----

    async def claim_due(
        self,
        limit: int,
        in_flight: Mapping[str, int],
        cap: Callable[[str], int] | None = None,
    ) -> Claim:
        """Lease due deliveries to this process: no receiver more than ``cap`` (default:
        its cap of attempts at once, receivers.py) counting the ``in_flight`` ones.

        A claim that leaves room (fewer than ``limit`` taken) also says, in the same
        transaction, when the next delivery it could take falls due."""
        cap = cap or self.receivers.cap
        async with self._transaction() as repo:
            await repo.plan_in_due_order()
            now = self.clock()
            claimed = await service.claim_due(
                repo,
                now,
                self.settings.delivery_lease_seconds,
                limit,
                in_flight,
                cap,
                self.receivers.held(),
            )
            if len(claimed) == limit:
                return Claim(claimed, 0.0)
            held = Counter(in_flight)
            held.update(delivery.target for delivery in claimed)
            full = [target for target, count in held.items() if count >= cap(target)]
            due = await repo.next_due_at(full)
        seconds = None if due is None else max(0.0, (due - now).total_seconds())
        return Claim(claimed, seconds, full)

    async def retry(self, org_id: uuid.UUID, delivery_id: uuid.UUID) -> RecordedAttempt:
        """A manual attempt of a finished delivery (decisions.md section 9)."""
        now = self.clock()
        async with self._transaction() as repo:
            claimed = await service.claim_for_manual_retry(
                repo, org_id, delivery_id, now, self.settings.delivery_lease_seconds
            )
            delivery = None if claimed else await repo.get_delivery(org_id, delivery_id)
        if claimed is None:
            if delivery is None:
                raise NotFound("No delivery with this id.")
            raise Conflict(
                "This delivery is still being attempted; retry it once it has succeeded or failed.",
                {"status": delivery.status},
            )
        recorded = await self.attempt(claimed, manual=True)
        if recorded is None:  # pragma: no cover - our own fresh lease cannot lapse this fast
            raise Conflict("The delivery was taken over while it was being retried.")
        return recorded

    async def send_test(
        self, connection_id: uuid.UUID, decider: service.Decider, url: str
    ) -> AttemptResult:
        """``POST /api/v1/test-webhook``: a signed sample payload, sent once, not stored,
        signed with ``connection_id``'s secret."""
        async with self.db.read_session() as session:
            secrets = await WebhookRepository(session, self.db.dialect).connection_secrets(
                connection_id
            )
        if secrets is None:  # pragma: no cover - the caller's connection exists
            raise NotFound("No connection.")
        now = self.clock()
        body = orjson.dumps(service.sample_payload(decider, now))
        headers = signed_headers(
            service.signing_keys(self.box, secrets, now),
            delivery_id=str(new_id()),
            attempt=1,
            timestamp=int(time.time()),
            body=body,
            request_id=current_request_id(),
        )
        return await send_attempt(
            self.clients,
            service.target_of(url),
            url,
            body,
            headers,
            policy=self.policy,
            timeout=self.settings.delivery_timeout_seconds,
            read_cap=self.settings.delivery_response_read_bytes,
        )

    async def close(self) -> None:
        await self.clients.aclose()
