"""The simulated world's PKI: server certificate reissue, client files, private permissions;
and worker join tokens."""

from __future__ import annotations

import stat
from pathlib import Path

from orchestrator.protocol.jointoken import read_join_key
from orchestrator.protocol.tls import identity_from_cert
from orchestrator.sim.pki import cert_names, ensure_client_files, ensure_server_tls


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_ensure_server_tls_reissues_for_new_names_keeps_ca(tmp_path: Path) -> None:
    files = ensure_server_tls(tmp_path / "tls", ["127.0.0.1"])
    ca_before = files.ca_cert.read_bytes()
    first = files.server_cert.read_bytes()
    assert cert_names(first) >= {"localhost", "127.0.0.1"}
    assert ensure_server_tls(tmp_path / "tls", ["127.0.0.1"]).server_cert.read_bytes() == first
    again = ensure_server_tls(tmp_path / "tls", ["10.213.0.1"])
    assert "10.213.0.1" in cert_names(again.server_cert.read_bytes())
    assert again.ca_cert.read_bytes() == ca_before
    assert _mode(files.server_key) == 0o600 and _mode(files.ca_key) == 0o600 and _mode(files.join_key) == 0o600
    assert _mode(tmp_path / "tls") == 0o700


def test_client_files_name_the_provisioner_and_share_the_join_key(tmp_path: Path) -> None:
    import ssl

    files = ensure_client_files(tmp_path)
    assert _mode(files.key) == 0o600 and _mode(files.join_key) == 0o600 and _mode(files.cert.parent) == 0o700
    decoded = ssl._ssl._test_decode_cert(str(files.cert))  # type: ignore[attr-defined]
    ident = identity_from_cert(decoded)
    assert ident is not None and (ident.role, ident.identity) == ("provisioner", "sim-orchestrator")
    controller_key = read_join_key(tmp_path / "tls" / "join.key")
    assert read_join_key(files.join_key) == controller_key
    before = files.cert.read_bytes()
    assert ensure_client_files(tmp_path).cert.read_bytes() == before  # kept while valid
