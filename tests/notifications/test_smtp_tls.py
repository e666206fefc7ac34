"""E-mail over TLS against a real TLS-speaking SMTP server on loopback: STARTTLS and
implicit TLS, a private CA trusted through ``SIGNOFF_SMTP_CA_FILE``, and a certificate
that does not verify failing the attempt rather than sending."""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from signoff.context import AppContext
from signoff.wiring import Wiring
from tests.conftest import Org, create_approval
from tests.notifications.support import MailBox, smtp_server

pytestmark = pytest.mark.anyio


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def make_certificates(directory: Path) -> tuple[Path, ssl.SSLContext]:
    """A private CA, written as PEM for the client to trust, and a server context whose
    certificate that CA signed for 127.0.0.1."""
    now = datetime.now(UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("signoff test CA"))
        .issuer_name(_name("signoff test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(_name("mail.signoff.test"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca_file = directory / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    chain = directory / "server.pem"
    chain.write_bytes(
        leaf.public_bytes(serialization.Encoding.PEM)
        + key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(chain)
    return ca_file, server


@pytest.fixture(params=["starttls", "implicit"])
def tls_mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def trust_ca() -> bool:
    return True


@pytest.fixture
def certificates(tmp_path: Path) -> tuple[Path, ssl.SSLContext]:
    return make_certificates(tmp_path)


@pytest.fixture
async def smtp(
    tls_mode: str, certificates: tuple[Path, ssl.SSLContext]
) -> AsyncIterator[tuple[MailBox, str]]:
    server_tls = certificates[1]
    if tls_mode == "starttls":
        async with smtp_server(starttls=server_tls) as server:
            yield server
    else:
        async with smtp_server(implicit_tls=server_tls) as server:
            yield server


@pytest.fixture
def settings_overrides(
    smtp: tuple[MailBox, str], certificates: tuple[Path, ssl.SSLContext], trust_ca: bool
) -> dict[str, Any]:
    overrides: dict[str, Any] = {
        "smtp_url": smtp[1],
        "mail_from": "signoff <signoff@acme.example>",
        "public_url": "http://signoff.test",
    }
    if trust_ca:
        overrides["smtp_ca_file"] = str(certificates[0])
    return overrides


async def mail_the_admins(api: httpx.AsyncClient, org: Org) -> dict[str, Any]:
    document = {
        "channels": {"mail": {"type": "email"}},
        "rules": [{"channels": ["mail"], "audience": "admins"}],
    }
    response = await api.put("/api/v1/routing", json=document, headers=org.admin.headers)
    assert response.status_code == 200, response.text
    return await create_approval(api, org.member)


async def test_mail_goes_over_tls_to_a_server_signed_by_the_trusted_ca(
    api: httpx.AsyncClient,
    ctx: AppContext,
    wiring: Wiring,
    org: Org,
    mailbox: MailBox,
    tls_mode: str,
) -> None:
    created = await mail_the_admins(api, org)
    assert await wiring.notifications.run_once() == 1
    [mail] = mailbox.mails
    assert mail.tls  # STARTTLS was taken, or TLS was spoken from the start
    assert mail.recipients == ["admin0@acme.example"]
    assert created["title"] in str(mail.message["Subject"])
    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.admin.headers
    )
    [row] = log.json()["data"]
    assert (row["status"], row["attempts"], row["error"]) == ("sent", 1, None)


@pytest.mark.parametrize("trust_ca", [False])
async def test_a_certificate_that_does_not_verify_fails_the_attempt_and_sends_nothing(
    api: httpx.AsyncClient,
    ctx: AppContext,
    wiring: Wiring,
    org: Org,
    mailbox: MailBox,
    tls_mode: str,
) -> None:
    """Without SIGNOFF_SMTP_CA_FILE the private CA is unknown: the client refuses the
    server, the attempt is logged with why, and the mail waits for its retry."""
    created = await mail_the_admins(api, org)
    await wiring.notifications.run_once()
    assert mailbox.mails == []
    log = await api.get(
        f"/api/v1/approvals/{created['id']}/notifications", headers=org.admin.headers
    )
    [row] = log.json()["data"]
    assert (row["status"], row["attempts"]) == ("pending", 1)
    assert row["error"] == "smtp: the server's TLS certificate did not verify"


def test_a_ca_file_that_holds_no_certificate_is_refused_at_start(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from signoff.config import Settings

    empty = tmp_path / "ca.pem"
    empty.write_text("not a certificate\n")
    for path in (empty, tmp_path / "missing.pem"):
        with pytest.raises(ValidationError, match="SIGNOFF_SMTP_CA_FILE"):
            Settings(smtp_ca_file=str(path))
