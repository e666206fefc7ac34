"""The request page's activity list, in words: "Requested by deploy-bot", "Approved by
Ann (1 of 2)", "Comment by Ben", "Expired". The audit trail's event types
(``request.created``) are names for programs; people read these."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

# How a decision arrived, when not on the dashboard or through the API.
_VIA = {"email": "an e-mail link", "slack": "Slack", "teams": "Teams", "discord": "Discord"}


class _Event(Protocol):
    type: str
    actor_id: uuid.UUID | None
    data: dict[str, Any] | None


class _Step(Protocol):
    id: uuid.UUID
    step_order: int


def describe_event(
    event: _Event,
    names: Mapping[uuid.UUID, str],
    requested_by: str,
    steps: Sequence[_Step] = (),
) -> str:
    """One event of a request as a sentence of the activity list. ``names``: the org's
    users by id; ``requested_by``: the name of the connection that created the request."""
    data = event.data or {}
    who = names.get(event.actor_id, "a former user") if event.actor_id else "signoff"
    kind = event.type
    if kind == "request.created":
        return f"Requested by {requested_by or who}"
    if kind == "comment.created":
        return f"Comment by {who}"
    if kind in ("request.approved", "request.rejected") and data.get("policy"):
        return _policy_decision(kind, data)
    if kind in ("request.vote_recorded", "request.approved", "request.rejected"):
        return _decision(kind, data, who)
    if kind == "policy.budget_exhausted":
        return (
            f"Left to people: policy v{data.get('version')} rule {data.get('rule')} "
            f"would have approved it, but {data.get('budget')}"
        )
    if kind.startswith("step."):
        order = {str(step.id): step.step_order for step in steps}.get(str(data.get("step_id")))
        step = f"Step {order}" if order is not None else "A step"
        what = kind.removeprefix("step.").replace("_", " ")  # "vote recorded"
        return f"{step} {what} by {who}{_via(data)}"
    if kind == "arguments.edited":
        return _edited(data, who, names, {str(step.id): step.step_order for step in steps})
    if kind == "steps.configured":
        count = len(data.get("steps") or [])
        return f"Approval chain of {count} step{'s' if count != 1 else ''} set by {who}"
    if kind == "request.cancelled":
        return f"Cancelled by {who}"
    if kind == "request.expired":
        return "Expired: nobody decided before the deadline"
    if kind == "callback.delivered":
        return f"Callback delivered (attempt {data.get('attempt', 1)})"
    if kind == "callback.failed":
        reason = f"HTTP {data['status_code']}" if data.get("status_code") else data.get("error")
        return "Callback failed" + (f" ({reason})" if reason else "")
    return kind.replace(".", " ").replace("_", " ").capitalize()


def _policy_decision(kind: str, data: Mapping[str, Any]) -> str:
    """A decision a policy made at create (``policies/``): which rule, of which version."""
    policy = data.get("policy") or {}
    word = "Rejected" if kind == "request.rejected" else "Approved"
    text = f"{word} automatically by policy v{policy.get('version')}, rule {policy.get('rule')}"
    return f"{text}: {data['comment']}" if data.get("comment") else text


def _decision(kind: str, data: Mapping[str, Any], who: str) -> str:
    word = "Rejected" if kind == "request.rejected" else "Approved"
    text = f"{word} by {who}{_via(data)}"
    if data.get("override"):
        return f"{text}, overriding the chain"
    required = data.get("required_approvals") or 1
    if word == "Approved" and required > 1:
        return f"{text} ({data.get('current_approvals', 0)} of {required})"
    return text


def _edited(
    data: Mapping[str, Any], who: str, names: Mapping[uuid.UUID, str], orders: Mapping[str, int]
) -> str:
    """An approver's edit of the arguments: it is their approval (or vote on a group's
    step; a delegate's, for whom they stand in), and the votes cast on the old arguments
    were dismissed, their voters asked again."""

    def name(user_id: str) -> str:
        return names.get(uuid.UUID(user_id), "a former user")

    def step(step_id: str) -> str:
        order = orders.get(step_id)
        return f"step {order}" if order is not None else "a step"

    changes = len(data.get("patch") or [])
    editor = who + (f" for {name(data['on_behalf_of'])}" if data.get("on_behalf_of") else "")
    text = f"Arguments edited by {editor} ({changes} change{'s' if changes != 1 else ''})"
    text += "; the edit counts as their approval"
    if data.get("step_id"):
        text += f" on {step(str(data['step_id']))}"
    dismissed = [name(v) for v in data.get("dismissed_approvals") or ()]
    for step_id, voters in (data.get("dismissed_votes") or {}).items():
        dismissed += [f"{name(v)} ({step(step_id)})" for v in voters]
    if dismissed:
        text += f". Votes dismissed, and asked again: {', '.join(dismissed)}"
    if data.get("reopened_steps"):
        reopened = ", ".join(step(str(sid)) for sid in data["reopened_steps"])
        text += f". Reopened: {reopened}"
    return text


def _via(data: Mapping[str, Any]) -> str:
    via = data.get("via")
    return f" via {_VIA.get(str(via), str(via))}" if via else ""
