"""Helpers of the audit tests: event rows written straight to ``audit_events``, as a use
case (or someone with write access to the database) would leave them for the sealer."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

START = datetime(2026, 11, 1, tzinfo=UTC)


def after_start(seconds: Iterable[int]) -> list[datetime]:
    """A time ``seconds`` after ``START`` for each of them."""
    return [START + timedelta(seconds=at) for at in seconds]


def event_rows(
    org_id: uuid.UUID,
    times: Iterable[datetime],
    *,
    request_id: uuid.UUID | None = None,
    type: str = "org.settings_changed",
    data: Callable[[int], dict[str, Any]] = lambda index: {"n": index},
) -> list[dict[str, Any]]:
    """Rows of the org's events, one stamped at each of ``times``, each with a new id and
    ``data`` of its index."""
    return [
        {
            "id": uuid.uuid4(),
            "org_id": org_id,
            "request_id": request_id,
            "type": type,
            "actor_id": None,
            "data": data(index),
            "created_at": at,
        }
        for index, at in enumerate(times)
    ]
