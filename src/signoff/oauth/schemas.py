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


class OAuthErrorOut(BaseModel):
    """RFC 6749 section 5.2 and OpenID CIBA core section 13: not the API envelope."""

    error: str
    error_description: str


class BackchannelAuthorizationOut(BaseModel):
    auth_req_id: str = Field(description="The approval request's id; poll /oauth/token with it.")
    expires_in: int = Field(description="Seconds until the request expires.")
    interval: int = Field(description="Least seconds between two polls (slow_down if sooner).")


def _oauth_errors(errors: str) -> dict[str, Any]:
    return {
        "model": OAuthErrorOut,
        "description": f"`error`: {errors}.",
        "headers": {"Cache-Control": {"schema": {"type": "string", "enum": ["no-store"]}}},
    }


BACKCHANNEL_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": BackchannelAuthorizationOut, "description": "The request was created."},
    400: _oauth_errors(
        "`invalid_request`, `invalid_scope`, `unknown_user_id`, `unauthorized_client`, "
        "`invalid_binding_message`, `invalid_authorization_details`",
    ),
    401: _oauth_errors("`invalid_client`"),
    403: _oauth_errors("`access_denied` (the user is deactivated)"),
}

BACKCHANNEL_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {
                    "type": "object",
                    "required": ["scope", "login_hint", "binding_message"],
                    "properties": {
                        "scope": {"type": "string", "example": "openid approvals:read"},
                        "login_hint": {"type": "string", "format": "email"},
                        "binding_message": {"type": "string", "maxLength": 100},
                        "requested_expiry": {"type": "integer", "minimum": 1},
                        "authorization_details": {
                            "type": "string",
                            "description": "RFC 9396: a JSON array of objects with a type.",
                        },
                        "client_notification_token": {
                            "type": "string",
                            "description": "Ping mode: required.",
                        },
                        "client_id": {"type": "string"},
                        "client_secret": {"type": "string"},
                    },
                }
            }
        },
    }
}


class TokenOut(BaseModel):
    """RFC 6749 section 5.1, plus who the token acts as; a CIBA grant's answer adds the
    approved ``authorization_details`` and the approval's ``receipt``."""

    access_token: str
    token_type: str = Field(description="Always `Bearer`.")
    expires_in: int
    refresh_token: str
    scope: str
    org_name: str
    user_email: str
    authorization_details: list[dict[str, Any]] | None = Field(
        None, description="CIBA: the arguments as approved (after any edit), RFC 9396."
    )
    receipt: str | None = Field(
        None, description="CIBA: the approval's signed receipt (docs/receipts.md)."
    )


TOKEN_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"model": TokenOut, "description": "Tokens issued."},
    400: _oauth_errors(
        "`invalid_request`, `unsupported_grant_type`, `invalid_grant`, `invalid_scope`, "
        "`unauthorized_client`; CIBA: `authorization_pending`, `slow_down`, `expired_token`, "
        "`access_denied`"
    ),
    401: _oauth_errors("`invalid_client`"),
}

TOKEN_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            "application/x-www-form-urlencoded": {
                "schema": {
                    "type": "object",
                    "required": ["grant_type"],
                    "properties": {
                        "grant_type": {
                            "type": "string",
                            "enum": [
                                "authorization_code",
                                "refresh_token",
                                "urn:openid:params:grant-type:ciba",
                            ],
                        },
                        "code": {"type": "string"},
                        "redirect_uri": {"type": "string"},
                        "code_verifier": {"type": "string"},
                        "refresh_token": {"type": "string"},
                        "scope": {"type": "string"},
                        "auth_req_id": {"type": "string", "description": "CIBA."},
                        "client_id": {"type": "string"},
                        "client_secret": {"type": "string"},
                    },
                }
            }
        },
    }
}
