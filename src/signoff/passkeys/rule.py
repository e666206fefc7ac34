"""Which decisions need a passkey, and the proof that one signed it.

Pure and free of WebAuthn: the approvals service asks it before any decision, whoever
makes it, so no way of deciding (API key, OAuth token, mail link, Slack, dashboard)
goes around it.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

PasskeyFor = Literal["off", "critical", "all"]
PASSKEY_FOR_VALUES: tuple[str, ...] = ("off", "critical", "all")


def passkey_may_be_needed(passkey_for: str, policy_version: int = 0) -> bool:
    """False when no request of the org needs a passkey: nothing more to read. An org
    with a policy may have a rule that asks for one (``passkey: true``)."""
    return passkey_for in ("critical", "all") or policy_version > 0


def passkey_needed(passkey_for: str, priority: str, by_policy: bool = False) -> bool:
    """Whether a decision on a request of this priority must be signed by a passkey;
    ``by_policy``: a policy rule asked so when the request was created."""
    if passkey_for == "all" or by_policy:
        return True
    return passkey_for == "critical" and priority == "critical"


@dataclass(frozen=True)
class PasskeyProof:
    """A verified assertion over (request, decision, arguments hash, nonce) made by
    ``user_id``'s passkey in this transaction (``passkeys.service.verify_decision``)."""

    request_id: uuid.UUID
    user_id: uuid.UUID
    decision: str

    def covers(self, request_id: uuid.UUID, user_id: uuid.UUID, decision: str) -> bool:
        return (
            self.request_id == request_id and self.user_id == user_id and self.decision == decision
        )
