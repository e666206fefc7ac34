"""Bodies and answers of ``/api/v1/oauth-clients``."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from signoff.common.time import format_timestamp
from signoff.models import OAuthClient


class CreateOAuthClient(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(
        description="Shown on the consent page.",
        json_schema_extra={"minLength": 1, "maxLength": 200, "pattern": r"\S"},
    )
    redirect_uris: list[str] = Field(
        description="Compared exactly; 1 to 10.", json_schema_extra={"minItems": 1, "maxItems": 10}
    )
    public: bool = Field(
        False,
        description="A client that cannot keep a secret (browser, mobile, CLI): no "
        "client_secret, PKCE required.",
    )
    connection_id: str | None = Field(
        None,
        description="The connection whose rate limit its calls count against; "
        "default: the caller's.",
    )


class OAuthClientOut(BaseModel):
    id: str
    client_id: str
    name: str
    connection_id: str
    redirect_uris: list[str]
    public: bool
    client_secret_prefix: str | None
    created_at: str
    deleted_at: str | None
    client_secret: str | None = Field(None, description="Only in the answer to create.")


class OAuthClientListOut(BaseModel):
    data: list[OAuthClientOut]


def client_to_dict(client: OAuthClient) -> dict[str, Any]:
    return {
        "id": str(client.id),
        "client_id": client.client_id,
        "name": client.name,
        "connection_id": str(client.connection_id),
        "redirect_uris": list(client.redirect_uris),
        "public": client.is_public,
        "client_secret_prefix": client.secret_prefix,
        "created_at": format_timestamp(client.created_at),
        "deleted_at": format_timestamp(client.deleted_at),
    }
