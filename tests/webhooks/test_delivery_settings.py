"""Delivery settings as operators write them in the environment."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from signoff.config import Settings


def test_lists_accept_commas_or_json(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SIGNOFF_DELIVERY_RETRY_DELAYS_SECONDS", "0.5, 1,2")
    monkeypatch.setenv("SIGNOFF_CALLBACK_ALLOWED_CIDRS", '["10.1.0.0/16", "fd00::/8"]')
    settings = Settings()
    assert settings.delivery_retry_delays_seconds == [0.5, 1.0, 2.0]
    assert settings.callback_allowed_cidrs == ["10.1.0.0/16", "fd00::/8"]


def test_defaults_follow_the_interface() -> None:
    settings = Settings()
    assert settings.delivery_timeout_seconds == 10.0
    assert settings.delivery_retry_delays_seconds == [1.0, 2.0, 4.0]


@pytest.mark.parametrize(
    "values",
    [
        {"delivery_timeout_seconds": 10, "delivery_lease_seconds": 10},  # lease must outlast
        {"callback_allowed_cidrs": ["10.0.0.0/33"]},
        {"delivery_retry_delays_seconds": [1, -1]},
    ],
)
def test_bad_values_are_refused(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(**values)  # type: ignore[arg-type]
