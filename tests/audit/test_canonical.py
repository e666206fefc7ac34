"""The chain's fast RFC 8785 form (audit/canonical.py) against the ``rfc8785`` package:
the same bytes, or the same refusal, for every value; and the fast path really taken
for the events the chain holds."""

from __future__ import annotations

import importlib
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from unittest import mock

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff.audit import canonical, chain

LIMIT = 2**53 - 1


def _same(value: Any) -> None:
    """``canonical.dumps`` gives what ``rfc8785.dumps`` gives: bytes, or an error of the
    same type."""
    try:
        expected: Any = rfc8785.dumps(value)
    except Exception as error:
        with pytest.raises(type(error)):
            canonical.dumps(value)
        return
    assert canonical.dumps(value) == expected


def test_every_code_point_is_written_as_rfc8785_writes_it() -> None:
    """Both escape character by character, so every code point but the surrogates, in
    strings of 256 at a time, as a value and in an array (the keys are ASCII here)."""
    points = [p for p in range(0x110000) if not 0xD800 <= p <= 0xDFFF]
    for start in range(0, len(points), 256):
        text = "".join(map(chr, points[start : start + 256]))
        assert canonical.dumps({"k": text, "a": [text]}) == rfc8785.dumps({"k": text, "a": [text]})


@pytest.mark.parametrize(
    "value",
    [
        1.5,  # floats: ECMAScript's form
        {"n": 1e21},
        {"n": [0.1, -0.0]},
        {"n": LIMIT},
        {"n": -LIMIT},
        {"n": LIMIT + 1},  # refused by RFC 8785, written by orjson
        {"n": [-(LIMIT + 1)]},
        {"n": 2**70},
        {"\ue000": 1, "\U00010000": 2},  # UTF-16 order is not code point order here
        {"é": 1, "e": 2},
        {"k": "\ud800"},  # a lone surrogate: refused
        {"\udfff": 1},
        {1: "non-string key"},
        {"t": (1, 2)},  # a tuple: rfc8785 writes it as an array
        {"u": uuid.UUID(int=1)},  # orjson would write these, rfc8785 refuses them
        {"d": datetime(2026, 1, 1, tzinfo=UTC)},
        {"b": True, "f": False, "z": None, "s": "", "l": [], "o": {}},
        {"s": '\x00\x1f\x7f\u2028\u2029"\\/'},
        [[[[[[[[[[{"deep": True}]]]]]]]]]],
        "x" * 10_000,
    ],
)
def test_values_outside_the_fast_path_give_what_rfc8785_gives(value: Any) -> None:
    _same(value)


def test_nesting_deeper_than_orjson_allows_is_left_to_rfc8785() -> None:
    value: Any = {"leaf": 1}
    for _ in range(300):
        value = {"x": [value]}
    _same(value)


_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**60), max_value=2**60)
    | st.integers(min_value=-LIMIT - 2, max_value=-LIMIT + 2)
    | st.integers(min_value=LIMIT - 2, max_value=LIMIT + 2)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
_keys = st.text(max_size=8) | st.sampled_from(["a", "b", "\ue000", "\U00010000", "\U0001f600"])
_json = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(_keys, inner, max_size=6),
    max_leaves=30,
)


@settings(max_examples=400, deadline=None)
@given(_json)
def test_generated_json_gives_what_rfc8785_gives(value: Any) -> None:
    _same(value)


@settings(max_examples=200, deadline=None)
@given(
    data=st.dictionaries(
        st.text(alphabet=st.characters(max_codepoint=127), max_size=10),
        st.text() | st.integers(min_value=-LIMIT, max_value=LIMIT) | st.none() | st.booleans(),
        max_size=8,
    )
)
def test_events_of_plain_values_take_the_fast_path(data: dict[str, Any]) -> None:
    """An event made of strings, safe integers, booleans and nulls never reaches the slow
    package (the point of the change), and still hashes to the bytes it writes."""
    form = chain.canonical_event(
        seq=7,
        id=uuid.uuid4(),
        org_id=uuid.uuid4(),
        request_id=None,
        type="request.created",
        actor_id=uuid.uuid4(),
        data=data,
        created_at=datetime.now(UTC),
        prev_hash=chain.GENESIS_HASH,
    )
    expected = rfc8785.dumps(form)

    def refuse(value: Any) -> bytes:
        raise AssertionError("the slow path was taken")

    with mock.patch.object(rfc8785, "dumps", refuse):
        assert canonical.dumps(form) == expected


@settings(max_examples=300, deadline=None)
@given(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)),
    st.sampled_from([None, UTC, timezone(timedelta(hours=5, minutes=30)), timezone.min]),
)
def test_chain_timestamps_are_the_text_strftime_wrote(moment: datetime, zone: Any) -> None:
    value = moment if zone is None else moment.replace(tzinfo=zone)
    aware = value.replace(tzinfo=UTC) if value.tzinfo is None else value
    assert chain.chain_timestamp(value) == aware.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_the_measurement_switch_sends_every_value_to_rfc8785(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Read when the module is imported, as ``signoff serve`` starts."""
    value = {"plain": ["value", 1, True, None]}
    monkeypatch.setattr(rfc8785, "dumps", lambda v: b"from rfc8785")
    assert canonical.dumps(value) != b"from rfc8785"
    monkeypatch.setenv(canonical.STOCK_SWITCH, "1")
    try:
        importlib.reload(canonical)
        assert canonical.dumps(value) == b"from rfc8785"
    finally:
        monkeypatch.delenv(canonical.STOCK_SWITCH)
        importlib.reload(canonical)
    assert canonical.dumps(value) != b"from rfc8785"
