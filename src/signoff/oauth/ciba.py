"""OpenID CIBA (Client-Initiated Backchannel Authentication, poll and ping modes). Never commits.

A backchannel authentication request is an approval request: created by the approvals
service (``create_request``, then a one-step chain for the person named by ``login_hint``),
decided on its page like any other, its ping sent by the decision callback's outbox (signed,
retried, SSRF-checked). Its ``auth_req_id`` is the approval request's id; the row in
``oauth_backchannel_requests`` says which client may poll it, with which scopes, and when
it may poll next.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

import orjson

from signoff.approvals import service as approvals
from signoff.approvals.schemas import CreateApprovalRequest
from signoff.approvals.state import StepSpec
from signoff.common.ids import parse_id
from signoff.common.validation import validate_model
from signoff.config import Settings
from signoff.crypto import SecretBox
from signoff.errors import ValidationFailed
from signoff.models import OAuthBackchannelRequest, OAuthClient, User
from signoff.oauth import credentials
from signoff.oauth.errors import OAuthError, invalid_client, invalid_grant, invalid_request
from signoff.oauth.repository import BackchannelPoll
from signoff.oauth.service import (
    NO_CIBA,
    CibaRegistration,
    ClientFacts,
    IssuedTokens,
    issue_tokens,
)
from signoff.receipts import service as receipts
from signoff.receipts.keys import KeyRing
from signoff.unit_of_work import UnitOfWork
from signoff.webhooks.service import CIBA_SOURCE, check_callback_url
from signoff.webhooks.urlpolicy import AddressPolicy

GRANT_TYPE = "urn:openid:params:grant-type:ciba"
DELIVERY_MODES = ("poll", "ping")
NOTIFICATION_ENDPOINT_FIELD = "backchannel_client_notification_endpoint"
MAX_BINDING_MESSAGE_LENGTH = 100
MAX_NOTIFICATION_TOKEN_LENGTH = 1024
MAX_AUTHORIZATION_DETAILS = 20
# Shown to the person and put into a header: printable characters only, no line breaks.
BINDING_MESSAGE_PATTERN = re.compile(r"[^\x00-\x1f\x7f]+")
NOTIFICATION_TOKEN_PATTERN = re.compile(r"[\x21-\x7e]+")
# The hints CIBA defines that signoff does not take: only login_hint (an e-mail).
UNSUPPORTED_HINTS = ("login_hint_token", "id_token_hint", "user_code")


# ---- client registration ----


async def check_registration(
    policy: AddressPolicy, enabled: bool, mode: str | None, endpoint: str | None
) -> CibaRegistration:
    """What a client registers for CIBA; a ping endpoint is checked as callback URLs are."""
    if not enabled:
        if mode is not None or endpoint is not None:
            raise ValidationFailed.for_field("ciba", "set ciba to true to register a delivery mode")
        return NO_CIBA
    mode = mode or "poll"
    if mode not in DELIVERY_MODES:
        raise ValidationFailed.for_field("backchannel_token_delivery_mode", "must be poll or ping")
    if mode == "poll":
        if endpoint is not None:
            raise ValidationFailed.for_field(
                NOTIFICATION_ENDPOINT_FIELD, "only ping mode has a notification endpoint"
            )
        return CibaRegistration(True, "poll", None)
    if not endpoint:
        raise ValidationFailed.for_field(NOTIFICATION_ENDPOINT_FIELD, "ping mode requires it")
    await check_callback_url(policy, endpoint, NOTIFICATION_ENDPOINT_FIELD)
    return CibaRegistration(True, "ping", endpoint)


# ---- the backchannel authentication endpoint ----


@dataclass(frozen=True)
class BackchannelAuthorization:
    auth_req_id: str
    expires_in: int
    interval: int

    def to_body(self) -> dict[str, Any]:
        return {
            "auth_req_id": self.auth_req_id,
            "expires_in": self.expires_in,
            "interval": self.interval,
        }


@dataclass(frozen=True)
class _Checked:
    """A backchannel authentication request's parameters, checked."""

    scopes: tuple[str, ...]
    login_hint: str
    binding_message: str
    expires_in: int
    authorization_details: list[dict[str, Any]] | None
    notification_token: str | None


def check_client(client: ClientFacts) -> None:
    if client.is_public or not client.ciba_enabled:
        raise OAuthError(
            "unauthorized_client", "This client is not registered to use CIBA (confidential only)."
        )


