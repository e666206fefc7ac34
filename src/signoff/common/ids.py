"""Identifiers: UUIDv7, so new rows land at the end of B-tree indexes."""

from __future__ import annotations

import os
import time
import uuid


def new_id() -> uuid.UUID:
    """A UUIDv7 (RFC 9562): 48-bit millisecond timestamp, then random bits."""
    millis = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    value = (millis & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76  # version
    value |= ((rand >> 68) & 0xFFF) << 64  # rand_a, 12 bits
    value |= 0b10 << 62  # variant
    value |= rand & ((1 << 62) - 1)  # rand_b, 62 bits
    return uuid.UUID(int=value)


def parse_id(text: str) -> uuid.UUID | None:
    """The UUID in a path segment, or None when it is not one (which callers answer 404)."""
    try:
        return uuid.UUID(text)
    except (ValueError, AttributeError, TypeError):
        return None
