"""``SignoffClient`` (blocking) and ``AsyncSignoffClient`` (asyncio): the same methods.

Both send the calls described in ``_calls.py``; this module only adds the transport
(an ``httpx.Client`` or ``httpx.AsyncClient``), the retry loop and the long-poll loop.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import httpx
from joserfc.jwk import KeySet

from signoff_client import _calls as calls
from signoff_client._calls import Call, RetryPolicy
from signoff_client._errors import (
    APIConnectionError,
    APIError,
    EmergencyStop,
    RateLimited,
    ServerError,
    UnknownReceiptKey,
    WaitTimeout,
)
from signoff_client._models import (
    Approval,
    ApprovalPage,
    AuditEvent,
    Comment,
    Redemption,
    Step,
    StepVote,
)
from signoff_client._receipts import Receipt, verify_receipt

__version__ = "0.1.0"

T = TypeVar("T")
DEFAULT_TIMEOUT = 30.0
DEFAULT_WAIT_SECONDS = 300.0
# How long a fetched key set is trusted before it is fetched again. A receipt signed by a
# key not in it yet (after a rotation) fetches it again at once.
JWKS_TTL_SECONDS = 300.0
# A receipt naming a key the cached set lacks fetches the set again at most this often:
# receipts with forged kids cannot make the client hammer the server.
JWKS_REFETCH_INTERVAL_SECONDS = 30.0
USER_AGENT = f"signoff-client/{__version__}"


class _Settings:
    """What both clients are configured with, checked once."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        oauth_token: str | None,
        timeout: float | httpx.Timeout,
        retries: int | RetryPolicy,
    ) -> None:
        if api_key and oauth_token:
            raise ValueError("give either api_key or oauth_token, not both")
        token = api_key or oauth_token
        if not token:
            raise ValueError("an api_key (gk_...) or an oauth_token is needed")
        self.base_url = base_url.rstrip("/")
        self.headers = {
            "Authorization": f"Bearer {token}",
            "Accept": "application/json",
            "User-Agent": USER_AGENT,
        }
        self.timeout = timeout if isinstance(timeout, httpx.Timeout) else httpx.Timeout(timeout)
        self.retries = retries if isinstance(retries, RetryPolicy) else RetryPolicy(retries)
        self.long_poll_seconds = calls.DEFAULT_LONG_POLL_SECONDS


class _DecisionWait:
    """The long-poll loop's decisions, shared by both clients (they only send and sleep).

    Each round asks ``GET .../:id?wait=N`` with N up to what remains of the timeout. A
    dropped connection or a 5xx is waited out with backoff; a 429 by its ``Retry-After``,
    unless that passes the deadline, which ends the wait at once.
    """

    def __init__(self, settings: _Settings, approval_id: str, timeout: float) -> None:
        self.settings = settings
        self.approval_id = approval_id
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.last: Approval | None = None
        self.failures = 0

    def next_call(self) -> Call[Approval]:
        remaining = self.deadline - time.monotonic()
        hold = round(max(0.0, min(remaining, self.settings.long_poll_seconds)), 1)
        return calls.get_approval(self.approval_id, wait=hold or None)

    def pause_after(self, outcome: Approval | APIConnectionError | APIError) -> float:
        """Seconds to sleep before the next round; raises when waiting is over."""
        if isinstance(outcome, Approval):
            self.last, self.failures = outcome, 0
            # Without long polls (a server that allows none), ask once a second.
            pause = 0.0 if self.settings.long_poll_seconds >= 1 else 1.0
        elif isinstance(outcome, RateLimited):
            pause = outcome.retry_after
            if pause > self.deadline - time.monotonic():
                raise self._timeout(f"rate limited for {pause:g} s") from outcome
        elif isinstance(outcome, APIConnectionError) or (
            isinstance(outcome, ServerError) and not isinstance(outcome, EmergencyStop)
        ):
            self.failures += 1
            pause = self.settings.retries.delay(min(self.failures, 5))
        elif (limit := calls.long_poll_limit(outcome)) is not None:
            self.settings.long_poll_seconds = limit
            pause = 0.0
        else:
            raise outcome
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise self._timeout("still pending")
        return min(pause, remaining)

    def _timeout(self, why: str) -> WaitTimeout:
        return WaitTimeout(
            f"no decision on approval request {self.approval_id} within {self.timeout:g} s ({why})",
            self.last,
        )


