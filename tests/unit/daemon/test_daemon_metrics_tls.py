"""The metrics endpoint over TLS: a real TLS scrape, client certificates, and files that cannot be used."""

from __future__ import annotations

import contextlib
import logging
import socket
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli
from orchestrator.daemon.metrics import DaemonMetrics, MetricsEndpoint, start_endpoint
from orchestrator.daemon.metrics_http import ServerLimits
from orchestrator.errors import ConfigError
from orchestrator.model.config import MetricsSettings
from orchestrator.sim import pki

SITE = """
cluster: t
state_dir: state
controller: {{addresses: ["127.0.0.1:1"], ca: system, connect_timeout: 1}}
providers: {{sim: {{module: xcesim}}}}
templates:
  cpu: {{providers: {{sim: {{flavor: c8.large, image: debian-12}}}}}}
daemon: {{metrics: {metrics}}}
"""


@dataclass(frozen=True)
class Pki:
    """A CA, the endpoint's certificate, a scraper's certificate, and one from another CA."""

    ca: Path
    cert: Path
    key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    d = tmp_path_factory.mktemp("metrics-pki")
    authority, other = pki.make_ca(), pki.make_ca("another CA")
    authority.write(d / "ca.pem", d / "ca.key")
    pki.issue_cert(authority, "metrics", ["127.0.0.1", "localhost"]).write(d / "cert.pem", d / "key.pem")
    pki.issue_cert(authority, "prometheus", client=True).write(d / "client.pem", d / "client.key")
    pki.issue_cert(other, "prometheus", client=True).write(d / "stranger.pem", d / "stranger.key")
    return Pki(
        d / "ca.pem",
        d / "cert.pem",
        d / "key.pem",
        d / "client.pem",
        d / "client.key",
        d / "stranger.pem",
        d / "stranger.key",
    )


@contextlib.contextmanager
def serving(settings: MetricsSettings) -> Iterator[MetricsEndpoint]:
    metrics = DaemonMetrics()
    metrics.set_lease("sim", valid=True, remaining_s=7.5)
    endpoint = start_endpoint(settings, metrics, "site.yaml")
    assert endpoint is not None
    try:
        yield endpoint
    finally:
        endpoint.stop()


def scrape_tls(endpoint: MetricsEndpoint, ca: Path, cert: tuple[Path, Path] | None = None) -> str:
    context = ssl.create_default_context(cafile=str(ca))
    if cert is not None:
        context.load_cert_chain(*cert)
    host, port = endpoint.address
    with urllib.request.urlopen(f"https://{host}:{port}/metrics", timeout=10, context=context) as reply:
        assert reply.status == 200
        return str(reply.read().decode())


def test_a_tls_scrape_is_answered_and_plain_http_is_not(certs: Pki) -> None:
    with serving(MetricsSettings(listen="127.0.0.1:0", tls_cert=certs.cert, tls_key=certs.key)) as endpoint:
        assert 'xceprov_lease_valid{provider="sim"} 1.0' in scrape_tls(endpoint, certs.ca)
        # Clear text to a TLS endpoint: closed without an answer (no metric leaves in clear text).
        answer = b""
        with socket.create_connection(endpoint.address, timeout=10) as raw:
            raw.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            with contextlib.suppress(ConnectionResetError):  # closed, or reset with our bytes unread
                while chunk := raw.recv(65536):
                    answer += chunk
        assert b"xceprov_" not in answer and b"HTTP/" not in answer
        assert "xceprov_lease_valid" in scrape_tls(endpoint, certs.ca)  # still serving
        # A request in one TLS record larger than one read of the server: the rest is decrypted
        # data waiting in the TLS layer, which the server reads without waiting for the socket.
        context = ssl.create_default_context(cafile=str(certs.ca))
        with (
            socket.create_connection(endpoint.address, timeout=10) as raw,
            context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
        ):
            tls.sendall(b"GET /metrics HTTP/1.0\r\nX-Padding: " + b"p" * 12000 + b"\r\n\r\n")
            assert tls.recv(100).startswith(b"HTTP/1.0 200 ")


