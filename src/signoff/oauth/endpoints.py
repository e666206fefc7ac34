"""The authorization server's endpoints, and ``/api/v1/oauth-clients`` for admins.

Browser side (``/oauth/authorize``, ``/oauth/login``, ``/oauth/logout``): server-rendered
pages; every POST carries the session's CSRF token in a hidden field, and the original
authorization request in hidden fields, re-checked on each step.

Client side (``/oauth/token`` and its alias ``/api/v1/oauth/token``, ``/oauth/revoke``,
``/oauth/introspect``): form or JSON bodies, answers and refusals in the shapes of
RFC 6749, 7009 and 7662, never the API envelope.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from typing import Annotated, Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson
from fastapi import APIRouter, Depends, Query
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from signoff.auth.principal import ALL_SCOPES, Principal
from signoff.common.http import (
    json_body_doc,
    json_response,
    principal_of,
)
from signoff.common.ids import parse_id
from signoff.common.openapi_declarations import errors
from signoff.common.routing import LeanRoute
from signoff.common.time import utcnow
from signoff.common.validation import parse_json_body
from signoff.config import Settings
from signoff.context import AppContext, context_of
from signoff.errors import Forbidden, NotFound, ValidationFailed
from signoff.models import DashboardSession, OAuthClient, User
from signoff.oauth import ciba, service, token_poll
from signoff.oauth.errors import (
    AuthorizePageError,
    AuthorizeRedirectError,
    OAuthError,
    invalid_request,
)
from signoff.oauth.pages import SCOPE_DESCRIPTIONS, render
from signoff.oauth.schemas import (
    BACKCHANNEL_BODY,
    BACKCHANNEL_RESPONSES,
    TOKEN_BODY,
    TOKEN_RESPONSES,
    CreateOAuthClient,
    OAuthClientListOut,
    OAuthClientOut,
    client_to_dict,
)
from signoff.unit_of_work import UnitOfWork
from signoff.wiring import wiring_of

SESSION_COOKIE = "signoff_session"
# Where a person signed in with a password an admin generated must choose their own
# (the dashboard's page): nothing else opens for them until then, consent included.
CHOOSE_PASSWORD_PATH = "/account/choose-password"  # noqa: S105 - a page's path
NO_STORE = token_poll.NO_STORE

router = APIRouter(tags=["oauth"], include_in_schema=False, route_class=LeanRoute)
# The token endpoint alone, tried right after the approvals' routes: CIBA clients poll it.
token_router = APIRouter(tags=["oauth"], route_class=LeanRoute)
api_router = APIRouter(prefix="/api/v1", tags=["oauth"], route_class=LeanRoute)
# Protocol endpoints that the OpenAPI document declares (answers in OAuth's shapes).
documented_router = APIRouter(tags=["oauth"], route_class=LeanRoute)


# ---- helpers ----


def _with_params(uri: str, params: Mapping[str, str]) -> str:
    """``uri`` with ``params`` added to its query, keeping any query it already has."""
    parts = urlsplit(uri)
    query = "&".join(q for q in (parts.query, urlencode(params)) if q)
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, ""))


def _redirect_back(
    redirect_uri: str, params: dict[str, str], state: str | None, settings: Settings
) -> Response:
    """The answer to the client (RFC 6749 section 4.1.2), with ``iss`` (RFC 9207)."""
    if state:
        params["state"] = state
    params["iss"] = settings.public_url
    return RedirectResponse(_with_params(redirect_uri, params), 303, headers=NO_STORE)


def _redirect_error(
    redirect_uri: str, exc: AuthorizeRedirectError, state: str | None, settings: Settings
) -> Response:
    params = {"error": exc.error, "error_description": exc.description}
    return _redirect_back(redirect_uri, params, state, settings)


def _error_page(exc: AuthorizePageError, status_code: int = 400) -> Response:
    return render("error.html", status_code, title=exc.title, message=exc.message)


def _start_again_page(request: service.AuthorizationRequest, message: str) -> Response:
    return render(
        "error.html",
        403,
        title="Please start again",
        message=message,
        retry_url="/oauth/authorize?" + urlencode(request.params),
    )


def set_session_cookie(response: Response, cookie: str, settings: Settings) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        cookie,
        max_age=settings.session_ttl_seconds,
        path="/",
        httponly=True,
        samesite="lax",
        secure=settings.is_production or settings.public_url.startswith("https://"),
    )


def _csrf_ok(session: DashboardSession | None, sent: str | None) -> bool:
    return (
        session is not None
        and sent is not None
        and hmac.compare_digest(session.csrf_token.encode(), sent.encode())
    )


async def _signed_in_user(
    uow: UnitOfWork, session: DashboardSession | None, client: OAuthClient
) -> User | None:
    """The session's user, if they belong to the org the client is registered in."""
    if session is None or session.user_id is None:
        return None
    return await uow.orgs.get_user(client.org_id, session.user_id)


