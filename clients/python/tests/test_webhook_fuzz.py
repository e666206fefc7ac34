"""``verify_webhook`` on hostile input: whatever the headers, body and timestamp, the only
exception it raises is the documented ``InvalidSignature`` (no ``TypeError`` from a
non-ASCII signature, no ``OverflowError`` from a huge timestamp, no ``RecursionError``
from a deeply nested body)."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from signoff_client import InvalidSignature, verify_webhook

SECRET = "whsec_" + base64.b64encode(b"0123456789abcdef0123456789abcdef").decode()
NOW = 1_790_000_000


def standard_headers(body: bytes, *, message_id: str = "msg_1", stamp: int = NOW) -> dict[str, str]:
    key = base64.b64decode(SECRET.removeprefix("whsec_"))
    signed = f"{message_id}.{stamp}.".encode() + body
    signature = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": f"v1,{signature}",
    }


def service_headers(body: bytes) -> dict[str, str]:
    digest = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    return {"X-Service-Signature": f"sha256={digest}"}


def verify(body: bytes, headers: dict[str, str]) -> None:
    verify_webhook(body, headers, SECRET, now=NOW)


@pytest.mark.parametrize(
    "headers",
    [
        {"webhook-id": "m", "webhook-timestamp": str(NOW), "webhook-signature": "v1,é"},
        {"webhook-id": "m", "webhook-timestamp": str(NOW), "webhook-signature": "v1,\udcff"},
        {"X-Service-Signature": "sha256=é"},
        {"X-Service-Signature": "sha256=\u2028"},
        {"webhook-id": "m", "webhook-timestamp": "9" * 400, "webhook-signature": "v1,a"},
        {"webhook-id": "m", "webhook-timestamp": "9" * 5000, "webhook-signature": "v1,a"},
        {"webhook-id": "m", "webhook-timestamp": "١٧٩٠٠٠٠٠٠٠", "webhook-signature": "v1,a"},
        {"webhook-id": "m", "webhook-timestamp": f" {NOW} ", "webhook-signature": "v1,a"},
        {"webhook-id": "m", "webhook-timestamp": "-1", "webhook-signature": "v1,a"},
        {"webhook-id": "\udcff", "webhook-timestamp": str(NOW), "webhook-signature": "v1,a"},
    ],
    ids=[
        "non-ascii standard signature",
        "lone surrogate signature",
        "non-ascii service signature",
        "line separator service signature",
        "timestamp past a float",
        "timestamp past int's digit limit",
        "arabic-indic digits",
        "padded timestamp",
        "negative timestamp",
        "surrogate message id",
    ],
)
def test_malformed_headers_raise_invalid_signature(headers: dict[str, str]) -> None:
    with pytest.raises(InvalidSignature):
        verify(b'{"event": "approval.decided"}', headers)


@pytest.mark.parametrize(
    "body",
    [b"[" * 100_000, b'{"a":' * 50_000, b"\xff\xfe\x00", b"1" * 5000, b"[]", b""],
    ids=["deep array", "deep object", "not utf-8", "huge number", "array", "empty"],
)
@pytest.mark.parametrize("sign", [standard_headers, service_headers], ids=["standard", "service"])
def test_a_correctly_signed_body_that_is_no_object_raises_invalid_signature(
    body: bytes, sign: object
) -> None:
    assert callable(sign)
    with pytest.raises(InvalidSignature):
        verify(body, sign(body))


def test_a_genuine_signature_still_verifies_after_the_hardening() -> None:
    body = json.dumps({"event": "approval.decided", "title": "Ünïcode ✓"}).encode()
    assert verify_webhook(body, standard_headers(body), SECRET, now=NOW)["title"] == "Ünïcode ✓"
    assert verify_webhook(body, service_headers(body), SECRET)["event"] == "approval.decided"


header_names = st.sampled_from(
    [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "X-Service-Signature",
        "x-service-signature-previous",
        "Content-Type",
    ]
)
header_values = st.one_of(
    st.text(),
    st.text(alphabet=st.characters(codec="utf-8")).map(lambda v: "v1," + v),
    st.text().map(lambda v: "sha256=" + v),
    st.integers().map(str),
    st.floats(allow_nan=True).map(str),
)


@settings(max_examples=400, deadline=None)
@given(
    body=st.one_of(st.binary(), st.text().map(str.encode), st.just(b'{"event": "x"}')),
    headers=st.dictionaries(header_names, header_values, max_size=6),
    secret=st.one_of(st.just(SECRET), st.text(), st.lists(st.text(), min_size=1, max_size=3)),
    tolerance=st.floats(allow_nan=True, allow_infinity=True),
    now=st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers()),
)
def test_fuzzed_input_raises_only_invalid_signature(
    body: bytes,
    headers: dict[str, str],
    secret: str | list[str],
    tolerance: float,
    now: float | None,
) -> None:
    try:
        verify_webhook(body, headers, secret, tolerance=tolerance, now=now)
    except InvalidSignature:
        pass


@settings(max_examples=300, deadline=None)
@given(
    body=st.binary(max_size=200),
    message_id=st.text(max_size=40),
    stamp_offset=st.integers(min_value=-(10**30), max_value=10**30),
    mangle=st.sampled_from(["none", "body", "signature", "append"]),
)
def test_fuzzed_signed_callbacks_verify_or_raise_invalid_signature(
    body: bytes, message_id: str, stamp_offset: int, mangle: str
) -> None:
    stamp = max(NOW + stamp_offset, 0)
    try:
        headers = standard_headers(body, message_id=message_id, stamp=stamp)
    except UnicodeEncodeError:
        return  # a message id no sender could have signed
    if mangle == "body":
        body += b" "
    elif mangle == "signature":
        headers["webhook-signature"] = headers["webhook-signature"][:-2] + "é="
    elif mangle == "append":
        headers["webhook-signature"] += " v1,\u00ff"
    try:
        verify(body, headers)
    except InvalidSignature:
        pass
