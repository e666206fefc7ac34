"""The aiohttp session of ``delivery.ClientPool``, through the SSRF guard.

A module of its own so that aiohttp is imported with the first callback attempt, not
with the app (docs/decisions/0043-serve-memory.md).
"""

from __future__ import annotations

import socket
import ssl

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult

from signoff.webhooks.urlpolicy import AddressPolicy, resolve_permitted


class GuardedResolver(AbstractResolver):
    """aiohttp's resolver, through the SSRF guard: every address of the answer checked."""

    def __init__(self, policy: AddressPolicy) -> None:
        self.policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        addresses = await resolve_permitted(self.policy, host, port)
        return [
            ResolveResult(
                hostname=host,
                host=str(address),
                port=port,
                family=socket.AF_INET6 if address.version == 6 else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for address in addresses
        ]

    async def close(self) -> None:
        return None


def guarded_session(
    policy: AddressPolicy, ssl_context: ssl.SSLContext, idle_seconds: float
) -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(
        resolver=GuardedResolver(policy),
        ssl=ssl_context,
        limit=0,
        limit_per_host=0,
        keepalive_timeout=idle_seconds,
    )
    return aiohttp.ClientSession(
        connector=connector,
        # A callback keeps no cookies, reads the answer's bytes as sent, takes no
        # proxy from the environment and names no client library.
        cookie_jar=aiohttp.DummyCookieJar(),
        auto_decompress=False,
        trust_env=False,
        skip_auto_headers=("User-Agent",),
        timeout=aiohttp.ClientTimeout(total=None),
    )