def _choose_password_first(authz: service.AuthorizationRequest) -> Response:
    back = "/oauth/authorize?" + urlencode(authz.params)
    return RedirectResponse(
        f"{CHOOSE_PASSWORD_PATH}?" + urlencode({"next": back}), 303, headers=NO_STORE
    )


async def _org_name(uow: UnitOfWork, client: OAuthClient) -> str:
    org = await uow.oauth.get_org(client.org_id)
    return org.name if org is not None else ""


def _login_page(
    request: service.AuthorizationRequest,
    csrf_token: str,
    org_name: str,
    *,
    error: str | None = None,
    email: str | None = None,
    status_code: int = 200,
) -> Response:
    return render(
        "login.html",
        status_code,
        client_name=request.client.name,
        org_name=org_name,
        params=request.params,
        csrf_token=csrf_token,
        error=error,
        email=email,
    )


def _consent_page(
    request: service.AuthorizationRequest, csrf_token: str, user: User, org_name: str
) -> Response:
    return render(
        "consent.html",
        client_name=request.client.name,
        org_name=org_name,
        user_name=user.name,
        user_email=user.email,
        scopes=[{"name": s, "description": SCOPE_DESCRIPTIONS[s]} for s in request.scopes],
        redirect_host=urlsplit(request.redirect_uri).netloc or request.redirect_uri,
        params=request.params,
        csrf_token=csrf_token,
    )


async def _form(request: Request) -> tuple[dict[str, str], set[str], dict[str, str]]:
    """A page's POST: the authorization parameters (and repeats), and the other fields."""
    form = await request.form()
    authorize: list[tuple[str, str]] = []
    other: dict[str, str] = {}
    for key, value in form.multi_items():
        if isinstance(value, UploadFile):
            continue
        if key in service.AUTHORIZE_PARAMS:
            authorize.append((key, value))
        else:
            other[key] = value
    params, repeated = service.single_params(authorize)
    return params, repeated, other


# ---- the authorization endpoint and its pages ----


async def _checked_authorization(
    uow: UnitOfWork, params: dict[str, str], repeated: set[str], settings: Settings
) -> service.AuthorizationRequest | Response:
    """The validated authorization request, or the page or redirect that refuses it.

    An unknown client or redirect URI gets an error page and never a redirect; any other
    fault goes back to the (now trusted) redirect URI, as RFC 6749 section 4.1.2.1 says.
    """
    try:
        client, redirect_uri, explicit = await service.resolve_client_and_redirect(
            uow.oauth, params, repeated
        )
    except AuthorizePageError as exc:
        return _error_page(exc)
    try:
        return service.check_authorization_request(client, redirect_uri, explicit, params, repeated)
    except AuthorizeRedirectError as exc:
        return _redirect_error(redirect_uri, exc, params.get("state"), settings)


