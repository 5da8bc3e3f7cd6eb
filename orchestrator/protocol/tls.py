"""TLS for the controller link: context builders for both ends and a small certificate maker.

Clients verify the controller's certificate against the configured CA and check the host name
by default; a client certificate is sent when configured. Both ends require TLS 1.2 or later.

The certificate maker (``cryptography``) serves the simulated world and the tests: a CA, a
server certificate with DNS and IP SANs, client certificates, and certificates with chosen
validity (an expired one for the failure tests). It is not meant for production PKI.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from orchestrator.errors import ConfigError

# ---------------------------------------------------------------------------------------------
# Contexts


def server_context(
    cert_file: str | os.PathLike[str],
    key_file: str | os.PathLike[str],
    *,
    client_ca_file: str | os.PathLike[str] | None = None,
    require_client_cert: bool = False,
) -> ssl.SSLContext:
    """A server-side context: TLS 1.2+, our certificate; client certificates optional or required.

    With ``client_ca_file`` set, client certificates are verified against it (required when
    ``require_client_cert``, else checked only when offered).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(str(cert_file), str(key_file))
        if client_ca_file is not None:
            ctx.load_verify_locations(cafile=str(client_ca_file))
            ctx.verify_mode = ssl.CERT_REQUIRED if require_client_cert else ssl.CERT_OPTIONAL
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError([f"TLS server certificate {cert_file} / key {key_file}: {exc}"]) from exc
    return ctx


def client_context(
    ca_file: str | os.PathLike[str] | None,
    *,
    cert_file: str | os.PathLike[str] | None = None,
    key_file: str | os.PathLike[str] | None = None,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """A client-side context: TLS 1.2+, verify against ``ca_file`` (system CAs when ``None``).

    The host name is checked unless ``check_hostname`` is false; pass ``server_hostname`` to
    ``wrap_socket`` (the configured ``server_name`` or the host part of the address).
    """
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.check_hostname = check_hostname
    ctx.verify_mode = ssl.CERT_REQUIRED
    try:
        if ca_file is not None:
            ctx.load_verify_locations(cafile=str(ca_file))
        else:
            ctx.load_default_certs(ssl.Purpose.SERVER_AUTH)
        if cert_file is not None:
            ctx.load_cert_chain(str(cert_file), str(key_file) if key_file is not None else None)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError([f"TLS client CA {ca_file} / certificate {cert_file}: {exc}"]) from exc
    return ctx


def describe_tls_error(exc: BaseException) -> str:
    """Say which TLS check failed: wrong CA, expired certificate, host name mismatch, or other."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        code = exc.verify_code
        msg = exc.verify_message or str(exc)
        # OpenSSL X509_V_ERR_* codes: 10 expired, 9 not yet valid, 62 host name mismatch,
        # 18/19/20/21/2 chain does not lead to a trusted (configured) CA.
        if code == 10:
            return f"certificate expired ({msg})"
        if code == 9:
            return f"certificate not yet valid ({msg})"
        if code in (62, 64) or "hostname" in msg.lower() or "ip address mismatch" in msg.lower():
            return f"host name mismatch ({msg})"
        if code in (2, 18, 19, 20, 21):
            return f"certificate not signed by the configured CA ({msg})"
        return f"certificate verification failed ({msg})"
    text = str(exc)
    lowered = text.lower()
    if "certificate expired" in lowered:
        return f"peer rejected our certificate: expired ({text})"
    if "unknown ca" in lowered:
        return f"peer rejected our certificate: unknown CA ({text})"
    if "certificate required" in lowered:
        return f"peer requires a client certificate ({text})"
    return f"TLS handshake failed ({text})"


# ---------------------------------------------------------------------------------------------
# Certificate maker


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes

    def certificate(self) -> x509.Certificate:
        """The parsed certificate."""
        return x509.load_pem_x509_certificate(self.cert_pem)

    def private_key(self) -> ec.EllipticCurvePrivateKey:
        """The parsed private key."""
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return key

    def write(self, cert_path: Path, key_path: Path) -> None:
        """Write both files (the key with mode 0600), each atomically."""
        _write_atomic(cert_path, self.cert_pem, 0o644)
        _write_atomic(key_path, self.key_pem, 0o600)


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def make_ca(common_name: str = "xceprov simulated CA", *, days: int = 3650) -> KeyPair:
    """A self-signed CA certificate and key (P-256)."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):  # unique, order kept
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    return x509.SubjectAlternativeName(entries)


def issue_cert(
    ca: KeyPair,
    common_name: str,
    names: list[str] | None = None,
    *,
    client: bool = False,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    days: int = 825,
) -> KeyPair:
    """A leaf certificate signed by ``ca``: a server certificate (SANs = ``names``) or a client one.

    ``not_before``/``not_after`` override the validity (e.g. both in the past for an expired
    certificate).
    """
    key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = ca.certificate()
    now = _now()
    start = not_before if not_before is not None else now - dt.timedelta(minutes=5)
    end = not_after if not_after is not None else now + dt.timedelta(days=days)
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([usage]),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.private_key().public_key()), critical=False
        )
    )
    if names:
        builder = builder.add_extension(_san(names), critical=False)
    cert = builder.sign(ca.private_key(), hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def cert_names(cert_pem: bytes) -> set[str]:
    """The DNS and IP SANs of a PEM certificate, as strings."""
    cert = x509.load_pem_x509_certificate(cert_pem)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    out: set[str] = set(san.get_values_for_type(x509.DNSName))
    out.update(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    return out


@dataclass(frozen=True)
class ServerTlsFiles:
    """Where :func:`ensure_server_tls` put the files."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path


def ensure_server_tls(tls_dir: Path, names: list[str]) -> ServerTlsFiles:
    """Make (or reuse) ``ca.pem``/``ca.key`` and ``server.pem``/``server.key`` in ``tls_dir``.

    The CA is kept once made (hosts trust it). The server certificate is reissued when it is
    missing, expires within a day, or lacks one of ``names`` as a SAN.
    """
    files = ServerTlsFiles(tls_dir / "ca.pem", tls_dir / "ca.key", tls_dir / "server.pem", tls_dir / "server.key")
    if files.ca_cert.exists() and files.ca_key.exists():
        ca = KeyPair(files.ca_cert.read_bytes(), files.ca_key.read_bytes())
    else:
        ca = make_ca()
        ca.write(files.ca_cert, files.ca_key)
    wanted = list(dict.fromkeys(["localhost", "127.0.0.1", *names]))
    reissue = True
    if files.server_cert.exists() and files.server_key.exists():
        pem = files.server_cert.read_bytes()
        cert = x509.load_pem_x509_certificate(pem)
        fresh = cert.not_valid_after_utc > _now() + dt.timedelta(days=1)
        signed_by_ca = cert.issuer == ca.certificate().subject
        reissue = not (fresh and signed_by_ca and set(wanted) <= cert_names(pem))
    if reissue:
        issue_cert(ca, "xceprov simulated controller", wanted).write(files.server_cert, files.server_key)
    return files
