"""Identifiers: UUIDv7, so new rows land at the end of B-tree indexes."""

from __future__ import annotations

import os
import threading
import time
import uuid

_COUNTER_BITS = 12
_lock = threading.Lock()
_last_millis = 0
_counter = 0


def _next_timestamp_and_counter() -> tuple[int, int]:
    """RFC 9562 method 1: a counter in rand_a keeps ids of one millisecond in order.

    Rows written in one transaction share a timestamp (audit events, for instance), and
    reads order them by (created_at, id); the counter makes that the order of creation.
    """
    global _last_millis, _counter  # noqa: PLW0603 - process-wide monotonic state
    with _lock:
        millis = time.time_ns() // 1_000_000
        if millis > _last_millis:
            _last_millis, _counter = millis, int.from_bytes(os.urandom(1), "big")
        else:
            _counter += 1
            if _counter >= 1 << _COUNTER_BITS:
                _last_millis, _counter = _last_millis + 1, 0
        return _last_millis, _counter


def new_id() -> uuid.UUID:
    """A UUIDv7: 48-bit millisecond timestamp, 12-bit counter, 62 random bits."""
    millis, counter = _next_timestamp_and_counter()
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= counter << 64  # rand_a: the monotonic counter
    value |= 0b10 << 62  # variant
    value |= int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)  # rand_b
    return uuid.UUID(int=value)


def parse_id(text: str) -> uuid.UUID | None:
    """The UUID in a path segment, or None when it is not one (which callers answer 404)."""
    try:
        return uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return None
