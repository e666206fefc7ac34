"""UTCDateTime's own SQLite conversions write and read what SQLAlchemy's would."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import DateTime
from sqlalchemy.dialects import sqlite

from signoff.models.base import UTCDateTime

DIALECT = sqlite.dialect()
# What the column type did before it had conversions of its own: SQLAlchemy's SQLite
# DATETIME, fed naive UTC.
REFERENCE = DateTime(timezone=True).dialect_impl(DIALECT)
REFERENCE_BIND = REFERENCE.bind_processor(DIALECT)
REFERENCE_RESULT = REFERENCE.result_processor(DIALECT, None)
BIND = UTCDateTime().dialect_impl(DIALECT).bind_processor(DIALECT)
RESULT = UTCDateTime().dialect_impl(DIALECT).result_processor(DIALECT, None)

VALUES = [
    datetime(2026, 11, 23, 15, 4, 5, 123456, tzinfo=UTC),
    datetime(2026, 11, 23, 15, 4, 5, tzinfo=UTC),  # no microseconds: still six digits
    datetime(2026, 1, 1, tzinfo=UTC),
    datetime(999, 12, 31, 23, 59, 59, 1, tzinfo=UTC),  # a year of three digits
    datetime(2026, 3, 29, 1, 30, tzinfo=timezone(timedelta(hours=2))),  # stored as UTC
]


@pytest.mark.parametrize("value", VALUES)
def test_a_timestamp_is_stored_as_sqlalchemy_stored_it(value: datetime) -> None:
    assert BIND is not None and REFERENCE_BIND is not None
    naive_utc = value.astimezone(UTC).replace(tzinfo=None)
    assert BIND(value) == REFERENCE_BIND(naive_utc)


@pytest.mark.parametrize("value", VALUES)
def test_a_stored_timestamp_reads_back_as_the_same_instant_in_utc(value: datetime) -> None:
    assert BIND is not None and RESULT is not None and REFERENCE_RESULT is not None
    stored = BIND(value)
    assert RESULT(stored) == value
    assert RESULT(stored).tzinfo is UTC
    assert RESULT(stored) == REFERENCE_RESULT(stored).replace(tzinfo=UTC)


def test_text_written_without_microseconds_reads_as_sqlalchemy_read_it() -> None:
    # SQLite's own CURRENT_TIMESTAMP, for instance.
    assert RESULT is not None and REFERENCE_RESULT is not None
    assert RESULT("2026-11-23 15:04:05") == datetime(2026, 11, 23, 15, 4, 5, tzinfo=UTC)
    assert RESULT("2026-11-23 15:04:05") == REFERENCE_RESULT("2026-11-23 15:04:05").replace(
        tzinfo=UTC
    )


def test_nulls_pass_and_naive_datetimes_are_refused() -> None:
    assert BIND is not None and RESULT is not None
    assert BIND(None) is None
    assert RESULT(None) is None
    with pytest.raises(ValueError, match="naive"):
        BIND(datetime(2026, 11, 23, 15, 4, 5))


def test_a_timestamp_bound_again_is_not_formatted_again() -> None:
    """A write binds its ``now`` in several columns and statements: the same object is
    formatted once, and any other value, equal or not, as itself."""
    assert BIND is not None
    now = datetime(2026, 11, 29, 13, 40, 1, 250000, tzinfo=UTC)
    first = BIND(now)
    assert BIND(now) is first
    equal = datetime(2026, 11, 29, 15, 40, 1, 250000, tzinfo=timezone(timedelta(hours=2)))
    assert BIND(equal) == first
    later = now + timedelta(microseconds=1)
    assert BIND(later) == "2026-11-29 13:40:01.250001"
    assert BIND(now) == first
    with pytest.raises(ValueError):
        BIND(datetime(2026, 11, 29))  # naive: refused, even right after an aware one
