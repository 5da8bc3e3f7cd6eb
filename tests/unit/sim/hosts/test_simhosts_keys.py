"""known_hosts and ssh_config of the simulated hosts (no ssh binaries run here)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.sim.hosts.keys import KnownHost, control_dir, render_ssh_config, write_known_hosts


def test_known_hosts_has_one_line_per_host_with_name_and_address(tmp_path: Path) -> None:
    path = tmp_path / "hosts" / "known_hosts"
    write_known_hosts(
        path,
        [
            KnownHost("b", "10.213.0.3", "ssh-ed25519 BBBB root@b"),
            KnownHost("a", "10.213.0.2", "ssh-ed25519 AAAA root@a"),
        ],
    )
    assert path.read_text() == "a,10.213.0.2 ssh-ed25519 AAAA\nb,10.213.0.3 ssh-ed25519 BBBB\n"
    write_known_hosts(path, [])
    assert path.read_text() == ""


def test_ssh_config_keeps_strict_host_key_checking(tmp_path: Path) -> None:
    text = render_ssh_config(tmp_path, [KnownHost("node-1", "10.213.0.2", "")])
    assert "Host node-1\n    HostName 10.213.0.2\n" in text
    assert "Host 10.213.0.2 node-1\n" in text
    assert "    StrictHostKeyChecking yes\n" in text
    assert f"    UserKnownHostsFile {tmp_path.resolve()}/hosts/known_hosts\n" in text
    assert f"    IdentityFile {tmp_path.resolve()}/ssh/id_ed25519\n" in text
    assert "ProxyCommand" not in text


def test_control_sockets_fit_a_unix_socket_address(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / "sim"
    ctl = control_dir(deep)
    assert len(f"{ctl}/cm-root@255.255.255.255:65535") + 17 < 104
    assert control_dir(deep) == ctl  # the same for every caller
    assert control_dir(Path("/s")) == Path("/s/ssh")
