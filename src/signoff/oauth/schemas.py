"""Bodies and answers of ``/api/v1/oauth-clients``."""

from __future__ import annotations

from typing import Any, Literal

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
        default_factory=list,
        description="Compared exactly; 1 to 10 (0 to 10 for a CIBA client).",
        json_schema_extra={"maxItems": 10},
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
    ciba: bool = Field(
        False,
        description="May use OpenID CIBA (`/oauth/bc-authorize`, docs/ciba.md); "
        "confidential clients only.",
    )
    backchannel_token_delivery_mode: Literal["poll", "ping"] | None = Field(
        None, description="CIBA only: how the client learns of the decision; default poll."
    )
    backchannel_client_notification_endpoint: str | None = Field(
        None,
        description="CIBA ping mode only: where the ping is POSTed; checked as callback URLs "
        "are (https and public addresses only in production).",
    )


class OAuthClientOut(BaseModel):
    id: str
    client_id: str
    name: str
    connection_id: str
    redirect_uris: list[str]
    public: bool
    client_secret_prefix: str | None
    ciba: bool
    backchannel_token_delivery_mode: str | None
    backchannel_client_notification_endpoint: str | None
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
        "ciba": client.ciba_enabled,
        "backchannel_token_delivery_mode": client.ciba_delivery_mode,
        "backchannel_client_notification_endpoint": client.ciba_notification_endpoint,
        "created_at": format_timestamp(client.created_at),
        "deleted_at": format_timestamp(client.deleted_at),
    }
