"""``SignoffClient`` against a live server: every method, and what each answer holds."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from conftest import LiveServer
from signoff_client import Approval, Comment, SignoffClient, StepVote


def test_create_and_read_back(live: LiveServer, admin: SignoffClient, tag: str) -> None:
    expires = datetime.now(UTC) + timedelta(hours=1)
    created = admin.create_approval(
        "Deploy billing v2",
        "Rolls out the invoice renderer.",
        "high",
        action_type=f"deploy.{tag}",
        metadata={"ticket": "OPS-7", "regions": ["eu", "us"]},
        callback_url="https://hooks.example/signoff",
        callback_headers={"X-Token": "s3cret"},
        expires_at=expires,
        required_approvals=2,
        source=tag,
    )
    assert isinstance(created, Approval)
    assert (created.status, created.priority, created.required_approvals) == ("pending", "high", 2)
    assert created.org_id == live.org_id and created.connection_id == live.admin.connection_id
    uuid.UUID(created.id)

    read = admin.get_approval(created.id)
    assert read.id == created.id
    assert isinstance(created.number, int) and created.number >= 1
    assert read.number == created.number
    assert read.metadata == {"ticket": "OPS-7", "regions": ["eu", "us"]}
    assert read.action_type == f"deploy.{tag}" and read.source == tag
    assert read.expires_at is not None and abs((read.expires_at - expires).total_seconds()) < 1
    assert read.callback_url == "https://hooks.example/signoff"
    assert "callback_headers" not in read.model_dump()  # never echoed by the server
    assert read.decided_at is None and read.decided_by is None
    assert read.comments_count == 0 and read.steps == [] and read.votes == []


def test_a_request_from_a_server_without_numbers_has_none() -> None:
    answer = {"id": "r1", "title": "t", "status": "pending", "priority": "low"}
    assert Approval.model_validate({**answer, "created_at": "2026-01-01T00:00:00Z"}).number is None


def test_idempotency_key_returns_the_first_request(admin: SignoffClient, tag: str) -> None:
    first = admin.create_approval("Rotate keys", "all of them", "critical", idempotency_key=tag)
    again = admin.create_approval("Something else", "entirely", "low", idempotency_key=tag)
    assert again.id == first.id and again.title == "Rotate keys"
    generated = admin.create_approval("Generated key", "d", "low", idempotency_key=True)
    assert generated.idempotency_key and generated.idempotency_key.startswith("signoff-client-")


def test_list_approvals_walks_every_page(admin: SignoffClient, tag: str) -> None:
    made = [admin.create_approval(f"Job {n} {tag}", "batch", "low", source=tag) for n in range(5)]
    admin.decide(made[0].id, "reject", "not this one")

    listed = list(admin.list_approvals(source=tag, page_size=2))  # three pages
    assert [a.id for a in listed] == [a.id for a in reversed(made)]  # newest first
    assert all(a.description == "batch" for a in listed)

    pending = list(admin.list_approvals(source=tag, status="pending", page_size=2))
    assert {a.id for a in pending} == {a.id for a in made[1:]}
    several = list(admin.list_approvals(source=tag, status=["pending", "rejected"]))
    assert len(several) == 5
    found = list(admin.list_approvals(search=f"Job 3 {tag}"))
    assert [a.id for a in found] == [made[3].id]
    assert list(admin.list_approvals(source=f"{tag}-none")) == []


def test_decide_answers_with_the_whole_request(
    admin: SignoffClient, member: SignoffClient, live: LiveServer
) -> None:
    created = admin.create_approval("Drop the staging db", "It is stale.", "medium")
    decided = member.decide(created.id, "approve", "fine by me")
    assert (decided.status, decided.decided_by, decided.decided_by_name) == (
        "approved",
        live.member.user_id,
        "Bob",
    )
    assert decided.decision_comment == "fine by me"
    assert decided.callback_delivered is False  # no callback_url
    assert decided.decided_at is not None

    rejected = member.decide(admin.create_approval("t", "d", "low").id, "reject")
    assert rejected.status == "rejected"


def test_count_based_votes(admin: SignoffClient, member: SignoffClient) -> None:
    created = admin.create_approval("Two keys", "two people", "high", required_approvals=2)
    first = member.decide(created.id, "approve")
    assert (first.status, first.current_approvals) == ("pending", 1)
    second = admin.decide(created.id, "approve")
    assert (second.status, second.current_approvals) == ("approved", 2)


def test_cancel(admin: SignoffClient) -> None:
    created = admin.create_approval("Maybe later", "d", "low")
    cancelled = admin.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.cancelled_at is not None
    assert admin.get_approval(created.id).status == "cancelled"


def test_comments_and_events(admin: SignoffClient, member: SignoffClient, live: LiveServer) -> None:
    created = admin.create_approval("Open the firewall", "port 8443", "high")
    comment = member.add_comment(created.id, "Which host?")
    assert isinstance(comment, Comment)
    assert (comment.body, comment.user_id) == ("Which host?", live.member.user_id)
    admin.add_comment(created.id, "edge-1")
    member.decide(created.id, "approve", "ok for edge-1")

    comments = admin.list_comments(created.id)
    assert [c.body for c in comments][:2] == ["Which host?", "edge-1"]  # oldest first
    assert comments[0].approval_request_id == created.id
    assert admin.get_approval(created.id).comments_count == len(comments)

    types = [event.type for event in admin.list_events(created.id)]
    assert types[0] == "request.created" and "request.approved" in types, types
    assert types.count("comment.created") >= 2, types


def test_steps_in_order(admin: SignoffClient, member: SignoffClient, live: LiveServer) -> None:
    from signoff_client import StepOutOfOrder

    created = admin.create_approval("Release 3.0", "two sign-offs", "high", is_sequential=True)
    steps = admin.set_steps(created.id, [live.admin.user_id, live.member.user_id], True)
    assert [(s.step_order, s.approver_id, s.status) for s in steps] == [
        (1, live.admin.user_id, "pending"),
        (2, live.member.user_id, "pending"),
    ]
    assert [s.id for s in admin.list_steps(created.id)] == [s.id for s in steps]

    with pytest.raises(StepOutOfOrder):
        member.vote_step(created.id, steps[1].id, "approve")
    first = admin.vote_step(created.id, steps[0].id, "approve", "lgtm")
    assert isinstance(first, StepVote)
    assert (first.status, first.request_status, first.current_approvals) == (
        "approved",
        "pending",
        1,
    )
    last = member.vote_step(created.id, steps[1].id, "approve")
    assert (last.request_status, last.current_approvals, last.required_approvals) == (
        "approved",
        2,
        2,
    )
    assert admin.get_approval(created.id).status == "approved"


def test_steps_take_dicts_and_refuse_a_different_order_rule(
    admin: SignoffClient, live: LiveServer
) -> None:
    created = admin.create_approval("Any order", "d", "low")
    with pytest.raises(ValueError, match="is_sequential"):
        admin.set_steps(created.id, [live.member.user_id], is_sequential=True)
    steps = admin.set_steps(
        created.id, [{"approver_id": live.member.user_id, "step_order": 5}], is_sequential=False
    )
    assert [(s.step_order, s.approver_id) for s in steps] == [(5, live.member.user_id)]


def test_a_group_step_is_set_read_and_voted(
    admin: SignoffClient, member: SignoffClient, live: LiveServer, tag: str
) -> None:
    group = httpx.post(
        f"{live.base_url}/api/v1/groups",
        json={"name": f"finance-{tag}", "member_ids": [live.member.user_id]},
        headers={"Authorization": f"Bearer {live.admin.api_key}"},
    )
    assert group.status_code == 201, group.text
    group_id = group.json()["id"]
    created = admin.create_approval("Pay", "a group decides", "low")
    (step,) = admin.set_steps(
        created.id, [{"group_id": group_id, "required_approvals": 1, "step_order": 1}], False
    )
    assert (step.approver_id, step.group_id, step.group_name) == (None, group_id, f"finance-{tag}")
    assert admin.list_steps(created.id)[0].required_approvals == 1
    voted = member.vote_step(created.id, step.id, "approve")
    assert voted.request_status == "approved"
    assert admin.get_approval(created.id).status == "approved"


def test_from_env(live: LiveServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_URL", live.base_url)
    monkeypatch.setenv("SIGNOFF_API_KEY", live.member.api_key)
    with SignoffClient.from_env() as client:
        created = client.create_approval("From the environment", "d", "low")
        assert created.connection_id == live.member.connection_id
    monkeypatch.delenv("SIGNOFF_URL")
    with pytest.raises(ValueError, match="SIGNOFF_URL"):
        SignoffClient.from_env()
    with pytest.raises(ValueError, match="api_key"):
        SignoffClient(live.base_url)
