"""The notification sender's loop: send what is due, then sleep until the next due time.

Runs beside the delivery worker, inside ``signoff serve`` (unless ``--no-worker``) and in
``signoff worker``; any number may run against one database (claims are leased rows,
``notifications/sending/sender.py``). It wakes at once when this process commits notifications
(``AppContext.transaction``), on PostgreSQL when any process does (``NOTIFY
signoff_notifications``), and otherwise at the next due time, polling at most
``SIGNOFF_NOTIFICATION_POLL_INTERVAL_SECONDS`` apart for rows other SQLite processes wrote.
"""

from __future__ import annotations

import asyncio
import logging

from signoff.notifications.planning.repository import NOTIFY_CHANNEL
from signoff.notifications.sending.sender import CLAIM_LIMIT, NotificationSender
from signoff.storage import ListenHub
from signoff.worker.deliveries import ERROR_BACKOFF_SECONDS, LISTENING_POLL_SECONDS, _wait_either

logger = logging.getLogger(__name__)

# How long a woken sender waits for more commits before it claims.
WAKEUP_GATHER_SECONDS = 0.05
# During a burst (rounds that each plan several creates) the wait doubles, up to this:
# a round's fixed cost (its reads, its transaction) is paid once for more creates, and in
# ``signoff serve`` that cost is event-loop time the API's requests wait for. It stays well
# inside the promise of a mail within a second of its create's commit.
BURST_GATHER_SECONDS = 0.25
# A round that planned at least this many plans counts as part of a burst.
BURST_PLANS = 2


def next_gather(gather: float, plans_last_round: int) -> float:
    """The wait after the next wake-up: longer while a burst goes on, short again once a
    round finds a single change (a lone create is sent without the burst's wait)."""
    if plans_last_round >= BURST_PLANS:
        return min(BURST_GATHER_SECONDS, gather * 2)
    return WAKEUP_GATHER_SECONDS


async def run_notification_sender(
    sender: NotificationSender, hub: ListenHub, stop: asyncio.Event
) -> None:
    poll = sender.settings.notification_poll_interval_seconds
    # PostgreSQL: plans any process commits wake the loop; so does each (re)start of
    # listening, as what was notified meanwhile went unheard.
    hub.listen(NOTIFY_CHANNEL, lambda _payload: sender.wakeup.set(), sender.wakeup.set)
    await hub.ready()
    gather = WAKEUP_GATHER_SECONDS
    # Whether this round began after a gather: only those measure a burst (a round run at
    # once, for plans committed just as the last one ended, finds a few by chance).
    gathered = False
    while not stop.is_set():
        sender.wakeup.clear()
        try:
            claimed = await sender.run_once()
            if gathered:
                gather = next_gather(gather, sender.plans_last_round)
            gathered = False
            if claimed >= CLAIM_LIMIT:
                continue  # a backlog: claim again at once
            # Woken during the round (a burst of creates): the next round is soon
            # anyway, so the due time is not worth a query.
            due = None if sender.wakeup.is_set() else await sender.next_due_seconds()
        except Exception:
            logger.exception("notification sender round failed; retrying shortly")
            due = ERROR_BACKOFF_SECONDS
        cap = max(poll, LISTENING_POLL_SECONDS) if hub.hears(NOTIFY_CHANNEL) else poll
        sleep = cap if due is None else min(cap, due)
        if sleep > 0:
            await _wait_either(stop, sender.wakeup, sleep)
            if sender.wakeup.is_set():
                # Woken by a commit: the commits of a burst share the next claim.
                await _wait_either(stop, asyncio.Event(), gather)
                gathered = True
