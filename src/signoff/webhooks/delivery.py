"""One HTTP attempt of a callback: POST, no redirects, capped read, one deadline.

Attempts go through aiohttp (``ClientPool``): its client costs far less CPU per request
than httpx's (docs/decisions/0021-expiry-storms-and-the-callback-worker.md), and a callback worker
draining a backlog spends its time there. Every connection is dialled through
``aiohttp_session.GuardedResolver``, which resolves the host itself and checks every
address against the SSRF policy; aiohttp then connects to those checked addresses only
(TLS still verifies the certificate against the host *name*, sent as SNI). A host
written as an IP address is checked before the attempt (aiohttp does not ask a resolver
for those). The pool has no overall size limit: one slow receiver must never make
another wait for a pooled connection; how many attempts run at once is the worker's
business.

``GuardedBackend`` does the same for httpx, which the Slack API client uses.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import httpcore
import httpx
from yarl import URL

from signoff.webhooks.urlpolicy import (
    AddressNotAllowed,
    AddressPolicy,
    ResolutionFailed,
    ip_literal,
    resolve_permitted,
)

if TYPE_CHECKING:
    import aiohttp

logger = logging.getLogger(__name__)

STORED_BODY_BYTES = 1024  # decisions.md section 9: the first 1 KiB of the answer is kept

# The error classes an attempt's log entry may carry (``error``); None on success.
ERROR_TIMEOUT = "timeout"
ERROR_REFUSED = "connection refused"
ERROR_CONNECTION = "connection error"
ERROR_DNS = "dns error"
ERROR_TLS = "tls error"
ERROR_ADDRESS = "address not allowed"
ERROR_HTTPS_REQUIRED = "https required"
ERROR_REDIRECT = "redirect not followed"
ERROR_STATUS = "non-2xx status"
ERROR_INVALID_URL = "invalid url"
ERROR_UNEXPECTED = "unexpected error"


# What an httpx client would have sent besides our own headers (``signing.signed_headers``).
REQUEST_HEADERS = {"Accept": "*/*", "Accept-Encoding": "gzip, deflate", "Connection": "keep-alive"}


@dataclass(frozen=True)
class AttemptResult:
    success: bool
    status_code: int  # 0 when no HTTP answer came back
    duration_ms: int
    response_body: str | None
    error: str | None


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """Resolve, check, then dial exactly the checked address (see module docstring)."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        addresses = await resolve_permitted(self.policy, host, port)
        failure: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(
                    str(address), port, timeout, local_address, socket_options
                )
            except (httpcore.ConnectError, OSError) as exc:
                failure = exc
        assert failure is not None
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:  # pragma: no cover - callbacks never use sockets
        raise AddressNotAllowed("unix sockets are not callback targets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


def build_transport(
    policy: AddressPolicy, *, keepalive: int = 50, ssl_context: ssl.SSLContext | None = None
) -> httpx.AsyncHTTPTransport:
    """A callback transport: guarded dialling, no proxies from the environment.

    Attempts go to the transport directly, not through an ``httpx.AsyncClient``: a client
    adds nothing a callback wants (cookies to keep, redirects to follow, auth, event hooks)
    and costs CPU on every attempt doing it (``make bench-callbacks``, throughput stage).
    """
    ssl_context = ssl_context or httpx.create_ssl_context(trust_env=False)
    transport = httpx.AsyncHTTPTransport(verify=ssl_context, trust_env=False)
    # httpx takes no network backend, so the pool is replaced with one that has ours.
    transport._pool = httpcore.AsyncConnectionPool(
        ssl_context=ssl_context,
        max_connections=None,
        max_keepalive_connections=keepalive,
        keepalive_expiry=30.0,
        network_backend=GuardedBackend(policy),
    )
    return transport


class ClientPool:
    """Kept-alive connections to every receiver, in one aiohttp session.

    A receiver has as many connections as it has attempts at once, reused from one attempt
    to the next; connections idle for ``idle_seconds`` are closed. The session is made on
    first use, in the event loop that uses it.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        idle_seconds: float = 60.0,
        ssl_context: ssl.SSLContext | None = None,
    ):
        self.policy = policy
        self.idle_seconds = idle_seconds
        # Loading the CA bundle takes milliseconds: once per process.
        self._ssl_context = ssl_context or httpx.create_ssl_context(trust_env=False)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._loop is not loop or self._session.closed:
            # aiohttp is loaded by the first attempt, not with the app: a server that
            # sends no callbacks never holds it (docs/decisions/0043-serve-memory.md).
            from signoff.webhooks.aiohttp_session import guarded_session

            self._session = guarded_session(self.policy, self._ssl_context, self.idle_seconds)
            self._loop = loop
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None and not session.closed:
            await session.close()


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def classify_error(exc: BaseException) -> str:
    import aiohttp

    chain = list(_chain(exc))
    if any(isinstance(e, AddressNotAllowed) for e in chain):
        return ERROR_ADDRESS
    if any(isinstance(e, ResolutionFailed) for e in chain):
        return ERROR_DNS
    if any(isinstance(e, TimeoutError | httpx.TimeoutException) for e in chain):
        return ERROR_TIMEOUT
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        return ERROR_REFUSED
    if any(isinstance(e, ssl.SSLError) for e in chain):
        return ERROR_TLS
    text = " ".join(str(e) for e in chain).lower()
    if "refused" in text:
        return ERROR_REFUSED
    if "ssl" in text or "certificate" in text:
        return ERROR_TLS
    if any(
        isinstance(e, httpx.UnsupportedProtocol | httpx.InvalidURL | aiohttp.InvalidURL)
        for e in chain
    ):
        return ERROR_INVALID_URL
    if any(isinstance(e, httpx.TransportError | aiohttp.ClientError | OSError) for e in chain):
        return ERROR_CONNECTION
    return ERROR_UNEXPECTED


async def send_attempt(
    clients: ClientPool,
    target: str,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    policy: AddressPolicy,
    timeout: float,
    read_cap: int,
) -> AttemptResult:
    """POST ``body`` to ``url`` once; never raises for anything the receiver does."""
    started = time.perf_counter()

    def elapsed_ms() -> int:
        return round((time.perf_counter() - started) * 1000)

    if policy.https_only and not url.lower().startswith("https://"):
        return AttemptResult(False, 0, 0, None, ERROR_HTTPS_REQUIRED)
    status_code = 0
    received = bytearray()
    try:
        parsed = URL(url)
        _check_literal_host(policy, parsed)
        # One turn of the event loop first: a hang-up that has reached us (a receiver that
        # closed an idle kept-alive connection) is then taken in, and that connection is
        # dialled again rather than written into.
        await asyncio.sleep(0)
        async with (
            asyncio.timeout(timeout),
            clients.session().post(
                parsed, data=body, headers={**REQUEST_HEADERS, **headers}, allow_redirects=False
            ) as response,
        ):
            status_code = response.status
            while len(received) < read_cap:
                chunk = await response.content.readany()
                if not chunk:
                    break
                received.extend(chunk)
            # Enough read (the cap): a body not read to its end closes the connection
            # instead of draining it.
    except Exception as exc:
        failure = classify_error(exc)
        if failure == ERROR_UNEXPECTED:
            logger.warning("callback to %s failed unexpectedly", url, exc_info=exc)
        stored = _stored_body(received) if status_code else None
        return AttemptResult(False, status_code, elapsed_ms(), stored, failure)
    success = 200 <= status_code < 300
    error: str | None = None
    if not success:
        error = ERROR_REDIRECT if 300 <= status_code < 400 else ERROR_STATUS
    return AttemptResult(success, status_code, elapsed_ms(), _stored_body(received), error)


def _check_literal_host(policy: AddressPolicy, url: URL) -> None:
    """A URL whose host is an IP address is dialled without asking a resolver: check it."""
    if not policy.enforce:
        return
    literal = ip_literal(url.raw_host) if url.raw_host else None
    if literal is not None:
        policy.check(literal)


def _stored_body(received: bytes | bytearray) -> str:
    return bytes(received[:STORED_BODY_BYTES]).decode("utf-8", errors="replace")
