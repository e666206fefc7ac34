"""A standing-approval hit's Python, made straight (a hit as fast as a plain create):
what a hit names of its standing approval is made once per standing approval."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from signoff.policies import standing
from signoff.policies.standing_repository import StandingCandidate

pytestmark = pytest.mark.anyio
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class _Repo:
    """Candidates as SQLite's repository answers them: the use is the insert's."""

    use_taken_by_create = False

    def __init__(self, candidate: StandingCandidate) -> None:
        self.candidate = candidate

    async def candidates(self, *_: Any) -> list[StandingCandidate]:
        return [self.candidate]

    async def use(self, candidate: StandingCandidate, now: datetime, *, taking: bool) -> int:
        return candidate.uses + 1


async def test_what_a_hit_names_is_made_once_per_standing_approval() -> None:
    granted_by = uuid.uuid4()
    row = StandingCandidate(uuid.uuid4(), {"env": {"eq": "prod"}}, granted_by, "Ada", 5, 1)
    standing._names.cache_clear()
    matches = []
    for uses in (1, 2):
        repo: Any = _Repo(row._replace(uses=uses))
        arguments = {"env": "prod"}
        matches.append(await standing.match(repo, uuid.uuid4(), uuid.uuid4(), "x", arguments, NOW))
    first, second = matches
    assert first is not None and second is not None
    assert first.label == f"standing approval {row.id} (granted by Ada)"
    assert list(second.data.items()) == [
        ("id", str(row.id)),
        ("granted_by", str(granted_by)),
        ("granted_by_name", "Ada"),
        ("uses", 3),
        ("max_uses", 5),
    ]
    assert first.data["uses"] == 2  # each hit its own data
    assert standing._names.cache_info().misses == 1
