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


class _RandomPool:
    """Bytes from the OS's CSPRNG, read a block at a time.

    Why: ``os.urandom`` is a system call, and on the virtual machines we run on a call
    costs far more than taking bytes from a buffer; every create took four of them
    (docs/decisions/0020-what-a-create-pays-for.md). The bytes are the same CSPRNG's,
    each handed out once.
    """

    BLOCK = 4096

    def __init__(self) -> None:
        self._buffer = b""
        self._offset = 0

    def take(self, count: int) -> bytes:
        """``count`` fresh random bytes. The caller holds ``_lock``."""
        if self._offset + count > len(self._buffer):
            self._buffer, self._offset = os.urandom(max(self.BLOCK, count)), 0
        start = self._offset
        self._offset += count
        return self._buffer[start : self._offset]

    def forget(self) -> None:
        """Drop the unread bytes: a forked child must not hand out its parent's."""
        self._buffer, self._offset = b"", 0


_pool = _RandomPool()
os.register_at_fork(after_in_child=_pool.forget)


def _next_timestamp_and_counter() -> tuple[int, int]:
    """RFC 9562 method 1: a counter in rand_a keeps ids of one millisecond in order.

    Rows written in one transaction share a timestamp (audit events, for instance), and
    reads order them by (created_at, id); the counter makes that the order of creation.
    The caller holds ``_lock``.
    """
    global _last_millis, _counter  # noqa: PLW0603 - process-wide monotonic state
    millis = time.time_ns() // 1_000_000
    if millis > _last_millis:
        _last_millis, _counter = millis, _pool.take(1)[0]
    else:
        _counter += 1
        if _counter >= 1 << _COUNTER_BITS:
            _last_millis, _counter = _last_millis + 1, 0
    return _last_millis, _counter


def new_id() -> uuid.UUID:
    """A UUIDv7: 48-bit millisecond timestamp, 12-bit counter, 62 random bits."""
    with _lock:
        millis, counter = _next_timestamp_and_counter()
        random_bits = int.from_bytes(_pool.take(8), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= counter << 64  # rand_a: the monotonic counter
    value |= 0b10 << 62  # variant
    value |= random_bits & ((1 << 62) - 1)  # rand_b
    return uuid.UUID(int=value)


def parse_id(text: str) -> uuid.UUID | None:
    """The UUID in a path segment, or None when it is not one (which callers answer 404)."""
    try:
        return uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return None
