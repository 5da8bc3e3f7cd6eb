"""A network mirror's credentials (``https://user:password@host/``) stay secret (issue 27 item 2).

A real HTTPS mirror (the provider network mirror protocol, a certificate of a CA made here and
trusted through ``SSL_CERT_FILE``) that answers only HTTP basic auth with the right credentials
serves the Python provider as ``example/xcesim``. Through the real bundled Terraform:
``terraform lock`` gets every listing and the package with the credentials, yet they are in no
output, no command line, and not in ``terraform.rc`` (only in the 0600 ``terraform.private.rc``);
a lock that fails says so without them.
"""

from __future__ import annotations

import base64
import io
import json
import ssl
import stat
import threading
import zipfile
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import pytest
from cli_run import xceprov

from orchestrator.clients.terraform.mirror import LocalProvider, ensure_mirror
from orchestrator.configfile import parse_config
from orchestrator.errors import TerraformError
from orchestrator.services.terraform_lock import lock_site
from orchestrator.sim import pki
from tests.integration.test_provider_lock import mirrored_site, toolkit_with, write_site

pytestmark = pytest.mark.integration

USER = "mirror-user"
PASSWORD = 'Mk3<r&o"r#p/w@d%Zq9'  # characters a URL must encode, and markers: Mk3, Zq9
MARKERS = ("Mk3", "Zq9")
SOURCE = "registry.terraform.io/example/xcesim"


def mirror_url(port: int, password: str = PASSWORD) -> str:
    return f"https://{USER}:{quote(password, safe='')}@127.0.0.1:{port}/"


def leaks(text: str) -> list[str]:
    return [marker for marker in MARKERS if marker in text]


class Mirror(ThreadingHTTPServer):
    """The network mirror: every request and whether it carried the right basic auth."""

    def __init__(self, package: bytes) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.package = package
        self.requests: list[tuple[str, bool]] = []


class _Handler(BaseHTTPRequestHandler):
    server: Mirror

    def do_GET(self) -> None:
        expected = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        allowed = self.headers.get("Authorization") == expected
        self.server.requests.append((self.path, allowed))
        base = f"/{SOURCE}/"
        if not allowed:
            self._answer(401, b"", "text/plain")
        elif self.path == base + "index.json":
            self._answer(200, json.dumps({"versions": {"0.1.0": {}}}).encode())
        elif self.path == base + "0.1.0.json":
            archive = {"linux_amd64": {"url": "xcesim_0.1.0_linux_amd64.zip"}}
            self._answer(200, json.dumps({"archives": archive}).encode())
        elif self.path == base + "xcesim_0.1.0_linux_amd64.zip":
            self._answer(200, self.server.package, "application/zip")
        else:
            self._answer(404, b"", "text/plain")

    def _answer(self, code: int, body: bytes, kind: str = "application/json") -> None:
        self.send_response(code)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


def provider_package(tmp_path: Path) -> bytes:
    """The Python provider's launcher as ``example/xcesim`` 0.1.0, zipped as a registry packs it."""
    served = LocalProvider("example", "xcesim", "0.1.0", "orchestrator.sim.cloud.provider")
    launcher = ensure_mirror(tmp_path / "packed", [served]).parent / "mirror" / served.executable_relpath()
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        info = zipfile.ZipInfo(launcher.name)
        info.external_attr = 0o755 << 16
        archive.writestr(info, launcher.read_bytes())
    return data.getvalue()


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Mirror]:
    ca = pki.make_ca("mirror test CA")
    leaf = pki.issue_cert(ca, "127.0.0.1", ["127.0.0.1"])
    tls = tmp_path / "tls"
    tls.mkdir()
    for name, data in (("ca.pem", ca.cert_pem), ("cert.pem", leaf.cert_pem), ("key.pem", leaf.key_pem)):
        (tls / name).write_bytes(data)
    monkeypatch.setenv("SSL_CERT_FILE", str(tls / "ca.pem"))  # Terraform (Go) trusts the test CA
    server = Mirror(provider_package(tmp_path))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tls / "cert.pem", tls / "key.pem")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_the_lock_authenticates_to_the_mirror_and_the_credentials_are_nowhere_else(
    tmp_path: Path, mirror: Mirror, monkeypatch: pytest.MonkeyPatch
) -> None:
    toolkit = toolkit_with(tmp_path, "example/xcesim", monkeypatch)
    url = mirror_url(mirror.server_address[1])
    site = mirrored_site(tmp_path, url)  # type: ignore[arg-type]
    loaded = parse_config((site / "xceprov.yaml").read_text(), "xceprov.yaml", site)
    report = lock_site(loaded, toolkit)
    assert report.locked == [f"terraform/roots/mirrored: provider {SOURCE} 0.1.0"]
    # Every listing and the package were asked for with the credentials, and only so.
    assert {path.rsplit("/", 1)[-1] for path, _ in mirror.requests} >= {
        "index.json",
        "0.1.0.json",
        "xcesim_0.1.0_linux_amd64.zip",
    }
    assert all(allowed for _, allowed in mirror.requests), mirror.requests
    home = site / "state" / "terraform"
    public = (home / "terraform.rc").read_text()
    assert f'url = "https://127.0.0.1:{mirror.server_address[1]}/"' in public and leaks(public) == []
    assert USER not in public
    private = home / "terraform.private.rc"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600 and f'url = "{url}"' in private.read_text()
    written = [p for p in (site / "state").rglob("*") if p.is_file() and p != private]
    assert [p for p in written if leaks(p.read_text(errors="replace"))] == []

    # The mirror refuses other credentials: the lock fails, saying so without any of them.
    wrong = mirrored_site(tmp_path, mirror_url(mirror.server_address[1], PASSWORD.replace("Zq9", "Zq8")))  # type: ignore[arg-type]
    loaded = parse_config((wrong / "xceprov.yaml").read_text(), "xceprov.yaml", wrong)
    with pytest.raises(TerraformError) as refused:
        lock_site(loaded, toolkit, upgrade=True)
    assert "rejected the given authentication credentials" in str(refused.value).replace("\n", " ")
    assert leaks(str(refused.value)) == [] and "Zq8" not in str(refused.value)


def test_the_lock_verb_never_shows_the_credentials(tmp_path: Path) -> None:
    """``xceprov terraform lock`` of a registry provider from a credentialed mirror nobody serves."""
    site = write_site(tmp_path, module="aws", terraform=f"terraform: {{provider_mirror: '{mirror_url(9)}'}}")
    done = xceprov(site, "terraform", "lock")
    assert done.returncode != 0
    assert done.stderr.startswith("xceprov: terraform/roots/aws: "), done.stderr
    assert leaks(done.stdout + done.stderr) == [] and ":***@127.0.0.1:9/" in done.stderr, done.stderr
    # Written as Terraform refuses it (unencoded): one line naming the key, never the password.
    raw = f"https://{USER}:Mk3<r&o%Zq9@mirror.example/"
    (site / "xceprov.yaml").write_text((site / "xceprov.yaml").read_text().replace(mirror_url(9), raw))
    done = xceprov(site, "terraform", "lock")
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert "terraform.provider_mirror" in line and "https://***@mirror.example/" in line and "percent-encode" in line
    assert leaks(line) == []