@router.get("/oauth/authorize")
async def authorize(request: Request) -> Response:
    ctx = context_of(request)
    settings = ctx.settings
    params, repeated = service.single_params(list(request.query_params.multi_items()))
    now = utcnow()
    # Reads only, unless a first visit needs a session: page views never queue for the
    # (SQLite) writer.
    async with ctx.reading() as uow:
        authz = await _checked_authorization(uow, params, repeated, settings)
        if isinstance(authz, Response):
            return authz
        client = authz.client
        session = await service.current_session(uow.oauth, request.cookies.get(SESSION_COOKIE), now)
        org_name = await _org_name(uow, client)
        user = await _signed_in_user(uow, session, client)
    if session is not None and user is not None:
        if user.must_change_password:
            return _choose_password_first(authz)
        return _consent_page(authz, session.csrf_token, user, org_name)
    if session is not None:
        return _login_page(authz, session.csrf_token, org_name)
    async with ctx.transaction() as uow:
        session, cookie = await service.start_session(uow.oauth, None, settings, now)
    response = _login_page(authz, session.csrf_token, org_name)
    set_session_cookie(response, cookie, settings)
    return response


@router.post("/oauth/login")
async def login(request: Request) -> Response:
    ctx = context_of(request)
    settings = ctx.settings
    params, repeated, fields = await _form(request)
    now = utcnow()
    # Checking the password is slow on purpose: do it outside the write transaction.
    async with ctx.reading() as uow:
        authz = await _checked_authorization(uow, params, repeated, settings)
        if isinstance(authz, Response):
            return authz
        client = authz.client
        session = await service.current_session(uow.oauth, request.cookies.get(SESSION_COOKIE), now)
        if session is None or not _csrf_ok(session, fields.get("csrf_token")):
            return _start_again_page(authz, "This sign-in form has expired or was not ours.")
        org_name = await _org_name(uow, client)
        email = fields.get("email", "")
        address = request.client.host if request.client else "unknown"
        allowed = await wiring_of(request).limiter.hit(
            f"login:{address}", settings.login_attempts_per_hour
        )
        if not allowed.allowed:
            return _login_page(
                authz,
                session.csrf_token,
                org_name,
                error="Too many sign-in attempts. Try again later.",
                email=email,
                status_code=429,
            )
        user = await service.check_password(
            uow.orgs, client.org_id, email, fields.get("password", "")
        )
    if user is None:
        return _login_page(
            authz,
            session.csrf_token,
            org_name,
            error="Wrong e-mail or password.",
            email=email,
            status_code=401,
        )
    async with ctx.transaction() as uow:
        _, cookie = await service.start_session(
            uow.oauth, user.id, settings, now, replacing=session
        )
    response = RedirectResponse(
        "/oauth/authorize?" + urlencode(authz.params), 303, headers=NO_STORE
    )
    set_session_cookie(response, cookie, settings)
    return response


@router.post("/oauth/logout")
async def logout(request: Request) -> Response:
    ctx = context_of(request)
    params, _, fields = await _form(request)
    async with ctx.transaction() as uow:
        session = await service.current_session(
            uow.oauth, request.cookies.get(SESSION_COOKIE), utcnow()
        )
        if session is not None and _csrf_ok(session, fields.get("csrf_token")):
            await uow.oauth.delete_session(session.id)
    response = RedirectResponse("/oauth/authorize?" + urlencode(params), 303, headers=NO_STORE)
    response.delete_cookie(SESSION_COOKIE, path="/")
    return response


@router.post("/oauth/authorize")
async def consent(request: Request) -> Response:
    ctx = context_of(request)
    settings = ctx.settings
    params, repeated, fields = await _form(request)
    now = utcnow()
    async with ctx.transaction() as uow:
        authz = await _checked_authorization(uow, params, repeated, settings)
        if isinstance(authz, Response):
            return authz
        client = authz.client
        session = await service.current_session(uow.oauth, request.cookies.get(SESSION_COOKIE), now)
        if not _csrf_ok(session, fields.get("csrf_token")):
            return _start_again_page(authz, "This consent form has expired or was not ours.")
        user = await _signed_in_user(uow, session, client)
        if user is None:
            # Signed out meanwhile: back to the sign-in page.
            return RedirectResponse(
                "/oauth/authorize?" + urlencode(authz.params), 303, headers=NO_STORE
            )
        if user.must_change_password:
            return _choose_password_first(authz)
        if fields.get("decision") != "allow":
            return _redirect_back(
                authz.redirect_uri,
                {"error": "access_denied", "error_description": "The user denied access."},
                authz.state,
                settings,
            )
        code = await service.issue_code(uow.oauth, authz, user, settings, now)
    return _redirect_back(authz.redirect_uri, {"code": code}, authz.state, settings)


