"""Use cases of the OAuth 2.0 authorization server (RFC 6749 with PKCE, RFC 7636). Never commits.

A refusal that must leave a trace (a replayed code or refresh token revokes the tokens
of its grant) writes the revocation, then raises: the token endpoint commits the unit of
work even when it answers with an error. Every other refusal is raised before any write.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cache
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit

from signoff.auth.principal import ALL_SCOPES
from signoff.auth.secrets import hash_password, verify_password
from signoff.config import Settings
from signoff.errors import NotFound, ValidationFailed
from signoff.models import (
    Connection,
    DashboardSession,
    OAuthAuthorizationCode,
    OAuthClient,
    OAuthToken,
    User,
)
from signoff.oauth import credentials
from signoff.oauth.errors import (
    AuthorizePageError,
    AuthorizeRedirectError,
    OAuthError,
    invalid_client,
    invalid_grant,
    invalid_request,
)
from signoff.oauth.repository import OAuthRepository
from signoff.orgs.repository import OrgRepository

MAX_REDIRECT_URIS = 10
MAX_REDIRECT_URI_LENGTH = 2000
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "::1", "localhost"})
# RFC 8252 section 7.1: native apps use a reverse-domain private-use scheme.
PRIVATE_USE_SCHEME = re.compile(r"[a-z][a-z0-9+\-]*(\.[a-z0-9+\-]+)+")
# A sign-in page that was never submitted is not worth keeping for long.
ANONYMOUS_SESSION_TTL = timedelta(hours=1)
AUTHORIZE_PARAMS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
)


# ---- client registration ----


@dataclass(frozen=True)
class CibaRegistration:
    """What a client registers for OpenID CIBA (checked by ``ciba.check_registration``)."""

    enabled: bool = False
    delivery_mode: str | None = None
    notification_endpoint: str | None = None


NO_CIBA = CibaRegistration()


@dataclass(frozen=True)
class IssuedClient:
    """A new client with its secret: the only time the secret is ever readable."""

    client: OAuthClient
    client_secret: str | None


def check_redirect_uri(uri: str, settings: Settings) -> str:
    """A redirect URI that may be registered; exact strings are compared later."""
    uri = uri.strip()
    if not uri or len(uri) > MAX_REDIRECT_URI_LENGTH:
        raise ValidationFailed.for_field(
            "redirect_uris", f"each must be 1 to {MAX_REDIRECT_URI_LENGTH} characters"
        )
    parts = urlsplit(uri)
    if parts.fragment or uri.endswith("#"):
        raise ValidationFailed.for_field("redirect_uris", f"{uri}: must not contain a fragment")
    scheme = parts.scheme.lower()
    if scheme in ("http", "https"):
        if not parts.hostname:
            raise ValidationFailed.for_field("redirect_uris", f"{uri}: must name a host")
        if scheme == "http" and settings.is_production and parts.hostname not in LOOPBACK_HOSTS:
            raise ValidationFailed.for_field(
                "redirect_uris", f"{uri}: must use https (plain http only for loopback)"
            )
        return uri
    if PRIVATE_USE_SCHEME.fullmatch(scheme):
        return uri
    raise ValidationFailed.for_field(
        "redirect_uris",
        f"{uri}: must be https, http, or a private-use scheme such as com.example.app",
    )


def _check_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 200:
        raise ValidationFailed.for_field("name", "must be 1 to 200 characters")
    return name


async def register_client(
    repo: OAuthRepository,
    settings: Settings,
    connection: Connection,
    *,
    name: str,
    redirect_uris: Sequence[str],
    public: bool,
    now: datetime,
    ciba: CibaRegistration = NO_CIBA,
) -> IssuedClient:
    """``ciba``: checked by ``ciba.check_registration``; a CIBA client needs no redirect URI."""
    uris = list(dict.fromkeys(check_redirect_uri(uri, settings) for uri in redirect_uris))
    least = 0 if ciba.enabled else 1
    if not least <= len(uris) <= MAX_REDIRECT_URIS:
        raise ValidationFailed.for_field(
            "redirect_uris", f"give {least} to {MAX_REDIRECT_URIS} redirect URIs"
        )
    if ciba.enabled and public:
        raise ValidationFailed.for_field("ciba", "only confidential clients may use CIBA")
    if connection.revoked_at is not None:
        raise ValidationFailed.for_field("connection_id", "the connection is revoked")
    secret = None if public else credentials.generate_client_secret()
    client = OAuthClient(
        client_id=credentials.generate_client_id(),
        org_id=connection.org_id,
        connection_id=connection.id,
        name=_check_name(name),
        redirect_uris=uris,
        is_public=public,
        secret_hash=credentials.hash_token(secret) if secret else None,
        secret_prefix=credentials.display_prefix(secret) if secret else None,
        created_at=now,
        ciba_enabled=ciba.enabled,
        ciba_delivery_mode=ciba.delivery_mode,
        ciba_notification_endpoint=ciba.notification_endpoint,
    )
    await repo.add(client)
    return IssuedClient(client, secret)


async def get_client(repo: OAuthRepository, org_id: uuid.UUID, client_id: str) -> OAuthClient:
    client = await repo.get_client(org_id, client_id)
    if client is None or client.deleted_at is not None:
        raise NotFound(f"No OAuth client {client_id!r} in this organization.")
    return client


async def list_clients(
    repo: OAuthRepository, org_id: uuid.UUID, connection_id: uuid.UUID | None
) -> Sequence[OAuthClient]:
    return await repo.list_clients(org_id, connection_id)


async def delete_client(repo: OAuthRepository, client: OAuthClient, now: datetime) -> None:
    """Its tokens answer 401 from the next call on; the row stays for the record."""
    if client.deleted_at is None:
        client.deleted_at = now
    await repo.revoke_client_tokens(client.id, now)


# ---- the authorization request ----


@dataclass(frozen=True)
class AuthorizationRequest:
    client: OAuthClient
    redirect_uri: str
    redirect_uri_explicit: bool
    scopes: tuple[str, ...]
    state: str | None
    code_challenge: str | None
    # The parameters as received, carried through the sign-in and consent forms.
    params: Mapping[str, str]


def single_params(items: Sequence[tuple[str, str]]) -> tuple[dict[str, str], set[str]]:
    """The parameters, and the names given more than once (RFC 6749 section 3.1)."""
    params: dict[str, str] = {}
    repeated: set[str] = set()
    for key, value in items:
        if key in params:
            repeated.add(key)
        params[key] = value
    return params, repeated


async def resolve_client_and_redirect(
    repo: OAuthRepository, params: Mapping[str, str], repeated: set[str]
) -> tuple[OAuthClient, str, bool]:
    """The client and where to send the answer, or an error *page*: never redirect to a
    URI that is not registered, exactly, for a client that exists."""
    if repeated & {"client_id", "redirect_uri"}:
        raise AuthorizePageError("Invalid request", "client_id and redirect_uri may appear once.")
    client_id = params.get("client_id", "")
    client = await repo.find_active_client(client_id) if client_id else None
    if client is None:
        raise AuthorizePageError(
            "Unknown application", "This application is not registered with signoff."
        )
    redirect_uri = params.get("redirect_uri")
    if redirect_uri is None or redirect_uri == "":
        if len(client.redirect_uris) != 1:
            raise AuthorizePageError(
                "Invalid request", "This application must say where to return (redirect_uri)."
            )
        return client, client.redirect_uris[0], False
    if redirect_uri not in client.redirect_uris:
        raise AuthorizePageError(
            "Invalid redirect URI",
            "The address this application asked to return to is not registered for it.",
        )
    return client, redirect_uri, True


def check_authorization_request(
    client: OAuthClient,
    redirect_uri: str,
    explicit: bool,
    params: Mapping[str, str],
    repeated: set[str],
) -> AuthorizationRequest:
    """The rest of the request; refusals go back to the (now trusted) redirect URI."""
    if repeated:
        raise AuthorizeRedirectError(
            "invalid_request", f"Parameters given more than once: {', '.join(sorted(repeated))}."
        )
    if params.get("response_type") != "code":
        raise AuthorizeRedirectError(
            "unsupported_response_type", "Only response_type=code is supported."
        )
    scopes = credentials.parse_scope(params.get("scope"))
    if scopes is None:
        raise AuthorizeRedirectError(
            "invalid_scope", f"Known scopes are: {credentials.format_scope(ALL_SCOPES)}."
        )
    challenge = params.get("code_challenge") or None
    method = params.get("code_challenge_method") or None
    if challenge is None:
        if method is not None:
            raise AuthorizeRedirectError(
                "invalid_request", "code_challenge_method was given without code_challenge."
            )
        if client.is_public:
            raise AuthorizeRedirectError(
                "invalid_request", "Public clients must use PKCE: send code_challenge (S256)."
            )
    else:
        # RFC 7636 defaults a missing method to plain, which we never accept.
        if method != "S256":
            raise AuthorizeRedirectError(
                "invalid_request", "code_challenge_method must be S256; plain is not accepted."
            )
        if credentials.S256_CHALLENGE_PATTERN.fullmatch(challenge) is None:
            raise AuthorizeRedirectError(
                "invalid_request", "code_challenge must be 43 base64url characters (S256)."
            )
    kept = {key: params[key] for key in AUTHORIZE_PARAMS if params.get(key)}
    return AuthorizationRequest(
        client=client,
        redirect_uri=redirect_uri,
        redirect_uri_explicit=explicit,
        scopes=scopes,
        state=params.get("state") or None,
        code_challenge=challenge,
        params=kept,
    )


async def issue_code(
    repo: OAuthRepository,
    request: AuthorizationRequest,
    user: User,
    settings: Settings,
    now: datetime,
) -> str:
    code = credentials.generate_code()
    await repo.add(
        OAuthAuthorizationCode(
            code_hash=credentials.hash_token(code),
            client_pk=request.client.id,
            user_id=user.id,
            redirect_uri=request.redirect_uri,
            redirect_uri_explicit=request.redirect_uri_explicit,
            scope=credentials.format_scope(request.scopes),
            code_challenge=request.code_challenge,
            created_at=now,
            expires_at=now + timedelta(seconds=settings.oauth_code_ttl_seconds),
        )
    )
    return code


# ---- the token endpoint ----


@dataclass(frozen=True)
class ClientCredentials:
    client_id: str | None
    client_secret: str | None


async def authenticate_client(repo: OAuthRepository, given: ClientCredentials) -> OAuthClient:
    if not given.client_id:
        raise invalid_client("Send client_id (and client_secret for confidential clients).")
    return check_client_credentials(await repo.find_active_client(given.client_id), given)


class ClientFacts(Protocol):
    """What authenticating a client and issuing its tokens read of it: an ``OAuthClient``
    or the plain row a CIBA poll reads (``repository.PolledClient``)."""

    @property
    def id(self) -> uuid.UUID: ...

    @property
    def org_id(self) -> uuid.UUID: ...

    @property
    def is_public(self) -> bool: ...

    @property
    def secret_hash(self) -> str | None: ...

    @property
    def ciba_enabled(self) -> bool: ...


Client = TypeVar("Client", bound=ClientFacts)


def check_client_credentials(client: Client | None, given: ClientCredentials) -> Client:
    """The client, if ``given`` authenticates it (``client``: the active one of that id)."""
    if client is None:
        raise invalid_client("Unknown client.")
    if client.is_public:
        if given.client_secret:
            raise invalid_client("Public clients have no secret.")
        return client
    if (
        not given.client_secret
        or client.secret_hash is None
        or not credentials.same_hash(given.client_secret, client.secret_hash)
    ):
        raise invalid_client("Client authentication failed.")
    return client


@dataclass(frozen=True)
class IssuedTokens:
    access_token: str
    refresh_token: str
    expires_in: int
    scope: str
    user_email: str
    org_name: str

    def to_body(self) -> dict[str, Any]:
        return {
            "access_token": self.access_token,
            "token_type": "Bearer",
            "expires_in": self.expires_in,
            "refresh_token": self.refresh_token,
            "scope": self.scope,
            "org_name": self.org_name,
            "user_email": self.user_email,
        }


async def issue_tokens(
    repo: OAuthRepository,
    client: ClientFacts,
    user_id: uuid.UUID,
    scope: str,
    family_id: uuid.UUID,
    parent_id: uuid.UUID | None,
    settings: Settings,
    now: datetime,
) -> IssuedTokens:
    user = await repo.get_user(user_id)
    org = await repo.get_org(client.org_id)
    if user is None or org is None or user.org_id != client.org_id:
        raise invalid_grant("The user who granted access no longer exists.")
    if user.deactivated_at is not None:
        raise invalid_grant("The user who granted access has been deactivated.")
    access = credentials.generate_access_token()
    refresh = credentials.generate_refresh_token()
    for kind, value, ttl in (
        ("access", access, settings.oauth_access_token_ttl_seconds),
        ("refresh", refresh, settings.oauth_refresh_token_ttl_seconds),
    ):
        await repo.add(
            OAuthToken(
                token_hash=credentials.hash_token(value),
                kind=kind,
                client_pk=client.id,
                user_id=user.id,
                scope=scope,
                family_id=family_id,
                parent_id=parent_id,
                created_at=now,
                expires_at=now + timedelta(seconds=ttl),
            )
        )
    return IssuedTokens(
        access, refresh, settings.oauth_access_token_ttl_seconds, scope, user.email, org.name
    )


async def exchange_code(
    repo: OAuthRepository,
    client: OAuthClient,
    *,
    code: str | None,
    redirect_uri: str | None,
    code_verifier: str | None,
    settings: Settings,
    now: datetime,
) -> IssuedTokens:
    if not code:
        raise invalid_request("Send the authorization code as code.")
    row = await repo.find_code(credentials.hash_token(code))
    if row is None or row.client_pk != client.id:
        raise invalid_grant("The authorization code is not valid for this client.")
    if row.used_at is not None:
        # RFC 6749 section 4.1.2: a replayed code revokes what it produced.
        await repo.revoke_family(row.id, now)
        raise invalid_grant("The authorization code was already used; its tokens are revoked.")
    if row.expires_at <= now:
        raise invalid_grant("The authorization code has expired.")
    if (row.redirect_uri_explicit or redirect_uri) and redirect_uri != row.redirect_uri:
        raise invalid_grant("redirect_uri does not match the authorization request.")
    if row.code_challenge is not None:
        if not code_verifier:
            raise invalid_grant("This code was issued with PKCE: send code_verifier.")
        if not credentials.verify_code_verifier(code_verifier, row.code_challenge):
            raise invalid_grant("code_verifier does not match the code_challenge.")
    elif code_verifier:
        raise invalid_grant("code_verifier was sent but the authorization request had no PKCE.")
    if not await repo.claim_code(row.id, now):
        await repo.revoke_family(row.id, now)
        raise invalid_grant("The authorization code was already used; its tokens are revoked.")
    return await issue_tokens(repo, client, row.user_id, row.scope, row.id, None, settings, now)


async def refresh_tokens(
    repo: OAuthRepository,
    client: OAuthClient,
    *,
    refresh_token: str | None,
    scope: str | None,
    settings: Settings,
    now: datetime,
) -> IssuedTokens:
    """Rotation: every refresh returns a new refresh token and retires the old one."""
    if not refresh_token:
        raise invalid_request("Send refresh_token.")
    row = await repo.find_token(credentials.hash_token(refresh_token))
    if row is None or row.kind != "refresh" or row.client_pk != client.id:
        raise invalid_grant("The refresh token is not valid for this client.")
    if row.rotated_at is not None:
        # A retired refresh token came back: someone holds a copy. End the whole grant.
        await repo.revoke_family(row.family_id, now)
        raise invalid_grant("The refresh token was already used; the grant is revoked.")
    if row.revoked_at is not None or row.expires_at <= now:
        raise invalid_grant("The refresh token is expired or revoked.")
    granted = tuple(row.scope.split())
    scopes = granted
    if scope:
        requested = credentials.parse_scope(scope)
        if requested is None or not set(requested) <= set(granted):
            raise OAuthError("invalid_scope", "A refresh may only narrow the granted scopes.")
        scopes = requested
    if not await repo.claim_refresh_token(row.id, now):
        await repo.revoke_family(row.family_id, now)
        raise invalid_grant("The refresh token was already used; the grant is revoked.")
    return await issue_tokens(
        repo,
        client,
        row.user_id,
        credentials.format_scope(scopes),
        row.family_id,
        row.id,
        settings,
        now,
    )


async def revoke(repo: OAuthRepository, client: OAuthClient, token: str, now: datetime) -> None:
    """RFC 7009. Unknown tokens are fine (200); revoking a refresh token ends the grant."""
    row = await repo.find_token(credentials.hash_token(token))
    if row is None:
        return
    if row.client_pk != client.id:
        raise invalid_grant("The token was not issued to this client.")
    if row.kind == "refresh":
        await repo.revoke_family(row.family_id, now)
    else:
        await repo.revoke_token(row.id, now)


async def introspect(
    repo: OAuthRepository, client: OAuthClient, token: str, settings: Settings, now: datetime
) -> dict[str, Any]:
    """RFC 7662, for the client's own tokens; anything else is simply not active."""
    details = await repo.describe_token(credentials.hash_token(token))
    if details is None or details.client.id != client.id:
        return {"active": False}
    row = details.token
    active = (
        row.revoked_at is None
        and row.expires_at > now
        and row.rotated_at is None
        and details.client.deleted_at is None
        and not details.connection_revoked
        and not details.user_deactivated
    )
    if not active:
        return {"active": False}
    answer: dict[str, Any] = {
        "active": True,
        "scope": row.scope,
        "client_id": details.client.client_id,
        "username": details.user_email,
        "token_type": "Bearer" if row.kind == "access" else "refresh_token",
        "exp": int(row.expires_at.timestamp()),
        "iat": int(row.created_at.timestamp()),
        "sub": str(row.user_id),
        "iss": settings.public_url,
        "org_id": str(details.org_id),
        "connection_id": str(details.client.connection_id),
    }
    # RFC 9396 section 9.2: a token granted through CIBA carries what was approved.
    arguments = await repo.backchannel_arguments(row.family_id, client.id)
    if arguments is not None and isinstance(arguments.get("authorization_details"), list):
        answer["authorization_details"] = arguments["authorization_details"]
    return answer


