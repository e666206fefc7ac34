"""The delivery worker: claim due deliveries, attempt each in its own task, repeat.

Runs inside ``signoff serve`` (unless ``--no-worker``) and alone as ``signoff worker``; any
number may run against one database. A claim leases rows to one worker
(``webhooks/repository.py``); a worker that dies leaves leases that run out, and any other
worker takes those deliveries over.

Waking up, without busy polling:
- in this process, ``dispatcher.wakeup`` is set whenever a delivery becomes due sooner
  than the loop may think (a retry scheduled, a hand-off);
- on PostgreSQL, every such transaction also sends ``NOTIFY signoff_deliveries``, which the
  process's LISTEN connection (``ListenHub``) turns into the same wake-up, across processes;
- otherwise the loop sleeps exactly until the next due time (a retry, or a lease running
  out), capped by ``SIGNOFF_DELIVERY_POLL_INTERVAL_SECONDS`` so that deliveries made due
  by *other* processes on SQLite are noticed too (one indexed query per interval).

A slow receiver never holds up the others: each attempt is its own task, the connection
pool has no global limit, and one receiver (host:port) gets at most
``SIGNOFF_DELIVERY_PER_TARGET_CONCURRENCY`` attempts of this worker at once; its other due
deliveries are left (or handed back) for later instead of taking every slot.

A receiver that answers fast has more deliveries claimed than it has free slots
(``ReceiverRecord.claim_ahead``): they wait in this worker's queue for that receiver and
start as soon as one of its attempts ends, instead of each slot waiting for a claim
transaction. A queued delivery starts only while its lease leaves room for a whole attempt
(``SIGNOFF_DELIVERY_TIMEOUT_SECONDS``) before it runs out; one that waited longer is handed
back, so no delivery is ever attempted by two workers within one lease.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, deque

from signoff.context import AppContext
from signoff.storage import ListenHub
from signoff.webhooks.dispatcher import WebhookDispatcher
from signoff.webhooks.repository import NOTIFY_CHANNEL
from signoff.webhooks.service import ClaimedDelivery

logger = logging.getLogger(__name__)

# With LISTEN/NOTIFY up, polling is only a safety net against a lost notification.
LISTENING_POLL_SECONDS = 30.0
ERROR_BACKOFF_SECONDS = 1.0
# How late a retry may be claimed so that it shares a claim with others due just after it.
CLAIM_GATHER_SECONDS = 0.1
# Deliveries taken by one claim, at most: a claim locks twice as many candidates to choose
# from, and a worker with many free slots locked hundreds of rows to take the few one
# busy receiver had room for. A backlog is claimed again at once.
CLAIM_LIMIT = 64
# On shutdown, how long attempts in flight may take to finish before their leases are
# handed back: container runtimes send SIGKILL 10 s after SIGTERM by default.
SHUTDOWN_GRACE_SECONDS = 5.0
# A queued delivery starts only if its lease outlasts a whole attempt by this margin (the
# lease was taken on the database's side of a claim, a moment before we queued it).
LEASE_MARGIN_SECONDS = 1.0


class DeliveryWorker:
    def __init__(self, ctx: AppContext, dispatcher: WebhookDispatcher, hub: ListenHub) -> None:
        self.ctx = ctx
        self.dispatcher = dispatcher
        settings = ctx.settings
        self.concurrency = settings.delivery_concurrency
        self.poll_seconds = settings.delivery_poll_interval_seconds
        self.in_flight: set[asyncio.Task[None]] = set()
        # Attempts cut short by the shutdown: their deliveries are handed back.
        self.interrupted: list[ClaimedDelivery] = []
        # Attempts talking to each receiver now, and deliveries claimed for each receiver
        # waiting for one of its slots (with the loop time they were queued at).
        self.per_target_in_flight: Counter[str] = Counter()
        self.queued: dict[str, deque[tuple[float, ClaimedDelivery]]] = {}
        self.queued_total = 0
        # How long a delivery may wait in the queue: its lease must outlast the attempt.
        self.queue_wait_limit = max(
            0.0,
            settings.delivery_lease_seconds
            - settings.delivery_timeout_seconds
            - LEASE_MARGIN_SECONDS,
        )
        self._background: set[asyncio.Task[None]] = set()
        self._waiting_for_slot = False
        # Free slots at the last step (none: the worker was full).
        self._claimable = self.concurrency
        # What the loop did, logged when it stops (the bench reads it): attempts started,
        # claim transactions, due-time lookups, and looks again after a short wait.
        self.attempts_made = 0
        self.claims_made = 0
        self.due_lookups = 0
        self.short_waits = 0
        self.hub = hub

    async def run(self, stop: asyncio.Event) -> None:
        loop = asyncio.get_running_loop()
        caught_up = False
        try:
            await self._listen()
            while not stop.is_set():
                self.dispatcher.wakeup.clear()
                try:
                    sleep = await self._step()
                except Exception:
                    logger.exception("delivery worker step failed; retrying shortly")
                    sleep = ERROR_BACKOFF_SECONDS
                if sleep > 0:
                    if not caught_up:
                        caught_up = True
                        self._log_ready()
                    self.dispatcher.worker_sleeps_until = loop.time() + sleep
                    try:
                        await _wait_either(stop, self.dispatcher.wakeup, sleep)
                    finally:
                        self.dispatcher.worker_sleeps_until = None
        finally:
            await self._drain()
            logger.info(
                "delivery worker stopped: attempts=%d claims=%d due_lookups=%d short_waits=%d",
                self.attempts_made,
                self.claims_made,
                self.due_lookups,
                self.short_waits,
            )

    async def _listen(self) -> None:
        """PostgreSQL: deliveries any process makes due wake the loop; so does each
        (re)start of listening, as what was notified meanwhile went unheard."""
        wake = self.dispatcher.wakeup.set
        self.hub.listen(NOTIFY_CHANNEL, lambda _payload: wake(), on_connect=wake)
        await self.hub.ready()

    def _log_ready(self) -> None:
        """Said once, when the worker first has nothing due: it is up and caught up (an
        operator's sign that it runs, and what tests wait for before making work)."""
        if self.hub.hears(NOTIFY_CHANNEL):
            logger.info("delivery worker ready: nothing due, woken by %s", NOTIFY_CHANNEL)
        else:
            logger.info("delivery worker ready: nothing due, polling every %s s", self.poll_seconds)

    async def _step(self) -> float:
        """Claim and start what is due; answer how long to sleep before the next step."""
        free = self.concurrency - len(self.in_flight) - self.queued_total
        self._claimable = free
        saturated = self._saturated()
        self._waiting_for_slot = free <= 0 or bool(saturated)
        if free <= 0:
            return self._poll_cap()  # a finishing attempt wakes us
        self.claims_made += 1
        limit = min(free, CLAIM_LIMIT)
        claim = await self.dispatcher.claim_due(limit, self._held(), self._claim_cap)
        self._enqueue(claim.claimed)
        if len(claim.claimed) == limit:
            return 0.0  # a backlog: claim again at once
        # Due work for receivers at their cap waits for one of their attempts to finish
        # (which wakes us); the sleep is until the next delivery we could take. The claim
        # left out of that time the receivers full when it ran: they wake us too, even if
        # one of their attempts has ended since.
        self._waiting_for_slot = bool(claim.full) or bool(self._saturated())
        self.due_lookups += 1
        seconds = claim.next_due_seconds
        if seconds is None:
            return self._poll_cap()
        if seconds <= 0:
            # Due, yet not ours: another worker took it a moment ago, or its candidate
            # window was full of a busy receiver's backlog. Look again shortly.
            self.short_waits += 1
            return min(self._poll_cap(), 0.05)
        # Retries fall due one by one, spread over time: waking a little after the next one
        # takes those due shortly after it in the same claim (one transaction, and their
        # records share one too) instead of one claim each. Work made due *now* (a hand-off)
        # still wakes the loop at once.
        return min(seconds + CLAIM_GATHER_SECONDS, self._poll_cap())

    def _held(self) -> Counter[str]:
        """Deliveries this worker holds per receiver: in flight and queued."""
        held = Counter(self.per_target_in_flight)
        for target, queue in self.queued.items():
            held[target] += len(queue)
        return held

    def _claim_cap(self, target: str) -> int:
        return self.dispatcher.receivers.claim_ahead(target)

    def _saturated(self) -> list[str]:
        """Receivers holding as many deliveries as they may (receivers.py): claims leave
        them out, and an attempt ending wakes the loop for them."""
        return [t for t, n in self._held().items() if n >= self._claim_cap(t)]

    def _poll_cap(self) -> float:
        if self.hub.hears(NOTIFY_CHANNEL):
            return max(self.poll_seconds, LISTENING_POLL_SECONDS)
        return self.poll_seconds

    def _enqueue(self, claimed: list[ClaimedDelivery]) -> None:
        now = asyncio.get_running_loop().time()
        targets: dict[str, None] = {}
        for delivery in claimed:
            self.queued.setdefault(delivery.target, deque()).append((now, delivery))
            self.queued_total += 1
            targets[delivery.target] = None
        for target in targets:
            self._start_queued(target)

    def _start_queued(self, target: str) -> None:
        """Start queued deliveries to ``target`` while it has free slots; hand back those
        that waited so long that their lease could run out during the attempt."""
        queue = self.queued.get(target)
        if not queue:
            return
        cap = self.dispatcher.receivers.cap(target)
        oldest_allowed = asyncio.get_running_loop().time() - self.queue_wait_limit
        expired: list[ClaimedDelivery] = []
        while queue and self.per_target_in_flight[target] < cap:
            queued_at, delivery = queue.popleft()
            self.queued_total -= 1
            if queued_at < oldest_allowed:
                expired.append(delivery)
                continue
            self._start(delivery)
        if not queue:
            del self.queued[target]
        if expired:
            self._hand_back(expired)

    def _start(self, delivery: ClaimedDelivery) -> None:
        self.per_target_in_flight[delivery.target] += 1
        task = asyncio.create_task(self._attempt(delivery))
        self.in_flight.add(task)
        task.add_done_callback(self._finished)

    def _hand_back(self, deliveries: list[ClaimedDelivery]) -> None:
        task = asyncio.create_task(self._release(deliveries))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _release(self, deliveries: list[ClaimedDelivery]) -> None:
        try:
            released = await self.dispatcher.release(deliveries)
        except Exception:
            # Unreleased, the leases still run out: later, but nothing is lost.
            logger.exception("could not hand back %d leases", len(deliveries))
        else:
            logger.info("handed back %d deliveries that waited too long for a slot", released)
            self.dispatcher.wakeup.set()  # due again at once: claim them

    async def _attempt(self, delivery: ClaimedDelivery) -> None:
        # The receiver's slot is free once it has answered: recording the attempt (a
        # transaction shared with others, which may wait its turn) keeps the worker's slot
        # only, so a receiver that answers fast is not held to its cap by our own writes.
        receiver_done = False

        def answered() -> None:
            nonlocal receiver_done
            if not receiver_done:
                receiver_done = True
                self._receiver_slot_freed(delivery.target)

        try:
            self.attempts_made += 1
            await self.dispatcher.attempt(delivery, batched=True, answered=answered)
        except asyncio.CancelledError:
            self.interrupted.append(delivery)
            raise
        except Exception:
            # The lease runs out and the delivery is attempted again: nothing is lost.
            logger.exception("delivery %s: attempt could not be recorded", delivery.id)
        finally:
            answered()

    def _receiver_slot_freed(self, target: str) -> None:
        self.per_target_in_flight[target] -= 1
        if self.per_target_in_flight[target] <= 0:
            del self.per_target_in_flight[target]
        self._start_queued(target)
        self._slot_freed(target)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self.in_flight.discard(task)
        if self._waiting_for_slot and self._claimable <= 0:
            self.dispatcher.wakeup.set()  # the worker was full: any free slot is worth a claim

    def _slot_freed(self, target: str) -> None:
        """An attempt to ``target`` ended. While the loop waits for its receivers' slots,
        it claims again once ``target`` has room for several deliveries (half of what it
        may hold), not at every attempt's end: one claim transaction and one due-time
        lookup for several of a busy receiver's deliveries, instead of one of each per
        delivery. A fast receiver's queue keeps its slots busy meanwhile."""
        if not self._waiting_for_slot:
            return
        cap = self._claim_cap(target)
        held = self.per_target_in_flight.get(target, 0) + len(self.queued.get(target, ()))
        if cap - held >= max(1, cap // 2):
            self.dispatcher.wakeup.set()

    async def _drain(self) -> None:
        """On shutdown, let attempts in flight finish (each has its own deadline), then
        hand back the leases of any cut short, so another worker takes them at once
        instead of after the lease runs out."""
        # Queued deliveries were never attempted: hand them back with the interrupted.
        for queue in self.queued.values():
            self.interrupted.extend(delivery for _, delivery in queue)
        self.queued.clear()
        self.queued_total = 0
        if self._background:
            await asyncio.gather(*self._background, return_exceptions=True)
        if not self.in_flight and not self.interrupted:
            return
        grace = min(self.ctx.settings.delivery_timeout_seconds + 2.0, SHUTDOWN_GRACE_SECONDS)
        pending: set[asyncio.Task[None]] = set()
        if self.in_flight:
            _, pending = await asyncio.wait(set(self.in_flight), timeout=grace)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if self.interrupted:
            try:
                released = await self.dispatcher.release(self.interrupted)
            except Exception:
                # Unreleased, the leases still run out: later, but nothing is lost.
                logger.exception("could not hand back %d leases", len(self.interrupted))
            else:
                logger.info("handed back %d unfinished deliveries", released)


async def _wait_either(stop: asyncio.Event, wakeup: asyncio.Event, timeout: float) -> None:
    waiters = [asyncio.create_task(stop.wait()), asyncio.create_task(wakeup.wait())]
    try:
        await asyncio.wait(waiters, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for waiter in waiters:
            waiter.cancel()
        await asyncio.gather(*waiters, return_exceptions=True)


async def run_delivery_worker(
    ctx: AppContext, dispatcher: WebhookDispatcher, hub: ListenHub, stop: asyncio.Event
) -> None:
    await DeliveryWorker(ctx, dispatcher, hub).run(stop)
