"""TLS helpers: a good handshake; wrong CA, expired, wrong host name refused, saying which; the
role and identity a client certificate names."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest

from orchestrator.protocol.tls import (
    PeerIdentity,
    client_context,
    describe_tls_error,
    identity_from_cert,
    identity_uri,
    peer_identity,
    server_context,
)
from orchestrator.sim.pki import KeyPair, issue_cert, issue_client, make_ca


def _write(tmp: Path, name: str, kp: KeyPair) -> tuple[Path, Path]:
    cert, key = tmp / f"{name}.pem", tmp / f"{name}.key"
    kp.write(cert, key)
    return cert, key


def _handshake(
    server_ctx: ssl.SSLContext,
    client_ctx: ssl.SSLContext,
    server_hostname: str,
) -> tuple[BaseException | None, BaseException | None]:
    """Run one handshake over loopback; returns (client error, server error)."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    server_error: list[BaseException] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(5)
        try:
            with server_ctx.wrap_socket(conn, server_side=True) as s:
                s.recv(1)  # TLS 1.3: client certificate problems surface on the first read
        except (ssl.SSLError, OSError) as exc:
            server_error.append(exc)
        finally:
            conn.close()

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    client_error: BaseException | None = None
    try:
        with (
            socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
            client_ctx.wrap_socket(raw, server_hostname=server_hostname) as s,
        ):
            s.sendall(b"x")
            s.recv(1)
    except (ssl.SSLError, OSError) as exc:
        client_error = exc
    t.join(5)
    listener.close()
    return client_error, (server_error[0] if server_error else None)


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, Path]:
    ca = make_ca()
    other_ca = make_ca("another CA")
    now = dt.datetime.now(dt.UTC)
    out: dict[str, Path] = {}
    out["ca"], _ = _write(tmp_path, "ca", ca)
    out["other_ca"], _ = _write(tmp_path, "other_ca", other_ca)
    out["server"], out["server_key"] = _write(tmp_path, "server", issue_cert(ca, "ctl", ["localhost", "127.0.0.1"]))
    expired = issue_cert(
        ca, "ctl", ["localhost"], not_before=now - dt.timedelta(days=10), not_after=now - dt.timedelta(days=1)
    )
    out["expired"], out["expired_key"] = _write(tmp_path, "expired", expired)
    out["client"], out["client_key"] = _write(tmp_path, "client", issue_cert(ca, "orch-a", client=True))
    return out


def test_good_handshake_by_name_and_ip(pki: dict[str, Path]) -> None:
    srv = server_context(pki["server"], pki["server_key"])
    for name in ("localhost", "127.0.0.1"):
        client_err, server_err = _handshake(srv, client_context(pki["ca"]), name)
        assert client_err is None and server_err is None


def test_wrong_ca(pki: dict[str, Path]) -> None:
    srv = server_context(pki["server"], pki["server_key"])
    err, _ = _handshake(srv, client_context(pki["other_ca"]), "localhost")
    assert err is not None
    assert "not signed by the configured CA" in describe_tls_error(err)


def test_expired_certificate(pki: dict[str, Path]) -> None:
    srv = server_context(pki["expired"], pki["expired_key"])
    err, _ = _handshake(srv, client_context(pki["ca"]), "localhost")
    assert err is not None
    assert "certificate expired" in describe_tls_error(err)


def test_wrong_host_name(pki: dict[str, Path]) -> None:
    srv = server_context(pki["server"], pki["server_key"])
    err, _ = _handshake(srv, client_context(pki["ca"]), "controller.example.org")
    assert err is not None
    assert "host name mismatch" in describe_tls_error(err)


def test_client_certificate_required(pki: dict[str, Path]) -> None:
    srv = server_context(pki["server"], pki["server_key"], client_ca_file=pki["ca"], require_client_cert=True)
    ok_client = client_context(pki["ca"], cert_file=pki["client"], key_file=pki["client_key"])
    assert _handshake(srv, ok_client, "localhost") == (None, None)
    _, server_err = _handshake(srv, client_context(pki["ca"]), "localhost")
    assert server_err is not None
    assert "certificate" in describe_tls_error(server_err)


def test_tls_below_1_2_refused(pki: dict[str, Path]) -> None:
    srv = server_context(pki["server"], pki["server_key"])
    assert srv.minimum_version == ssl.TLSVersion.TLSv1_2
    assert client_context(pki["ca"]).minimum_version == ssl.TLSVersion.TLSv1_2
    assert client_context(pki["ca"]).check_hostname


def _identity_over_tls(pki: dict[str, Path], tmp_path: Path, client: KeyPair | None) -> PeerIdentity | None:
    """The identity the server side reads from a real handshake with ``client``'s certificate."""
    srv = server_context(pki["server"], pki["server_key"], client_ca_file=pki["ca"])
    cert = _write(tmp_path, "id-client", client) if client is not None else None
    cli = client_context(pki["ca"], cert_file=cert[0] if cert else None, key_file=cert[1] if cert else None)
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[PeerIdentity | None] = []

    def serve() -> None:
        conn, _ = listener.accept()
        conn.settimeout(5)
        with conn, srv.wrap_socket(conn, server_side=True) as s:
            seen.append(peer_identity(s))
            s.sendall(b"x")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    with (
        socket.create_connection(listener.getsockname(), timeout=5) as raw,
        cli.wrap_socket(raw, server_hostname="localhost") as s,
    ):
        s.recv(1)
    t.join(5)
    listener.close()
    assert seen, "the server saw no connection"
    return seen[0]


def test_peer_identity_from_a_verified_client_certificate(pki: dict[str, Path], tmp_path: Path) -> None:
    ca = KeyPair(pki["ca"].read_bytes(), (pki["ca"].parent / "ca.key").read_bytes())
    got = _identity_over_tls(pki, tmp_path, issue_client(ca, "provisioner", "orch-a"))
    assert got == PeerIdentity("provisioner", "orch-a") and str(got) == "xce://provisioner/orch-a"
    assert _identity_over_tls(pki, tmp_path, None) is None
    # A client certificate without a role URI names nobody.
    assert _identity_over_tls(pki, tmp_path, issue_cert(ca, "orch-b", client=True)) is None


def test_identity_needs_exactly_one_well_formed_uri() -> None:
    def cert(*uris: str) -> dict[str, object]:
        return {"subjectAltName": (*(("URI", u) for u in uris), ("DNS", "x"))}

    assert identity_from_cert(cert("xce://admin/ops")) == PeerIdentity("admin", "ops")
    assert identity_from_cert(cert("xce://admin/ops", "xce://provisioner/a")) is None  # two roles: none
    assert identity_from_cert(cert("xce://worker/h1")) is None  # workers use join tokens
    assert identity_from_cert(cert("xce://provisioner/a/b")) is None
    assert identity_from_cert(cert("https://provisioner/a")) is None
    assert identity_from_cert({}) is None and identity_from_cert(None) is None
    with pytest.raises(ValueError, match="role"):
        identity_uri("worker", "h1")
