"""A request's JSON rendered by the database: what ``json_answers.request_to_dict`` gives,
as one SQL expression per dialect.

Why: a list page holds 20 to 100 requests. Converting each of their columns to Python
objects (UUIDs, datetimes) and back to text cost more than the query itself
(docs/decisions/0010-list-pages-rendered-by-the-database.md). SQLite's
``json_object`` and, on PostgreSQL, text joined in SQL (``_PostgreSQL``) do the same work
in C, and the page is answered with the rendered objects as they are (``orjson.Fragment``).

Both renderings must stay equal: ``tests/approvals/test_json_in_sql.py`` compares them byte for
byte, on both databases, with every kind of value a request holds.
"""

from __future__ import annotations

from typing import Any

import orjson
from sqlalchemy import (
    ColumnElement,
    FromClause,
    Table,
    Text,
    and_,
    bindparam,
    case,
    cast,
    func,
    literal_column,
    null,
    or_,
    select,
)

from signoff.approvals.json_fields import REQUEST_FIELDS
from signoff.approvals.typed_rows import COLUMN_OF_FIELD
from signoff.models import ApprovalRequest, Receipt
from signoff.models.base import UTCDateTime

# The read time, as the list query binds it: a pending request past its deadline reads
# as expired (decided at its deadline) before the sweep has written that down.
NOW = bindparam("now", type_=UTCDateTime())

_REQUESTS: Table = ApprovalRequest.__table__  # type: ignore[assignment]
_RECEIPTS: Table = Receipt.__table__  # type: ignore[assignment]
_Column = ColumnElement[Any]


def is_past_expiry(rows: FromClause = _REQUESTS) -> ColumnElement[bool]:
    """A deadline reached at the read time: with ``status = 'pending'``, a request that
    reads as expired. The one SQL form of ``state.is_past_expiry``, shared by the
    rendering and the list filters. ``rows``: the requests table, or a selection of its
    columns."""
    r = rows.c
    return and_(r.expires_at.is_not(None), r.expires_at <= NOW)


def request_json(dialect: str, rows: FromClause = _REQUESTS) -> ColumnElement[str]:
    """The request of each row as a JSON object (text), with the keys and values of
    ``request_to_dict``, both derived from ``json_fields.REQUEST_FIELDS``, then
    ``receipt_issued`` and ``receipt_uses``; ``callback_headers`` is never rendered.
    ``rows``: the requests table, or a selection of its columns (a subquery)."""
    render: _Renderer = _SQLite if dialect == "sqlite" else _PostgreSQL
    r = rows.c
    expired = and_(r.status == _sql("pending"), is_past_expiry(rows))
    read_expired: dict[str, ColumnElement[Any]] = {
        "status": _sql("expired"),
        "deadline": r.expires_at,
    }
    pairs: list[tuple[str, ColumnElement[Any]]] = []
    for field in REQUEST_FIELDS:
        value: ColumnElement[Any] = r[COLUMN_OF_FIELD.get(field.source, field.source)]
        if field.when_expired:
            value = case((expired, read_expired[field.when_expired]), else_=value)
        pairs.append((field.key, _render_kind(render, field.kind, value)))
    pairs.extend(_receipt_counts(render, rows))
    return render.object(pairs)


def _receipt_counts(render: _Renderer, rows: FromClause) -> list[tuple[str, ColumnElement[Any]]]:
    """``receipt_issued`` and ``receipt_uses`` of each row (``receipts.service.answer_fields``
    without the receipt, which lists never carry): one lookup in the receipts' unique
    ``request_id`` index per row."""
    uses = (
        select(_RECEIPTS.c.uses)
        .where(_RECEIPTS.c.request_id == rows.c.id)
        .correlate(rows)
        .scalar_subquery()
    )
    return [
        ("receipt_issued", render.boolean(uses.is_not(None))),
        ("receipt_uses", render.plain(func.coalesce(uses, _sql(0)))),
    ]


def _render_kind(render: _Renderer, kind: str, value: ColumnElement[Any]) -> ColumnElement[Any]:
    if kind == "id":
        return render.uuid(value)
    if kind == "time":
        return render.timestamp(value)
    if kind == "flag":
        return render.boolean(value)
    if kind == "object":
        return render.json_object_or_empty(value)
    if kind == "json":
        return render.json_or_null(value)
    return render.plain(value)


