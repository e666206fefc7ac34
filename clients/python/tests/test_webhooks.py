"""``verify_webhook`` on callbacks the live server really sent to a loopback receiver."""

from __future__ import annotations

import pytest

from conftest import LiveServer, Received, Receiver
from signoff_client import InvalidSignature, SignoffClient, verify_webhook


@pytest.fixture
def callback(
    admin: SignoffClient, member: SignoffClient, receiver: Receiver
) -> tuple[str, Received]:
    created = admin.create_approval(
        "Pay the invoice", "ACME, 1200 EUR", "high",
        callback_url=receiver.url, metadata={"invoice": 42},
    )  # fmt: skip
    decided = member.decide(created.id, "approve", "paid")
    assert decided.callback_delivered is True
    return created.id, receiver.next()


def test_a_genuine_callback_verifies(live: LiveServer, callback: tuple[str, Received]) -> None:
    request_id, received = callback
    payload = verify_webhook(received.body, received.headers, live.admin.webhook_secret)
    assert payload["event"] == "approval.decided"
    assert (payload["request_id"], payload["status"]) == (request_id, "approved")
    assert payload["comment"] == "paid" and payload["metadata"] == {"invoice": 42}
    assert payload["decided_by"]["email"] == "bob@acme.example"
    # Header names in any case, and the secret among others (a rotation in progress).
    lowered = {k.lower(): v for k, v in received.headers.items()}
    assert verify_webhook(received.body, lowered, ["whsec_b2xk", live.admin.webhook_secret])


def test_tampering_and_wrong_secrets_are_refused(
    live: LiveServer, callback: tuple[str, Received]
) -> None:
    _, received = callback
    body = received.body
    headers = received.headers
    tampered = body.replace(b'"approved"', b'"rejected"')
    assert tampered != body
    with pytest.raises(InvalidSignature):
        verify_webhook(tampered, headers, live.admin.webhook_secret)
    with pytest.raises(InvalidSignature):
        verify_webhook(body, headers, live.member.webhook_secret)  # another connection's
    forged_id = {**headers, "webhook-id": "msg_forged"}
    with pytest.raises(InvalidSignature):
        verify_webhook(body, forged_id, live.admin.webhook_secret)
    with pytest.raises(InvalidSignature, match="no signature"):
        verify_webhook(body, {"Content-Type": "application/json"}, live.admin.webhook_secret)


def test_the_timestamp_must_be_recent(live: LiveServer, callback: tuple[str, Received]) -> None:
    _, received = callback
    body = received.body
    headers = received.headers
    sent_at = int(headers["webhook-timestamp"])
    secret = live.admin.webhook_secret
    assert verify_webhook(body, headers, secret, now=sent_at + 299)
    with pytest.raises(InvalidSignature, match="tolerance"):
        verify_webhook(body, headers, secret, now=sent_at + 301)  # a replay, later
    with pytest.raises(InvalidSignature, match="tolerance"):
        verify_webhook(body, headers, secret, now=sent_at - 301)
    assert verify_webhook(body, headers, secret, now=sent_at + 3000, tolerance=3600)
    # Moving the timestamp to look fresh breaks the signature, which covers it.
    with pytest.raises(InvalidSignature, match="no webhook-signature"):
        verify_webhook(body, {**headers, "webhook-timestamp": str(sent_at + 1)}, secret)


def test_x_service_signature_alone(live: LiveServer, callback: tuple[str, Received]) -> None:
    _, received = callback
    body = received.body
    headers = {
        name: value
        for name, value in received.headers.items()
        if not name.lower().startswith("webhook-")
    }
    assert headers["X-Service-Signature"].startswith("sha256=")
    assert verify_webhook(body, headers, live.admin.webhook_secret)["status"] == "approved"
    with pytest.raises(InvalidSignature, match="X-Service-Signature"):
        verify_webhook(body + b" ", headers, live.admin.webhook_secret)


def test_a_rotated_secret_keeps_verifying(
    live: LiveServer, admin: SignoffClient, receiver: Receiver
) -> None:
    old_secret = live.admin.webhook_secret
    rotated = live.cli("connection", "rotate-secret", live.admin.connection_id, "--org",
                       live.org_id)  # fmt: skip
    live.admin.webhook_secret = rotated["webhook_secret"]
    created = admin.create_approval("After rotation", "d", "low", callback_url=receiver.url)
    admin.cancel(created.id)
    received = receiver.next()
    for secret in (rotated["webhook_secret"], old_secret):
        assert verify_webhook(received.body, received.headers, secret)["status"] == "cancelled"
        x_service_only = {
            k: v for k, v in received.headers.items() if not k.lower().startswith("webhook-")
        }
        assert verify_webhook(received.body, x_service_only, secret)["request_id"] == created.id
