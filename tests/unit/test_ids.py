from __future__ import annotations

from signoff.common.ids import new_id, parse_id


def test_ids_are_version_7_and_strictly_increasing() -> None:
    ids = [new_id() for _ in range(10_000)]
    assert all(i.version == 7 and i.variant == "specified in RFC 4122" for i in ids)
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_parse_id() -> None:
    value = new_id()
    assert parse_id(str(value)) == value
    assert parse_id("not-a-uuid") is None