# ---- token, revocation, introspection, metadata ----


_oauth_error = token_poll.oauth_error


async def _client_params(request: Request) -> dict[str, str]:
    """The body as form fields or a JSON object (decisions.md section 13)."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    items: list[tuple[str, str]] = []
    if content_type == "application/json" or content_type.endswith("+json"):
        raw = await request.body()
        try:
            data: Any = orjson.loads(raw) if raw.strip() else {}
        except orjson.JSONDecodeError:
            raise invalid_request("The body is not valid JSON.") from None
        if not isinstance(data, dict):
            raise invalid_request("The JSON body must be an object.")
        for key, value in data.items():
            if value is None:
                continue
            if not isinstance(value, str | int):
                raise invalid_request(f"{key} must be a string.")
            items.append((key, str(value)))
    elif content_type == "application/x-www-form-urlencoded":
        # What every OAuth client sends, parsed directly: a CIBA client polls often.
        try:
            items = parse_qsl((await request.body()).decode(), keep_blank_values=True)
        except UnicodeDecodeError:
            raise invalid_request("The body is not UTF-8.") from None
    else:
        form = await request.form()
        items = [(k, v) for k, v in form.multi_items() if isinstance(v, str)]
    params, repeated = service.single_params(items)
    if repeated:
        raise invalid_request(f"Parameters given more than once: {', '.join(sorted(repeated))}.")
    return {key: value for key, value in params.items() if value != ""}


def _client_credentials(request: Request, params: dict[str, str]) -> service.ClientCredentials:
    return token_poll.client_credentials(request.headers.get("authorization", ""), params)


GRANT_TYPES = ("authorization_code", "refresh_token", ciba.GRANT_TYPE)


async def token(request: Request) -> Response:
    ctx = context_of(request)
    try:
        params = await _client_params(request)
        given = _client_credentials(request, params)
        grant_type = params.get("grant_type")
        if grant_type is None:
            raise invalid_request("Send grant_type.")
        if grant_type not in GRANT_TYPES:
            raise OAuthError(
                "unsupported_grant_type", f"grant_type must be one of {', '.join(GRANT_TYPES)}."
            )
    except OAuthError as exc:
        return _oauth_error(exc)
    now = utcnow()
    if grant_type == ciba.GRANT_TYPE:
        # What the API guard answers itself unless SIGNOFF_STOCK_CIBA_POLL=1 (token_poll.py).
        return await token_poll.answer_poll(ctx, wiring_of(request).limiter, given, params, now)
    try:
        # Refused clients never take the write transaction.
        async with ctx.reading() as uow:
            client = await service.authenticate_client(uow.oauth, given)
    except OAuthError as exc:
        return _oauth_error(exc)
    error: OAuthError | None = None
    issued: service.IssuedTokens
    async with ctx.transaction() as uow:
        try:
            if grant_type == "authorization_code":
                issued = await service.exchange_code(
                    uow.oauth,
                    client,
                    code=params.get("code"),
                    redirect_uri=params.get("redirect_uri"),
                    code_verifier=params.get("code_verifier"),
                    settings=ctx.settings,
                    now=now,
                )
            else:
                issued = await service.refresh_tokens(
                    uow.oauth,
                    client,
                    refresh_token=params.get("refresh_token"),
                    scope=params.get("scope"),
                    settings=ctx.settings,
                    now=now,
                )
        except OAuthError as exc:
            # Committed all the same: a replay's revocations must stick.
            error = exc
    if error is not None:
        return _oauth_error(error)
    return json_response(issued.to_body(), 200, NO_STORE)


token_router.add_api_route(
    "/oauth/token",
    token,
    methods=["POST"],
    responses=TOKEN_RESPONSES,
    openapi_extra=TOKEN_BODY,
    summary="OAuth 2.0 token endpoint: authorization code, refresh token and OpenID CIBA grants",
    description="The client authenticates with Basic or client_secret_post (public clients "
    "send client_id alone). Errors are OAuth's `{error, error_description}`, not the API "
    "envelope (docs/oauth.md, docs/ciba.md).",
)
api_router.add_api_route("/oauth/token", token, methods=["POST"], include_in_schema=False)


async def _authenticated_client(
    ctx: AppContext, request: Request
) -> tuple[OAuthClient, dict[str, str]]:
    params = await _client_params(request)
    given = _client_credentials(request, params)
    async with ctx.reading() as uow:
        client = await service.authenticate_client(uow.oauth, given)
    if not params.get("token"):
        raise invalid_request("Send token.")
    return client, params


@router.post("/oauth/revoke")
async def revoke(request: Request) -> Response:
    """RFC 7009: 200 whether or not the token was known."""
    ctx = context_of(request)
    try:
        client, params = await _authenticated_client(ctx, request)
        async with ctx.transaction() as uow:
            await service.revoke(uow.oauth, client, params["token"], utcnow())
    except OAuthError as exc:
        return _oauth_error(exc)
    return json_response({}, 200, NO_STORE)


@router.post("/oauth/introspect")
async def introspect(request: Request) -> Response:
    """RFC 7662, for a client's own tokens."""
    ctx = context_of(request)
    try:
        client, params = await _authenticated_client(ctx, request)
    except OAuthError as exc:
        return _oauth_error(exc)
    async with ctx.reading() as uow:
        body = await service.introspect(uow.oauth, client, params["token"], ctx.settings, utcnow())
    return json_response(body, 200, NO_STORE)


