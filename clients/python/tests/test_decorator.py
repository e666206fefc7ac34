"""``@requires_approval``: the gated function runs only once a human has approved the call."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from conftest import LiveServer, in_thread, join_ok
from signoff_client import (
    Approval,
    ApprovalRejected,
    AsyncSignoffClient,
    SignoffClient,
    WaitTimeout,
    requires_approval,
)


def decide_when_asked(
    client: SignoffClient, action_type: str, decision: str, comment: str | None = None
) -> Callable[[], Approval]:
    """A human watching for the request (polled with a deadline), then deciding it."""

    def act() -> Approval:
        give_up = time.monotonic() + 20
        while not (found := list(client.list_approvals(action_type=action_type))):
            assert time.monotonic() < give_up, "the request never appeared"
            time.sleep(0.1)
        return client.decide(found[0].id, decision, comment)

    return act


def test_approved_runs_the_function(admin: SignoffClient, member: SignoffClient, tag: str) -> None:
    ran: list[tuple[str, bool]] = []

    @requires_approval(admin, title="Delete {path}", priority="critical",
                       action_type=f"files.{tag}")  # fmt: skip
    def delete(path: str, recursive: bool = False, options: dict[str, int] | None = None) -> str:
        """Deletes a path from the shared volume."""
        ran.append((path, recursive))
        return f"deleted {path}"

    human = in_thread(decide_when_asked(member, f"files.{tag}", "approve"))
    assert delete("/srv/old", recursive=True, options={"depth": 3}) == "deleted /srv/old"
    join_ok(human)
    assert ran == [("/srv/old", True)]

    (request,) = admin.list_approvals(action_type=f"files.{tag}")
    assert request.title == "Delete /srv/old" and request.priority == "critical"
    assert "delete(" in request.description and '"/srv/old"' in request.description
    assert "Deletes a path" in request.description
    assert request.metadata["arguments"] == {
        "path": "/srv/old",
        "recursive": True,
        "options": {"depth": 3},
    }
    assert '{"depth": 3}' in request.description
    assert request.metadata["function"].endswith("delete")
    assert delete.__name__ == "delete"  # wraps keeps the tool's name and docstring


def test_rejected_raises_with_the_comment(
    admin: SignoffClient, member: SignoffClient, tag: str
) -> None:
    ran: list[str] = []

    @requires_approval(admin, title="Email every customer", action_type=f"mail.{tag}")
    def send_mail(subject: str) -> None:
        ran.append(subject)

    human = in_thread(decide_when_asked(member, f"mail.{tag}", "reject", "not on a Friday"))
    with pytest.raises(ApprovalRejected) as caught:
        send_mail("Big news")
    join_ok(human)
    assert ran == []
    assert (caught.value.status, caught.value.comment) == ("rejected", "not on a Friday")
    assert caught.value.decided_by_name == "Bob"
    assert "not on a Friday" in str(caught.value)


def test_no_decision_in_time_cancels_the_request(admin: SignoffClient, tag: str) -> None:
    @requires_approval(admin, title="Unwatched", action_type=f"idle.{tag}", timeout=1)
    def never() -> None:
        raise AssertionError("must not run")

    with pytest.raises(WaitTimeout):
        never()
    (request,) = admin.list_approvals(action_type=f"idle.{tag}")
    assert request.status == "cancelled"


def test_the_client_must_match_the_function(live: LiveServer) -> None:
    async_client = AsyncSignoffClient(live.base_url, live.admin.api_key)
    with pytest.raises(TypeError, match="SignoffClient"):
        requires_approval(async_client)(lambda: None)
    with live.client() as sync_client, pytest.raises(TypeError, match="AsyncSignoffClient"):

        @requires_approval(sync_client)
        async def tool() -> None:
            pass


@pytest.mark.anyio
async def test_async_functions(live: LiveServer, member: SignoffClient, tag: str) -> None:
    async with AsyncSignoffClient(live.base_url, live.admin.api_key) as client:

        @requires_approval(client, title="Scale to {replicas}", action_type=f"scale.{tag}")
        async def scale(replicas: int) -> int:
            return replicas

        human = in_thread(decide_when_asked(member, f"scale.{tag}", "approve"))
        assert await scale(12) == 12
        join_ok(human)

        @requires_approval(client, title="Scale down", action_type=f"down.{tag}")
        async def scale_down() -> None:
            raise AssertionError("must not run")

        human = in_thread(decide_when_asked(member, f"down.{tag}", "reject", "peak hours"))
        with pytest.raises(ApprovalRejected, match="peak hours"):
            await scale_down()
        join_ok(human)
