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
    if value.tzinfo is not UTC:  # what the database hands back is UTC already
        value = value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
    # isoformat (C) rather than strftime: a list page formats a hundred of these.
    return value.isoformat(timespec="milliseconds").removesuffix("+00:00") + "Z"


def parse_timestamp(text: str) -> datetime:
    """Parse RFC 3339 / ISO 8601 with a required time zone; raises ValueError otherwise."""
    parsed = datetime.fromisoformat(text.strip().replace("z", "Z"))
    if parsed.tzinfo is None:
        raise ValueError("must include a time zone, e.g. 'Z' or '+02:00'")
    try:
        parsed = parsed.astimezone(UTC)
    except OverflowError:
        raise ValueError("lies outside the years 1 to 9999 once converted to UTC") from None
    return parsed.replace(microsecond=parsed.microsecond - parsed.microsecond % 1000)
