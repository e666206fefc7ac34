"""The sender plans, reads and records a burst a piece at a time (``sender.PLAN_PIECE``,
``READ_PIECE``, ``RECORD_PIECE``), each piece a short turn of its own: nothing may be
lost or doubled at the seams, and a sender that dies between two pieces of a record
leaves only the rest to send again."""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

import httpx
import orjson
import pytest
from bench.receiver import Receiver
from sqlalchemy import select

from signoff.context import AppContext
from signoff.models import Notification, NotificationAttempt
from signoff.notifications.sending import sender as sender_module
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.notifications.support import check_slack_message
from tests.notifications.test_schedule import Clock

pytestmark = pytest.mark.anyio


@pytest.fixture
def small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Pieces far smaller than the burst, so that every seam is crossed several times."""
    monkeypatch.setattr(sender_module, "PLAN_PIECE", 3)
    monkeypatch.setattr(sender_module, "READ_PIECE", 4)
    monkeypatch.setattr(sender_module, "RECORD_PIECE", 4)


async def _route_to(api: httpx.AsyncClient, org: Org, *urls: str) -> None:
    document = {
        "channels": {f"s{i}": {"type": "slack", "webhook_url": url} for i, url in enumerate(urls)},
        "rules": [{"channels": [f"s{i}" for i in range(len(urls))]}],
    }
    answer = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
    assert answer.status_code == 200, answer.text


def _titles(body: bytes) -> set[str]:
    """The request titles a digest lists, each once (titles here are unique)."""
    message: dict[str, Any] = orjson.loads(body)
    check_slack_message(message)
    listed = [
        block["text"]["text"].split("|", 1)[1].split(">", 1)[0]
        for block in message["blocks"]
        if block["type"] == "section"
    ]
    assert message["text"] == f"{len(listed)} requests wait for a decision"
    assert len(set(listed)) == len(listed)
    return set(listed)


async def _rows(ctx: AppContext) -> tuple[dict[uuid.UUID, str], Counter[uuid.UUID]]:
    """Each notification's status, and how many attempts each has logged."""
    async with ctx.reading() as uow:
        statuses = dict(
            (await uow.session.execute(select(Notification.id, Notification.status))).all()
        )
        attempts = Counter(
            (await uow.session.scalars(select(NotificationAttempt.notification_id))).all()
        )
    return statuses, attempts


async def test_a_burst_read_and_recorded_in_pieces_is_one_digest_per_channel_with_every_row(
    api: httpx.AsyncClient, ctx: AppContext, wiring: Wiring, org: Org, small_pieces: None
) -> None:
    """Two channels' rows interleave across the read pieces (each piece reads the
    channels it has not seen); 7 requests: 14 rows, 4 pieces read, 4 recorded."""
    wiring.notifications.clock = Clock()
    async with Receiver() as first, Receiver() as second:
        await _route_to(api, org, first.url, second.url)
        titles = {f"Piece {number}" for number in range(7)}
        for title in sorted(titles):
            await create_approval(api, org.member, title=title)
        assert await wiring.notifications.run_once() == 14
        [one] = first.received
        [other] = second.received
    assert _titles(one.body) == titles
    assert _titles(other.body) == titles
    statuses, attempts = await _rows(ctx)
    assert len(statuses) == 14 and set(statuses.values()) == {"sent"}
    assert attempts == Counter(dict.fromkeys(statuses, 1))


async def test_a_sender_dead_between_two_record_pieces_sends_only_the_rest_again(
    api: httpx.AsyncClient,
    ctx: AppContext,
    wiring: Wiring,
    org: Org,
    small_pieces: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    sender = wiring.notifications
    sender.clock = clock
    recorded = sender._record_piece
    calls = 0

    async def dies_before_the_second_piece(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise RuntimeError("the worker was killed")
        await recorded(*args)

    monkeypatch.setattr(sender, "_record_piece", dies_before_the_second_piece)
    async with Receiver() as slack:
        await _route_to(api, org, slack.url)
        titles = [f"Crash {number}" for number in range(10)]
        for title in titles:
            await create_approval(api, org.member, title=title)
        with pytest.raises(RuntimeError):
            await sender.run_once()
        [digest] = slack.received
        statuses, _ = await _rows(ctx)
        assert Counter(statuses.values()) == {"sent": 4, "pending": 6}  # the rest: claimed
        await sender.run_once()
        assert len(slack.received) == 1  # their lease has not run out
        clock.advance(ctx.settings.notification_lease_seconds / 60 + 0.01)
        await sender.run_once()
        [_, again] = slack.received
    assert _titles(digest.body) == set(titles)
    assert len(_titles(again.body)) == 6  # only the rows whose record was lost
    statuses, attempts = await _rows(ctx)
    assert set(statuses.values()) == {"sent"}
    assert attempts == Counter(dict.fromkeys(statuses, 1))