# ---- sign-in sessions ----


async def current_session(
    repo: OAuthRepository, cookie: str | None, now: datetime
) -> DashboardSession | None:
    if not cookie or len(cookie) > 100:
        return None
    return await repo.find_session(credentials.hash_token(cookie), now)


async def start_session(
    repo: OAuthRepository,
    user_id: uuid.UUID | None,
    settings: Settings,
    now: datetime,
    replacing: DashboardSession | None = None,
) -> tuple[DashboardSession, str]:
    """A new session and its cookie value. Signing in always issues a new id."""
    if replacing is not None:
        await repo.delete_session(replacing.id)
    await repo.delete_expired_sessions(now)
    ttl = timedelta(seconds=settings.session_ttl_seconds) if user_id else ANONYMOUS_SESSION_TTL
    cookie = credentials.generate_session_token()
    session = DashboardSession(
        token_hash=credentials.hash_token(cookie),
        user_id=user_id,
        csrf_token=credentials.generate_csrf_token(),
        created_at=now,
        expires_at=now + ttl,
    )
    await repo.add(session)
    return session, cookie


@cache
def _dummy_password_hash() -> str:
    return hash_password(credentials.generate_csrf_token())


async def check_password(
    orgs: OrgRepository, org_id: uuid.UUID, email: str, password: str
) -> User | None:
    """The user of the org with this e-mail and password, or None.

    Unknown e-mails cost an argon2 verification too, so timing tells nothing. Argon2 runs
    in a thread: it is slow on purpose and must not stall the event loop.
    """
    user = await orgs.find_user_by_email(org_id, email.strip().lower())
    stored = user.password_hash if user is not None else None
    ok = await asyncio.to_thread(_verify, stored, password)
    return user if ok and stored is not None and user is not None and user.is_active else None


def _verify(stored: str | None, password: str) -> bool:
    return verify_password(stored or _dummy_password_hash(), password)
