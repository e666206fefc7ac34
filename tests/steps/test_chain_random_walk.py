"""The service agrees with the state machine: random runs through the real API.

Each run makes a request (count-based or a chain, sequential or not), then fires random
votes, step votes, overrides and cancellations over HTTP. The pure state machine,
fed the same actions, predicts every answer's status code and the request's status; the
database must agree after each step, and its invariants hold at the end.
"""

from __future__ import annotations

import dataclasses
import random
import uuid
from datetime import UTC, datetime
from typing import Any

import httpx

from signoff.approvals.state import (
    Cancel,
    Decide,
    RequestView,
    StepView,
    VoteStep,
    apply,
)
from signoff.auth.actor import Actor
from signoff.errors import AppError
from tests.conftest import Member, Org, create_approval

RUNS = 12
ACTIONS_PER_RUN = 8


def _fold(view: RequestView, action: Any, transition: Any) -> RequestView:
    changes = dict(transition.step_changes)
    voters = view.voters | ({action.actor.user_id} if transition.records_vote else set())
    return dataclasses.replace(
        view,
        status=transition.status,
        current_approvals=transition.current_approvals,
        voters=voters,
        steps=tuple(dataclasses.replace(s, status=changes.get(s.id, s.status)) for s in view.steps),
    )


async def test_random_runs_match_the_state_machine(client: httpx.AsyncClient, org: Org) -> None:
    rng = random.Random(20261123)
    people: list[Member] = [org.admin, *org.members]
    actors = {m.user_id: Actor(uuid.UUID(m.user_id), m.role == "admin") for m in people}
    for _ in range(RUNS):
        n_steps = rng.choice([0, 0, 2, 3])
        sequential = rng.random() < 0.5
        required = rng.randint(1, 3)
        request = await create_approval(
            client, org.admin, required_approvals=required, is_sequential=sequential
        )
        rid = request["id"]
        steps: list[dict[str, Any]] = []
        if n_steps:
            approvers = rng.sample(org.members, n_steps)
            response = await client.post(
                f"/api/v1/approvals/{rid}/steps",
                headers=org.admin.headers,
                json={
                    "steps": [
                        {"approver_id": a.user_id, "step_order": i}
                        for i, a in enumerate(approvers, 1)
                    ]
                },
            )
            steps = response.json()["data"]
        view = RequestView(
            status="pending",
            required_approvals=n_steps or required,
            is_sequential=sequential,
            steps=tuple(
                StepView(
                    uuid.UUID(s["id"]), s["step_order"], uuid.UUID(s["approver_id"]), "pending"
                )
                for s in steps
            ),
        )
        for _ in range(ACTIONS_PER_RUN):
            who = rng.choice(people)
            decision = rng.choice(["approve", "approve", "reject"])
            kind = rng.choice(
                ["decide", "vote", "vote", "cancel"] if steps else ["decide", "decide", "cancel"]
            )
            action: Any
            if kind == "decide":
                action = Decide(actors[who.user_id], decision)  # type: ignore[arg-type]
                call = client.patch(
                    f"/api/v1/approvals/{rid}", headers=who.headers, json={"decision": decision}
                )
            elif kind == "vote":
                step = rng.choice(steps)
                action = VoteStep(actors[who.user_id], uuid.UUID(step["id"]), decision)  # type: ignore[arg-type]
                call = client.patch(
                    f"/api/v1/approvals/{rid}/steps/{step['id']}",
                    headers=who.headers,
                    json={"decision": decision},
                )
            else:
                action = Cancel(actors[who.user_id])
                call = client.delete(f"/api/v1/approvals/{rid}", headers=who.headers)
            try:
                transition = apply(view, action, datetime.now(UTC))
                expected_code = 200
            except AppError as refusal:
                transition, expected_code = None, refusal.status_code
            response = await call
            assert response.status_code == expected_code, (action, response.text)
            if transition is not None:
                view = _fold(view, action, transition)
            read = (await client.get(f"/api/v1/approvals/{rid}", headers=org.admin.headers)).json()
            assert read["status"] == view.status
            assert read["current_approvals"] == view.current_approvals
            assert [s["status"] for s in read["steps"]] == [s.status for s in view.steps]
        assert read["current_approvals"] <= read["required_approvals"]
        approvers = [v["user_id"] for v in read["votes"] if v["decision"] == "approve"]
        assert len(approvers) == len(set(approvers))
