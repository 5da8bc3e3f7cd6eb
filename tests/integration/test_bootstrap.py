"""Bootstrap over real SSH: the service, the runner, the role and the example site on loopback hosts.

Hosts are ``tests/loopback_hosts.py`` (sshd per host on its own 127.x address under
``unshare``); the node manager is the simulated artifact of ``orchestrator.sim.nodemanager``
(nothing joins: no controller runs here, the worker just retries). Root only.
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from orchestrator.clients.ansible.hostkeys import keyscan
from orchestrator.clients.ansible.inventory import InstanceRecord
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.model.progress import HostDone, ProgressEvent, TaskDone
from orchestrator.services.bootstrap import bootstrap

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE_SITE = ROOT / "examples" / "site"


def _load_lab_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("loopback_hosts", ROOT / "tests" / "loopback_hosts.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


lh = _load_lab_module()

pytestmark = [
    pytest.mark.integration,
    pytest.mark.root,
    pytest.mark.skipif(not lh.sshd_available(), reason="loopback hosts need root, sshd and unshare"),
]


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulated node manager artifact (the stand-in when the real one cannot be built)."""
    dest = tmp_path_factory.mktemp("artifact")
    try:
        from orchestrator.sim.nodemanager import build_artifact

        return Path(build_artifact(dest))
    except Exception:  # the artifact needs pycapnp; without it the stand-in shows the same paths
        return Path(lh.build_standin_artifact(dest))


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[Any]:
    lab = lh.LoopbackLab(tmp_path / "lab")
    try:
        yield lab
    finally:
        lab.stop_all()


def _config(
    tmp_path: Path, lab: Any, site: Path | None, roles: str = "[site_motd]", xce: str = "{}", strategy: str = ""
) -> LoadedConfig:
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n")
    text = f"""
cluster: t1
state_dir: {tmp_path / "state"}
controller: {{addresses: ["127.0.0.1:7441"], worker_addresses: ["10.213.0.1:7441"], ca: {ca}}}
ansible:
  ssh_key: {lab.key}
  forks: 10
  timeout: 300s
  {"site_dir: " + str(site) if site else ""}
  {"strategy: " + strategy if strategy else ""}
providers: {{sim: {{module: xcesim}}}}
templates:
  cpu:
    providers: {{sim: {{flavor: c8, image: debian-12}}}}
    bootstrap: {{groups: [cpu], vars: {{tuned_profile: hpc}}, roles: {roles}}}
    xce: {xce}
"""
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


def _records(lab: Any, names: list[str] | None = None) -> list[InstanceRecord]:
    return [
        InstanceRecord(
            key=f"op1-{i:03d}",
            instance_id=h.instance_id,
            name=h.name,
            address=h.address,
            template="cpu",
            provider="sim",
            op_id="op1",
            port=h.port,
        )
        for i, h in enumerate(lab.hosts.values())
        if names is None or h.name in names
    ]


def _host_file(lab: Any, name: str, path: str) -> Path:
    """A file inside a host, read from its overlay's upper dir (what the host wrote)."""
    top, rest = path.lstrip("/").split("/", 1)
    return Path(lab.root / "hosts" / name / ("root" if top == "root" else f"upper/{top}") / rest)


def _sim_vars(artifact: Path) -> dict[str, Any]:
    return {
        "xce_node_manager_install_method": "artifact",
        "xce_node_manager_archive_src": str(artifact),
        "xce_node_manager_interpreter": "/usr/bin/python3",
        "ansible_python_interpreter": "/usr/bin/python3",
        "site_nfs_mounts_now": False,
        "xce_bootstrap_ssh_timeout": 30,
        "xce_bootstrap_cloud_init_timeout": 30,
    }


