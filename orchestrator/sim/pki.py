"""The simulated world's small PKI: a cluster CA, the controller's server certificate, client
certificates that name a role and an identity, and the worker join key.

Not production PKI: it serves ``xceprov sim up``, the simulated controller and the tests. A real
site issues these with its own CA; docs/protocol.md ("Authentication and roles") says what the
certificates must contain. This is the only module that needs ``cryptography``; the product's
TLS code (``orchestrator.protocol.tls``) builds contexts with the standard library only.

Files under ``<sim_state_dir>``:

- ``tls/`` (0700): ``ca.pem``, ``ca.key``, ``server.pem``, ``server.key``, ``join.key`` (the
  controller's own files; keys 0600);
- ``client/`` (0700): ``provisioner.pem``, ``provisioner.key``, ``join.key`` (what the
  orchestrator is given: its client certificate and the join key it mints worker tokens with).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from orchestrator.protocol.tls import identity_uri

PROVISIONER_ID: Final = "sim-orchestrator"  # the identity in the world's provisioner certificate
JOIN_KEY_BYTES: Final = 32


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
        """Write both files (the key 0600, its directory 0700), each atomically."""
        write_private(cert_path, self.cert_pem, 0o644)
        write_private(key_path, self.key_pem, 0o600)


def private_dir(path: Path) -> Path:
    """Create ``path`` (and parents) and make it 0700: it holds private keys."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def write_private(path: Path, data: bytes, mode: int) -> None:
    """Write ``data`` atomically with ``mode`` (the file never exists with wider permissions)."""
    private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.chmod(tmp, mode)  # the umask may have narrowed it; never widen beyond ``mode``
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename survives a crash
    finally:
        os.close(dir_fd)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


_CA_USAGE: Final = x509.KeyUsage(
    digital_signature=True,
    content_commitment=False,
    key_encipherment=False,
    data_encipherment=False,
    key_agreement=False,
    key_cert_sign=True,
    crl_sign=True,
    encipher_only=False,
    decipher_only=False,
)


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
        .add_extension(_CA_USAGE, critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def _san(names: list[str], uris: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for name in dict.fromkeys(names):  # unique, order kept
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(name)))
        except ValueError:
            entries.append(x509.DNSName(name))
    entries += [x509.UniformResourceIdentifier(u) for u in dict.fromkeys(uris)]
    return x509.SubjectAlternativeName(entries)


def issue_cert(
    ca: KeyPair,
    common_name: str,
    names: list[str] | None = None,
    *,
    client: bool = False,
    uris: list[str] | None = None,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
    days: int = 825,
) -> KeyPair:
    """A leaf certificate signed by ``ca``: a server certificate (SANs = ``names``) or a client one.

    ``uris`` are URI SANs (a client's role and identity: :func:`issue_client`).
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
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.private_key().public_key()), critical=False
        )
    )
    if names or uris:
        builder = builder.add_extension(_san(names or [], uris or []), critical=False)
    cert = builder.sign(ca.private_key(), hashes.SHA256())
    return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_client(
    ca: KeyPair,
    role: str,
    identity: str,
    *,
    not_before: dt.datetime | None = None,
    not_after: dt.datetime | None = None,
) -> KeyPair:
    """A client certificate naming ``role`` and ``identity`` (SAN URI ``xce://<role>/<identity>``)."""
    uris = [identity_uri(role, identity)]
    return issue_cert(ca, identity, client=True, uris=uris, not_before=not_before, not_after=not_after)


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
    join_key: Path


def load_ca(tls_dir: Path) -> KeyPair:
    """The CA in ``tls_dir``, made (and kept from then on: hosts trust it) when missing."""
    ca_cert, ca_key = tls_dir / "ca.pem", tls_dir / "ca.key"
    if ca_cert.exists() and ca_key.exists():
        return KeyPair(ca_cert.read_bytes(), ca_key.read_bytes())
    ca = make_ca()
    ca.write(ca_cert, ca_key)
    return ca


def ensure_join_key(path: Path) -> bytes:
    """The worker join key at ``path`` (hex text, 0600), made when missing; returns its bytes."""
    try:
        return bytes.fromhex(path.read_text().strip())
    except (OSError, ValueError):
        key = secrets.token_bytes(JOIN_KEY_BYTES)
        write_private(path, key.hex().encode() + b"\n", 0o600)
        return key


def ensure_server_tls(tls_dir: Path, names: list[str]) -> ServerTlsFiles:
    """Make (or reuse) the CA, ``server.pem``/``server.key`` and ``join.key`` in ``tls_dir``.

    The server certificate is reissued when it is missing, expires within a day, is not signed
    by the CA, or lacks one of ``names`` as a SAN.
    """
    private_dir(tls_dir)
    files = ServerTlsFiles(
        tls_dir / "ca.pem", tls_dir / "ca.key", tls_dir / "server.pem", tls_dir / "server.key", tls_dir / "join.key"
    )
    ca = load_ca(tls_dir)
    ensure_join_key(files.join_key)
    wanted = list(dict.fromkeys(["localhost", "127.0.0.1", *names]))
    if _needs_reissue(files.server_cert, files.server_key, ca, set(wanted)):
        issue_cert(ca, "xceprov simulated controller", wanted).write(files.server_cert, files.server_key)
    return files


def _needs_reissue(cert_path: Path, key_path: Path, ca: KeyPair, names: set[str]) -> bool:
    if not (cert_path.exists() and key_path.exists()):
        return True
    pem = cert_path.read_bytes()
    cert = x509.load_pem_x509_certificate(pem)
    fresh = cert.not_valid_after_utc > _now() + dt.timedelta(days=1)
    return not (fresh and cert.issuer == ca.certificate().subject and names <= cert_names(pem))


@dataclass(frozen=True)
class ClientFiles:
    """What the orchestrator is given to talk to the simulated controller."""

    cert: Path
    key: Path
    join_key: Path


def ensure_client_files(state_dir: Path, identity: str = PROVISIONER_ID) -> ClientFiles:
    """Issue (or keep) the provisioner's client certificate and a copy of the join key.

    ``<state_dir>/client/`` (0700): ``provisioner.pem``, ``provisioner.key`` (0600) and
    ``join.key`` (0600). The certificate is reissued when it expires within a day or is not
    signed by the current CA.
    """
    tls_dir = private_dir(state_dir / "tls")
    client_dir = private_dir(state_dir / "client")
    ca = load_ca(tls_dir)
    join_key = ensure_join_key(tls_dir / "join.key")
    files = ClientFiles(client_dir / "provisioner.pem", client_dir / "provisioner.key", client_dir / "join.key")
    if _needs_reissue(files.cert, files.key, ca, set()):
        issue_client(ca, "provisioner", identity).write(files.cert, files.key)
    try:
        current = bytes.fromhex(files.join_key.read_text().strip())
    except (OSError, ValueError):
        current = b""
    if current != join_key:
        write_private(files.join_key, join_key.hex().encode() + b"\n", 0o600)
    return files
