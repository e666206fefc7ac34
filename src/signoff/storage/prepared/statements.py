"""Compiled statements: a Core statement compiled once per dialect, with the value
conversions SQLAlchemy would apply both ways, and several compiled writes combined into
one statement (PostgreSQL, ``write_batching``).

Values are converted with the very bind and result processors SQLAlchemy would use, so
rows read here equal rows read through the ORM. Rows are tuples whose fields are named by
the statement's column labels.
"""

from __future__ import annotations

import functools
import os
import re
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Label, Select, inspect
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import UpdateBase

Processor = Callable[[Any], Any] | None

# The measurement switch of the index hints (docs/performance.md, *Hand-written
# replacements*): with it set when a statement is first compiled, SQLite's own planner
# chooses every index.
STOCK_PLANNER_SWITCH = "SIGNOFF_STOCK_SQLITE_PLANNER"
# The measurement switch of prepared execution: with it set, prepared statements run
# through SQLAlchemy's execution (a pooled connection or the session's), not past it.
STOCK_EXECUTION_SWITCH = "SIGNOFF_STOCK_EXECUTION"


def switched(name: str) -> bool:
    """Whether the measurement switch ``name`` is set in the environment."""
    return os.environ.get(name) == "1"


def entity_columns(entity: type[Any]) -> list[Label[Any]]:
    """Every column of a mapped class, labelled with its attribute name (``metadata_``),
    so a row read here has the fields an ORM entity has."""
    mapper = inspect(entity)
    return [prop.columns[0].label(prop.key) for prop in mapper.column_attrs]


class PreparedQuery:
    """A Core statement with named parameters: a ``SELECT``, or a write whose ``RETURNING``
    columns (if any) are labelled as its rows' field names.

    Every value must come with the call or be fixed in the statement: column defaults
    computed by SQLAlchemy at execution are not applied here, so writes name every column.
    """

    def __init__(
        self,
        statement: Select[*tuple[Any, ...]] | UpdateBase,
        *,
        column_keys: Sequence[str] | None = None,
        sqlite_indexes: Sequence[SQLiteIndex] = (),
        row_type: type[tuple[Any, ...]] | None = None,
    ) -> None:
        """``column_keys``: for an ``INSERT`` without ``values()``, the columns each call
        gives, as its parameters of the same names. ``sqlite_indexes``: how SQLite must read
        the statement's tables, where its planner would choose worse (SQLAlchemy renders
        no table hints for SQLite). ``row_type``: a ``NamedTuple`` whose fields are the
        statement's column labels, in order, to build each row as (else a plain one)."""
        self.statement = statement
        self.column_keys = list(column_keys) if column_keys is not None else None
        self.sqlite_indexes = tuple(sqlite_indexes)
        self.keys = tuple(str(column.key) for column in statement.exported_columns)
        if row_type is not None and getattr(row_type, "_fields", None) != self.keys:
            raise TypeError(f"{row_type.__name__}'s fields are not the columns {self.keys}")
        self.row_type: type[tuple[Any, ...]] = row_type or namedtuple("Row", self.keys)
        self._typed = row_type is not None
        self._sqlite: Compiled | None = None
        self._postgres: Compiled | None = None

    def rows_of(self, rows: Sequence[Any]) -> list[Any]:
        """Rows SQLAlchemy answered, as this query's ``row_type`` if it has one."""
        if self._typed:
            return [self.row_type(*row) for row in rows]
        return list(rows)

    def for_sqlite(self, dialect: Dialect) -> Compiled:
        if self._sqlite is None:
            self._sqlite = Compiled(self, dialect, self.sqlite_indexes)
        return self._sqlite

    def for_postgres(self, dialect: Dialect) -> Compiled:
        if self._postgres is None:
            self._postgres = Compiled(self, dialect, ())
        return self._postgres


@dataclass(frozen=True)
class SQLiteIndex:
    """How SQLite must read one table of a statement: through the index ``name``
    (``INDEXED BY``), or with no name, through rowid lookups only (``NOT INDEXED``).
    ``table`` as the statement's ``FROM`` names it: ``requests`` or ``requests AS r``."""

    table: str
    name: str | None

    def applied_to(self, sql: str) -> str:
        """``sql`` with the clause after the table's one ``FROM``; an error if the table
        is not read exactly once so, where the hint would be ambiguous."""
        clause = f"INDEXED BY {self.name}" if self.name else "NOT INDEXED"
        from_table = re.compile(rf"\bFROM {re.escape(self.table)}\b(?! AS)")
        hinted, count = from_table.subn(f"FROM {self.table} {clause}", sql)
        if count != 1:
            raise ValueError(f"expected one FROM {self.table} in: {sql}")
        return hinted