def check_params(client: OAuthClient, params: Mapping[str, str], settings: Settings) -> _Checked:
    """Every refusal that needs no database, in the order CIBA core section 13 lists them."""
    given = [name for name in UNSUPPORTED_HINTS if name in params]
    if given:
        raise invalid_request(f"Only login_hint is supported, not {', '.join(given)}.")
    if "scope" not in params:
        raise invalid_request("Send scope.")
    scopes = _scopes(params["scope"])
    login_hint = params.get("login_hint", "").strip().lower()
    if not login_hint:
        raise invalid_request("Send login_hint: the e-mail of the person who decides.")
    return _Checked(
        scopes=scopes,
        login_hint=login_hint,
        binding_message=_binding_message(params.get("binding_message")),
        expires_in=_expiry(params.get("requested_expiry"), settings),
        authorization_details=_authorization_details(params.get("authorization_details")),
        notification_token=_notification_token(client, params.get("client_notification_token")),
    )


def _scopes(value: str) -> tuple[str, ...]:
    # "openid" is what every CIBA request carries; the rest are signoff's scopes.
    requested = " ".join(s for s in value.split() if s != "openid")
    scopes = credentials.parse_scope(requested)
    if scopes is None:
        raise OAuthError("invalid_scope", "Unknown scope; known: openid and signoff's scopes.")
    return scopes


def _binding_message(value: str | None) -> str:
    """Required: it is what the person sees and compares with the agent's own screen."""
    if value is None or not value.strip():
        raise OAuthError("invalid_binding_message", "Send binding_message: it is required.")
    value = value.strip()
    if len(value) > MAX_BINDING_MESSAGE_LENGTH or not BINDING_MESSAGE_PATTERN.fullmatch(value):
        raise OAuthError(
            "invalid_binding_message",
            f"binding_message must be 1 to {MAX_BINDING_MESSAGE_LENGTH} printable characters.",
        )
    return value


def _expiry(value: str | None, settings: Settings) -> int:
    if value is None:
        return settings.ciba_default_expiry_seconds
    if not value.isdigit() or not 1 <= int(value) <= settings.ciba_max_expiry_seconds:
        raise invalid_request(
            f"requested_expiry must be 1 to {settings.ciba_max_expiry_seconds} seconds."
        )
    return int(value)


def _authorization_details(value: str | None) -> list[dict[str, Any]] | None:
    """RFC 9396: a JSON array of objects, each with a string ``type``."""
    if value is None:
        return None
    try:
        details = orjson.loads(value)
    except orjson.JSONDecodeError:
        raise _bad_details("authorization_details is not valid JSON.") from None
    if not isinstance(details, list) or not 1 <= len(details) <= MAX_AUTHORIZATION_DETAILS:
        raise _bad_details(
            "authorization_details must be a JSON array of 1 to "
            f"{MAX_AUTHORIZATION_DETAILS} objects."
        )
    for index, item in enumerate(details):
        if not isinstance(item, dict) or not isinstance(item.get("type"), str) or not item["type"]:
            raise _bad_details(f"authorization_details[{index}] must be an object with a type.")
    return details


def _bad_details(description: str) -> OAuthError:
    return OAuthError("invalid_authorization_details", description)


def _notification_token(client: OAuthClient, value: str | None) -> str | None:
    if client.ciba_delivery_mode != "ping":
        return None
    if not value:
        raise invalid_request("Ping mode requires client_notification_token.")
    if len(value) > MAX_NOTIFICATION_TOKEN_LENGTH or not NOTIFICATION_TOKEN_PATTERN.fullmatch(
        value
    ):
        raise invalid_request(
            f"client_notification_token must be 1 to {MAX_NOTIFICATION_TOKEN_LENGTH} "
            "printable characters without spaces."
        )
    return value


async def find_person(uow: UnitOfWork, client: OAuthClient, login_hint: str) -> User:
    user = await uow.orgs.find_user_by_email(client.org_id, login_hint)
    if user is None:
        raise OAuthError(
            "unknown_user_id", "No user with this e-mail in the client's organization."
        )
    if not user.is_active:
        raise OAuthError("access_denied", "This user has been deactivated.", 403)
    return user


async def authorize(
    uow: UnitOfWork,
    client: OAuthClient,
    checked: _Checked,
    user: User,
    box: SecretBox,
    settings: Settings,
    now: datetime,
) -> BackchannelAuthorization:
    """Create the approval request, assign it to ``user``, and remember who may poll it."""
    principal = await uow.oauth.principal_of_connection(client.connection_id)
    if principal is None:
        raise invalid_client("The client's connection is revoked.")
    payload = _payload(client, checked, user, settings, now)
    created = await approvals.create_request(uow, principal, payload, box, now)
    request = created.request
    if request.status == "pending":
        await approvals.set_steps(uow, principal, request.id, [StepSpec(user.id, 1)], now)
    await uow.oauth.add(
        OAuthBackchannelRequest(
            request_id=request.id,
            client_pk=client.id,
            user_id=user.id,
            scope=credentials.format_scope(checked.scopes),
            created_at=now,
            expires_at=now + timedelta(seconds=checked.expires_in),
        )
    )
    return BackchannelAuthorization(
        str(request.id), checked.expires_in, settings.ciba_interval_seconds
    )


