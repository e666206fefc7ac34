"""PostgreSQL: search ignores accents, as SQLite's does; a NOTIFY when a request is decided

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-25

SQLite's search index folds accents (``remove_diacritics 2``, migration 0001): a search
for "deploiement" finds "déploiement" and the other way round. PostgreSQL's ``simple``
configuration kept them, so the same search found nothing there.

The search vector and the search query now both pass through ``signoff_unaccent(text)``,
an ``IMMUTABLE`` function (a generated column and its index may only call those):

- where the ``unaccent`` extension can be created (it ships with PostgreSQL's contrib
  package; creating it needs the right to create extensions in the database), the function
  calls ``unaccent`` with its dictionary named, so it depends on no ``search_path``;
- otherwise (a managed service that refuses it, a server without contrib) the function
  folds the accented Latin letters of ``FALLBACK_FROM`` with ``translate``. Letters beyond
  them (ligatures such as "œ", other scripts' marks) then keep their accents. Creating the
  extension later and running ``signoff db upgrade`` on a fresh database, or this
  revision's downgrade and upgrade, switches to ``unaccent``.

The generated column is rebuilt, which rewrites the requests table (a short outage on a
large table: plan the upgrade).

A trigger sends ``NOTIFY signoff_requests, '<request id>'`` when a request's status
changes (delivered when the transaction commits), so a long poll held by one replica wakes
at once on a decision made through another (``context.RequestWaiters``), instead of at its
next periodic re-read.

SQLite is unchanged: its processes notice each other's commits by re-reading.
"""

from __future__ import annotations

from alembic import op
from sqlalchemy.exc import DBAPIError

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

# The accented Latin-1 and Latin Extended-A letters most text uses, and what they fold to.
FALLBACK_FROM = (
    "ÀÁÂÃÄÅàáâãäåĀāĂăĄąÇçĆćĈĉĊċČčĎďĐđÈÉÊËèéêëĒēĔĕĖėĘęĚěĜĝĞğĠġĢģĤĥĦħÌÍÎÏìíîïĨĩĪīĬĭĮįİı"
    "ĴĵĶķĹĺĻļĽľĿŀŁłÑñŃńŅņŇňÒÓÔÕÖØòóôõöøŌōŎŏŐőŔŕŖŗŘřŚśŜŝŞşŠšŢţŤťŦŧÙÚÛÜùúûüŨũŪūŬŭŮůŰűŲų"
    "ŴŵÝýÿŶŷŸŹźŻżŽž"
)
FALLBACK_TO = (
    "AAAAAAaaaaaaAaAaAaCcCcCcCcCcDdDdEEEEeeeeEeEeEeEeEeGgGgGgGgHhHhIIIIiiiiIiIiIiIiIi"
    "JjKkLlLlLlLlLlNnNnNnNnOOOOOOooooooOoOoOoRrRrRrSsSsSsSsTtTtTtUUUUuuuuUuUuUuUuUuUu"
    "WwYyyYyYZzZzZz"
)

# PostgreSQL's parser keeps host names, dotted labels, versions and e-mails whole, so the
# vector is built from the alphanumeric runs (as in 0001).
_WORDS = "regexp_replace(signoff_unaccent(coalesce({column}, '')), '[^[\\:alnum\\:]]+', ' ', 'g')"
_VECTOR = (
    f"setweight(to_tsvector('simple', {_WORDS.format(column='title')}), 'A') || "
    f"setweight(to_tsvector('simple', {_WORDS.format(column='description')}), 'B')"
)
_WORDS_OF_0001 = "regexp_replace(coalesce({column}, ''), '[^[\\:alnum\\:]]+', ' ', 'g')"
VECTOR_OF_0001 = (
    f"setweight(to_tsvector('simple', {_WORDS_OF_0001.format(column='title')}), 'A') || "
    f"setweight(to_tsvector('simple', {_WORDS_OF_0001.format(column='description')}), 'B')"
)


def _unaccent_schema() -> str | None:
    """The schema of the ``unaccent`` extension, created here if it can be; None if not."""
    bind = op.get_bind()
    try:
        with bind.begin_nested():
            bind.exec_driver_sql("CREATE EXTENSION IF NOT EXISTS unaccent")
    except DBAPIError:
        pass  # not available, or not allowed: the fallback below
    schema = bind.exec_driver_sql(
        "SELECT extnamespace::regnamespace::text FROM pg_extension WHERE extname = 'unaccent'"
    ).scalar()
    return str(schema) if schema is not None else None


def _create_function() -> None:
    schema = _unaccent_schema()
    if schema is not None:
        body = f"SELECT {schema}.unaccent('{schema}.unaccent'::regdictionary, $1)"
    else:
        body = f"SELECT translate($1, '{FALLBACK_FROM}', '{FALLBACK_TO}')"
    op.execute(
        "CREATE OR REPLACE FUNCTION signoff_unaccent(text) RETURNS text "
        f"LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$ {body} $$"
    )


def _rebuild_search_vector(expression: str) -> None:
    op.execute("DROP INDEX IF EXISTS ix_approval_requests_search")
    op.execute("ALTER TABLE approval_requests DROP COLUMN IF EXISTS search_vector")
    op.execute(
        "ALTER TABLE approval_requests ADD COLUMN search_vector tsvector "
        f"GENERATED ALWAYS AS ({expression}) STORED"
    )
    op.execute(
        "CREATE INDEX ix_approval_requests_search ON approval_requests USING GIN (search_vector)"
    )


# The channel ``context.RequestWaiters`` listens on; kept here as written.
REQUEST_CHANNEL = "signoff_requests"
NOTIFY_ON_STATUS_CHANGE = [
    "CREATE OR REPLACE FUNCTION signoff_notify_request_changed() RETURNS trigger "
    "LANGUAGE plpgsql AS $$ BEGIN "
    f"PERFORM pg_notify('{REQUEST_CHANNEL}', NEW.id::text); RETURN NULL; END $$",
    "CREATE TRIGGER approval_requests_notify_status AFTER UPDATE OF status "
    "ON approval_requests FOR EACH ROW WHEN (OLD.status IS DISTINCT FROM NEW.status) "
    "EXECUTE FUNCTION signoff_notify_request_changed()",
]


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    _create_function()
    _rebuild_search_vector(_VECTOR)
    for statement in NOTIFY_ON_STATUS_CHANGE:
        op.execute(statement)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP TRIGGER IF EXISTS approval_requests_notify_status ON approval_requests")
    op.execute("DROP FUNCTION IF EXISTS signoff_notify_request_changed()")
    _rebuild_search_vector(VECTOR_OF_0001)
    op.execute("DROP FUNCTION IF EXISTS signoff_unaccent(text)")
