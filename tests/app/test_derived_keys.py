"""Keys derived from the secret key: one per purpose, the same on every replica, never the
secret key itself."""

from __future__ import annotations

from signoff.crypto import derived_key, generate_secret_key, master_key
from tests.conftest import make_settings


def test_a_derived_key_is_the_same_for_one_secret_and_differs_by_purpose() -> None:
    settings = make_settings("sqlite+aiosqlite://", secret_key=generate_secret_key())
    replica = make_settings("sqlite+aiosqlite://", secret_key=settings.secret_key)
    key = derived_key(settings, "mcp/request-state")
    assert len(key) == 32
    assert key == derived_key(replica, "mcp/request-state")
    assert key not in (derived_key(settings, "something-else"), master_key(settings))
    other = make_settings("sqlite+aiosqlite://", secret_key=generate_secret_key())
    assert derived_key(other, "mcp/request-state") != key
