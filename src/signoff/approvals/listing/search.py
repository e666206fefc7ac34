"""Full-text search of a list page and the inbox: a search box's words as each engine's
query (SQLite FTS5, PostgreSQL ``tsvector``), the conditions that find and rank their
matches through the search index, and a search for a request's number (``#1234``).
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Select,
    String,
    bindparam,
    column,
    func,
    literal_column,
    select,
    table,
    text,
)
from sqlalchemy.sql.selectable import CTE, NamedFromClause

from signoff.models import ApprovalRequest
from signoff.storage import PreparedQuery, QueryRunner

# A word of a search box: letters and digits.
_SEARCH_TERM = re.compile(r"[^\W_]+", re.UNICODE)
MAX_SEARCH_TERMS = 16
# The SQLite FTS5 table of migration 0006: title, description and org_id are indexed.
FTS = table("approval_requests_fts", column("request_id"), column("created_at"))
# bm25 weights of its columns (title, description, org_id): a title match outranks a
# description match, as the A and B weights of the PostgreSQL vector make it there; the
# org, which every match of a search has, weighs nothing.
_FTS_COLUMN_WEIGHTS = (10.0, 1.0, 0.0)


def search_terms(text_query: str) -> list[str]:
    """Words of a search box, stripped of every operator of either engine's query syntax."""
    return [t.lower() for t in _SEARCH_TERM.findall(text_query)][:MAX_SEARCH_TERMS]


# A search box holding a request's number, ``#1234`` or ``1234``, and nothing else.
_NUMBER_SEARCH = re.compile(r"\s*(#?)\s*(\d{1,10})\s*")
_LARGEST_NUMBER = 2**31 - 1  # the column's type


@dataclass(frozen=True)
class NumberSearch:
    """A search for a request's number: ``#1234`` finds that request alone (``only``);
    ``1234`` finds it first, then the requests whose text has the word, as any search."""

    number: int
    only: bool


def number_searched(text_query: str | None) -> NumberSearch | None:
    """The request number a search box holds, if it holds only that."""
    found = _NUMBER_SEARCH.fullmatch(text_query or "")
    if found is None or int(found.group(2)) > _LARGEST_NUMBER:
        return None
    return NumberSearch(int(found.group(2)), only=bool(found.group(1)))


def with_search(
    dialect: str, query: Select[Any], *, ranked: bool = False
) -> tuple[Select[Any], Any]:
    """Narrow ``query`` to full-text matches of the ``search_query`` parameter and give
    their ranking; both use an index.

    Every term must match, as a prefix, case-insensitively; titles weigh more than
    descriptions. PostgreSQL: the GIN-indexed ``search_vector``. SQLite: a join with the
    FTS5 table, ranked by bm25 with title and description weights (its default ``rank``
    weighs every column alike). ``ranked``: the rows are ranked (``fts_ranked_match``).
    """
    if dialect == "postgresql":
        # Accents folded as in the indexed vector (migration 0011).
        tsquery = postgres_tsquery()
        vector: ColumnElement[Any] = literal_column("approval_requests.search_vector")
        return query.where(vector.op("@@")(tsquery)), func.ts_rank(vector, tsquery).desc()
    match = fts_ranked_match() if ranked else [fts_match()]
    joined = query.join(FTS, FTS.c.request_id == ApprovalRequest.id).where(*match)
    return joined, bm25().asc()  # bm25 is negative: better matches sort first


def fts_ranked_match() -> list[ColumnElement[bool]]:
    """The org's matches of a search (``fts_match``) found in a form bm25 ranks cheaply:
    the search table's rows that match the words alone and are among the org's matches.

    Why: bm25 weighs each phrase of the query by how many rows hold it, and counts them
    on its first call; with the org's id as a phrase of the query, it read one entry for
    every request of the org (the org's id is in each), whatever the words, a cost that
    grew with the org. The org's weight is nought, so the scores are the same. The org's
    matches are read first (``+``: not as a lookup of each row) and are few: a search is
    ranked only up to ``SEARCH_RANKED_UP_TO`` matches."""
    words = literal_column("approval_requests_fts").op("MATCH")(
        bindparam("search_words", type_=String())
    )
    orgs_matches: Select[Any] = (
        select(literal_column("org_matches.rowid"))
        .select_from(text("approval_requests_fts AS org_matches"))
        .where(
            literal_column("org_matches.approval_requests_fts").op("MATCH")(
                _search_query_parameter()
            )
        )
    )
    return [words, literal_column("+approval_requests_fts.rowid").in_(orgs_matches)]


def postgres_tsquery() -> ColumnElement[Any]:
    """The ``search_query`` parameter as PostgreSQL's query, accents folded as in the
    indexed vector."""
    return func.to_tsquery("simple", func.signoff_unaccent(_search_query_parameter()))