def test_bootstrap_example_site_idempotent_then_decommission(
    tmp_path: Path, lab: Any, artifact: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("cpu-a", "cpu-b"):
        lab.start(name, record_key=False)  # keys are recorded by the toolkit, not handed to it
    lab.wait_ready()
    loaded = _config(tmp_path, lab, EXAMPLE_SITE)
    seen: list[ProgressEvent] = []
    # The example site's group_vars/provider_sim.yml picks the artifact install and reads its path
    # from the environment: no install variables are passed here, so that file is what applies.
    monkeypatch.setenv("XCEPROV_NODE_MANAGER_ARTIFACT", str(artifact))
    waits = {"xce_bootstrap_ssh_timeout": 30, "xce_bootstrap_cloud_init_timeout": 30}

    first = bootstrap(loaded, ROOT, records=_records(lab), extra_vars=waits, progress=seen.append)

    assert {h: r.status for h, r in first.hosts.items()} == {"cpu-a": "changed", "cpu-b": "changed"}, [
        r.describe() for r in first.hosts.values()
    ]
    tasks = [p for p in seen if isinstance(p, TaskDone)]
    assert any(p.task == "Write the node manager configuration" and p.status == "changed" for p in tasks)
    assert sorted((p.host, p.outcome) for p in seen if isinstance(p, HostDone)) == [
        ("cpu-a", "changed"),
        ("cpu-b", "changed"),
    ]
    cfg = json.loads(_host_file(lab, "cpu-a", "/etc/xce/node-manager.json").read_text())
    assert cfg["roles"] == ["worker"]
    assert cfg["controller"] == {"addresses": ["10.213.0.1:7441"], "ca_file": "/etc/xce/ca.pem"}
    assert (cfg["template"], cfg["instance_id"], cfg["host_name"]) == ("cpu", "i-cpu-a", "cpu-a")
    assert "TEST" in _host_file(lab, "cpu-a", "/etc/xce/ca.pem").read_text()
    # The node manager runs (inside the host's own process list) under the supervisor.
    assert "node manager" in lab.run_in("cpu-a", "/opt/xce/sbin/xce-node-manager-service", "status")
    # The example site: pre hook, per-template role (site_motd), group_vars per template.
    assert "site=example template=cpu provider=sim" in _host_file(lab, "cpu-b", "/etc/xce-site").read_text()
    motd = _host_file(lab, "cpu-b", "/etc/motd").read_text()
    assert "CPU node: 8 slots" in motd and "instance=i-cpu-b" in motd
    assert "/shared/home nfs" in _host_file(lab, "cpu-b", "/etc/fstab").read_text()
    # Keys were recorded on first contact and pinned per instance.
    state = tmp_path / "state" / "ansible"
    assert set(json.loads((state / "host_keys.json").read_text())) == {"i-cpu-a", "i-cpu-b"}
    inventory = json.loads((state / "inventory" / "xceprov.yml").read_text())
    assert set(inventory["all"]["children"]["op_op1"]["hosts"]) == {"cpu-a", "cpu-b"}
    assert (first.artifact_dir / "job_events").is_dir()

    second = bootstrap(loaded, ROOT, records=_records(lab), extra_vars=waits)
    assert {h: (r.status, r.changed) for h, r in second.hosts.items()} == {"cpu-a": ("ok", 0), "cpu-b": ("ok", 0)}, [
        r.describe() for r in second.hosts.values()
    ]

    gone = bootstrap(loaded, ROOT, records=_records(lab), hosts=["cpu-b"], playbook="decommission")
    assert gone.hosts["cpu-b"].status == "changed", gone.hosts["cpu-b"].describe()
    assert set(gone.hosts) == {"cpu-b"}
    assert json.loads(_host_file(lab, "cpu-b", "/etc/xce/node-manager.json").read_text())["roles"] == []
    assert json.loads(_host_file(lab, "cpu-a", "/etc/xce/node-manager.json").read_text())["roles"] == ["worker"]


def test_faults_are_per_host_results(tmp_path: Path, lab: Any, artifact: Path) -> None:
    site = tmp_path / "site"
    (site / "group_vars").mkdir(parents=True)
    (site / "post-bootstrap.yml").write_text(
        "- name: Failing site hook\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Site check that fails on one host\n      ansible.builtin.fail:\n"
        "        msg: site says no\n      when: inventory_hostname == 'hookfail'\n"
    )
    lab.start("good", record_key=False)
    lab.start("late", delay=3.0, record_key=False)  # SSH and cloud-init come up 3 s later
    lab.start("hookfail", record_key=False)
    lab.start("noart", record_key=False)  # its archive path (site group_vars below) does not exist
    lab.wait_ready()  # all but "late"
    ghost_address = lab.hosts["good"].address.rsplit(".", 1)[0] + ".250"  # nothing listens there
    ghost = InstanceRecord("op1-099", "i-ghost", "ghost", ghost_address, "cpu", "sim", "op1", lab.port)
    records = [*_records(lab), ghost]
    loaded = _config(tmp_path, lab, site, roles="[]")
    evars = _sim_vars(artifact)
    site_vars = site / "group_vars" / "all.yml"
    site_vars.write_text(
        "xce_node_manager_archive_src: \"{{ '/nonexistent/nm.tar.gz' if inventory_hostname "
        "== 'noart' else '" + str(artifact) + "' }}\"\n"
    )
    del evars["xce_node_manager_archive_src"]

    result = bootstrap(loaded, ROOT, records=records, extra_vars=evars, ssh_wait=10)

    by = result.hosts
    assert by["good"].status == "changed", by["good"].describe()
    assert by["late"].status == "changed", by["late"].describe()
    assert by["ghost"].status == "unreachable" and "did not answer" in (by["ghost"].message or "")
    assert by["hookfail"].status == "failed"
    assert by["hookfail"].task == "Site check that fails on one host" and by["hookfail"].message == "site says no"
    assert by["noart"].status == "failed", by["noart"].describe()
    assert by["noart"].task == "Copy the node manager archive to the host"
    assert "/nonexistent/nm.tar.gz" in (by["noart"].message or "")
    assert sorted(result.failed) == ["ghost", "hookfail", "noart"]


class CountedScan:
    """ssh-keyscan, counting the addresses it was asked for."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, address: str, port: int, timeout: float) -> list[str]:
        self.calls.append(address)
        return keyscan(address, port, timeout)


def test_hosts_that_publish_their_key_are_bootstrapped_with_no_scan(tmp_path: Path, lab: Any, artifact: Path) -> None:
    """Keys read from the hosts' consoles are pinned before first contact: no ssh-keyscan runs,
    the late host's first connection is already checked, and each host is bootstrapped."""
    lab.start("pub1", record_key=False)
    lab.start("publate", delay=3.0, record_key=False)  # its key is on the console before its sshd is up
    scan = CountedScan()

    result = bootstrap(
        _config(tmp_path, lab, None, roles="[]"),
        ROOT,
        records=_records(lab),
        extra_vars=_sim_vars(artifact),
        ssh_wait=10,
        scanner=scan,
        published=lh.LoopbackConsoles(lab),
    )

    assert {h: r.status for h, r in result.hosts.items()} == {"pub1": "changed", "publate": "changed"}, [
        r.describe() for r in result.hosts.values()
    ]
    assert scan.calls == []
    recorded = json.loads((tmp_path / "state" / "ansible" / "host_keys.json").read_text())
    for name in ("pub1", "publate"):
        served = (lab.root / "hosts" / name / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        assert recorded[f"i-{name}"]["keys"] == [" ".join(served)]
        assert recorded[f"i-{name}"]["origin"] == "published"


def test_a_published_key_sshd_does_not_serve_leaves_the_host_unreachable(
    tmp_path: Path, lab: Any, artifact: Path
) -> None:
    """A console showing a key other than the one sshd serves: that host is unreachable with a
    line saying so, the real key is never learnt, and the honest host is bootstrapped."""
    lab.start("honest", record_key=False)
    lab.start("liar", record_key=False)
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    forged = " ".join(Path(f"{other}.pub").read_text().split()[:2])
    scan = CountedScan()
    evars = {**_sim_vars(artifact), "xce_bootstrap_ssh_timeout": 5}

    result = bootstrap(
        _config(tmp_path, lab, None, roles="[]"),
        ROOT,
        records=_records(lab),
        extra_vars=evars,
        ssh_wait=10,
        scanner=scan,
        published=lh.LoopbackConsoles(lab, forged={"liar": forged}),
    )

    assert result.hosts["honest"].status == "changed", result.hosts["honest"].describe()
    liar = result.hosts["liar"]
    assert liar.status == "unreachable", liar.describe()
    assert "is not the one instance i-liar published on its console" in (liar.message or "")
    assert "\n" not in (liar.message or "")
    assert scan.calls == [lab.hosts["liar"].address]  # asked once, after its play failed, to say why
    recorded = json.loads((tmp_path / "state" / "ansible" / "host_keys.json").read_text())
    served = " ".join((lab.root / "hosts" / "liar" / "ssh_host_ed25519_key.pub").read_text().split()[:2])
    assert recorded["i-liar"]["keys"] == [forged] and served not in json.dumps(recorded["i-liar"])


def _tfstate(tmp_path: Path, entries: list[tuple[Any, str, dict[str, str]]]) -> None:
    """What an apply leaves: the provider's Terraform state with the module's ``instances`` output.

    ``entries``: (loopback host, the name the cloud reports for it, its owner tags).
    """
    output = {
        f"op1-{i:03d}": {"id": h.instance_id, "name": name, "address": h.address, "port": h.port, "tags": tags}
        for i, (h, name, tags) in enumerate(entries)
    }
    workdir = tmp_path / "state" / "work" / "t1" / "sim"
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "terraform.tfstate").write_text(json.dumps({"version": 4, "outputs": {"instances": {"value": output}}}))


def _files_under(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*") if p.is_file() and not p.is_symlink()]


def test_template_values_tags_and_cloud_names_are_never_evaluated(
    tmp_path: Path, lab: Any, artifact: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A template's ``xce.model``, an owner tag read back from Terraform state and an instance
    renamed in the cloud all hold a command; none runs, the other hosts are bootstrapped, and a
    secret in our environment is in no file under the state directory afterwards."""
    marks = tmp_path / "marks"
    marks.mkdir()

    def hostile(what: str) -> str:
        return "{{ lookup('pipe', 'touch " + str(marks / what) + " MARKER-" + what + "') }}"

    secret = f"xce-test-secret-{tmp_path.name}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.chdir(marks)  # where a relative MARKER would land
    for name in ("hx-a", "hx-b", "hx-c"):
        lab.start(name, record_key=False)
    lab.wait_ready()
    hosts = lab.hosts
    ok_tags = {"xce:template": "cpu", "xce:provider": "sim", "xce:op_id": "op1"}
    _tfstate(
        tmp_path,
        [
            (hosts["hx-a"], "hx-a", {**ok_tags, "xce:op_id": hostile("tag")}),
            (hosts["hx-b"], "hx-b", ok_tags),
            (hosts["hx-c"], hostile("name"), ok_tags),  # renamed in the cloud
        ],
    )
    loaded = _config(tmp_path, lab, None, roles="[]", xce='{model: "' + hostile("model").replace('"', '\\"') + '"}')

    result = bootstrap(loaded, ROOT, extra_vars=_sim_vars(artifact))

    by = result.hosts
    assert by["hx-a"].status == "changed", by["hx-a"].describe()
    assert by["hx-b"].status == "changed", by["hx-b"].describe()
    assert by[hostile("name")].status == "failed"
    assert hostile("name") in (by[hostile("name")].message or "") and "not a valid host name" in (
        by[hostile("name")].message or ""
    )
    assert sorted(result.failed) == [hostile("name")]
    assert list(marks.iterdir()) == []
    assert not [p for p in _files_under(tmp_path) if p.name.startswith("MARKER")]
    # The values arrived as the text they are.
    cfg = json.loads(_host_file(lab, "hx-a", "/etc/xce/node-manager.json").read_text())
    assert (cfg["xce"]["model"], cfg["op_id"]) == (hostile("model"), hostile("tag"))
    assert not _host_file(lab, "hx-c", "/etc/xce/node-manager.json").exists()
    # No secret at rest, and what is kept is private.
    state = tmp_path / "state"
    kept = _files_under(state)
    assert any(p.name == "command" for p in kept) and any(p.name == "stdout" for p in kept)
    assert [p for p in kept if secret in p.read_text(errors="replace")] == []
    private = state / "ansible"
    assert {oct(p.stat().st_mode & 0o777) for p in private.rglob("*") if p.is_file() and not p.is_symlink()} == {
        "0o600"
    }
    assert {oct(p.stat().st_mode & 0o777) for p in [private, *private.rglob("*")] if p.is_dir()} == {"0o700"}


def test_a_name_with_pattern_characters_runs_on_no_other_host(tmp_path: Path, lab: Any, artifact: Path) -> None:
    """Cloud names like ``p*`` or ``pa,pb`` select nothing else: the run covers exactly the
    hosts chosen, by exact name."""
    for name in ("pa", "pb", "pc", "pd"):
        lab.start(name, record_key=False)
    lab.wait_ready()
    hosts = lab.hosts
    loaded = _config(tmp_path, lab, None, roles="[]")
    records = [
        InstanceRecord("op1-000", hosts["pa"].instance_id, "pa", hosts["pa"].address, "cpu", "sim", "op1", lab.port),
        InstanceRecord("op2-000", hosts["pb"].instance_id, "pb", hosts["pb"].address, "cpu", "sim", "op2", lab.port),
        InstanceRecord("op1-001", hosts["pc"].instance_id, "p*", hosts["pc"].address, "cpu", "sim", "op1", lab.port),
        InstanceRecord("op1-002", hosts["pd"].instance_id, "pb,pd", hosts["pd"].address, "cpu", "sim", "op1", lab.port),
    ]

    by_op = bootstrap(loaded, ROOT, records=records, op="op1", extra_vars=_sim_vars(artifact))
    by_name = bootstrap(loaded, ROOT, records=records, hosts=["p*", "pb,pd"], extra_vars=_sim_vars(artifact))

    assert {h: r.status for h, r in by_op.hosts.items()} == {"pa": "changed", "p*": "failed", "pb,pd": "failed"}
    assert {h: r.status for h, r in by_name.hosts.items()} == {"p*": "failed", "pb,pd": "failed"}
    assert _host_file(lab, "pa", "/etc/xce/node-manager.json").exists()
    for other in ("pb", "pc", "pd"):
        assert not _host_file(lab, other, "/etc/xce/node-manager.json").exists(), other


def test_a_hostile_address_in_terraform_state_fails_its_host_and_pins_no_key(
    tmp_path: Path, lab: Any, artifact: Path
) -> None:
    """An instance record whose address is ``<addr>,*`` (ssh-keyscan scans the first, known_hosts
    would read the pattern as "every host") or holds a newline and a key line: that host fails
    with a reason naming the value, known_hosts holds exactly the good hosts' keys, and the good
    hosts are bootstrapped."""
    for name in ("ha-good", "ha-other", "ha-comma", "ha-newline"):
        lab.start(name, record_key=False)
    lab.wait_ready()
    hosts = lab.hosts
    tags = {"xce:template": "cpu", "xce:provider": "sim", "xce:op_id": "op1"}
    hostile = {
        "ha-comma": f"{hosts['ha-comma'].address},*",
        "ha-newline": f"{hosts['ha-newline'].address}\n* ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIattacker",
    }
    output = {
        f"op1-{i:03d}": {
            "id": h.instance_id,
            "name": name,
            "address": hostile.get(name, h.address),
            "port": h.port,
            "tags": tags,
        }
        for i, (name, h) in enumerate(sorted(hosts.items()))
    }
    workdir = tmp_path / "state" / "work" / "t1" / "sim"
    workdir.mkdir(parents=True)
    (workdir / "terraform.tfstate").write_text(json.dumps({"version": 4, "outputs": {"instances": {"value": output}}}))
    loaded = _config(tmp_path, lab, None, roles="[]")

    result = bootstrap(loaded, ROOT, extra_vars=_sim_vars(artifact), ssh_wait=10)

    by = result.hosts
    assert {h: r.status for h, r in by.items()} == {
        "ha-good": "changed",
        "ha-other": "changed",
        "ha-comma": "failed",
        "ha-newline": "failed",
    }, {h: r.describe() for h, r in by.items()}
    for name, address in hostile.items():
        assert repr(address) in (by[name].message or "") and "neither an IP address nor a host name" in (
            by[name].message or ""
        )
    known = (tmp_path / "state" / "ansible" / "known_hosts").read_text().splitlines()
    good = {f"[{hosts[n].address}]:{hosts[n].port}" for n in ("ha-good", "ha-other")}
    assert known and {line.split()[0] for line in known} == good, known
    inventory = json.loads((tmp_path / "state" / "ansible" / "inventory" / "xceprov.yml").read_text())
    assert sorted(inventory["all"]["hosts"]) == ["ha-good", "ha-other"]
    assert not _host_file(lab, "ha-comma", "/etc/xce/node-manager.json").exists()


def test_end_to_end_worker_joins_the_simulated_controller(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """``xceprov bootstrap`` on the simulated world's own hosts (orchestrator.sim.hosts): the node
    manager installed from the simulated artifact joins the simulated controller over the lab."""
    import os
    import socket
    import time

    import yaml
    from click.testing import CliRunner
    from sim_labs import claim_test_lab
    from sim_world_helpers import one_region

    from orchestrator.cli.main import cli
    from orchestrator.sim.cloud.store import CloudStore
    from orchestrator.sim.hosts import lab as labnet

    try:
        import capnp  # noqa: F401  (the simulated node manager bundles pycapnp)
    except ImportError:
        pytest.skip("pycapnp is not installed: no simulated node manager artifact")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    lab = claim_test_lab(f"{os.getpid()}/{request.node.nodeid}")
    sim = tmp_path / "sim"
    cfg = yaml.safe_load((ROOT / "orchestrator" / "defaults" / "xceprov.yaml").read_text())
    cfg.update({"state_dir": str(tmp_path / "state"), "sim": {"state_dir": str(sim)}})
    cfg["controller"] = {
        "addresses": [f"127.0.0.1:{port}"],
        "worker_addresses": [f"{lab.gateway}:{port}"],
        "ca": str(sim / "tls" / "ca.pem"),
        "join_key": str(sim / "client" / "join.key"),
    }
    cfg.pop("ansible", None)  # the verb finds the simulated world's key itself
    one_region(cfg)
    cfg["providers"]["sim"]["join_deadline"] = 600  # the expiry of a re-run's join token, from now
    cfg_file = tmp_path / "xceprov.yaml"
    cfg_file.write_text(yaml.safe_dump(cfg))

    def xceprov(*args: str, code: int = 0) -> str:
        out = CliRunner().invoke(cli, ["--config", str(cfg_file), *args], catch_exceptions=False)
        assert out.exit_code == code, out.output
        return out.stdout  # progress lines go to stderr

    try:
        xceprov(
            "sim",
            "up",
            "--json",
            "--lab-name",
            lab.name,
            "--lab-subnet",
            str(lab.subnet),
            "--controller-port",
            str(port),
        )
        if not (sim / "tls" / "ca.pem").exists():
            pytest.skip("the simulated controller is not available here")
        store = CloudStore(sim / "cloud.sqlite")  # sim up bound it to the lab: its addresses are there
        name = f"e2e{os.getpid()}"
        tags = {"xce:template": "cpu", "xce:op_id": "op9", "xce:provider": "sim"}
        inst = store.create_instance(name, "c8.large", "debian-12", tags, "", "tok-e2e")
        # What an apply leaves: the provider's Terraform state with the module's `instances` output.
        workdir = tmp_path / "state" / "work" / cfg["cluster"] / "sim"
        workdir.mkdir(parents=True)
        output = {"op9-000": {"id": inst.id, "name": name, "address": inst.address, "tags": tags}}
        state = {"version": 4, "outputs": {"instances": {"value": output}}}
        (workdir / "terraform.tfstate").write_text(json.dumps(state))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listed = json.loads(xceprov("sim", "hosts", "list", "--json"))
            if any(h.get("name") == name and h["state"] == "ready" for h in listed):
                break
            time.sleep(0.2)

        minted = time.time()
        results = json.loads(xceprov("bootstrap", "--op", "op9", "--json"))

        assert results[name]["status"] == "changed", results
        # Its key came from its console (printed at boot, shown by the cloud), not from a scan.
        pinned = json.loads((tmp_path / "state" / "ansible" / "host_keys.json").read_text())[inst.id]
        served = (sim / "hosts" / inst.id / "ssh_host_ed25519_key.pub").read_text().split()[:2]
        assert pinned["origin"] == "published" and pinned["keys"] == [" ".join(served)], pinned
        log = sim / "hosts" / inst.id / "upper" / "var" / "log" / "xce" / "node-manager.log"
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "joined controller" not in (log.read_text() if log.exists() else ""):
            time.sleep(0.5)
        assert "joined controller" in log.read_text(), log.read_text()[-2000:]
        # The host's join token is on the host (0600) and in no file the orchestrator keeps.
        token_file = sim / "hosts" / inst.id / "upper" / "etc" / "xce" / "join-token"
        token = token_file.read_text().strip()
        # v2, expiring the provider's join_deadline from now (a re-run knows no expectedHost fact).
        version, expires, mac = token.split(".")
        assert (version, len(mac)) == ("v2", 64) and token_file.stat().st_mode & 0o777 == 0o600
        assert minted + 600 <= int(expires) <= time.time() + 601
        kept = [p for p in (tmp_path / "state").rglob("*") if p.is_file() and mac.encode() in p.read_bytes()]
        assert kept == [], kept
        inventory = json.loads((tmp_path / "state" / "ansible" / "inventory" / "xceprov.yml").read_text())
        assert name in inventory["all"]["children"]["module_xcesim"]["hosts"]
    finally:
        CliRunner().invoke(cli, ["--config", str(cfg_file), "sim", "down"])
        labnet.destroy_lab(lab)


def _failing_hook_site(tmp_path: Path, lab: Any, artifact: Path, names: tuple[str, ...]) -> tuple[Path, list[str]]:
    """Lab hosts ``names`` in Terraform state, and a site whose post-bootstrap hook fails on the
    host named ``pv-fail``: the site directory and the ``-e`` arguments of the simulated artifact.

    Loopback hosts are no instances of the simulated cloud: no console ever shows their keys, so
    the site looks for published keys for one second (``host_key_publish_wait``), not for the
    default half of ``ansible.timeout`` (150 s of nothing per run), before it scans them."""
    import shutil

    from orchestrator.sim.nodemanager.artifact import ARTIFACT_NAME

    site = tmp_path / "site"
    site.mkdir()
    (site / "post-bootstrap.yml").write_text(
        "- name: Failing site hook\n  hosts: all\n  gather_facts: false\n  tasks:\n"
        "    - name: Site check that fails on one host\n      ansible.builtin.fail:\n"
        "        msg: site says no\n      when: inventory_hostname == 'pv-fail'\n"
    )
    for name in names:
        lab.start(name, record_key=False)
    lab.wait_ready()
    tags = {"xce:template": "cpu", "xce:provider": "sim", "xce:op_id": "op1"}
    _tfstate(tmp_path, [(h, h.name, tags) for h in lab.hosts.values()])
    # The simulated world's artifact is where the verb looks for it, newer than its sources.
    kept = tmp_path / "sim" / "artifacts" / ARTIFACT_NAME
    kept.parent.mkdir(parents=True)
    shutil.copy(artifact, kept)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n")
    cfg = f"""
cluster: t1
state_dir: {tmp_path / "state"}
sim: {{state_dir: {tmp_path / "sim"}}}
controller: {{addresses: ["127.0.0.1:7441"], worker_addresses: ["10.213.0.1:7441"], ca: {tmp_path / "ca.pem"}}}
ansible: {{ssh_key: {lab.key}, forks: 10, timeout: 300s, host_key_publish_wait: 1s, site_dir: {site}}}
providers: {{sim: {{module: xcesim}}}}
templates:
  cpu:
    providers: {{sim: {{flavor: c8, image: debian-12}}}}
    bootstrap: {{groups: [cpu], roles: []}}
"""
    (site / "xceprov.yaml").write_text(cfg)
    evars = [a for k, v in _sim_vars(kept).items() for a in ("-e", f"{k}={v if isinstance(v, str) else json.dumps(v)}")]
    return site, evars


def test_cli_shows_a_line_per_host_and_tasks_only_with_v(tmp_path: Path, lab: Any, artifact: Path) -> None:
    """``xceprov bootstrap`` as an operator runs it, output not a terminal (as in CI or a pipe):
    on stderr a few phase lines however many tasks ran and a plain line per host state change
    (waiting, running, its outcome with the failing task), one line per host on stdout at the
    end; the per-task lines only with ``-v``, and no per-host lines with ``-q``."""
    import re
    import time

    from cli_run import xceprov

    site, evars = _failing_hook_site(tmp_path, lab, artifact, ("pv-a", "pv-b", "pv-fail"))

    started = time.monotonic()
    quiet = xceprov(site, "bootstrap", *evars)
    elapsed = time.monotonic() - started

    assert quiet.returncode == 1, quiet.stdout + quiet.stderr
    hosts = [ln for ln in quiet.stdout.splitlines() if not ln.startswith("artifacts: ")]
    assert len(hosts) == 3
    assert re.fullmatch(r"pv-a: changed \(ok=\d+ changed=\d+\)", hosts[0]) and hosts[1].startswith("pv-b: changed ")
    assert hosts[2] == "pv-fail: failed at task 'Site check that fails on one host': site says no"
    lines = quiet.stderr.splitlines()
    assert "\x1b" not in quiet.stderr  # not a terminal: no control characters
    progress = [ln for ln in lines if re.fullmatch(r"bootstrap: \d/3 hosts done(, 1 failed)?", ln)]
    by_host = {
        name: [ln for ln in lines if ln.startswith(f"bootstrap: {name} ")] for name in ("pv-a", "pv-b", "pv-fail")
    }
    assert sorted(progress + [ln for found in by_host.values() for ln in found]) == sorted(lines), lines
    # The phase lines are few: the phase's start, end, and at most one per 10 s between them.
    assert progress[0] == "bootstrap: 0/3 hosts done" and progress[-1] == "bootstrap: 2/3 hosts done, 1 failed"
    assert len(progress) <= 2 + elapsed / 10 + 1
    # One line per host and state change (never per task): waiting, running, its outcome; the
    # failure keeps its task and reason.
    for name, found in by_host.items():
        assert len(found) == 3, found
        assert found[0] == f"bootstrap: {name} waiting"
        assert re.fullmatch(rf"bootstrap: {name} running \(task '.+'\)", found[1]), found
    assert re.fullmatch(r"bootstrap: pv-a changed after \d+s", by_host["pv-a"][2])
    assert re.fullmatch(
        r"bootstrap: pv-fail failed after \d+s: at task 'Site check that fails on one host': site says no",
        by_host["pv-fail"][2],
    )
    assert "Write the node manager configuration" not in quiet.stderr

    verbose = xceprov(site, "-v", "bootstrap", "-q", *evars)

    assert verbose.returncode == 1, verbose.stderr
    assert verbose.stdout.splitlines()[2] == hosts[2]
    assert not [ln for ln in verbose.stderr.splitlines() if ln.startswith("bootstrap: pv-")]  # -q: no host lines
    tasks = [ln.split(None, 2) for ln in verbose.stderr.splitlines() if ln.startswith("  ")]
    written = [t for t in tasks if t[2] == "Write the node manager configuration"]
    assert sorted(t[0] for t in written) == ["pv-a", "pv-b", "pv-fail"]
    assert len(tasks) > 10 * len(progress)


def test_cli_on_a_terminal_updates_each_host_s_line_in_place(tmp_path: Path, lab: Any, artifact: Path) -> None:
    """``xceprov bootstrap`` with stderr on a terminal (a pty): each host's line is drawn, then
    redrawn in place (cursor up, erase line) as its state and task change, and left with its
    outcome; the failure keeps its task. stdout (a pipe) has the same one line per host as always."""
    import os
    import pty
    import re
    import subprocess
    import sys
    import threading

    site, evars = _failing_hook_site(tmp_path, lab, artifact, ("pv-a", "pv-fail"))
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 65536)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    env = {**os.environ, "XCEPROV_CONFIG": str(site / "xceprov.yaml"), "COLUMNS": "160", "LINES": "40"}
    try:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "bootstrap", *evars],
            cwd=site,
            env=env,
            stdout=subprocess.PIPE,
            stderr=slave,
            text=True,
            timeout=600,
            check=False,
        )
    finally:
        os.close(slave)
        reader.join(10)
        os.close(master)
    screen = b"".join(chunks).decode("utf-8", errors="replace")
    assert done.returncode == 1, done.stdout + screen
    hosts = [ln for ln in done.stdout.splitlines() if not ln.startswith("artifacts: ")]
    assert hosts[1] == "pv-fail: failed at task 'Site check that fails on one host': site says no"
    assert re.search(r"pv-a +waiting +0:00", screen), screen
    assert re.search(r"pv-a +running +\d+:\d\d +\S", screen), screen  # a task named while it ran
    assert "\x1b[1A\x1b[2K" in screen  # redrawn in place
    last = screen.rsplit("bootstrap:", 1)[-1]
    assert re.search(r"pv-a +changed +\d+:\d\d", last), last
    assert re.search(r"pv-fail +failed +\d+:\d\d +at task 'Site check that fails on one host': site says no", last)


SLOW_STEPS = 60  # one second each: far longer than the test waits


def _slow_site(tmp_path: Path, lab: Any, artifact: Path) -> Path:
    """A site whose pre-bootstrap hook takes SLOW_STEPS seconds; its configuration uses the lab
    (published keys looked for one second only, as in ``_failing_hook_site``)."""
    import shutil

    import yaml

    from orchestrator.sim.nodemanager.artifact import ARTIFACT_NAME

    site = tmp_path / "site"
    site.mkdir()
    steps = [{"name": f"Slow step {n}", "ansible.builtin.command": "sleep 1"} for n in range(1, SLOW_STEPS + 1)]
    play = [{"name": "The test's slow site hook", "hosts": "all", "gather_facts": False, "tasks": steps}]
    (site / "pre-bootstrap.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    kept = tmp_path / "sim" / "artifacts" / ARTIFACT_NAME
    kept.parent.mkdir(parents=True)
    shutil.copy(artifact, kept)
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\nTEST\n-----END CERTIFICATE-----\n")
    (site / "xceprov.yaml").write_text(f"""
cluster: t1
state_dir: {tmp_path / "state"}
sim: {{state_dir: {tmp_path / "sim"}}}
controller: {{addresses: ["127.0.0.1:7441"], worker_addresses: ["10.213.0.1:7441"], ca: {tmp_path / "ca.pem"}}}
ansible: {{ssh_key: {lab.key}, forks: 10, timeout: 300s, host_key_publish_wait: 1s, site_dir: {site}}}
providers: {{sim: {{module: xcesim}}}}
templates:
  cpu:
    providers: {{sim: {{flavor: c8, image: debian-12}}}}
    bootstrap: {{groups: [cpu], roles: []}}
""")
    return site


def test_ctrl_c_stops_the_play_between_tasks_and_exits_130(tmp_path: Path, lab: Any, artifact: Path) -> None:
    """``xceprov bootstrap`` and a Ctrl-C as a terminal sends it (SIGINT to the command's whole
    process group) while a site hook of many short steps runs: the play ends between two steps,
    each host shows as stopped, the exit status is 130, and no ansible-playbook is left."""
    import os
    import signal
    import subprocess
    import sys

    from play_processes import playbooks_with
    from sim_world_helpers import wait_until

    from orchestrator.sim.nodemanager.artifact import ARTIFACT_NAME

    for name in ("ic-a", "ic-b"):
        lab.start(name, record_key=False)
    lab.wait_ready()
    tags = {"xce:template": "cpu", "xce:provider": "sim", "xce:op_id": "op1"}
    _tfstate(tmp_path, [(h, h.name, tags) for h in lab.hosts.values()])
    site = _slow_site(tmp_path, lab, artifact)
    evars = [
        a
        for k, v in _sim_vars(tmp_path / "sim" / "artifacts" / ARTIFACT_NAME).items()
        for a in ("-e", f"{k}={v if isinstance(v, str) else json.dumps(v)}")
    ]
    config = site / "xceprov.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestrator.cli", "bootstrap", *evars],
        cwd=site,
        env={**os.environ, "XCEPROV_CONFIG": str(config)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        runs = tmp_path / "state" / "ansible" / "artifacts"

        def output() -> str:
            return "".join(p.read_text(errors="replace") for p in runs.glob("*/stdout"))

        wait_until("the play in its slow hook", lambda: "Slow step 3" in output() or proc.poll() is not None, 180)
        assert playbooks_with(f"XCEPROV_CONFIG={config}"), "no play running when Ctrl-C came"
        os.killpg(proc.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole foreground group
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
    assert proc.returncode == 130, out + err
    assert "stopping the play after its current task" in err and err.rstrip().endswith("xceprov: interrupted")
    hosts = [ln for ln in out.splitlines() if not ln.startswith("artifacts: ")]
    assert hosts == [f"{h}: stopped: not finished: interrupted (Ctrl-C)" for h in ("ic-a", "ic-b")]
    assert "User interrupted execution" in output() and f"Slow step {SLOW_STEPS}" not in output()
    assert playbooks_with(f"XCEPROV_CONFIG={config}") == []


@pytest.mark.parametrize("strategy", ["mitogen_linear", "linear"])
def test_a_host_presenting_another_key_than_the_pinned_one_fails_and_is_untouched(
    tmp_path: Path, lab: Any, artifact: Path, strategy: str
) -> None:
    # First contact "recorded" a key the host does not have (a man in the middle at the first
    # scan, say): every connection of the play must refuse the host, whichever strategy runs it.
    lab.start("good", record_key=False)
    lab.start("spoofed", record_key=False)
    lab.wait_ready()
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    wrong = " ".join(Path(f"{other}.pub").read_text().split()[:2])

    def scanner(address: str, port: int, timeout: float) -> list[str]:
        return [wrong] if address == lab.hosts["spoofed"].address else keyscan(address, port, timeout)

    loaded = _config(tmp_path, lab, None, roles="[]", strategy=strategy)
    result = bootstrap(loaded, ROOT, records=_records(lab), extra_vars=_sim_vars(artifact), scanner=scanner)

    assert result.hosts["good"].status == "changed", result.hosts["good"].describe()
    spoofed = result.hosts["spoofed"]
    assert spoofed.status == "failed" and spoofed.task == "Wait for SSH", spoofed.describe()
    assert not _host_file(lab, "spoofed", "/etc/xce/node-manager.json").exists()