class _KeyCache:
    """The server's receipt keys, as last fetched, and whether they are still fresh."""

    def __init__(self, ttl: float, refetch_interval: float) -> None:
        self.ttl = ttl
        self.refetch_interval = refetch_interval
        self.keys: KeySet | None = None
        self.fetched_at = 0.0
        self.refetched_at: float | None = None  # the last fetch for an unknown kid

    def current(self) -> KeySet | None:
        if self.keys is not None and time.monotonic() - self.fetched_at < self.ttl:
            return self.keys
        return None

    def store(self, keys: KeySet) -> KeySet:
        self.keys, self.fetched_at = keys, time.monotonic()
        return keys

    def verify(self, token: str, checks: Mapping[str, Any]) -> Receipt | None:
        """The receipt checked against the cached keys; None when they must be fetched
        (none fresh, or the receipt's key is not among them: the server rotated, unless
        that fetch was made less than ``refetch_interval`` ago, then ``UnknownReceiptKey``)."""
        keys = self.current()
        if keys is None:
            return None
        try:
            return verify_receipt(token, jwks=keys, **checks)
        except UnknownReceiptKey:
            if not self._may_refetch():
                raise
            return None

    def _may_refetch(self) -> bool:
        now = time.monotonic()
        if self.refetched_at is not None and now - self.refetched_at < self.refetch_interval:
            return False
        self.refetched_at = now
        return True


def _connection_error(call: Call[Any], exc: httpx.TransportError) -> APIConnectionError:
    return APIConnectionError(f"{call.method} {call.path} failed: {exc!r}")


def _check_sequential(approval: Approval, is_sequential: bool) -> None:
    if approval.is_sequential != is_sequential:
        raise ValueError(
            f"approval request {approval.id} has is_sequential={approval.is_sequential}; "
            "signoff fixes the order rule when a request is created "
            "(create_approval(..., is_sequential=True))"
        )


