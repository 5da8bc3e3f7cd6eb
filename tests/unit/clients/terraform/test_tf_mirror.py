"""The local provider mirror: layout, launcher script, CLI configuration, idempotence."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from orchestrator.clients.terraform.mirror import (
    XCESIM,
    LocalProvider,
    cache_lock,
    ensure_mirror,
    launcher_env,
    plugin_cache_dir,
)
from orchestrator.errors import ConfigError


def test_layout_and_config(tmp_path: Path) -> None:
    config = ensure_mirror(tmp_path, [XCESIM])
    assert config == tmp_path.resolve() / "terraform.rc"
    exe = tmp_path / "mirror/registry.terraform.io/xce/xcesim/0.1.0/linux_amd64/terraform-provider-xcesim_v0.1.0"
    assert os.access(exe, os.X_OK)
    script = exe.read_text()
    assert script.startswith("#!/bin/sh\n")
    assert f"-m {XCESIM.module}" in script
    text = config.read_text()
    assert "filesystem_mirror" in text
    assert 'include = ["registry.terraform.io/xce/*"]' in text
    assert 'exclude = ["registry.terraform.io/xce/*"]' in text
    assert f'plugin_cache_dir = "{plugin_cache_dir(tmp_path.resolve())}"' in text
    assert plugin_cache_dir(tmp_path).is_dir()


def test_launcher_runs_the_module_with_the_engine_interpreter(tmp_path: Path) -> None:
    # A provider backed by a standard-library module proves the script execs Python -m MODULE.
    fake = LocalProvider("acme", "echo", "1.2.3", "platform")
    ensure_mirror(tmp_path, [fake])
    exe = tmp_path / "mirror" / fake.executable_relpath()
    env = {**os.environ, **launcher_env([fake])}
    assert env["XCEPROV_PYTHON"] == sys.executable
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True, timeout=60, env=env)
    assert out.stdout.strip()  # `python -m platform` prints the platform string
    bare = {k: v for k, v in os.environ.items() if not k.startswith("XCEPROV_")}
    failed = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, env=bare)
    assert failed.returncode == 1 and "XCEPROV_PYTHON is not set" in failed.stderr


def test_launcher_is_the_same_on_every_machine(tmp_path: Path) -> None:
    # Its checksum goes into .terraform.lock.hcl: no interpreter or checkout path inside.
    ensure_mirror(tmp_path / "a", [XCESIM])
    ensure_mirror(tmp_path / "b", [XCESIM])
    a = (tmp_path / "a" / "mirror" / XCESIM.executable_relpath()).read_text()
    b = (tmp_path / "b" / "mirror" / XCESIM.executable_relpath()).read_text()
    assert a == b
    assert sys.executable not in a and str(tmp_path) not in a
    assert "XCEPROV_PYTHONPATH" in launcher_env([XCESIM])


def test_idempotent_and_no_rewrite(tmp_path: Path) -> None:
    config = ensure_mirror(tmp_path, [XCESIM])
    exe = tmp_path / "mirror" / XCESIM.executable_relpath()
    before = (config.stat().st_ino, exe.stat().st_ino)
    assert ensure_mirror(tmp_path, [XCESIM]) == config
    assert (config.stat().st_ino, exe.stat().st_ino) == before
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_concurrent_writers_leave_whole_files(tmp_path: Path) -> None:
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda _: ensure_mirror(tmp_path, [XCESIM]), range(16)))
    assert len(set(results)) == 1
    assert "provider_installation" in results[0].read_text()
    assert not [p for p in tmp_path.rglob("*.tmp")]


def test_template_sequences_are_escaped(tmp_path: Path) -> None:
    odd = tmp_path / "a${b}%{c}"
    config = ensure_mirror(odd, [XCESIM])
    assert "$${b}%%{c}" in config.read_text()


def test_cache_lock_is_reentrant_per_object(tmp_path: Path) -> None:
    lock = cache_lock(plugin_cache_dir(tmp_path))
    with lock, lock:
        assert lock.is_locked
    assert not lock.is_locked
    assert sys.executable  # the launcher depends on it


def test_a_site_directory_mirror_serves_every_other_provider_and_nothing_is_downloaded(tmp_path: Path) -> None:
    site = tmp_path / "site mirror"
    site.mkdir()
    text = ensure_mirror(tmp_path / "home", [XCESIM], str(site)).read_text()
    assert "direct {" not in text
    assert f'  filesystem_mirror {{\n    path = "{site}"\n    exclude = ["registry.terraform.io/xce/*"]\n  }}\n' in text
    # The toolkit's own providers still come from the toolkit's mirror.
    assert 'include = ["registry.terraform.io/xce/*"]' in text


def test_a_network_mirror_is_named_by_its_url(tmp_path: Path) -> None:
    text = ensure_mirror(tmp_path, [XCESIM], "https://mirror.example/providers/").read_text()
    assert "direct {" not in text
    assert (
        'network_mirror {\n    url = "https://mirror.example/providers/"\n    exclude = ["registry.terraform.io/xce/*"]'
        in text
    )


def test_a_site_mirror_directory_that_does_not_exist_is_a_configuration_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        ensure_mirror(tmp_path, [XCESIM], str(tmp_path / "nope"))
    assert raised.value.problems == [f"terraform.provider_mirror: {tmp_path / 'nope'}: no such directory"]
    assert not (tmp_path / "terraform.rc").exists()


def test_a_mirror_urls_credentials_are_only_in_the_private_cli_configuration(tmp_path: Path) -> None:
    url = "https://xce:s3cr%3Ct@mirror.example/providers/"
    umask = os.umask(0)  # whatever the umask
    try:
        used = ensure_mirror(tmp_path, [XCESIM], url)
    finally:
        os.umask(umask)
    assert used == tmp_path.resolve() / "terraform.private.rc"
    assert stat.S_IMODE(used.stat().st_mode) == 0o600 and f'url = "{url}"' in used.read_text()
    public = (tmp_path / "terraform.rc").read_text()
    assert 'url = "https://mirror.example/providers/"' in public and "s3cr" not in public and "xce:" not in public
    # Credentials dropped from the configuration: the private file goes, terraform.rc is used again.
    assert ensure_mirror(tmp_path, [XCESIM], "https://mirror.example/providers/") == tmp_path.resolve() / "terraform.rc"
    assert not used.exists()