def test_a_stalled_handshake_holds_no_thread_and_is_closed_after_the_read_timeout(
    certs: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    limits = ServerLimits(read_timeout=1.0)
    before = threading.active_count()
    settings = MetricsSettings(listen="127.0.0.1:0", tls_cert=certs.cert, tls_key=certs.key)
    with caplog.at_level(logging.INFO, logger="orchestrator.daemon.metrics"):
        endpoint = start_endpoint(settings, DaemonMetrics(), "site.yaml", limits)
    assert endpoint is not None
    stalled: list[socket.socket] = []
    try:
        host, port = endpoint.address
        assert f"metrics served on https://{host}:{port}/metrics" in caplog.messages
        for _ in range(20):  # the first bytes of a TLS record, then nothing
            sock = socket.create_connection((host, port), timeout=10)
            sock.sendall(b"\x16\x03\x01")
            stalled.append(sock)
        assert threading.active_count() <= before + 1 + limits.workers
        assert "xceprov_" in scrape_tls(endpoint, certs.ca)  # answered meanwhile
        for sock in stalled:  # each is closed by the server once read_timeout passed
            with contextlib.suppress(ConnectionResetError):
                assert sock.recv(1) == b""
    finally:
        for sock in stalled:
            sock.close()
        endpoint.stop()


def test_with_a_client_ca_only_a_scraper_with_its_certificate_is_answered(certs: Pki) -> None:
    settings = MetricsSettings(listen="127.0.0.1:0", tls_cert=certs.cert, tls_key=certs.key, tls_client_ca=certs.ca)
    with serving(settings) as endpoint:
        assert "xceprov_lease_valid" in scrape_tls(endpoint, certs.ca, (certs.client_cert, certs.client_key))
        for refused in (None, (certs.stranger_cert, certs.stranger_key)):
            with pytest.raises((ssl.SSLError, ConnectionError, urllib.error.URLError)):
                scrape_tls(endpoint, certs.ca, refused)
        assert "xceprov_lease_valid" in scrape_tls(endpoint, certs.ca, (certs.client_cert, certs.client_key))


def test_files_that_cannot_be_used_are_one_line_naming_the_key(certs: Pki, tmp_path: Path) -> None:
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate\n")
    cases = [
        (MetricsSettings(listen="127.0.0.1:0", tls_cert=tmp_path / "none.pem", tls_key=certs.key), "tls_cert"),
        (MetricsSettings(listen="127.0.0.1:0", tls_cert=certs.cert, tls_key=tmp_path / "none.key"), "tls_key"),
        (MetricsSettings(listen="127.0.0.1:0", tls_cert=junk, tls_key=certs.key), "tls_cert"),
        (MetricsSettings(listen="127.0.0.1:0", tls_cert=certs.cert, tls_key=certs.client_key), "tls_cert"),
        (
            MetricsSettings(listen="127.0.0.1:0", tls_cert=certs.cert, tls_key=certs.key, tls_client_ca=junk),
            "tls_client_ca",
        ),
    ]
    for settings, key in cases:
        with pytest.raises(ConfigError) as info:
            start_endpoint(settings, DaemonMetrics(), "site.yaml")
        (line,) = info.value.problems
        assert line.startswith(f"site.yaml: daemon.metrics.{key}: cannot be used: "), line
        assert "\n" not in line


def write_site(tmp_path: Path, metrics: str) -> Path:
    cfg = tmp_path / "xceprov.yaml"
    cfg.write_text(SITE.format(metrics=metrics))
    return cfg


@pytest.mark.parametrize(
    ("metrics", "says"),
    [
        ("{listen: '127.0.0.1:0', tls_cert: cert.pem}", "daemon.metrics: tls_cert is set but tls_key is not"),
        ("{listen: '127.0.0.1:0', tls_key: key.pem}", "daemon.metrics: tls_key is set but tls_cert is not"),
        ("{listen: '127.0.0.1:0', tls_client_ca: ca.pem}", "daemon.metrics: tls_client_ca is set but tls_cert"),
    ],
)
def test_half_a_tls_setting_is_refused_by_validate(tmp_path: Path, metrics: str, says: str) -> None:
    cfg = write_site(tmp_path, metrics)
    result = CliRunner().invoke(cli, ["--config", str(cfg), "validate"])
    assert result.exit_code == 3, result.output
    assert f"{cfg}: {says}" in result.output, result.output


def test_the_daemon_refuses_to_start_with_a_certificate_it_cannot_use(tmp_path: Path) -> None:
    (tmp_path / "cert.pem").write_text("not a certificate\n")
    (tmp_path / "key.pem").write_text("not a key\n")
    # Relative paths are the configuration file's directory's, as every path of the file.
    cfg = write_site(tmp_path, "{listen: '127.0.0.1:0', tls_cert: cert.pem, tls_key: key.pem}")
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "--config", str(cfg), "daemon"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd="/",
    )
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert f"{cfg}: daemon.metrics.tls_cert: cannot be used: not a certificate with its private key in tls_key" in last
