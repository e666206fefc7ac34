"""Receipts end to end against the live server: create with arguments, approve, verify
offline against ``/.well-known/jwks.json``, redeem once."""

from __future__ import annotations

import time

import pytest

from conftest import LiveServer, in_thread, join_ok
from signoff_client import (
    ArgumentsMismatch,
    ReceiptUsedUp,
    SignoffClient,
    ValidationError,
    arguments_hash,
    requires_approval,
    verify_receipt,
)
from test_decorator import decide_when_asked

SCHEMA = {
    "type": "object",
    "properties": {"service": {"type": "string"}, "replicas": {"type": "integer"}},
    "required": ["service", "replicas"],
}


def test_approve_verify_redeem_once(
    live: LiveServer, admin: SignoffClient, member: SignoffClient, tag: str
) -> None:
    arguments = {"service": "billing", "replicas": 3}
    created = admin.create_approval(
        "Scale billing", "Peak hours", "medium", action_type=f"scale.{tag}", arguments=arguments
    )
    assert created.arguments == arguments
    assert created.arguments_hash == arguments_hash(arguments)
    member.decide(created.id, "approve")
    decided = admin.wait_for_decision(created.id, timeout=30)
    assert decided.is_approved and decided.receipt and not decided.arguments_edited

    receipt = verify_receipt(
        decided.receipt, jwks=admin.jwks(), arguments=arguments, action_type=f"scale.{tag}"
    )
    assert receipt.request_id == created.id and receipt.max_uses == 1
    assert receipt.decided_by == (live.member.user_id,)
    with pytest.raises(ArgumentsMismatch):
        verify_receipt(decided.receipt, jwks=admin.jwks(), arguments={**arguments, "replicas": 30})

    redeemed = admin.redeem_receipt(decided.receipt, arguments=arguments)
    assert (redeemed.request_id, redeemed.jti, redeemed.uses_left) == (created.id, receipt.jti, 0)
    with pytest.raises(ReceiptUsedUp):
        admin.redeem_receipt(decided.receipt, arguments=arguments)
    assert admin.get_approval(created.id).receipt_uses == 1


def test_the_decorator_runs_the_approved_call_once(
    admin: SignoffClient, member: SignoffClient, tag: str
) -> None:
    ran: list[tuple[str, int]] = []

    @requires_approval(admin, action_type=f"deploy.{tag}", require_receipt=True)
    def scale(service: str, replicas: int) -> None:
        ran.append((service, replicas))

    human = in_thread(decide_when_asked(member, f"deploy.{tag}", "approve"))
    scale("billing", 3)
    join_ok(human)
    assert ran == [("billing", 3)]
    (request,) = admin.list_approvals(action_type=f"deploy.{tag}")
    assert admin.get_approval(request.id).receipt_uses == 1


def test_the_decorator_runs_the_edited_call(
    admin: SignoffClient, member: SignoffClient, tag: str
) -> None:
    """An approver edits the arguments as they approve: the function runs with the edited
    ones, once, after the receipt naming them is verified and redeemed."""
    ran: list[tuple[str, int]] = []

    @requires_approval(
        admin, action_type=f"edit.{tag}", arguments_schema=SCHEMA, require_receipt=True
    )
    def scale(service: str, replicas: int) -> None:
        ran.append((service, replicas))

    def edit_and_approve() -> object:
        give_up = time.monotonic() + 20
        while not (found := list(member.list_approvals(action_type=f"edit.{tag}"))):
            assert time.monotonic() < give_up, "the request never appeared"
            time.sleep(0.1)
        return member.decide(
            found[0].id, "approve", arguments={"service": "billing", "replicas": 2}
        )

    human = in_thread(edit_and_approve)
    scale("billing", 30)
    join_ok(human)
    assert ran == [("billing", 2)]
    (request,) = admin.list_approvals(action_type=f"edit.{tag}")
    approval = admin.get_approval(request.id)
    assert approval.arguments_edited and approval.arguments == {"service": "billing", "replicas": 2}
    assert approval.receipt_uses == 1


def test_an_edit_outside_the_schema_is_refused(admin: SignoffClient, member: SignoffClient) -> None:
    created = admin.create_approval(
        "Scale billing", "Peak", "low", arguments={"service": "billing", "replicas": 3},
        arguments_schema=SCHEMA,
    )  # fmt: skip
    with pytest.raises(ValidationError) as refused:
        member.decide(created.id, "approve", arguments={"service": "billing", "replicas": "x"})
    assert refused.value.code == "VALIDATION_ERROR"
    assert admin.get_approval(created.id).status == "pending"
