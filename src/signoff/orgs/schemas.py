"""What the API and the CLI show of a connection, and the body of a transfer."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from signoff.common.time import format_timestamp
from signoff.models import Connection


class TransferConnectionIn(BaseModel):
    model_config = ConfigDict(extra="ignore")

    owner_id: str = Field(
        min_length=1,
        max_length=320,
        description="The id (or e-mail) of an active user of the organization: the "
        "connection's API key acts as them from the next call on.",
    )


class ConnectionOut(BaseModel):
    id: str
    org_id: str
    owner_id: str = Field(description="The user its API key acts as.")
    name: str
    rate_limit: int = Field(description="Calls per hour.")
    api_key_prefix: str = Field(description="The key's first characters, to recognise it.")
    created_at: str
    revoked_at: str | None


def connection_to_dict(connection: Connection) -> dict[str, Any]:
    """A connection, never its secrets."""
    return {
        "id": str(connection.id),
        "org_id": str(connection.org_id),
        "owner_id": str(connection.owner_id),
        "name": connection.name,
        "rate_limit": connection.rate_limit_per_hour,
        "api_key_prefix": connection.api_key_prefix,
        "created_at": format_timestamp(connection.created_at),
        "revoked_at": format_timestamp(connection.revoked_at),
    }
