"""Declarative base and the column types shared by every table."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import JSON, Constraint, DateTime, Index, MetaData
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """Timezone-aware UTC in Python; ``timestamptz`` on PostgreSQL, UTC text on SQLite.

    SQLite has no time zones: values are stored as naive UTC in one fixed format, so
    comparisons in SQL stay correct, and handed back as aware datetimes.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetimes are not stored; use an aware UTC value")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)

    # On SQLite, one function each way in place of two chained ones. Why: every create
    # and decision binds three or four timestamps, and every read converts some back;
    # SQLAlchemy's SQLite DATETIME formats through a dict of seven fields and parses with
    # a regular expression (docs/decisions/0020-what-a-create-pays-for.md). The text is
    # the same: naive UTC as
    # ``YYYY-MM-DD HH:MM:SS.ffffff``, as ``tests/unit/test_column_types.py`` holds it.

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().bind_processor(dialect)
        return _sqlite_utc_text

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        if dialect.name != "sqlite":
            return super().result_processor(dialect, coltype)
        return _sqlite_utc_datetime


# The last timestamp formatted, and its text. Why: a write binds its one ``now`` in
# several columns and statements (a decision: the request's ``updated_at`` and
# ``decided_at`` and its condition's bound, the vote's and the event's ``created_at``), each
# formatted anew. The same object (not an equal one: datetimes are immutable) gets the
# same text; one tuple, replaced whole, so threads sharing it at worst format again.
_last_formatted: list[tuple[datetime, str]] = [
    (datetime(1, 1, 1, tzinfo=UTC), "0001-01-01 00:00:00.000000")
]


def _sqlite_utc_text(value: datetime | None) -> str | None:
    if value is None:
        return None
    last = _last_formatted[0]
    if last[0] is value:
        return last[1]
    if value.tzinfo is None:
        raise ValueError("naive datetimes are not stored; use an aware UTC value")
    utc = value if value.tzinfo is UTC else value.astimezone(UTC)
    text = utc.replace(tzinfo=None).isoformat(" ", "microseconds")
    _last_formatted[0] = (value, text)
    return text


def _sqlite_utc_datetime(value: str | None) -> datetime | None:
    if value is None:
        return None
    parsed = datetime.fromisoformat(value)
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


JSONType = JSON().with_variant(JSONB(), "postgresql")


_OnOneDialect = TypeVar("_OnOneDialect", Index, Constraint)


def only_on(dialect: str, item: _OnOneDialect) -> _OnOneDialect:
    """``item`` (an index, a constraint) made on ``dialect`` alone (``ddl_if``), and said
    so in its ``info``: alembic does not read ``ddl_if``, so the comparison of the schema
    with the models (``migrations.described_by_models``) reads ``info["dialect"]``."""
    item.info["dialect"] = dialect
    return item.ddl_if(dialect=dialect)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map: dict[Any, Any] = {datetime: UTCDateTime()}
