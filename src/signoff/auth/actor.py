"""Who acts on a request: what the state machine (``approvals/state.py``) needs to know of
a caller, whether an API key, an OAuth token or a signed-in person."""

from __future__ import annotations

import uuid
from dataclasses import dataclass


@dataclass(frozen=True)
class Actor:
    user_id: uuid.UUID
    is_admin: bool = False
    # The connection whose API key acts (None for OAuth tokens and signed-in people):
    # the creating connection may configure its request's steps.
    connection_id: uuid.UUID | None = None
    # That connection's owner is deactivated: it acts for the integration only, with no
    # person's authority (auth/authority.py): it may cancel its own requests, not decide.
    owner_deactivated: bool = False
    # The people this one stands in for now (out of office: orgs/delegation.py): they
    # may vote the steps assigned to them.
    stands_in_for: frozenset[uuid.UUID] = frozenset()
