"""``RequestRecord`` is the request's one shape in the code: it holds every column."""

from __future__ import annotations

from sqlalchemy import inspect, select

from signoff.approvals.typed_rows import RequestRecord, request_columns
from signoff.models import ApprovalRequest
from signoff.storage import PreparedQuery


def test_the_record_has_a_field_for_every_column_of_the_table() -> None:
    columns = {prop.key for prop in inspect(ApprovalRequest).column_attrs}
    assert set(RequestRecord._fields) == columns


def test_a_prepared_query_refuses_a_row_type_that_is_not_its_columns() -> None:
    PreparedQuery(select(*request_columns()), row_type=RequestRecord)
    try:
        PreparedQuery(select(*request_columns()[1:]), row_type=RequestRecord)
    except TypeError as error:
        assert "RequestRecord" in str(error)
    else:
        raise AssertionError("a mismatched row type was accepted")
