"""The callback transport's connections (``webhooks.delivery``), over real loopback sockets.

Attempts go through a pool of kept-alive connections, dialled through the SSRF guard: kept-alive
connections must be reused, a connection the receiver closed meanwhile must be noticed
(and replaced, not failed on), over plain TCP and TLS alike.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import ssl
from pathlib import Path

import pytest
from bench.receiver import Receiver, Reply
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from signoff.config import Settings
from signoff.webhooks.delivery import ClientPool, send_attempt
from signoff.webhooks.service import target_of
from signoff.webhooks.urlpolicy import AddressPolicy
from tests.conftest import make_settings


class TlsReceiver(Receiver):
    """The test receiver behind TLS, with a certificate for 127.0.0.1."""

    def __init__(self, context: ssl.SSLContext, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.context = context

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/hook"

    async def __aenter__(self) -> TlsReceiver:
        self._server = await asyncio.start_server(
            self._on_connection, "127.0.0.1", 0, ssl=self.context
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self


def _certificate(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server context, client context trusting only that server's certificate)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert_path, key_path)
    client = ssl.create_default_context(cafile=str(cert_path))
    return server, client


@pytest.fixture
def policy(tmp_path: Path) -> AddressPolicy:
    settings: Settings = make_settings(f"sqlite:///{tmp_path / 'unused.db'}")
    return AddressPolicy.from_settings(settings)


async def _post(pool: ClientPool, policy: AddressPolicy, url: str) -> tuple[bool, int, str | None]:
    result = await send_attempt(
        pool, target_of(url), url, b'{"n":1}', {"Content-Type": "application/json"},
        policy=policy, timeout=5.0, read_cap=65536,
    )  # fmt: skip
    return result.success, result.status_code, result.error


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
async def test_a_kept_alive_connection_is_reused_and_a_closed_one_replaced(
    tls: bool, policy: AddressPolicy, tmp_path: Path
) -> None:
    client_context: ssl.SSLContext | None = None
    if tls:
        server_context, client_context = _certificate(tmp_path)
        receiver: Receiver = TlsReceiver(server_context)
    else:
        receiver = Receiver()
    pool = ClientPool(policy, ssl_context=client_context)
    try:
        async with receiver:
            assert await _post(pool, policy, receiver.url) == (True, 200, None)
            assert await _post(pool, policy, receiver.url) == (True, 200, None)
            assert receiver.connections == 1  # kept alive, asked whether readable, reused
            # The receiver hangs up on its idle connection without a word: the pool must
            # see that the socket is done and dial again, not send into it. Once the
            # receiver's socket is closed, the loopback peer has its FIN.
            for writer in list(receiver._writers):
                writer.transport.abort()
                await writer.wait_closed()
            assert await _post(pool, policy, receiver.url) == (True, 200, None)
            assert receiver.connections == 2
            assert len(receiver.received) == 3
    finally:
        await pool.aclose()


async def test_a_certificate_not_trusted_is_a_tls_error(
    policy: AddressPolicy, tmp_path: Path
) -> None:
    server_context, _ = _certificate(tmp_path)
    pool = ClientPool(policy)  # the system's trust store: our certificate is not in it
    try:
        async with TlsReceiver(server_context) as receiver:
            assert await _post(pool, policy, receiver.url) == (False, 0, "tls error")
            assert receiver.received == []
    finally:
        await pool.aclose()


async def test_attempts_at_once_to_one_receiver_each_keep_a_connection_for_the_next(
    policy: AddressPolicy,
) -> None:
    """A receiver gets as many connections as attempts run at once, and the next round of
    attempts reuses them rather than dialling again."""
    pool = ClientPool(policy)
    try:
        async with Receiver(default=Reply(delay=0.05)) as receiver:
            for _ in range(3):
                outcomes = await asyncio.gather(
                    *(_post(pool, policy, receiver.url) for _ in range(8))
                )
                assert all(success for success, _, _ in outcomes)
            assert len(receiver.received) == 24
            assert receiver.connections == 8
    finally:
        await pool.aclose()
