"""TLS helpers: a good handshake; wrong CA, expired, wrong host name refused, saying which."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
from pathlib import Path

import pytest

from orchestrator.protocol.tls import (
    KeyPair,
    cert_names,
    client_context,
    describe_tls_error,
    ensure_server_tls,
    issue_cert,
    make_ca,
    server_context,
)


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


def test_ensure_server_tls_reissues_for_new_names_keeps_ca(tmp_path: Path) -> None:
    files = ensure_server_tls(tmp_path, ["127.0.0.1"])
    ca_before = files.ca_cert.read_bytes()
    first = files.server_cert.read_bytes()
    assert cert_names(first) >= {"localhost", "127.0.0.1"}
    assert ensure_server_tls(tmp_path, ["127.0.0.1"]).server_cert.read_bytes() == first
    again = ensure_server_tls(tmp_path, ["10.213.0.1"])
    assert "10.213.0.1" in cert_names(again.server_cert.read_bytes())
    assert again.ca_cert.read_bytes() == ca_before
    assert (files.server_key.stat().st_mode & 0o777) == 0o600
