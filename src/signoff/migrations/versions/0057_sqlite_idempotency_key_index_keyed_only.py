"""SQLite: the idempotency keys' unique index holds keyed requests only

Revision ID: 0057
Revises: 0056
Create Date: 2026-11-29

The unique constraint on ``(org_id, idempotency_key)`` kept an entry for every request,
though most creates have no key and a NULL key never conflicts. A unique index on the
same columns ``WHERE idempotency_key IS NOT NULL`` holds the same keys apart and none of
the keyless requests; the create's ``ON CONFLICT`` names that condition to use it as its
arbiter (docs/decisions/0051-sqlite-idempotency-index-keyed-only.md).

SQLite cannot drop a table's constraint: the table is rebuilt (SQLite's documented
procedure: a new table, every row copied with its rowid, the old one dropped, the new one
renamed, its indexes and triggers created again). The rowids are kept because the search
index's queue names requests by rowid. Foreign keys must be off (``DROP TABLE`` would
otherwise delete the rows that refer to the requests); ``signoff db upgrade`` runs with
them off. The copy must keep the row count and add no reference to a missing row.
The rebuild writes the whole table, which takes a while on a large one.

PostgreSQL keeps 0056's index.
"""

from __future__ import annotations

import re

from alembic import op
from sqlalchemy.engine import Connection

revision = "0057"
down_revision = "0056"
branch_labels = None
depends_on = None

_TABLE = "approval_requests"
_NEW = "_approval_requests_0057"
_CONSTRAINT = "uq_approval_requests_org_id_idempotency_key"
_CONSTRAINT_SQL = f"CONSTRAINT {_CONSTRAINT} UNIQUE (org_id, idempotency_key)"
_INDEX_SQL = (
    f"CREATE UNIQUE INDEX {_CONSTRAINT} ON {_TABLE} (org_id, idempotency_key) "
    "WHERE idempotency_key IS NOT NULL"
)
_CREATE_TABLE = re.compile(r'^CREATE TABLE\s+"?approval_requests"?\s*\(')


def _rebuild(connection: Connection, table_sql: str, keyed_index: bool) -> None:
    """The requests table made anew from ``table_sql``, every row kept with its rowid, the
    other indexes and the triggers as they were; the keyed-only index if ``keyed_index``."""
    if connection.exec_driver_sql("PRAGMA foreign_keys").scalar():
        raise RuntimeError(f"rebuilding {_TABLE} needs foreign keys off (PRAGMA foreign_keys)")
    objects = connection.exec_driver_sql(
        "SELECT type, sql FROM sqlite_master WHERE tbl_name = ? AND sql IS NOT NULL "
        "AND type IN ('index', 'trigger') AND name <> ? ORDER BY type, name",
        (_TABLE, _CONSTRAINT),
    ).all()
    columns = ", ".join(
        f'"{row[1]}"' for row in connection.exec_driver_sql(f"PRAGMA table_info({_TABLE})")
    )
    rows, broken = _rows_and_broken_references(connection)
    connection.exec_driver_sql(_CREATE_TABLE.sub(f"CREATE TABLE {_NEW} (", table_sql, count=1))
    # Names from this module and the table's own columns, no input.
    copy = f"INSERT INTO {_NEW} (rowid, {columns}) SELECT rowid, {columns} FROM {_TABLE}"  # noqa: S608
    connection.exec_driver_sql(copy)
    connection.exec_driver_sql(f"DROP TABLE {_TABLE}")
    connection.exec_driver_sql(f"ALTER TABLE {_NEW} RENAME TO {_TABLE}")
    for _type, sql in objects:
        connection.exec_driver_sql(sql)
    if keyed_index:
        connection.exec_driver_sql(_INDEX_SQL)
    after = _rows_and_broken_references(connection)
    if after != (rows, broken):
        raise RuntimeError(
            f"{_TABLE} rebuilt wrong: rows, broken references {rows, broken} {after}"
        )


def _rows_and_broken_references(connection: Connection) -> tuple[int, int]:
    """The table's rows, and its references (org, connection, user) to no row: a database
    written with foreign keys off may hold some already; the rebuild must add none."""
    counts = connection.exec_driver_sql(
        f"SELECT (SELECT count(*) FROM {_TABLE}), "  # noqa: S608 (the module's table name)
        f"(SELECT count(*) FROM pragma_foreign_key_check('{_TABLE}'))"
    ).one()
    return int(counts[0]), int(counts[1])


def _table_sql(connection: Connection) -> str:
    sql = connection.exec_driver_sql(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (_TABLE,)
    ).scalar()
    assert isinstance(sql, str) and _CREATE_TABLE.match(sql), sql
    return sql


def upgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != "sqlite":
        return
    sql = _table_sql(connection)
    constraint = re.compile(r",\s*" + re.escape(_CONSTRAINT_SQL))
    if len(constraint.findall(sql)) != 1:
        raise RuntimeError(f"{_TABLE}: no {_CONSTRAINT} to replace in {sql}")
    _rebuild(connection, constraint.sub("", sql), keyed_index=True)


def downgrade() -> None:
    connection = op.get_bind()
    if connection.dialect.name != "sqlite":
        return
    sql = _table_sql(connection).rstrip()
    assert sql.endswith(")"), sql
    _rebuild(connection, f"{sql[:-1].rstrip()}, \n\t{_CONSTRAINT_SQL}\n)", keyed_index=False)
