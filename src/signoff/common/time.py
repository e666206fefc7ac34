"""Timestamps: always timezone-aware UTC, millisecond precision, RFC 3339 with ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, truncated to milliseconds so what we store is exactly what we show."""
    now = datetime.now(UTC)
    return now.replace(microsecond=now.microsecond - now.microsecond % 1000)


def format_timestamp(value: datetime | None) -> str | None:
    if value is None:
        return None
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%dT%H:%M:%S.") + f"{value.microsecond // 1000:03d}Z"


def parse_timestamp(text: str) -> datetime:
    """Parse RFC 3339 / ISO 8601 with a required time zone; raises ValueError otherwise."""
    parsed = datetime.fromisoformat(text.strip().replace("z", "Z"))
    if parsed.tzinfo is None:
        raise ValueError("must include a time zone, e.g. 'Z' or '+02:00'")
    parsed = parsed.astimezone(UTC)
    return parsed.replace(microsecond=parsed.microsecond - parsed.microsecond % 1000)
