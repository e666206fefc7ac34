"""The process's notification machinery: claim due notifications, send, record.

A round is a few transactions' worth, the way callbacks are delivered
(``webhooks/dispatcher.py``), and only the middle step talks to anyone outside:
1. a claim, which first plans what changes left to plan (``planning.plan_waiting``,
   transactions of their own: the rows of a create or of steps opening are written and
   their plans deleted, so a sender killed before a commit leaves those plans to the
   next), then leases due rows to this process (one statement), reads them, and, in one
   more transaction if any message needs it, issues the one-click links of the messages
   about to go out (only their hashes are stored), puts back chat notifications that
   must wait for their channel's digest, and voids those whose request was decided
   meanwhile;
2. the sends, outside any transaction, concurrently;
3. the record: each attempt is logged and its rows move on (sent, retried later with
   backoff, or failed), only by the holder of the claim.

Planning, reading and recording go a piece at a time, and each piece first waits for a
moment without an API write in flight in this process (briefly; ``common/api_writes.py``):
in ``signoff serve`` on SQLite every piece runs on the API's event loop without a break.

A sender that dies after a claim leaves leases that run out; any sender then claims the
rows again and sends them: at least once, and at most once more per crash.

The clock is injected (``clock``) so reminders and escalations are tested without
sleeping: a test moves the clock and runs one round.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from email.utils import make_msgid

from signoff.auth.principal import OrgMember
from signoff.common.api_writes import ApiWrites
from signoff.common.ids import new_id
from signoff.common.poison import PoisonedRows
from signoff.common.time import utcnow
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.models.notifications import NotificationChannel
from signoff.notifications.decisions.links import issue_links
from signoff.notifications.planning import service as planning
from signoff.notifications.planning.repository import SCHEDULED_KINDS
from signoff.notifications.repository import NotificationRepository
from signoff.notifications.routing.document import CHAT_TYPES, RequestFacts, plan_chat_messages
from signoff.notifications.routing.service import channel_settings
from signoff.notifications.sending import messages
from signoff.notifications.sending.channels import HttpChannels, SmtpServer, send_mail
from signoff.notifications.sending.repository import ClaimedNotification, ClaimedRow
from signoff.passkeys.rule import passkey_needed
from signoff.storage import Database
from signoff.webhooks.delivery import AttemptResult, ClientPool
from signoff.webhooks.urlpolicy import AddressPolicy

logger = logging.getLogger(__name__)

# Delays before retry 1, 2, 3, 4 of a message that failed: a chat service or mail server
# that is down for minutes still gets it.
RETRY_DELAYS_SECONDS = (5.0, 30.0, 120.0, 600.0)
CLAIM_LIMIT = 200
# Plans taken per round, and per planning transaction; claimed rows read per piece; rows
# recorded per write transaction. A burst's plans, and a digest's hundred rows, are
# handled a piece at a time, and the SQLite writer (in ``signoff serve``, the event loop)
# is held for one piece at a time, the API's creates going between the pieces. Each
# piece costs a fixed share of its own (a write transaction, its statements), so the
# pieces are no smaller than that: smaller pieces cost markedly more CPU in all
# (docs/decisions/0016-the-senders-work-in-pieces.md).
PLAN_LIMIT = 200
PLAN_PIECE = 25
READ_PIECE = 25
RECORD_PIECE = 50
# Before each piece, the longest wait for a moment without an API write in flight. A
# create is several turns of the event loop (the request read, its write, the commit's
# wait, the answer), and with a piece run at each turn it would wait a piece at each.
PIECE_WAIT_SECONDS = 0.01
# While plans wait that another sender is planning (its rows locked), look again this
# soon rather than spin.
PLANS_WAITING_RECHECK_SECONDS = 0.05


@dataclass(frozen=True)
class Outgoing:
    """One message to send: the rows it stands for (several for a digest)."""

    rows: tuple[ClaimedRow, ...]
    items: tuple[messages.Item, ...]


class NotificationSender:
    def __init__(
        self,
        settings: Settings,
        db: Database,
        box: SecretBox,
        clients: ClientPool,
        policy: AddressPolicy,
        poisoned: PoisonedRows,
        clock: Callable[[], datetime] = utcnow,
        api_writes: ApiWrites | None = None,
    ) -> None:
        """``api_writes``: the API's writes in flight in this process, if it serves the API;
        each piece of work waits for a moment without one (``common/api_writes.py``)."""
        self.settings = settings
        self.poisoned = poisoned
        self.db = db
        self.box = box
        self.clock = clock
        self.api_writes = api_writes or ApiWrites()
        self.http = HttpChannels(clients, policy, settings)
        self.smtp = (
            SmtpServer.from_url(settings.smtp_url, settings.smtp_ca_file)
            if settings.smtp_url
            else None
        )
        # Set after a commit that wrote notifications (``AppContext.transaction``).
        self.wakeup = asyncio.Event()
        # When each chat channel last got a message from this process (clock seconds).
        self.last_chat_message: dict[uuid.UUID, float] = {}
        self.messages_sent = 0
        self.planned_last_round = False
        # Plans taken by the last ``run_once`` (all its claims): the loop's burst measure.
        self.plans_last_round = 0

    def request_url(self, request_id: uuid.UUID) -> str:
        return f"{self.settings.public_url}/requests/{request_id}"

    def link_url(self, token: str) -> str:
        return f"{self.settings.public_url}/links/{token}"

    async def run_once(self) -> int:
        """One round: plan what waits and claim what is due, send it, record it; again
        while a backlog of plans remains. Answers rows claimed."""
        claimed = 0
        self.plans_last_round = 0
        while True:
            token = new_id()
            outgoing, taken, planned = await self._claim(token)
            self.planned_last_round = planned > 0
            self.plans_last_round += planned
            claimed += taken
            if outgoing:
                results = await asyncio.gather(*(self._send(message) for message in outgoing))
                self._chat_channels_told(outgoing)
                await self._record(token, list(zip(outgoing, results, strict=True)))
            if planned < PLAN_LIMIT:
                return claimed

    # ---- 1. plan and claim ----

    async def _claim(self, token: uuid.UUID) -> tuple[list[Outgoing], int, int]:
        """Messages to send, rows claimed, plans taken.

        Each step is a short turn of its own, not one transaction: in ``signoff serve`` on
        SQLite a writer's block, or a read, runs on the event loop without a break, and
        the API's creates waiting meanwhile go between the turns.
        1. plan (``planning.plan_waiting``);
        2. claim, one statement;
        3. read the claimed rows, in pieces, outside any write;
        4. only if some need it: void rows of decided requests, put back chat rows that
           must wait, and issue the one-click links of single messages.
        (Rows committed by one step are taken up by the next, or by any sender after a
        crash between them: planned rows are pending rows like any other, and a claim
        not sent runs out with its lease.)"""
        now = self.clock()
        lease = now + timedelta(seconds=self.settings.notification_lease_seconds)
        # Chat channels told less than an interval ago: their rows are not even claimed
        # (to be put back), so a burst's rounds stay short; they go in the next digest.
        waiting = self._chat_channels_waiting(now.timestamp())
        planned = await self._plan(now)
        await self._wait_for_api_quiet()
        async with self.db.write_transaction() as session:
            repo = NotificationRepository(session, self.db.dialect)
            taken = await repo.claim_due(token, now, lease, CLAIM_LIMIT, waiting)
        if not taken:
            return [], 0, planned
        rows = await self._read_claimed(token, lease)
        live, void = _split_decided(rows)
        outgoing, held = self._group(live)
        if not (void or held or any(self._needs_links(message) for message in outgoing)):
            return [self._without_links(message) for message in outgoing], taken, planned
        async with self.db.write_transaction() as session:
            repo = NotificationRepository(session, self.db.dialect)
            for row in void:
                await repo.finish(
                    row.notification.id,
                    token,
                    {
                        "status": "cancelled",
                        "claim_token": None,
                        "updated_at": now,
                        "last_error": "request no longer pending",
                    },
                )
            if held:
                wait = timedelta(seconds=self.settings.notification_chat_interval_seconds)
                await repo.put_back([r.notification.id for r in held], token, now + wait)
            built = [
                self._without_links(message)
                if await _needs_passkey(repo, message)
                else self._with_links(repo, message, now)
                for message in outgoing
            ]
        return built, taken, planned

    async def _plan(self, now: datetime) -> int:
        """Plan what waits, ``PLAN_PIECE`` plans per write transaction, up to
        ``PLAN_LIMIT`` a round; how many were taken."""
        planned = 0
        while planned < PLAN_LIMIT:
            await self._wait_for_api_quiet()
            async with self.db.write_transaction() as session:
                repo = NotificationRepository(session, self.db.dialect)
                piece = await planning.plan_waiting(repo, now, PLAN_PIECE, self.poisoned)
            planned += piece
            if piece < PLAN_PIECE:
                break
        return planned

    async def _wait_for_api_quiet(self) -> None:
        """A moment without an API write in flight (waited for at most
        ``PIECE_WAIT_SECONDS``): what runs next holds the event loop for a while."""
        await self.api_writes.wait_for_quiet(PIECE_WAIT_SECONDS)

    async def _read_claimed(self, token: uuid.UUID, lease: datetime) -> list[ClaimedRow]:
        """The rows this claim holds, read ``READ_PIECE`` at a time
        (``NotificationRepository.claimed_piece``)."""
        rows: list[ClaimedRow] = []
        channels: dict[uuid.UUID, NotificationChannel] = {}
        after: uuid.UUID | None = None
        async with self.db.read_session() as session:
            repo = NotificationRepository(session, self.db.dialect)
            while True:
                await self._wait_for_api_quiet()
                piece, after = await repo.claimed_piece(token, lease, after, READ_PIECE, channels)
                rows += piece
                if after is None:
                    return rows

    def _group(self, rows: Sequence[ClaimedRow]) -> tuple[list[list[ClaimedRow]], list[ClaimedRow]]:
        """E-mail and webhook rows go one by one; chat rows one message per channel."""
        single = [[r] for r in rows if r.channel.type not in CHAT_TYPES]
        chat = {r.notification.id: r for r in rows if r.channel.type in CHAT_TYPES}
        loop_now = self.clock().timestamp()  # the injected clock: digests are tested too
        planned, held_ids = plan_chat_messages(
            [(r.notification.id, r.channel.id) for r in chat.values()],
            self.last_chat_message,
            loop_now,
            self.settings.notification_chat_interval_seconds,
        )
        for message in planned:
            self.last_chat_message[message.channel_id] = loop_now
        grouped = [[chat[i] for i in message.notification_ids] for message in planned]
        return single + grouped, [chat[i] for i in held_ids]

    def _chat_channels_waiting(self, now: float) -> dict[uuid.UUID, float]:
        """Chat channels that must wait, and the clock second each may be told again."""
        interval = self.settings.notification_chat_interval_seconds
        return {
            channel_id: told + interval
            for channel_id, told in self.last_chat_message.items()
            if now - told < interval
        }

    def _chat_channels_told(self, sent: Sequence[Outgoing]) -> None:
        """The interval counts from when a send ended, not from the claim: the next
        message then starts at least an interval after the last one arrived, whatever
        the time between claiming and sending (the receiver sees the spacing, not us)."""
        ended = self.clock().timestamp()
        for message in sent:
            channel = message.rows[0].channel
            if channel.type in CHAT_TYPES:
                self.last_chat_message[channel.id] = ended

    def _needs_links(self, rows: Sequence[ClaimedRow]) -> bool:
        """Whether a message carries one-click links, issued (and stored) for it: a
        single message to a person or a chat channel, not a digest (which lists requests
        with their Open link only), not a webhook event, not a Slack app's message (which
        decides in Slack)."""
        if len(rows) != 1:
            return False
        row = rows[0]
        return row.channel.type != "webhook" and not _interactive_slack(self.box, row)

    def _without_links(self, rows: list[ClaimedRow]) -> Outgoing:
        items = tuple(
            messages.Item(
                row.request,
                row.notification.kind,
                messages.Links(self.request_url(row.request.id), None, None),
            )
            for row in rows
        )
        return Outgoing(tuple(rows), items)

    def _with_links(
        self, repo: NotificationRepository, rows: list[ClaimedRow], now: datetime
    ) -> Outgoing:
        if not self._needs_links(rows):
            return self._without_links(rows)
        [row] = rows
        n = row.notification
        issued = issue_links(
            repo, row.request, n.recipient_user_id, _via(row.channel.type), n.require_sign_in, now
        )
        links = messages.Links(
            self.request_url(row.request.id),
            self.link_url(issued.approve),
            self.link_url(issued.reject),
        )
        return Outgoing((row,), (messages.Item(row.request, n.kind, links),))

    async def _passkey_only(self, message: Outgoing) -> bool:
        """A Slack app's buttons must not decide a request that needs a passkey either:
        its message opens the request page instead."""
        async with self.db.read_session() as session:
            return await _needs_passkey(
                NotificationRepository(session, self.db.dialect), message.rows
            )

    # ---- 2. send ----

    async def _send(self, message: Outgoing, sample: bool = False) -> AttemptResult:
        """``sample``: ``send_test``'s message, about no stored request."""
        row = message.rows[0]
        try:
            settings = channel_settings(self.box, row.channel)
            kind = row.channel.type
            if kind == "email":
                if self.smtp is None:
                    return AttemptResult(False, 0, 0, None, "SIGNOFF_SMTP_URL is not set")
                mail = messages.email_message(
                    message.items[0],
                    self.settings.mail_from,
                    row.notification.recipient,
                    self._mail_ids(row, sample),
                )
                return await send_mail(self.smtp, mail, self.settings.notification_timeout_seconds)
            if kind == "slack":
                app = "bot_token" in settings
                sign_in_first = app and (
                    _sign_in_first(message) or await self._passkey_only(message)
                )
                payload = messages.slack_payload(
                    message.items, app and not sign_in_first, sign_in_first
                )
                return await self.http.post_json(settings["webhook_url"], payload)
            if kind == "teams":
                return await self.http.post_json(
                    settings["webhook_url"], messages.teams_payload(message.items)
                )
            if kind == "discord":
                return await self.http.post_json(
                    settings["webhook_url"], messages.discord_payload(message.items)
                )
            event = messages.webhook_event(message.items[0], self.clock())
            return await self.http.post_signed(
                settings["url"],
                settings["secret"],
                str(row.notification.id),
                row.notification.attempts + 1,
                event,
            )
        except Exception as exc:
            # A channel whose settings no longer decrypt (the secret key changed) fails
            # and says so; it must not stop the round.
            logger.warning("notification %s: %s", row.notification.id, type(exc).__name__)
            return AttemptResult(False, 0, 0, None, f"could not send: {type(exc).__name__}")

    def _mail_ids(self, row: ClaimedRow, sample: bool) -> messages.MailIds:
        n = row.notification
        domain = messages.mail_domain(self.settings.public_url)
        if sample:
            # No request, no thread: an id of its own.
            return messages.MailIds(self.clock(), make_msgid("signoff-test", domain), None)
        message_id, thread = messages.mail_ids(n.kind, n.request_id, n.id, n.recipient, domain)
        return messages.MailIds(self.clock(), message_id, thread)

    # ---- 3. record ----

    async def _record(self, token: uuid.UUID, sent: list[tuple[Outgoing, AttemptResult]]) -> None:
        """Each row's attempt is logged and the row moves on, ``RECORD_PIECE`` rows per
        write transaction: a digest's hundred rows in one held the writer (on SQLite,
        this process's event loop) for several milliseconds, and the API's creates queued
        behind it; they go between the pieces. A sender that dies between two pieces
        leaves the rest claimed: their lease runs out and they are sent once more, as
        after any crash between a send and its record."""
        now = self.clock()
        rows = [(row, result) for message, result in sent for row in message.rows]
        for start in range(0, len(rows), RECORD_PIECE):
            await self._wait_for_api_quiet()
            await self._record_piece(token, rows[start : start + RECORD_PIECE], now)

    async def _record_piece(
        self, token: uuid.UUID, rows: list[tuple[ClaimedRow, AttemptResult]], now: datetime
    ) -> None:
        """Rows that move on alike (same attempt number, same outcome) are updated by one
        statement; the attempts are one multi-row insert."""
        groups: dict[tuple[int, bool, str | None], list[tuple[ClaimedRow, AttemptResult]]] = {}
        for row, result in rows:
            attempt = row.notification.attempts + 1
            groups.setdefault((attempt, result.success, result.error), []).append((row, result))
        async with self.db.write_transaction() as session:
            repo = NotificationRepository(session, self.db.dialect)
            attempts: list[dict[str, object]] = []
            for (attempt, success, error), alike in groups.items():
                values = _next_state(attempt, success, error, now)
                moved = await repo.finish_many(
                    [row.notification.id for row, _ in alike], token, values
                )
                for row, result in alike:
                    n = row.notification
                    if n.id not in moved:
                        logger.warning("notification %s: lease lost; another sender owns it", n.id)
                        continue
                    attempts.append(
                        {
                            "id": new_id(),
                            "notification_id": n.id,
                            "request_id": n.request_id,
                            "attempt": attempt,
                            "success": result.success,
                            "status_code": result.status_code,
                            "duration_ms": result.duration_ms,
                            "error": result.error,
                            "created_at": now,
                        }
                    )
                    self.messages_sent += result.success
            await repo.add_attempts(attempts)

    async def send_test(
        self, org_id: uuid.UUID, channel_name: str, member: OrgMember
    ) -> AttemptResult | None:
        """The routing page's "send a test notification": a sample, now, not stored.
        E-mail channels mail the admin who asked. None if the org has no such channel."""
        async with self.db.read_session() as session:
            channels = await NotificationRepository(session, self.db.dialect).channels(org_id)
        channel = next((c for c in channels if c.name == channel_name), None)
        if channel is None:
            return None
        now = self.clock()
        sample = RequestFacts(
            id=new_id(),
            org_id=org_id,
            title="Test notification from signoff",
            description=f"{member.user_name} sent this to check the channel {channel_name}.",
            priority="low",
            action_type="signoff.test",
            source="signoff",
            metadata={},
            has_steps=False,
            created_at=now,
            expires_at=None,
        )
        notification = ClaimedNotification(
            id=sample.id,
            request_id=sample.id,
            kind="created",
            recipient=member.user_email if channel.type == "email" else channel_name,
            recipient_user_id=None,
            require_sign_in=False,
            attempts=0,
        )
        row = ClaimedRow(notification, channel, sample, "pending")
        links = messages.Links(f"{self.settings.public_url}/", None, None)
        outgoing = Outgoing((row,), (messages.Item(sample, "created", links),))
        return await self._send(outgoing, sample=True)

    async def next_due_seconds(self) -> float | None:
        """Seconds until there is work: at once while plans wait (another process wrote
        them, or another sender is planning them); no later than a waiting chat channel
        may be told again (its rows were due, but not claimed)."""
        async with self.db.read_session() as session:
            repo = NotificationRepository(session, self.db.dialect)
            if await repo.any_plan_waiting(self.poisoned.parked(planning.PLAN_JOB)):
                # New plans: at once. Plans the last round could not take are another
                # sender's (PostgreSQL, locked): look again shortly rather than spin.
                return 0.0 if self.planned_last_round else PLANS_WAITING_RECHECK_SECONDS
            now = self.clock()
            waiting = self._chat_channels_waiting(now.timestamp())
            due = await repo.next_due_at(skip_channels=waiting)
        free = waiting.values()
        soonest = [max(0.0, min(free) - now.timestamp())] if free else []
        if due is not None:
            soonest.append(max(0.0, (due - now).total_seconds()))
        return min(soonest, default=None)


