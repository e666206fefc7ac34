"""Callback signing, checked against the ``standardwebhooks`` reference package."""

from __future__ import annotations

import base64
import hashlib
import hmac
import time

import pytest
from standardwebhooks import Webhook, WebhookVerificationError

from signoff.auth.secrets import generate_webhook_secret
from signoff.webhooks.service import RetrySchedule
from signoff.webhooks.signing import SigningKeys, service_signature, signed_headers

BODY = b'{"event":"approval.decided","request_id":"r1","status":"approved"}'


def test_service_signature_is_keyed_with_the_whole_secret_string() -> None:
    secret = "whsec_" + base64.b64encode(b"k" * 32).decode()
    expected = hmac.new(secret.encode("utf-8"), BODY, hashlib.sha256).hexdigest()
    assert service_signature(secret, BODY) == "sha256=" + expected
    assert expected == expected.lower() and len(expected) == 64


def test_standard_webhooks_headers_verify_with_the_reference_package() -> None:
    secret = generate_webhook_secret()
    headers = signed_headers(
        SigningKeys(secret), delivery_id="d-1", attempt=2, timestamp=int(time.time()), body=BODY
    )
    assert Webhook(secret).verify(BODY, headers) is not None
    assert headers["webhook-id"] == headers["X-Service-Delivery-Id"] == "d-1"
    assert headers["X-Service-Attempt"] == "2"
    assert headers["Content-Type"] == "application/json"
    with pytest.raises(WebhookVerificationError):
        Webhook(generate_webhook_secret()).verify(BODY, headers)
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(BODY.replace(b"approved", b"rejected"), headers)
    stale = signed_headers(
        SigningKeys(secret),
        delivery_id="d-1",
        attempt=1,
        timestamp=int(time.time()) - 600,
        body=BODY,
    )
    with pytest.raises(WebhookVerificationError):  # replays outside the tolerance fail
        Webhook(secret).verify(BODY, stale)


def test_a_rotation_signs_with_both_secrets() -> None:
    new, old = generate_webhook_secret(), generate_webhook_secret()
    headers = signed_headers(
        SigningKeys(new, old), delivery_id="d", attempt=1, timestamp=int(time.time()), body=BODY
    )
    Webhook(new).verify(BODY, headers)
    Webhook(old).verify(BODY, headers)
    assert headers["X-Service-Signature"] == service_signature(new, BODY)
    assert headers["X-Service-Signature-Previous"] == service_signature(old, BODY)


def test_our_headers_win_over_the_callers() -> None:
    secret = generate_webhook_secret()
    headers = signed_headers(
        SigningKeys(secret),
        delivery_id="d",
        attempt=1,
        timestamp=int(time.time()),
        body=BODY,
        extra={"X-Token": "t", "X-Service-Attempt": "99"},
    )
    assert headers["X-Token"] == "t"
    assert headers["X-Service-Attempt"] == "1"


def test_retry_schedule() -> None:
    schedule = RetrySchedule((1.0, 2.0, 4.0))
    assert schedule.max_attempts == 4
    assert [schedule.delay_after(n) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, None]