class Compiled:
    """The SQL text, the order of its parameters, and the value conversions both ways."""

    def __init__(
        self, query: PreparedQuery, dialect: Dialect, sqlite_indexes: Sequence[SQLiteIndex]
    ) -> None:
        compiled = query.statement.compile(dialect=dialect, column_keys=query.column_keys)
        if compiled.positiontup is None:  # pragma: no cover - qmark and numeric_dollar are
            raise TypeError("expected a positional parameter style")
        if compiled.post_compile_params:
            # An IN list expanded per call: build the statement with one parameter each.
            raise TypeError(f"expanding parameters are not supported: {compiled}")
        if compiled.insert_prefetch or compiled.update_prefetch:
            # Defaults SQLAlchemy computes per execution (ids, timestamps) would be skipped.
            raise TypeError(f"the call must give every column with a default: {compiled}")
        sql = compiled.string
        for index in () if switched(STOCK_PLANNER_SWITCH) else sqlite_indexes:
            sql = index.applied_to(sql)
        self.sql = sql
        self.names: tuple[str, ...] = tuple(compiled.positiontup)
        binds = compiled.binds  # by their names in the SQL: anonymous ones made unique
        # Values fixed in the statement itself: a literal in a WHERE clause, a column's
        # constant default.
        self.fixed = {name: bind.value for name, bind in binds.items() if not bind.required}
        self.bind_processors: tuple[Processor, ...] = tuple(
            binds[name].type.dialect_impl(dialect).bind_processor(dialect) for name in self.names
        )
        result_processors = (
            column.type.dialect_impl(dialect).result_processor(dialect, None)
            for column in query.statement.exported_columns
        )
        # Only the columns whose values are converted are visited per row: on PostgreSQL,
        # where asyncpg decodes most types itself, only a request's timestamps.
        self.converted: tuple[tuple[int, Callable[[Any], Any]], ...] = tuple(
            (index, process)
            for index, process in enumerate(result_processors)
            if process is not None
        )
        self.row_type = query.row_type

    def parameters(self, params: Mapping[str, Any]) -> list[Any]:
        values = []
        for name, process in zip(self.names, self.bind_processors, strict=True):
            value = params[name] if name in params else self.fixed[name]
            values.append(process(value) if process is not None and value is not None else value)
        return values

    def row(self, raw: Sequence[Any]) -> tuple[Any, ...]:
        if not self.converted:
            # Nothing to convert (a rendered page's one text column): no copy.
            same: tuple[Any, ...] = self.row_type._make(raw)  # type: ignore[attr-defined]
            return same
        values = list(raw)
        for index, process in self.converted:
            values[index] = process(values[index])
        made: tuple[Any, ...] = self.row_type._make(values)  # type: ignore[attr-defined]
        return made


# A parameter of PostgreSQL's SQL: ``$1``.
_PLACEHOLDER = re.compile(r"\$(\d+)")


@functools.lru_cache(maxsize=256)
def combined_sql(statements: tuple[Compiled, ...]) -> str:
    """The writes as one statement (their parameters renumbered in order): a decision
    sends one of a few combinations, each built once."""
    counts = ", ".join(_row_counts(len(statements)))
    return f"{_with_writes(statements)} SELECT {counts}"


def _with_writes(statements: tuple[Compiled, ...]) -> str:
    """``WITH w0 AS (write RETURNING 1), w1 AS (...)``: the writes' parameters renumbered
    in order."""
    parts, offset = [], 0
    for index, compiled in enumerate(statements):
        shift = offset  # bound now, for the substitution below

        def renumbered(match: re.Match[str], shift: int = shift) -> str:
            return f"${int(match.group(1)) + shift}"

        parts.append(f"w{index} AS ({_PLACEHOLDER.sub(renumbered, compiled.sql)} RETURNING 1)")
        offset += len(compiled.names)
    return f"WITH {', '.join(parts)}"


def _row_counts(count: int) -> list[str]:
    return [f"(SELECT count(*) FROM w{i})" for i in range(count)]  # noqa: S608


@functools.lru_cache(maxsize=256)
def all_or_nothing_sql(statements: tuple[Compiled, ...], checked: tuple[bool, ...]) -> str:
    """``combined_sql``'s statement, given up as a whole (``signoff_lost_race``) unless
    every ``checked`` write changed exactly one row."""
    if not any(checked):
        return combined_sql(statements)
    listed = ", ".join(f"{count} AS c{i}" for i, count in enumerate(_row_counts(len(checked))))
    one_each = " AND ".join(f"c{i} = 1" for i, check in enumerate(checked) if check)
    return (
        f"{_with_writes(statements)} SELECT * FROM (SELECT {listed}) AS counts"  # noqa: S608
        f" WHERE CASE WHEN {one_each} THEN true ELSE signoff_lost_race() END"
    )