def _next_state(attempt: int, success: bool, error: str | None, now: datetime) -> dict[str, object]:
    """A notification's row after its ``attempt``-th send: sent, due again later, or
    failed after its last retry."""
    values: dict[str, object] = {"attempts": attempt, "claim_token": None, "updated_at": now}
    if success:
        values.update(status="sent", sent_at=now, last_error=None)
    elif attempt > len(RETRY_DELAYS_SECONDS):
        values.update(status="failed", last_error=error)
    else:
        delay = timedelta(seconds=RETRY_DELAYS_SECONDS[attempt - 1])
        values.update(due_at=now + delay, last_error=error)
    return values


def _split_decided(rows: Sequence[ClaimedRow]) -> tuple[list[ClaimedRow], list[ClaimedRow]]:
    """A person is not asked to decide what is decided; webhook events of what happened
    (a create, a step opened) still go out. A reminder, escalation or warning of a
    request no longer pending is void on every channel, the webhook's too: the decision
    voids what is scheduled, but on PostgreSQL one that waited for the planning's lock
    did not see the rows that planning wrote (``ApprovalRepository.share_lock_pending``),
    and this check is what stops them."""
    live: list[ClaimedRow] = []
    void: list[ClaimedRow] = []
    for row in rows:
        goes = row.request_status == "pending" or (
            row.channel.type == "webhook" and row.notification.kind not in SCHEDULED_KINDS
        )
        (live if goes else void).append(row)
    return live, void


def _via(channel_type: str) -> str:
    return channel_type


def _sign_in_first(message: Outgoing) -> bool:
    """A single message about a critical request whose rule requires sign-in for it: a
    Slack app's buttons must not decide it in place (a digest has no deciding button)."""
    if len(message.rows) != 1:
        return False
    row = message.rows[0]
    return row.request.priority == "critical" and row.notification.require_sign_in


async def _needs_passkey(repo: NotificationRepository, rows: Sequence[ClaimedRow]) -> bool:
    """A request decided only with a passkey gets no one-click links: its message
    offers the link to its page alone (docs/passkeys.md)."""
    if len(rows) != 1:
        return False
    facts = rows[0].request
    org = await repo.orgs.get_org(facts.org_id)
    return org is not None and passkey_needed(
        org.passkey_for, facts.priority, facts.passkey_required
    )


def _interactive_slack(box: SecretBox, row: ClaimedRow) -> bool:
    """A Slack channel with the app configured decides in Slack, not by link."""
    return row.channel.type == "slack" and "bot_token" in channel_settings(box, row.channel)
