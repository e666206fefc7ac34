"""The task a request's summary maps to (mcp_tasks.task_state / task_of), every status."""

from __future__ import annotations

import pytest

from signoff_client.mcp_tasks import task_of, task_state


@pytest.mark.parametrize(
    ("status", "comment", "expected"),
    [
        ("pending", None, ("working", "Waiting for a human decision on signoff.")),
        ("approved", "go", ("completed", "Approved by Ann.")),
        ("rejected", "not today", ("failed", "Rejected by Ann: not today")),
        ("rejected", None, ("failed", "Rejected by Ann.")),
        ("expired", None, ("failed", "Expired: nobody decided in time.")),
        ("cancelled", None, ("failed", "Cancelled.")),
    ],
)
def test_every_status_maps_to_a_task_state(
    status: str, comment: str | None, expected: tuple[str, str]
) -> None:
    summary = {"status": status, "comment": comment, "decided_by": "Ann"}
    assert task_state(summary) == expected


def test_the_task_is_the_request() -> None:
    summary = {
        "id": "0b9a3c1e-7f0e-4d7b-9a77-1c2f8d1e2a10",
        "status": "approved",
        "comment": None,
        "decided_by": "Ann",
        "created_at": "2026-11-28T04:00:00+00:00",
        "decided_at": "2026-11-28T04:05:00+00:00",
    }
    task = task_of(summary)
    assert task["taskId"] == summary["id"]
    assert (task["createdAt"], task["lastUpdatedAt"]) == (
        summary["created_at"],
        summary["decided_at"],
    )