def _payload(
    client: OAuthClient, checked: _Checked, user: User, settings: Settings, now: datetime
) -> CreateApprovalRequest:
    data: dict[str, Any] = {
        "title": checked.binding_message,
        "description": f"{client.name} asks {user.email} to approve this request "
        f"(OpenID CIBA; scopes: {credentials.format_scope(checked.scopes)}).",
        "priority": "medium",
        "source": CIBA_SOURCE,
        "metadata": {
            "oauth_client_id": client.client_id,
            "binding_message": checked.binding_message,
        },
        "expires_at": (now + timedelta(seconds=checked.expires_in)).isoformat(),
    }
    if checked.authorization_details is not None:
        data["arguments"] = {"authorization_details": checked.authorization_details}
    if checked.notification_token is not None:
        data["callback_url"] = client.ciba_notification_endpoint
        data["callback_headers"] = {"Authorization": f"Bearer {checked.notification_token}"}
    try:
        return validate_model(CreateApprovalRequest, data, settings)
    except ValidationFailed as exc:
        fields = (exc.details or {}).get("fields", [])
        if any(str(f.get("field", "")).startswith("arguments") for f in fields):
            raise _bad_details("authorization_details are too large or nested too deep.") from None
        raise invalid_request(exc.message) from None


# ---- the token endpoint ----


@dataclass(frozen=True)
class CibaTokens:
    tokens: IssuedTokens
    authorization_details: list[Any] | None
    receipt: str | None

    def to_body(self) -> dict[str, Any]:
        body = self.tokens.to_body()
        if self.authorization_details is not None:
            body["authorization_details"] = self.authorization_details
        if self.receipt is not None:
            body["receipt"] = self.receipt
        return body


class PollPacer(Protocol):
    """Counts calls per key in a window of its own length (the rate limiter's store)."""

    async def first_within(self, key: str, seconds: int) -> bool: ...


@dataclass(frozen=True)
class PollState:
    request_id: uuid.UUID
    state: BackchannelPoll


def poll_state(
    client: ClientFacts, auth_req_id: str | None, state: BackchannelPoll | None
) -> PollState:
    """The polled request of an authenticated client (``state``: as read with it, None if
    unknown or another client's); the errors CIBA names in the order it names them."""
    check_client(client)
    if not auth_req_id:
        raise invalid_request("Send auth_req_id.")
    request_id = parse_id(auth_req_id)
    if request_id is None or state is None:
        raise invalid_grant("Unknown auth_req_id.")
    return PollState(request_id, state)


async def pace(pacer: PollPacer, polled: PollState, settings: Settings) -> None:
    """slow_down for a poll sooner than ``interval`` after the last one let through. Kept
    in the rate limiter's store (Redis when configured, shared by replicas), so a poll
    writes nothing to the database."""
    interval = settings.ciba_interval_seconds
    if interval and not await pacer.first_within(f"ciba:{polled.request_id.hex}", interval):
        raise OAuthError("slow_down", f"Poll at most every {interval} s.")


def refuse_undecided(state: BackchannelPoll, now: datetime) -> None:
    if state.status == "pending":
        if state.expires_at is not None and state.expires_at <= now:
            raise OAuthError("expired_token", "The request expired before anyone decided.")
        raise OAuthError("authorization_pending", "Nobody has decided yet.")
    if state.status == "expired":
        raise OAuthError("expired_token", "The request expired before anyone decided.")
    if state.status != "approved":
        # 400 at the token endpoint (RFC 6749 section 5.2); bc-authorize's is a 403.
        raise OAuthError("access_denied", f"The request was {state.status}.")
    if state.token_issued_at is not None:
        raise invalid_grant("A token was already issued for this auth_req_id.")


async def issue(
    uow: UnitOfWork,
    client: ClientFacts,
    polled: PollState,
    keys: KeyRing,
    box: SecretBox,
    settings: Settings,
    now: datetime,
) -> CibaTokens:
    """The approved request's tokens, once (``refuse_undecided`` said it is approved)."""
    request_id, state = polled.request_id, polled.state
    if not await uow.oauth.claim_backchannel_token(request_id, now):
        raise invalid_grant("A token was already issued for this auth_req_id.")
    tokens = await issue_tokens(
        uow.oauth, client, state.user_id, state.scope, request_id, None, settings, now
    )
    arguments = await uow.oauth.approved_arguments(request_id) or {}
    details = arguments.get("authorization_details")
    receipt = await receipts.token_of_request(uow.session, keys, box, request_id)
    return CibaTokens(tokens, details if isinstance(details, list) else None, receipt)