def server_metadata(settings: Settings) -> dict[str, Any]:
    base = settings.public_url
    auth_methods = ["client_secret_basic", "client_secret_post", "none"]
    return {
        "issuer": base,
        "authorization_endpoint": f"{base}/oauth/authorize",
        "token_endpoint": f"{base}/oauth/token",
        "revocation_endpoint": f"{base}/oauth/revoke",
        "introspection_endpoint": f"{base}/oauth/introspect",
        "scopes_supported": list(ALL_SCOPES),
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": list(GRANT_TYPES),
        # OpenID CIBA (docs/ciba.md).
        "backchannel_authentication_endpoint": f"{base}/oauth/bc-authorize",
        "backchannel_token_delivery_modes_supported": list(ciba.DELIVERY_MODES),
        "backchannel_user_code_parameter_supported": False,
        "token_endpoint_auth_methods_supported": auth_methods,
        "revocation_endpoint_auth_methods_supported": auth_methods,
        "introspection_endpoint_auth_methods_supported": auth_methods,
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
        "service_documentation": f"{base}/api/v1/docs",
    }


@router.get("/.well-known/oauth-authorization-server")
async def metadata(request: Request) -> Response:
    """RFC 8414."""
    return json_response(server_metadata(context_of(request).settings))


@documented_router.post(
    "/oauth/bc-authorize",
    responses=BACKCHANNEL_RESPONSES,
    openapi_extra=BACKCHANNEL_BODY,
    summary="OpenID CIBA: ask a person for a decision (backchannel authentication)",
    description="The client authenticates (Basic or client_secret_post). Creates an approval "
    "request assigned to the user named by `login_hint`; poll `/oauth/token` with the grant "
    "`urn:openid:params:grant-type:ciba`, or wait for the ping (docs/ciba.md).",
)
async def backchannel_authorize(request: Request) -> Response:
    """OpenID CIBA core section 7: ask a person of the client's org for a decision."""
    ctx = context_of(request)
    try:
        params = await _client_params(request)
        given = _client_credentials(request, params)
        async with ctx.reading() as uow:
            client = await service.authenticate_client(uow.oauth, given)
        ciba.check_client(client)
        checked = ciba.check_params(client, params, ctx.settings)
        now = utcnow()
        async with ctx.transaction() as uow:
            user = await ciba.find_person(uow, client, checked.login_hint)
            answer = await ciba.authorize(uow, client, checked, user, ctx.box, ctx.settings, now)
    except OAuthError as exc:
        return _oauth_error(exc)
    return json_response(answer.to_body(), 200, NO_STORE)


