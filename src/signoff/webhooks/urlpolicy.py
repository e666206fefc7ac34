"""Where callbacks may go (decisions.md section 9): the SSRF guard.

In production (``SIGNOFF_ENV=production``) callback URLs must use https, and no callback
may reach loopback, private, link-local, shared, multicast, reserved or unspecified
addresses, including IPv4 addresses hidden inside IPv6 ones (IPv4-mapped ``::ffff:a.b.c.d``,
NAT64, 6to4, Teredo). Operators who do run receivers on private networks list those
networks in ``SIGNOFF_CALLBACK_ALLOWED_CIDRS``.

The same rule covers the URLs of notification channels (a Slack or Teams webhook, a
signed webhook channel): ``refusal`` is the one check both make when a URL is saved.

The rule is checked when a request is created, or routing saved (so the caller hears
about it at once), and again at every send, against each address the name resolves to
*then*; the connection is made to the very address that was checked (see
``delivery.GuardedBackend``), so a DNS answer that changes between check and connect
(rebinding) cannot slip through.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence
from dataclasses import dataclass

from signoff.common.validation import validate_callback_url
from signoff.config import Settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
CREATE_TIME_RESOLVE_SECONDS = 2.0


class AddressNotAllowed(Exception):
    """The URL's host is, or resolves to, an address callbacks may not reach."""


class ResolutionFailed(Exception):
    """The URL's host name does not resolve."""


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    if address.teredo is not None:
        return address.teredo[1]
    return None


def is_public_address(address: IPAddress) -> bool:
    """True for globally routable unicast addresses, the only ones callbacks may reach."""
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return is_public_address(embedded)
    return not (
        not address.is_global
        or address.is_private
        or address.is_loopback
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
    )


def parse_networks(values: Sequence[str]) -> tuple[IPNetwork, ...]:
    return tuple(ipaddress.ip_network(value.strip(), strict=False) for value in values)


@dataclass(frozen=True)
class AddressPolicy:
    """``enforce`` is on in production; ``allowed`` are the operator's private networks."""

    enforce: bool
    https_only: bool
    allowed: tuple[IPNetwork, ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings) -> AddressPolicy:
        return cls(
            enforce=settings.is_production,
            https_only=settings.is_production,
            allowed=parse_networks(settings.callback_allowed_cidrs),
        )

    def permits(self, address: IPAddress) -> bool:
        if not self.enforce or is_public_address(address):
            return True
        candidates: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and (embedded := _embedded_ipv4(address)):
            candidates.append(embedded)
        return any(
            candidate.version == network.version and candidate in network
            for candidate in candidates
            for network in self.allowed
        )

    def check(self, address: IPAddress) -> None:
        if not self.permits(address):
            raise AddressNotAllowed(
                f"{address} is a loopback, private, link-local or reserved address"
            )


def ip_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


async def resolve(host: str, port: int) -> list[IPAddress]:
    """Every address ``host`` resolves to, in the resolver's order, without duplicates."""
    literal = ip_literal(host)
    if literal is not None:
        return [literal]
    loop = asyncio.get_running_loop()
    try:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ResolutionFailed(f"{host} does not resolve: {exc}") from None
    addresses: list[IPAddress] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
        if address not in addresses:
            addresses.append(address)
    if not addresses:
        raise ResolutionFailed(f"{host} does not resolve")
    return addresses


async def resolve_permitted(policy: AddressPolicy, host: str, port: int) -> list[IPAddress]:
    """The addresses to dial for ``host``; refuses if *any* of them is not permitted.

    Refusing on any (rather than dialling only the good ones) keeps a name that mixes
    public and private answers out altogether: it is a rebinding attempt or a mistake.
    """
    addresses = await resolve(host, port)
    for address in addresses:
        policy.check(address)
    return addresses


async def check_url_at_create(url: str, policy: AddressPolicy) -> str | None:
    """Why ``url`` may not receive callbacks, or None. Called when a request is created.

    A host that does not resolve right now is accepted: DNS may be late for a receiver
    that is still being deployed, and the send-time check guards the actual connection.
    """
    import httpx

    parsed = httpx.URL(url)
    if policy.https_only and parsed.scheme != "https":
        return "must use https in production"
    if not policy.enforce:
        return None
    host = parsed.host
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        async with asyncio.timeout(CREATE_TIME_RESOLVE_SECONDS):
            await resolve_permitted(policy, host, port)
    except AddressNotAllowed as exc:
        return f"is not allowed: {exc}"
    except (ResolutionFailed, TimeoutError):
        return None
    return None


async def refusal(url: str, policy: AddressPolicy, *, credentials_advice: str) -> str | None:
    """Why ``url`` may not be sent to, or None: its form (absolute http or https, no
    credentials, https in production), then where its host leads (``check_url_at_create``).
    The one rule for callback URLs and notification channels, checked when either is
    saved; the send-time check (``delivery.send_attempt``) applies it again."""
    try:
        validate_callback_url(
            url, https_only=policy.https_only, credentials_advice=credentials_advice
        )
    except ValueError as exc:
        return str(exc)
    return await check_url_at_create(url, policy)
