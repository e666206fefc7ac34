"""One HTTP attempt of a callback: POST, no redirects, capped read, one deadline.

Each attempt dials through ``GuardedBackend``, which resolves the host itself, checks every
address against the SSRF policy and connects to the checked address (TLS still verifies
the certificate against the host *name*, which httpcore passes as SNI). The connection
pool has no overall size limit: one slow receiver must never make another wait for a
pooled connection; how many attempts run at once is the worker's business.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpcore
import httpx

from signoff.webhooks.urlpolicy import (
    AddressNotAllowed,
    AddressPolicy,
    ResolutionFailed,
    resolve_permitted,
)

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


@dataclass
class _Lane:
    """One connection's transport: an attempt has it to itself while it runs."""

    transport: httpx.AsyncHTTPTransport
    in_use: bool = False
    last_used: float = 0.0


class ClientPool:
    """Transports per receiver (host:port), one connection each (*lanes*).

    An attempt takes an idle lane of its receiver (a kept-alive connection) or opens a new
    one, so a receiver has as many connections as it has attempts at once, reused from
    one attempt to the next. One connection per transport because httpcore's pool, on
    every request, matches its waiting requests against each of its connections (checking
    each socket): with a receiver's 16 attempts in one pool that cost more CPU than the
    attempt itself (``make bench-expiry``; docs/engineering-log.md, *100,000 expiries at
    once*). Lanes idle for a minute are closed.
    """

    def __init__(
        self,
        policy: AddressPolicy,
        *,
        keepalive: int = 50,
        idle_seconds: float = 60.0,
        ssl_context: ssl.SSLContext | None = None,
    ):
        self.policy = policy
        # Idle lanes kept per receiver, at most (more are closed as their attempts end).
        self.keepalive = keepalive
        self.idle_seconds = idle_seconds
        self._lanes: dict[str, list[_Lane]] = {}
        self._next_prune = 0.0
        # Loading the CA bundle takes milliseconds: once per process, not per receiver.
        self._ssl_context = ssl_context or httpx.create_ssl_context(trust_env=False)

    @asynccontextmanager
    async def transport(self, target: str) -> AsyncIterator[httpx.AsyncHTTPTransport]:
        lanes = self._lanes.setdefault(target, [])
        lane = next((lane for lane in lanes if not lane.in_use), None)
        if lane is None:
            lane = _Lane(build_transport(self.policy, keepalive=1, ssl_context=self._ssl_context))
            lanes.append(lane)
        lane.in_use = True
        try:
            yield lane.transport
        finally:
            lane.in_use = False
            lane.last_used = time.monotonic()
            await self._close_surplus(target)
            await self._prune()

    async def _close_surplus(self, target: str) -> None:
        lanes = self._lanes[target]
        idle = [lane for lane in lanes if not lane.in_use]
        for lane in idle[: max(0, len(idle) - self.keepalive)]:
            lanes.remove(lane)
            await lane.transport.aclose()

    async def _prune(self) -> None:
        now = time.monotonic()
        if now < self._next_prune:
            return
        self._next_prune = now + self.idle_seconds / 4
        for target, lanes in list(self._lanes.items()):
            idle = [x for x in lanes if not x.in_use and now - x.last_used > self.idle_seconds]
            for lane in idle:
                lanes.remove(lane)
                await lane.transport.aclose()
            if not lanes:
                del self._lanes[target]

    async def aclose(self) -> None:
        lanes, self._lanes = self._lanes, {}
        for lane in (lane for target_lanes in lanes.values() for lane in target_lanes):
            await lane.transport.aclose()


def _chain(exc: BaseException) -> Iterable[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def classify_error(exc: BaseException) -> str:
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
    if any(isinstance(e, httpx.UnsupportedProtocol | httpx.InvalidURL) for e in chain):
        return ERROR_INVALID_URL
    if any(isinstance(e, httpx.TransportError | OSError) for e in chain):
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
        request = httpx.Request(
            "POST",
            url,
            content=body,
            headers={**REQUEST_HEADERS, **headers},
            extensions={"timeout": httpx.Timeout(timeout).as_dict()},
        )
        async with asyncio.timeout(timeout), clients.transport(target) as transport:
            response = await transport.handle_async_request(request)
            try:
                status_code = response.status_code
                async for chunk in response.aiter_raw():
                    received.extend(chunk)
                    if len(received) >= read_cap:
                        break  # enough: the connection is dropped instead of drained
            finally:
                await response.aclose()
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


def _stored_body(received: bytes | bytearray) -> str:
    return bytes(received[:STORED_BODY_BYTES]).decode("utf-8", errors="replace")
