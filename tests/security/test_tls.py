"""`wss://` from the `tls_cert`/`tls_key` settings (a throw-away self-signed certificate)."""

from __future__ import annotations

import datetime as dt
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from notify.config import Settings
from notify.core import CoreConfig
from notify.server.app import NotifyServer
from tests.integration.conftest import Raw


def self_signed(tmp: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=1))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


async def test_wss_with_configured_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    settings = Settings.load(cli={"server": {"tls_cert": str(cert), "tls_key": str(key)}})
    srv = NotifyServer(CoreConfig(), host="localhost", port=0, ssl=settings.ssl_context())
    async with srv:
        assert srv.url.startswith("wss://")
        client_ctx = ssl.create_default_context(cafile=str(cert))
        raw = await Raw.open(srv.url, "alice", ssl=client_ctx)
        assert raw.member == "alice"
        await raw.close()
