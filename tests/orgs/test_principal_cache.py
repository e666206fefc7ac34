"""The cache of API-key principals (orgs/repository.py), against a stand-in for the
database whose commit stamp each test moves. Through the API, on both databases:
tests/api/test_auth.py."""

from __future__ import annotations

import uuid
from typing import Any, cast

from signoff.orgs import repository
from signoff.storage.prepared import QueryRunner


class _Queries:
    """A QueryRunner with one connection row and a stamp the test moves."""

    def __init__(self, row: tuple[Any, ...]) -> None:
        self.row = row
        self.stamp: tuple[int, int] | None = (1, 1)
        self.reads = 0

    def commit_stamp(self) -> tuple[int, int] | None:
        return self.stamp

    async def one(self, _query: Any, params: dict[str, Any]) -> Any:
        self.reads += 1
        return self.row if params["key_hash"].startswith("known") else None


def _principals() -> tuple[repository.PrincipalsByKey, _Queries]:
    row = (
        uuid.uuid4(),
        "conn",
        100,
        uuid.uuid4(),
        "Acme",
        False,
        uuid.uuid4(),
        "a@b.c",
        "A",
        "admin",
        None,  # the owner is active
        "off",  # the org's passkey_for
        "allow",  # the org's self_approval
        0,  # the org's policy version
        0,  # the standing approvals the org granted
        False,  # whether the org has a notification channel
    )
    queries = _Queries(row)
    return repository.PrincipalsByKey(cast(QueryRunner, queries)), queries


async def test_unknown_keys_are_never_kept() -> None:
    principals, queries = _principals()
    for _ in range(3):
        assert await principals.find("unknown") is None
    assert queries.reads == 3


async def test_the_cache_starts_over_past_its_size_and_without_a_stamp() -> None:
    principals, queries = _principals()
    for index in range(principals.MAX_KEYS + 1):
        assert await principals.find(f"known-{index}") is not None
    assert queries.reads == principals.MAX_KEYS + 1
    assert await principals.find(f"known-{principals.MAX_KEYS}") is not None
    assert queries.reads == principals.MAX_KEYS + 1  # the newest stayed
    assert await principals.find("known-0") is not None
    assert queries.reads == principals.MAX_KEYS + 2  # the oldest went with the rest
    queries.stamp = None
    await principals.find("known-0")
    await principals.find("known-0")
    assert queries.reads == principals.MAX_KEYS + 4


async def test_a_read_the_stamp_overtook_is_not_kept() -> None:
    principals, queries = _principals()
    read = queries.one

    async def read_while_someone_commits(query: Any, params: dict[str, Any]) -> Any:
        if params["key_hash"] == "known-slow":
            # While this read waits (a busy database), a commit lands and another call
            # moves the cache on to the new stamp.
            queries.stamp = (1, 2)
            assert await principals.find("known-other") is not None
        return await read(query, params)

    queries.one = read_while_someone_commits  # type: ignore[method-assign]
    assert await principals.find("known-slow") is not None
    assert queries.reads == 2
    # Read under the old stamp: not kept. The other call's read was, under the new one.
    assert await principals.find("known-slow") is not None
    assert await principals.find("known-other") is not None
    assert queries.reads == 3
