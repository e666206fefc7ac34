"""``verify_receipt`` offline: real Ed25519 receipts, and every way to get one wrong."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from datetime import UTC, datetime
from typing import Any

import pytest
import rfc8785
from joserfc.jwk import KeySet

from signer import NOW, claims, new_key, public_jwks, segment, sign
from signoff_client import (
    ArgumentsMismatch,
    InvalidReceipt,
    Receipt,
    ReceiptExpired,
    UnknownReceiptKey,
    arguments_hash,
    verify_receipt,
)

KEY = new_key("k1")
JWKS = public_jwks(KEY, new_key("k0"))
ARGUMENTS = {"path": "/srv/old"}


def verify(token: str, **options: Any) -> Receipt:
    return verify_receipt(token, jwks=options.pop("jwks", JWKS), now=NOW + 60, **options)


# ---- the hash rule ----


def test_the_hash_of_no_arguments_is_that_of_an_empty_object() -> None:
    # SHA-256 of the two bytes "{}", base64url without padding.
    assert arguments_hash({}) == "sha-256:RBNvo1WzZ4oRRq0W9-hknpT7T8If536DEMBg9hyq_4o"
    assert arguments_hash(None) == arguments_hash({})


def test_the_hash_is_of_the_rfc_8785_canonical_form() -> None:
    arguments = {"z": [True, None, "é"], "a": 1.0, "m": {"y": 2, "b": "x"}}
    canonical = '{"a":1,"m":{"b":"x","y":2},"z":[true,null,"é"]}'.encode()
    assert rfc8785.dumps(arguments) == canonical
    digest = base64.urlsafe_b64encode(hashlib.sha256(canonical).digest()).rstrip(b"=")
    assert arguments_hash(arguments) == "sha-256:" + digest.decode()
    # Key order and number spelling do not change what was approved.
    assert arguments_hash({"m": {"b": "x", "y": 2.0}, "z": [True, None, "é"], "a": 1}) == (
        arguments_hash(arguments)
    )
    assert arguments_hash({"a": 2}) != arguments_hash({"a": 1})


def test_what_json_cannot_carry_exactly_has_no_hash() -> None:
    with pytest.raises(ValueError):
        arguments_hash({"x": float("nan")})
    with pytest.raises(ValueError):
        arguments_hash({"x": 2**60})


# ---- a good receipt ----


def test_a_genuine_receipt_gives_its_claims() -> None:
    receipt = verify(sign(KEY), arguments=ARGUMENTS, action_type="files.delete")
    assert (receipt.request_id, receipt.jti, receipt.org) == ("req-1", "jti-1", "org-1")
    assert (receipt.kid, receipt.alg, receipt.max_uses) == ("k1", "Ed25519", 1)
    assert receipt.decided_by == ("user-1",)
    assert receipt.arguments_hash == arguments_hash(ARGUMENTS)
    assert receipt.preview_hash is None
    assert receipt.authorization_details[0]["type"] == "signoff_action"
    assert receipt.expires_at == datetime.fromtimestamp(NOW + 900, UTC)


def test_the_key_set_may_be_a_joserfc_key_set_and_the_old_alg_name_is_accepted() -> None:
    keys = KeySet.import_key_set(JWKS)
    assert verify(sign(KEY, alg="EdDSA"), jwks=keys).alg == "EdDSA"
    assert verify(sign(KEY, claims(preview_hash="sha-256:abc"))).preview_hash == "sha-256:abc"


# ---- every rejection ----


def test_a_tampered_payload_is_refused() -> None:
    header, _, signature = sign(KEY).split(".")
    forged = segment(claims(max_uses=1000))
    with pytest.raises(InvalidReceipt, match="signature"):
        verify(f"{header}.{forged}.{signature}")


@pytest.mark.parametrize("cut", [1, 20, 200])
def test_a_truncated_receipt_is_refused(cut: int) -> None:
    token = sign(KEY)
    with pytest.raises(InvalidReceipt):
        verify(token[:-cut])
    with pytest.raises(InvalidReceipt, match="compact JWS"):
        verify(token.rsplit(".", 1)[0])
    with pytest.raises(InvalidReceipt, match="compact JWS"):
        verify("not a token")


def test_an_expired_receipt_raises_receipt_expired() -> None:
    token = sign(KEY)
    with pytest.raises(ReceiptExpired):
        verify_receipt(token, jwks=JWKS, now=NOW + 900 + 60)
    with pytest.raises(ReceiptExpired):
        verify_receipt(token, jwks=JWKS, now=datetime.fromtimestamp(NOW + 3600, UTC))
    # A few seconds of clock skew are tolerated, and no more than asked.
    assert verify_receipt(token, jwks=JWKS, now=NOW + 902).jti == "jti-1"
    with pytest.raises(ReceiptExpired):
        verify_receipt(token, jwks=JWKS, now=NOW + 902, leeway=0)


def test_a_receipt_not_valid_yet_is_refused() -> None:
    token = sign(KEY, claims(nbf=NOW + 300))
    with pytest.raises(InvalidReceipt, match="not valid before") as caught:
        verify_receipt(token, jwks=JWKS, now=NOW)
    assert not isinstance(caught.value, ReceiptExpired)


def test_alg_none_is_refused() -> None:
    header = segment({"alg": "none", "typ": "signoff-receipt+jwt", "kid": "k1"})
    with pytest.raises(InvalidReceipt, match="'none' is not accepted"):
        verify(f"{header}.{segment(claims())}.")


@pytest.mark.parametrize("alg", ["HS256", "HS512"])
def test_hmac_with_the_public_key_as_secret_is_refused(alg: str) -> None:
    public = JWKS["keys"][0]
    raw = base64.urlsafe_b64decode(public["x"] + "==")
    for secret in (raw, public["x"].encode(), json.dumps(public).encode()):
        signing_input = f"{segment({'alg': alg, 'typ': 'signoff-receipt+jwt', 'kid': 'k1'})}"
        signing_input += f".{segment(claims())}"
        digest = hashlib.sha256 if alg == "HS256" else hashlib.sha512
        mac = hmac.new(secret, signing_input.encode(), digest).digest()
        token = f"{signing_input}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}"
        with pytest.raises(InvalidReceipt, match="not accepted"):
            verify(token)


@pytest.mark.parametrize("typ", ["JWT", "at+jwt", None])
def test_another_token_type_is_refused(typ: str | None) -> None:
    with pytest.raises(InvalidReceipt, match="typ"):
        verify(sign(KEY, typ=typ))


def test_an_unknown_key_is_refused() -> None:
    with pytest.raises(UnknownReceiptKey):
        verify(sign(new_key("k9")))
    # Another key under a listed kid: the signature gives it away.
    with pytest.raises(InvalidReceipt, match="signature does not match"):
        verify(sign(new_key("k1")))
    with pytest.raises(InvalidReceipt, match="names no key"):
        verify(sign(KEY, kid=None))


def test_other_arguments_raise_arguments_mismatch() -> None:
    token = sign(KEY)
    with pytest.raises(ArgumentsMismatch):
        verify(token, arguments={"path": "/"})
    with pytest.raises(ArgumentsMismatch):
        verify(token, arguments={})
    assert verify(token, arguments={"path": "/srv/old"}).sub == "req-1"


def test_another_action_type_is_refused() -> None:
    with pytest.raises(InvalidReceipt, match="action type"):
        verify(sign(KEY), action_type="files.read")


def test_the_checks_run_in_order() -> None:
    # Expired and for other arguments: the period is checked first.
    with pytest.raises(ReceiptExpired):
        verify_receipt(sign(KEY), jwks=JWKS, arguments={"path": "/"}, now=NOW + 7200)
    # A bad type is reported before an unknown key.
    with pytest.raises(InvalidReceipt, match="typ"):
        verify(sign(new_key("k9"), typ="JWT"))


@pytest.mark.parametrize(
    "broken",
    [{"sub": None}, {"exp": "tomorrow"}, {"iat": True}, {"max_uses": "1"}, {"decided_by": "x"}],
)
def test_malformed_claims_are_refused(broken: dict[str, Any]) -> None:
    with pytest.raises(InvalidReceipt):
        verify(sign(KEY, claims(**broken)))


def test_a_bad_key_set_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="JSON Web Key Set"):
        verify_receipt(sign(KEY), jwks={"keys": []})
