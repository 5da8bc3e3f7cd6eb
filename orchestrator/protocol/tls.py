"""TLS for the controller link: context builders for both ends and the peer's identity.

Clients verify the controller's certificate against the configured CA and check the host name
by default; a client certificate is sent when configured. Both ends require TLS 1.2 or later.

A client certificate names its role and identity in one URI subject alternative name,
``xce://<role>/<identity>`` (docs/protocol.md, "Authentication and roles"); :func:`peer_identity`
reads it from a verified connection. Standard library only: certificates are issued elsewhere
(the simulated world's ``orchestrator.sim.pki``, or the site's own CA).
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass
from typing import Any, Final

from orchestrator.errors import ConfigError

URI_SCHEME: Final = "xce://"
CERT_ROLES: Final = frozenset({"provisioner", "admin"})
IDENTITY_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")

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
# Peer identity


@dataclass(frozen=True)
class PeerIdentity:
    """The role and identity a verified client certificate names."""

    role: str
    identity: str

    def __str__(self) -> str:
        return identity_uri(self.role, self.identity)


def identity_uri(role: str, identity: str) -> str:
    """The URI SAN that names ``role`` and ``identity``: ``xce://<role>/<identity>``."""
    if role not in CERT_ROLES:
        raise ValueError(f"role {role!r} is not one of {sorted(CERT_ROLES)}")
    if not IDENTITY_PATTERN.fullmatch(identity):
        raise ValueError(f"identity {identity!r} must match {IDENTITY_PATTERN.pattern}")
    return f"{URI_SCHEME}{role}/{identity}"


def identity_from_cert(cert: dict[str, Any] | None) -> PeerIdentity | None:
    """The identity in a decoded certificate (``SSLSocket.getpeercert()``), or ``None``.

    Exactly one URI SAN with the ``xce://`` scheme must be present and well-formed; none, two or
    a malformed one mean no identity (a certificate that names two roles names none).
    """
    if not cert:
        return None
    uris = [str(v) for k, v in cert.get("subjectAltName", ()) if k == "URI" and str(v).startswith(URI_SCHEME)]
    if len(uris) != 1:
        return None
    role, sep, identity = uris[0][len(URI_SCHEME) :].partition("/")
    if not sep or role not in CERT_ROLES or not IDENTITY_PATTERN.fullmatch(identity):
        return None
    return PeerIdentity(role, identity)


def peer_identity(sock: ssl.SSLSocket) -> PeerIdentity | None:
    """The identity of a TLS peer whose certificate the handshake verified, or ``None``."""
    return identity_from_cert(sock.getpeercert())
