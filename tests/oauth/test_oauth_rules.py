"""OAuth rules without I/O: PKCE, scopes, token shapes, redirect URIs, authorize checks."""

from __future__ import annotations

from typing import Any

import pytest

from signoff.auth.principal import ALL_SCOPES
from signoff.config import Settings
from signoff.errors import ValidationFailed
from signoff.models import OAuthClient
from signoff.oauth import credentials
from signoff.oauth.errors import AuthorizeRedirectError
from signoff.oauth.service import check_authorization_request, check_redirect_uri, single_params

# RFC 7636 appendix B.
RFC_VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"
RFC_CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"


def test_s256_matches_the_rfc_7636_example() -> None:
    assert credentials.s256_challenge(RFC_VERIFIER) == RFC_CHALLENGE
    assert credentials.verify_code_verifier(RFC_VERIFIER, RFC_CHALLENGE)
    assert not credentials.verify_code_verifier(RFC_VERIFIER[:-1] + "A", RFC_CHALLENGE)
    # plain would compare the verifier itself; it never matches.
    assert not credentials.verify_code_verifier(RFC_CHALLENGE, RFC_CHALLENGE)


def test_verifiers_outside_rfc_7636_are_refused() -> None:
    for verifier in ("short", "x" * 129, "a" * 42 + "!"):
        assert not credentials.verify_code_verifier(verifier, credentials.s256_challenge(verifier))


def test_scopes() -> None:
    assert credentials.parse_scope(None) == ALL_SCOPES
    assert credentials.parse_scope("  ") == ALL_SCOPES
    assert credentials.parse_scope("comments:write approvals:read approvals:read") == (
        "approvals:read",
        "comments:write",
    )
    assert credentials.parse_scope("approvals:read admin") is None


def test_issued_values_have_their_prefixes_and_entropy() -> None:
    access = credentials.generate_access_token()
    assert credentials.looks_like_access_token(access)
    assert not credentials.looks_like_access_token(credentials.generate_refresh_token())
    assert not credentials.looks_like_access_token("gk_" + "0" * 64)
    assert credentials.generate_client_secret().startswith("cs_")
    assert credentials.generate_client_id().startswith("oc_")
    assert len({credentials.generate_code() for _ in range(50)}) == 50
    assert credentials.hash_token(access) != access and len(credentials.hash_token(access)) == 64


@pytest.mark.parametrize(
    ("uri", "development", "production"),
    [
        ("https://zap.example/cb", True, True),
        ("https://zap.example/cb?tenant=1", True, True),
        ("http://127.0.0.1:8123/cb", True, True),
        ("http://localhost/cb", True, True),
        ("http://zap.example/cb", True, False),
        ("com.example.app:/oauth", True, True),
        ("https://zap.example/cb#x", False, False),
        ("javascript:alert(1)", False, False),
        ("data:text/html,hi", False, False),
        ("/relative/cb", False, False),
        ("https:///no-host", False, False),
        ("", False, False),
    ],
)
def test_redirect_uris_that_may_be_registered(
    uri: str, development: bool, production: bool
) -> None:
    for env, allowed in (("development", development), ("production", production)):
        settings = Settings(env=env, secret_key="k" * 32)  # type: ignore[arg-type]
        if allowed:
            assert check_redirect_uri(uri, settings) == uri
        else:
            with pytest.raises(ValidationFailed):
                check_redirect_uri(uri, settings)


def _client(public: bool) -> OAuthClient:
    return OAuthClient(
        client_id="oc_x", name="X", redirect_uris=["https://x.example/cb"], is_public=public
    )


def _check(public: bool, **params: str) -> Any:
    values, repeated = single_params([("response_type", "code"), *params.items()])
    return check_authorization_request(
        _client(public), "https://x.example/cb", True, values, repeated
    )


def test_pkce_rules_at_the_authorization_endpoint() -> None:
    assert _check(False).code_challenge is None
    assert _check(True, code_challenge=RFC_CHALLENGE, code_challenge_method="S256").code_challenge
    refusals: list[tuple[bool, dict[str, str]]] = [
        (True, {}),
        (True, {"code_challenge": RFC_CHALLENGE}),
        (False, {"code_challenge": RFC_CHALLENGE, "code_challenge_method": "plain"}),
        (False, {"code_challenge": "tooshort", "code_challenge_method": "S256"}),
        (False, {"code_challenge_method": "S256"}),
    ]
    for public, params in refusals:
        with pytest.raises(AuthorizeRedirectError) as caught:
            _check(public, **params)
        assert caught.value.error == "invalid_request", params


def test_repeated_parameters_are_refused() -> None:
    values, repeated = single_params([("response_type", "code"), ("scope", "a"), ("scope", "b")])
    with pytest.raises(AuthorizeRedirectError):
        check_authorization_request(_client(False), "https://x.example/cb", True, values, repeated)