# ---- /api/v1/oauth-clients ----


def require_admin_api_key(request: Request) -> Principal:
    """Client credentials are minted by admins with an API key: a delegated OAuth token
    must not be able to mint further credentials."""
    principal = principal_of(request)
    if principal.auth_method != "api_key":
        raise Forbidden("OAuth clients are managed with an API key, not an OAuth token.")
    if not principal.is_admin:
        raise Forbidden("Only admins may manage OAuth clients.")
    return principal


Admin = Annotated[Principal, Depends(require_admin_api_key)]


@api_router.post(
    "/oauth-clients",
    status_code=201,
    response_model=OAuthClientOut,
    responses=errors(ValidationFailed, Forbidden, NotFound),
    openapi_extra=json_body_doc(CreateOAuthClient),
    summary="Register an OAuth client (admins, API key)",
    description="201 with `client_secret` for confidential clients: shown once, stored "
    "hashed. Public clients get none and must use PKCE (S256).",
)
async def create_oauth_client(request: Request, principal: Admin) -> Response:
    ctx = context_of(request)
    payload = await parse_json_body(request, CreateOAuthClient, ctx.settings)
    registration = await ciba.check_registration(
        wiring_of(request).webhooks.policy,
        payload.ciba,
        payload.backchannel_token_delivery_mode,
        payload.backchannel_client_notification_endpoint,
    )
    async with ctx.transaction() as uow:
        connection_id = principal.connection_id
        if payload.connection_id:
            parsed = parse_id(payload.connection_id)
            if parsed is None:
                raise NotFound(f"No connection {payload.connection_id!r} in this organization.")
            connection_id = parsed
        connection = await uow.orgs.get_connection(principal.org_id, connection_id)
        if connection is None:
            raise NotFound(f"No connection {payload.connection_id!r} in this organization.")
        issued = await service.register_client(
            uow.oauth,
            ctx.settings,
            connection,
            name=payload.name,
            redirect_uris=payload.redirect_uris,
            public=payload.public,
            now=utcnow(),
            ciba=registration,
        )
    return json_response(
        {**client_to_dict(issued.client), "client_secret": issued.client_secret}, 201
    )


@api_router.get(
    "/oauth-clients",
    response_model=OAuthClientListOut,
    responses=errors(Forbidden),
    summary="List OAuth clients (admins, API key)",
)
async def list_oauth_clients(
    request: Request,
    principal: Admin,
    connection_id: str | None = Query(None, description="Only this connection's clients."),
) -> Response:
    ctx = context_of(request)
    connection = parse_id(connection_id) if connection_id else None
    if connection_id and connection is None:
        return json_response({"data": []})
    async with ctx.reading() as uow:
        clients = await service.list_clients(uow.oauth, principal.org_id, connection)
    return json_response({"data": [client_to_dict(c) for c in clients]})


@api_router.get(
    "/oauth-clients/{client_id}",
    response_model=OAuthClientOut,
    responses=errors(Forbidden, NotFound),
    summary="Get one OAuth client (admins, API key)",
)
async def get_oauth_client(request: Request, client_id: str, principal: Admin) -> Response:
    ctx = context_of(request)
    async with ctx.reading() as uow:
        client = await service.get_client(uow.oauth, principal.org_id, client_id)
    return json_response(client_to_dict(client))


@api_router.delete(
    "/oauth-clients/{client_id}",
    response_model=OAuthClientOut,
    responses=errors(Forbidden, NotFound),
    summary="Delete an OAuth client; its tokens stop working at once (admins, API key)",
)
async def delete_oauth_client(request: Request, client_id: str, principal: Admin) -> Response:
    ctx = context_of(request)
    async with ctx.transaction() as uow:
        client = await service.get_client(uow.oauth, principal.org_id, client_id)
        await service.delete_client(uow.oauth, client, utcnow())
    return json_response(client_to_dict(client))
