"""``SQLiteIndex``: the ``INDEXED BY`` / ``NOT INDEXED`` clauses written into compiled SQL."""

from __future__ import annotations

import pytest

from signoff.storage.prepared import SQLiteIndex

SQL = (
    "SELECT r.id FROM requests JOIN requests_fts ON requests_fts.id = requests.id "
    "WHERE requests.rowid IN (SELECT d.rowid FROM requests AS d WHERE d.org = ?)"
)


def test_the_clause_follows_the_table_it_names() -> None:
    hinted = SQLiteIndex("requests", "ix_org").applied_to(SQL)
    assert "FROM requests INDEXED BY ix_org JOIN requests_fts" in hinted
    assert "FROM requests AS d WHERE" in hinted  # the aliased read is another table's
    hinted = SQLiteIndex("requests AS d", None).applied_to(hinted)
    assert "FROM requests AS d NOT INDEXED WHERE" in hinted


def test_a_table_read_twice_or_not_at_all_is_refused() -> None:
    with pytest.raises(ValueError, match="expected one FROM requests"):
        SQLiteIndex("requests", "ix_org").applied_to(SQL + " UNION SELECT id FROM requests")
    with pytest.raises(ValueError, match="expected one FROM votes"):
        SQLiteIndex("votes", "ix_votes").applied_to(SQL)