def _search_query_parameter() -> BindParameter[str]:
    return bindparam("search_query", type_=String())


def fts_match() -> ColumnElement[bool]:
    """SQLite: the search table's rows that match the ``search_query`` parameter."""
    return literal_column("approval_requests_fts").op("MATCH")(_search_query_parameter())


def bm25() -> ColumnElement[Any]:
    """The SQLite search score: negative, lower for better matches."""
    return func.bm25(literal_column("approval_requests_fts"), *_FTS_COLUMN_WEIGHTS)


def search_query(
    dialect: str,
    terms: list[str],
    org_id: uuid.UUID,
    forms: Sequence[Sequence[str] | None] | None = None,
) -> str:
    """The search box's words as the engine's query: each a prefix, all required. On
    SQLite the query also names the org, whose id migration 0006 indexes as one word of
    its own column (stored as SQLite stores UUIDs), so that FTS5 finds that org's matches
    alone; the words are looked for in the title and the description only. ``forms``
    (SQLite): each term's indexed words, where known (``sqlite_word_forms``)."""
    if dialect == "postgresql":
        return " & ".join(f"{term}:*" for term in terms)
    return " AND ".join((f'{{org_id}} : "{org_id.hex}"', search_words(terms, forms)))


def search_words(terms: list[str], forms: Sequence[Sequence[str] | None] | None = None) -> str:
    """The words of a SQLite search query (``search_query``) without the org: each term
    as a prefix, or as the OR of the indexed words it is a prefix of (``forms``), which
    finds the same rows."""
    phrases = []
    for index, term in enumerate(terms):
        words = forms[index] if forms is not None else None
        if words is None:
            phrases.append(_phrase(term, prefix=True))
        else:
            # A column filter on each phrase, not on a parenthesized group: FTS5 has
            # read that form since its first release.
            alternatives = [_phrase(word, prefix=False) for word in [term, *words]]
            phrases.append("(" + " OR ".join(alternatives) + ")")
    return " AND ".join(phrases)


def _phrase(word: str, *, prefix: bool) -> str:
    return '{title description} : "' + word.replace('"', '""') + ('"*' if prefix else '"')


# SQLite: the search index's words (migration 0016), in order: a term's longer forms.
_TERMS = table("approval_requests_fts_terms", column("term", String()))
# A prefix with more longer forms than this stays a prefix query.
_MAX_WORD_FORMS = 8
_LONGER_WORDS = PreparedQuery(
    select(_TERMS.c.term)
    .where(_TERMS.c.term >= bindparam("after"), _TERMS.c.term < bindparam("past"))
    .limit(_MAX_WORD_FORMS + 1)
)


async def sqlite_word_forms(queries: QueryRunner, term: str) -> list[str] | None:
    """The words longer than ``term`` that the search index holds and ``term`` is a prefix
    of, if there are at most ``_MAX_WORD_FORMS``; None if more, or if ``term`` is not
    plain ASCII letters and digits (the tokenizer folds other characters, this would not).

    Why: for a prefix query (``"word"*``) FTS5 gathers the entries of every word with that
    prefix into one list before it returns the first row, a cost that grows with the
    number of requests holding them (a common word costs more the larger the org, whatever
    the page's size). Exact words are read lazily, as far as the page and the
    bounded count need. The words come from the index's vocabulary (``fts5vocab``), which
    reads its terms in order from the prefix."""
    if not (term.isascii() and term.isalnum()):
        return None
    # From just after ``term`` (no word holds a control character): the vocabulary
    # counts each word it reads, and "> term" read ``term`` itself first.
    after, past = term + "\x01", term[:-1] + chr(ord(term[-1]) + 1)
    rows = await queries.all(_LONGER_WORDS, {"after": after, "past": past})
    if len(rows) > _MAX_WORD_FORMS:
        return None
    return [str(row.term) for row in rows]


def matches_search(dialect: str, rows: NamedFromClause) -> ColumnElement[bool]:
    """A full-text match of the ``search_query`` parameter, tested row by row: on SQLite
    the org's matches are read from the search table once per statement (a common table
    expression, which every priority's part shares; ``search_query`` names the org), on
    PostgreSQL each row's indexed vector is tested."""
    if dialect == "postgresql":
        tsquery = func.to_tsquery("simple", func.signoff_unaccent(_search_query_parameter()))
        vector: ColumnElement[Any] = literal_column(f"{rows.name}.search_vector")
        return vector.op("@@")(tsquery)
    return rows.c.id.in_(select(_search_matches().c.request_id))


@functools.cache
def _search_matches() -> CTE:
    """The org's matches of the ``search_query`` parameter in SQLite's search table: one
    object, so that a statement that tests them in several places reads them once."""
    return select(FTS.c.request_id.label("request_id")).where(fts_match()).cte("search_matches")
