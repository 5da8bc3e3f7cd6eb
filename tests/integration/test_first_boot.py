"""First boot through the real Terraform and the simulated cloud (issue 30, deliverable 2).

An apply of a ``first-boot`` template creates instances whose boot copy of the user data (what
the simulated host runs cloud-init on at boot, ``orchestrator/sim/hosts/boot.py``) writes each
host's own join token to ``/etc/xce/join-token`` (0600), no push play runs, and no file the
toolkit keeps (Terraform's state as ``terraform show -json`` prints it, the op's saved plan, the
bundle, the desired set, the fact journal, the audit), no log line and no ``plan --json`` holds
any token's text. Standalone (no controller): nothing here joins; the join itself is the
simulated controller's (tests/unit/sim/controller/test_simctl_join_tokens.py).
"""

from __future__ import annotations

import io
import json
import logging
import stat
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from cli_run import xceprov

from orchestrator.configfile import load_config
from orchestrator.errors import TerraformError
from orchestrator.model.firstboot import JOIN_TOKEN_FILE, STARTED_OUTCOME, TOKEN_FORM
from orchestrator.paths import toolkit_root
from orchestrator.protocol.jointoken import check_token
from orchestrator.services.apply import apply_bundle
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.hosts.cloudinit import run_cloud_init
from orchestrator.workspace.terraform import engine_for
from orchestrator.workspace.workdir import ProviderWorkdir

pytestmark = pytest.mark.integration

JOIN_KEY = "5f" * 32
HOSTILE = 'm"odel ${var.x} {{ 7*7 }} %{ if true }y%{ endif }\n- path: /etc/shadow\n$(reboot)'
SITE = f"""
cluster: fbtest
state_dir: state
standalone: true
controller: {{ca: system, worker_addresses: ["10.213.0.1:7441"], join_key: join.key}}
providers:
  sim: {{module: xcesim, max_instances: 10, join_deadline: 7m}}
templates:
  cpu:
    xce: {{model: {json.dumps(HOSTILE)}}}
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
    bootstrap: {{mode: first-boot}}
"""


class RecordingEngine:
    """The real engine; each apply's saved plan is copied and the variable files it was given noted."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.plans: list[bytes] = []
        self.var_files: list[list[Path]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply(self, workdir: Path, plan_file: Path | None = None, **kwargs: Any) -> Any:
        if plan_file is not None:
            self.plans.append(plan_file.read_bytes())
        self.var_files.append(list(kwargs.get("var_files", ())))
        if kwargs.get("var_files"):
            # The saved plan holds no token, and Terraform will not apply it without them again.
            with pytest.raises(TerraformError, match="must also be set during the apply phase"):
                self.inner.apply(workdir, plan_file=plan_file, **{**kwargs, "var_files": []})
        return self.inner.apply(workdir, plan_file=plan_file, **kwargs)


def _texts(path: Path) -> list[str]:
    """Every file under ``path`` as text, the members of zip files (saved plans) unpacked."""
    out = []
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        data = f.read_bytes()
        out.extend(_unpacked(data))
    return out


def _unpacked(data: bytes) -> list[str]:
    if data[:2] == b"PK":
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return [archive.read(n).decode("utf-8", "replace") for n in archive.namelist()]
    return [data.decode("utf-8", "replace")]


def test_apply_writes_each_hosts_token_at_boot_and_keeps_it_nowhere(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    (tmp_path / "join.key").write_text(JOIN_KEY + "\n")
    planned = xceprov(tmp_path, "plan", "cpu=2", "--json", "--out", "bundle")
    assert planned.returncode == 0, planned.stderr
    loaded = load_config(str(tmp_path / "xceprov.yaml"))
    engine = RecordingEngine(engine_for(loaded.config))
    before = time.time()
    caplog.set_level(logging.DEBUG)
    # The recording engine stands in for the Engine protocol by delegation (mypy cannot see that).
    [applied] = apply_bundle(loaded, tmp_path / "bundle", toolkit_root(), engine, bootstrap=True)  # type: ignore[arg-type]
    after = time.time()

    # No push play: every host is started at its creation, and nothing was tried over SSH.
    [op] = applied.ops
    assert op.bootstrap == {c.name: STARTED_OUTCOME for c in op.created} and len(op.created) == 2
    assert not (tmp_path / "state" / "ansible" / "inventory").exists()

    # Each host boots with its own token, 0600, bound to its key and name, expiring at its deadline.
    store = CloudStore(tmp_path / "state" / "sim" / "cloud.sqlite")
    try:
        instances = {i.id: i for i in store.list_instances()}
        boots = store.boot_copies()
    finally:
        store.close()
    assert sorted(boots) == sorted(instances) == sorted(c.instance_id for c in op.created)
    tokens = []
    for iid, inst in instances.items():
        root = tmp_path / "hosts" / iid
        run_cloud_init(boots[iid], iid, root=root)
        token_file = root / JOIN_TOKEN_FILE.lstrip("/")
        token = token_file.read_text().strip()
        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        expires = check_token(bytes.fromhex(JOIN_KEY), inst.client_token, inst.name, token)
        assert isinstance(expires, int) and before + 420 <= expires <= after + 421
        created = next(c for c in op.created if c.instance_id == iid)
        assert created.join_deadline == expires  # the expectedHost fact's deadline is the token's
        nm = json.loads((root / "etc" / "xce" / "node-manager.json").read_text())
        assert nm["join_token_file"] == JOIN_TOKEN_FILE and nm["xce"]["model"] == HOSTILE
        assert token not in inst.user_data  # what the cloud's API (and so Terraform) reports
        tokens.append(token)
    assert len(set(tokens)) == 2

    # The apply was given the ephemeral variables file, which is gone with the op's scratch.
    assert [len(files) for files in engine.var_files] == [1] and not engine.var_files[0][0].exists()
    # Nowhere in clear: the state as Terraform shows it, the op's saved plan, the bundle, every file
    # under the state directory but the simulated cloud's own (desired set, facts, audit), the
    # log, and plan --json.
    workdir = ProviderWorkdir(loaded.config, "sim", toolkit_root())
    shown = json.dumps(engine.show_state(workdir.path))
    kept = [
        shown,
        *(t for plan in engine.plans for t in _unpacked(plan)),
        *_texts(tmp_path / "bundle"),
        *(t for d in (tmp_path / "state").iterdir() if d.name != "sim" for t in _texts(d)),
        caplog.text,
        planned.stdout + planned.stderr,
    ]
    assert len(engine.plans) == 1
    for token in tokens:
        leaks = [text[:80] for text in kept if token in text or token.split(".")[2] in text]
        assert leaks == []
    assert not any(TOKEN_FORM.search(text) for text in kept)