class _SQLite:
    """SQLite: UUIDs are stored as 32 hex digits, timestamps as naive UTC text, booleans
    as 0 and 1, JSON as text (``models.base``)."""

    @staticmethod
    def object(pairs: list[tuple[str, ColumnElement[Any]]]) -> ColumnElement[str]:
        # Keys are constants of ours: inlined, so the statement binds only real values.
        arguments = [part for key, value in pairs for part in (_sql(key), value)]
        return func.json_object(*arguments, type_=Text)

    @staticmethod
    def uuid(value: _Column) -> ColumnElement[Any]:
        groups = [func.substr(value, _sql(start), _sql(length)) for start, length in _UUID_GROUPS]
        text: ColumnElement[Any] = groups[0]
        for group in groups[1:]:
            text = text.op("||")(_sql("-")).op("||")(group)
        # Tested first: an absent id (who decided a pending request) skips the nine steps.
        return case((value.is_(None), null()), else_=text)

    @staticmethod
    def timestamp(value: _Column) -> ColumnElement[Any]:
        # %f is seconds with milliseconds, the precision every stored time has.
        return func.strftime(_sql("%Y-%m-%dT%H:%M:%fZ"), value)

    @staticmethod
    def boolean(value: _Column) -> ColumnElement[Any]:
        # json(): the result is JSON, so json_object embeds true/false, not 1/0. Each
        # json() of a constant is evaluated once per statement, not once per row.
        return case((value, _JSON_TRUE), else_=_JSON_FALSE)

    @staticmethod
    def json_object_or_empty(value: _Column) -> ColumnElement[Any]:
        # A JSON null (how an absent value may be stored) reads as {} too. The empty
        # object, the common value, is a constant: only other text is parsed, per row.
        empty = or_(value.is_(None), value.in_([_sql("null"), _sql("{}")]))
        return case((empty, _JSON_EMPTY), else_=func.json(value))

    @staticmethod
    def json_or_null(value: _Column) -> ColumnElement[Any]:
        # json(NULL) is NULL, which json_object writes as null.
        return func.json(value)

    @staticmethod
    def plain(value: _Column) -> ColumnElement[Any]:
        return value


_JSON_TRUE = func.json(literal_column("'true'"))
_JSON_FALSE = func.json(literal_column("'false'"))
_JSON_EMPTY = func.json(literal_column("'{}'"))


class _PostgreSQL:
    """PostgreSQL: native uuid, timestamptz, boolean and jsonb.

    The object is written as text: each value as its JSON text (``null`` when absent),
    joined with its key by ``||``. Why: ``json_build_object`` looks up how to write each
    of its 54 arguments, keys included, again for every row, most of what rendering a
    page cost the database (docs/decisions/0010-list-pages-rendered-by-the-database.md).
    Only text that may need escaping goes through ``to_json``; UUIDs, times, numbers and
    booleans are written as they are, as JSON writes them."""

    @staticmethod
    def object(pairs: list[tuple[str, ColumnElement[Any]]]) -> ColumnElement[str]:
        rendered: ColumnElement[Any] | None = None
        for index, (key, value) in enumerate(pairs):
            opening = "{" if index == 0 else ","
            part = _sql(f"{opening}{orjson.dumps(key).decode()}:").op("||")(value)
            rendered = part if rendered is None else rendered.op("||")(part)
        assert rendered is not None
        return cast(rendered.op("||")(_sql("}")), Text)

    @staticmethod
    def uuid(value: _Column) -> ColumnElement[Any]:
        return _or_null(_quoted(cast(value, Text)))

    @staticmethod
    def timestamp(value: _Column) -> ColumnElement[Any]:
        text = func.to_char(
            func.timezone(_sql("UTC"), value), _sql('YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')
        )
        return _or_null(_quoted(text))

    @staticmethod
    def boolean(value: _Column) -> ColumnElement[Any]:
        return _or_null(case((value, _sql("true")), (~value, _sql("false"))))

    @staticmethod
    def json_object_or_empty(value: _Column) -> ColumnElement[Any]:
        return cast(
            func.coalesce(
                func.nullif(value, literal_column("'null'::jsonb")), literal_column("'{}'::jsonb")
            ),
            Text,
        )

    @staticmethod
    def json_or_null(value: _Column) -> ColumnElement[Any]:
        return _or_null(cast(value, Text))

    @staticmethod
    def plain(value: _Column) -> ColumnElement[Any]:
        return _or_null(cast(func.to_json(value), Text))


def _quoted(text: ColumnElement[Any]) -> ColumnElement[Any]:
    """A text that needs no escaping (a UUID, a time) as a JSON string."""
    return _sql('"').op("||")(text).op("||")(_sql('"'))


def _or_null(text: ColumnElement[Any]) -> ColumnElement[Any]:
    return func.coalesce(text, _sql("null"))


# (start, length) of each group of a UUID's 32 hex digits, as SQL's substr counts.
_UUID_GROUPS = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))


def _sql(value: str | int) -> ColumnElement[Any]:
    """A constant of ours, written into the statement rather than bound: the statement
    then binds only real values (and each bind costs a conversion per call)."""
    text = str(value) if isinstance(value, int) else "'" + value.replace("'", "''") + "'"
    return literal_column(text)


_Renderer = type[_SQLite] | type[_PostgreSQL]