class SignoffClient:
    """A blocking client of the signoff API.

    ``SignoffClient("https://signoff.example", "gk_...")``, or with
    ``oauth_token=...`` for a user's OAuth access token. Use it as a context manager, or
    call ``close()``. ``retries`` is how many times a retryable failure is retried
    (an int, or a ``RetryPolicy``); ``http_client`` replaces the ``httpx.Client`` used.
    ``jwks_refetch_interval``: a receipt naming a key the cached ``jwks()`` lacks fetches
    the keys again at most once per this many seconds; until then it is refused
    (``UnknownReceiptKey``).
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        oauth_token: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retries: int | RetryPolicy = 3,
        http_client: httpx.Client | None = None,
        jwks_refetch_interval: float = JWKS_REFETCH_INTERVAL_SECONDS,
    ) -> None:
        self._settings = _Settings(base_url, api_key, oauth_token, timeout, retries)
        self._http = http_client or httpx.Client()
        self._owns_http = http_client is None
        self._keys = _KeyCache(JWKS_TTL_SECONDS, jwks_refetch_interval)

    @classmethod
    def from_env(cls, **options: Any) -> SignoffClient:
        """From ``SIGNOFF_URL`` and ``SIGNOFF_API_KEY`` (or ``SIGNOFF_OAUTH_TOKEN``)."""
        return cls(**_env_options(), **options)

    def close(self) -> None:
        if self._owns_http:
            self._http.close()

    def __enter__(self) -> SignoffClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _send(self, call: Call[T], retries: RetryPolicy | None = None) -> T:
        policy = retries or self._settings.retries
        attempt = 0
        while True:
            attempt += 1
            try:
                response = self._http.request(
                    call.method,
                    self._settings.base_url + call.path,
                    json=call.json,
                    params=call.params,
                    headers=self._settings.headers,
                    timeout=calls.read_timeout(self._settings.timeout, call.hold_seconds),
                )
                return calls.parse_answer(call, response)
            except (httpx.TransportError, APIError) as exc:
                delay = calls.retry_delay(call, policy, attempt, exc)
                if delay is None:
                    if isinstance(exc, httpx.TransportError):
                        raise _connection_error(call, exc) from exc
                    raise
            time.sleep(delay)

    def create_approval(
        self,
        title: str,
        description: str,
        priority: str,
        *,
        action_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        callback_url: str | None = None,
        callback_headers: Mapping[str, str] | None = None,
        expires_at: datetime | str | None = None,
        required_approvals: int | None = None,
        idempotency_key: str | bool | None = None,
        source: str | None = None,
        is_sequential: bool | None = None,
        arguments: Mapping[str, Any] | None = None,
        arguments_schema: Mapping[str, Any] | None = None,
        preview: Mapping[str, Any] | None = None,
        receipt_ttl_seconds: int | None = None,
    ) -> Approval:
        """Create a request. ``idempotency_key=True`` has the client generate a key, which
        makes the create safe to retry; without a key a failed create is never resent.

        ``arguments`` (a JSON object) are the exact parameters the action will run with:
        the receipt issued on approval names their hash. With ``arguments_schema`` (JSON
        Schema) approvers may edit them. ``preview`` is ``{"kind", "content"}``, what the
        approver looks at; ``receipt_ttl_seconds`` how long the receipt is valid."""
        return self._send(
            calls.create_approval(
                title,
                description,
                priority,
                action_type=action_type,
                metadata=metadata,
                callback_url=callback_url,
                callback_headers=callback_headers,
                expires_at=expires_at,
                required_approvals=required_approvals,
                idempotency_key=idempotency_key,
                source=source,
                is_sequential=is_sequential,
                arguments=arguments,
                arguments_schema=arguments_schema,
                preview=preview,
                receipt_ttl_seconds=receipt_ttl_seconds,
            )
        )

    def get_approval(self, approval_id: str) -> Approval:
        return self._send(calls.get_approval(approval_id))

    def me(self) -> dict[str, Any]:
        """Who these credentials are (``GET /api/v1/me``): org, connection, user and role,
        scopes and rate limit."""
        return self._send(calls.me())

    def list_page(self, page: int = 1, **filters: Any) -> ApprovalPage:
        """One numbered page of the requests matching ``filters``, newest first, with its
        ``pagination`` (for callers that hand pages on, as MCP's ``tasks/list`` does)."""
        return self._send(calls.list_page(filters, page))

    def list_approvals(self, **filters: Any) -> Iterator[Approval]:
        """Every request matching ``filters`` (status, priority, action_type, source, search,
        created_after, ...), newest first, fetching page after page as you iterate."""
        seen: set[str] = set()
        page = 1
        while True:
            result = self._send(calls.list_page(filters, page))
            for approval in result.data:
                # A request created meanwhile shifts the pages; never yield one twice.
                if approval.id not in seen:
                    seen.add(approval.id)
                    yield approval
            if page >= result.pagination.total_pages:
                return
            page += 1

    def decide(
        self,
        approval_id: str,
        decision: str,
        comment: str | None = None,
        *,
        source: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Approval:
        """``decision``: ``"approve"`` or ``"reject"``. ``arguments`` beside an approve
        edits them (only on a request with an ``arguments_schema``)."""
        return self._send(calls.decide(approval_id, decision, comment, source, arguments))

    def cancel(self, approval_id: str) -> Approval:
        return self._send(calls.cancel(approval_id))

    def add_comment(self, approval_id: str, body: str) -> Comment:
        return self._send(calls.add_comment(approval_id, body))

    def list_comments(self, approval_id: str) -> list[Comment]:
        return self._send(calls.list_comments(approval_id))

    def list_events(self, approval_id: str) -> list[AuditEvent]:
        return self._send(calls.list_events(approval_id))

    def list_steps(self, approval_id: str) -> list[Step]:
        return self._send(calls.list_steps(approval_id))

    def set_steps(
        self,
        approval_id: str,
        steps: Sequence[str | Mapping[str, Any]],
        is_sequential: bool | None = None,
    ) -> list[Step]:
        """Replace the chain: approver ids in order, or ``{approver_id, step_order}`` dicts.

        The order rule is set at creation; ``is_sequential``, when given, is checked
        against the request's (a ``ValueError`` if they differ) instead of being ignored.
        """
        if is_sequential is not None:
            _check_sequential(self.get_approval(approval_id), is_sequential)
        return self._send(calls.set_steps(approval_id, steps))

    def vote_step(
        self,
        approval_id: str,
        step_id: str,
        decision: str,
        comment: str | None = None,
        *,
        arguments: Mapping[str, Any] | None = None,
    ) -> StepVote:
        return self._send(calls.vote_step(approval_id, step_id, decision, comment, arguments))

    def wait_for_decision(
        self, approval_id: str, timeout: float = DEFAULT_WAIT_SECONDS
    ) -> Approval:
        """The request once it has left pending; ``WaitTimeout`` after ``timeout`` seconds.

        Approved by a server that issues receipts, it carries ``receipt`` (check it with
        ``verify_receipt``, spend it with ``redeem_receipt``) and the final ``arguments``
        (``arguments_edited`` when an approver changed them)."""
        wait = _DecisionWait(self._settings, approval_id, timeout)
        while True:
            outcome: Approval | APIConnectionError | APIError
            try:
                outcome = self._send(wait.next_call(), calls.NO_RETRIES)
            except (APIConnectionError, APIError) as exc:
                outcome = exc
            if isinstance(outcome, Approval) and outcome.is_final:
                return outcome
            time.sleep(wait.pause_after(outcome))

    def jwks(self, *, refresh: bool = False) -> KeySet:
        """The server's receipt keys (``/.well-known/jwks.json``), cached for a few minutes;
        ``refresh=True`` fetches them again."""
        keys = None if refresh else self._keys.current()
        return keys or self._keys.store(self._send(calls.jwks()))

    def verify_receipt(
        self,
        token: str,
        *,
        arguments: Mapping[str, Any] | None = None,
        action_type: str | None = None,
    ) -> Receipt:
        """``verify_receipt`` against this server's keys, fetched again once if the
        receipt names a key the cached set lacks (the server rotated its keys), at most
        once per ``jwks_refetch_interval`` seconds."""
        checks: dict[str, Any] = {"arguments": arguments, "action_type": action_type}
        return self._keys.verify(token, checks) or verify_receipt(
            token, jwks=self.jwks(refresh=True), **checks
        )

    def redeem_receipt(self, token: str, arguments: Mapping[str, Any] | None = None) -> Redemption:
        """Spend one use of a receipt, just before acting. With ``arguments`` the server
        also checks they are the approved ones. Refusals are ``InvalidReceipt`` errors:
        ``ReceiptUsedUp`` (409), ``RedeemExpired`` (410), ``RedeemArgumentsMismatch`` and
        ``ReceiptRefused`` (400); another organization's receipt is ``NotFound``."""
        return self._send(calls.redeem_receipt(token, arguments))


class AsyncSignoffClient:
    """The asyncio twin of ``SignoffClient``: the same methods, awaited.

    ``list_approvals`` is an async iterator: ``async for approval in client.list_approvals()``.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str | None = None,
        *,
        oauth_token: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        retries: int | RetryPolicy = 3,
        http_client: httpx.AsyncClient | None = None,
        jwks_refetch_interval: float = JWKS_REFETCH_INTERVAL_SECONDS,
    ) -> None:
        self._settings = _Settings(base_url, api_key, oauth_token, timeout, retries)
        self._http = http_client or httpx.AsyncClient()
        self._owns_http = http_client is None
        self._keys = _KeyCache(JWKS_TTL_SECONDS, jwks_refetch_interval)

    @property
    def base_url(self) -> str:
        """The server this client calls (where its pages are, too)."""
        return self._settings.base_url

    @classmethod
    def from_env(cls, **options: Any) -> AsyncSignoffClient:
        """From ``SIGNOFF_URL`` and ``SIGNOFF_API_KEY`` (or ``SIGNOFF_OAUTH_TOKEN``)."""
        return cls(**_env_options(), **options)

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncSignoffClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def _send(self, call: Call[T], retries: RetryPolicy | None = None) -> T:
        policy = retries or self._settings.retries
        attempt = 0
        while True:
            attempt += 1
            try:
                response = await self._http.request(
                    call.method,
                    self._settings.base_url + call.path,
                    json=call.json,
                    params=call.params,
                    headers=self._settings.headers,
                    timeout=calls.read_timeout(self._settings.timeout, call.hold_seconds),
                )
                return calls.parse_answer(call, response)
            except (httpx.TransportError, APIError) as exc:
                delay = calls.retry_delay(call, policy, attempt, exc)
                if delay is None:
                    if isinstance(exc, httpx.TransportError):
                        raise _connection_error(call, exc) from exc
                    raise
            await asyncio.sleep(delay)

    async def create_approval(
        self,
        title: str,
        description: str,
        priority: str,
        *,
        action_type: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        callback_url: str | None = None,
        callback_headers: Mapping[str, str] | None = None,
        expires_at: datetime | str | None = None,
        required_approvals: int | None = None,
        idempotency_key: str | bool | None = None,
        source: str | None = None,
        is_sequential: bool | None = None,
        arguments: Mapping[str, Any] | None = None,
        arguments_schema: Mapping[str, Any] | None = None,
        preview: Mapping[str, Any] | None = None,
        receipt_ttl_seconds: int | None = None,
    ) -> Approval:
        """See ``SignoffClient.create_approval``."""
        return await self._send(
            calls.create_approval(
                title,
                description,
                priority,
                action_type=action_type,
                metadata=metadata,
                callback_url=callback_url,
                callback_headers=callback_headers,
                expires_at=expires_at,
                required_approvals=required_approvals,
                idempotency_key=idempotency_key,
                source=source,
                is_sequential=is_sequential,
                arguments=arguments,
                arguments_schema=arguments_schema,
                preview=preview,
                receipt_ttl_seconds=receipt_ttl_seconds,
            )
        )

    async def get_approval(self, approval_id: str) -> Approval:
        return await self._send(calls.get_approval(approval_id))

    async def me(self) -> dict[str, Any]:
        """See ``SignoffClient.me``."""
        return await self._send(calls.me())

    async def list_page(self, page: int = 1, **filters: Any) -> ApprovalPage:
        """See ``SignoffClient.list_page``."""
        return await self._send(calls.list_page(filters, page))

    async def list_approvals(self, **filters: Any) -> AsyncGenerator[Approval, None]:
        """See ``SignoffClient.list_approvals``."""
        seen: set[str] = set()
        page = 1
        while True:
            result = await self._send(calls.list_page(filters, page))
            for approval in result.data:
                if approval.id not in seen:
                    seen.add(approval.id)
                    yield approval
            if page >= result.pagination.total_pages:
                return
            page += 1

    async def decide(
        self,
        approval_id: str,
        decision: str,
        comment: str | None = None,
        *,
        source: str | None = None,
        arguments: Mapping[str, Any] | None = None,
    ) -> Approval:
        return await self._send(calls.decide(approval_id, decision, comment, source, arguments))

    async def cancel(self, approval_id: str) -> Approval:
        return await self._send(calls.cancel(approval_id))

    async def add_comment(self, approval_id: str, body: str) -> Comment:
        return await self._send(calls.add_comment(approval_id, body))

    async def list_comments(self, approval_id: str) -> list[Comment]:
        return await self._send(calls.list_comments(approval_id))

    async def list_events(self, approval_id: str) -> list[AuditEvent]:
        return await self._send(calls.list_events(approval_id))

    async def list_steps(self, approval_id: str) -> list[Step]:
        return await self._send(calls.list_steps(approval_id))

    async def set_steps(
        self,
        approval_id: str,
        steps: Sequence[str | Mapping[str, Any]],
        is_sequential: bool | None = None,
    ) -> list[Step]:
        """See ``SignoffClient.set_steps``."""
        if is_sequential is not None:
            _check_sequential(await self.get_approval(approval_id), is_sequential)
        return await self._send(calls.set_steps(approval_id, steps))

    async def vote_step(
        self,
        approval_id: str,
        step_id: str,
        decision: str,
        comment: str | None = None,
        *,
        arguments: Mapping[str, Any] | None = None,
    ) -> StepVote:
        return await self._send(calls.vote_step(approval_id, step_id, decision, comment, arguments))

    async def wait_for_decision(
        self, approval_id: str, timeout: float = DEFAULT_WAIT_SECONDS
    ) -> Approval:
        """See ``SignoffClient.wait_for_decision``."""
        wait = _DecisionWait(self._settings, approval_id, timeout)
        while True:
            outcome: Approval | APIConnectionError | APIError
            try:
                outcome = await self._send(wait.next_call(), calls.NO_RETRIES)
            except (APIConnectionError, APIError) as exc:
                outcome = exc
            if isinstance(outcome, Approval) and outcome.is_final:
                return outcome
            await asyncio.sleep(wait.pause_after(outcome))

    async def jwks(self, *, refresh: bool = False) -> KeySet:
        """See ``SignoffClient.jwks``."""
        keys = None if refresh else self._keys.current()
        return keys or self._keys.store(await self._send(calls.jwks()))

    async def verify_receipt(
        self,
        token: str,
        *,
        arguments: Mapping[str, Any] | None = None,
        action_type: str | None = None,
    ) -> Receipt:
        """See ``SignoffClient.verify_receipt``."""
        checks: dict[str, Any] = {"arguments": arguments, "action_type": action_type}
        return self._keys.verify(token, checks) or verify_receipt(
            token, jwks=await self.jwks(refresh=True), **checks
        )

    async def redeem_receipt(
        self, token: str, arguments: Mapping[str, Any] | None = None
    ) -> Redemption:
        """See ``SignoffClient.redeem_receipt``."""
        return await self._send(calls.redeem_receipt(token, arguments))


def _env_options() -> dict[str, Any]:
    url = os.environ.get("SIGNOFF_URL")
    if not url:
        raise ValueError("SIGNOFF_URL is not set (e.g. https://signoff.example.com)")
    return {
        "base_url": url,
        "api_key": os.environ.get("SIGNOFF_API_KEY") or None,
        "oauth_token": os.environ.get("SIGNOFF_OAUTH_TOKEN") or None,
    }
