"""Issue 30 end to end: a baked image, a first-boot template with a warm pool, hosts that join by themselves.

One simulated world with hosts (``xceprov sim up`` in a lab of its own, root only), driven as an
operator drives it: ``xceprov image bake cpu --provider sim --json``, then ``cpu`` becomes a
first-boot template on ``image: bake:newest`` with a warm pool of 2, and ``xceprov daemon`` runs.
The daemon fills the pool (two instances, stopped); a demand of 3 starts both pool instances (each
start mints fresh tokens, written into the boot copy of the user data as it starts) and creates one
(its token in the boot copy at launch). Before the demand, one pool instance's token is made
refused: the controller is told it was already used by another instance (its join binding), what a
copied token looks like. Then: the other two join the controller by themselves, no SSH reached any
of them (their consoles, where sshd logs, show no login; no play ran for them), their consoles hold
``XCE-FIRST-BOOT`` started lines, the refused one says ``failed`` at step ``join`` on its console,
shows so in ``xceprov status --json`` and is returned; no token's text is in any file the toolkit
keeps, in the daemon's log or in the audit.
"""

from __future__ import annotations

import json
import os
import secrets
import sqlite3
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from sim_world_helpers import SimWorld, can_run_hosts, wait_until, world_with_hosts

from orchestrator.model import tags as owner
from orchestrator.model.bootresult import MARKER
from orchestrator.model.facts import FactKind
from orchestrator.model.firstboot import JOIN_TOKEN_FILE, TOKEN_FORM
from orchestrator.protocol.jointoken import check_token, read_join_key
from orchestrator.sim.hosts.console import console_output
from tests.integration.test_daemon import running_daemon

pytestmark = [pytest.mark.integration, pytest.mark.root]

HOSTS_WANTED = 3


def first_boot_config(world: SimWorld) -> None:
    """``cpu``: first boot from its newest bake, a warm pool of 2; the daemon's test settings."""
    path = world.site / "xceprov.yaml"
    cfg: dict[str, Any] = yaml.safe_load(path.read_text())
    cpu = cfg["templates"]["cpu"]
    cpu["bootstrap"] = {"mode": "first-boot"}
    cpu["providers"]["sim"].update({"image": "bake:newest", "warm_pool": 2})
    cfg["daemon"] = {"reconcile_interval": "2s", "stop_timeout": "30s"}
    cfg["policy"] = {"cooldown": "1s", "orphans": {"settle_window": 0}}
    cfg["providers"]["sim"]["join_deadline"] = "5m"
    path.write_text(yaml.safe_dump(cfg))


def console(world: SimWorld, instance_id: str) -> str:
    out = console_output(world.sim, instance_id)
    return out.text if out else ""


def results(world: SimWorld, instance_id: str) -> list[tuple[str, str]]:
    """The host's ``XCE-FIRST-BOOT`` lines: (outcome, step)."""
    lines = [
        line[line.index(MARKER) + len(MARKER) :] for line in console(world, instance_id).splitlines() if MARKER in line
    ]
    return [(json.loads(x)["outcome"], json.loads(x).get("step", "")) for x in lines]


def boot_token(world: SimWorld, instance_id: str) -> str:
    """The join token in the copy of the user data the host boots with ("" when it holds none)."""
    boot = world.store.boot_copies().get(instance_id, "")
    files = (yaml.safe_load(boot) or {}).get("write_files", []) if boot else []
    return next((str(f["content"]).strip() for f in files if f["path"] == JOIN_TOKEN_FILE), "")


def refuse_token_of(world: SimWorld, key: str, host_name: str) -> None:
    """The controller records the token of ``key`` as used by another instance (a copied token)."""
    db = sqlite3.connect(world.sim / "controller.sqlite", timeout=30)
    try:
        now_ms = int(time.time() * 1000)
        db.execute(
            "INSERT INTO join_bindings (instance_key, host_name, instance_id, expires_ms, used_ms) VALUES (?,?,?,?,?)",
            (key, host_name, "i-elsewhere", now_ms + 3_600_000, now_ms),
        )
        db.commit()
    finally:
        db.close()


def join_bindings(world: SimWorld) -> dict[str, str]:
    """The controller's join bindings: instance key -> the instance id its token is bound to."""
    db = sqlite3.connect(world.sim / "controller.sqlite", timeout=30)
    try:
        return {str(k): str(i) for k, i in db.execute("SELECT instance_key, instance_id FROM join_bindings")}
    finally:
        db.close()


def kept_texts(world: SimWorld) -> list[tuple[str, str]]:
    """(path, text) of every file under the orchestrator's state directory and the site's logs."""
    out = []
    for f in [*world.state.rglob("*"), *world.site.glob("*.log")]:
        if f.is_file():
            out.append((str(f), f.read_bytes().decode("utf-8", "replace")))
    return out


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimWorld]:
    if not can_run_hosts():
        pytest.skip("simulated hosts need root and pycapnp (the node manager artifact)")
    site = tmp_path_factory.mktemp("fb-join") / "site"
    with world_with_hosts(site, f"fbj-{secrets.token_hex(3)}", f"{os.getpid()}/first-boot-join") as w:
        yield w


def test_baked_first_boot_hosts_and_pool_join_by_themselves_a_refused_one_is_returned(world: SimWorld) -> None:
    # The template is first boot before its first bake (its builder gets no token: it has no user
    # data and never joins); the bake starts from the base image named with --from.
    first_boot_config(world)
    made = json.loads(world.ok("image", "bake", "cpu", "--provider", "sim", "--from", "debian-12", "--json"))
    image_id = made["image_id"]
    audit_before = len(world.audit())

    with running_daemon(world, "daemon") as daemon:
        # The pool is filled: two instances of the baked image, stopped, tagged.
        def pool() -> dict[str, Any]:
            return {k: i for k, i in world.alive().items() if i.tags.get(owner.POOL) == "warm" and i.state == "stopped"}

        wait_until("a warm pool of 2", lambda: len(pool()) == 2, timeout=180)
        pooled = pool()
        assert {i.image for i in pooled.values()} == {image_id}
        bad_key = sorted(pooled)[0]
        refuse_token_of(world, bad_key, pooled[bad_key].name)
        at_fill = {k: boot_token(world, i.id) for k, i in pooled.items()}

        world.ok("sim", "submit", "--template", "cpu", "--hosts", str(HOSTS_WANTED), "--duration", "600s")

        def joined() -> set[str]:
            return {k for k, h in world.hosts().items() if h.joined_at > 0}

        def returned(key: str) -> bool:
            return key not in world.alive()

        wait_until(
            "two hosts joined and the refused one returned", lambda: len(joined()) >= 2 and returned(bad_key), 300
        )
        good = sorted(joined())
        # Each joined under the id the cloud gave it (cloud-init's record: its user data was
        # rendered before the id existed), which the controller binds its token to.
        cloud_ids = {k: i.id for k, i in world.alive().items()}
        assert {k: v for k, v in join_bindings(world).items() if k in good} == {k: cloud_ids[k] for k in good}
        shown: dict[str, Any] = {}

        def status_says() -> bool:
            # The daemon writes its status after each pass: the one after the joins and the return.
            assert daemon.alive(), daemon.log()[-4000:]
            shown.update(json.loads(world.ok("status", "--json")))
            member = shown["daemon"].get("first_boot") or {}
            return member.get("counts", {}).get("sim", {}).get("joined", 0) >= 2 and bool(member.get("failed"))

        wait_until("the status naming the joins and the failure", status_says, timeout=60, every=1)
        status = dict(shown)
        waiting = {k for k, i in world.alive().items() if i.tags.get(owner.POOL) == "warm"}
        boots = {k: boot_token(world, i.id) for k, i in world.alive().items()}

    # Joined: the other pool instance (started in place, same id) and the created one.
    facts = world.facts()
    started_pool = [k for k in pooled if k != bad_key]
    assert set(started_pool) <= set(good), (good, started_pool)
    created = [f.instance_key for f in facts if f.kind == FactKind.INSTANCE_CREATED and f.instance_key not in pooled]
    assert set(good) - set(started_pool) <= set(created)
    instances = world.store.list_instances({"xce:cluster": world.cluster}, include_terminated=True)
    by_key = {i.client_token: i for i in instances}
    for key in good:
        text = console(world, by_key[key].id)
        assert results(world, by_key[key].id) == [("started", "join")], text[-2000:]
        assert "Accepted publickey" not in text  # sshd logs every login on the console: none
    # The started pool instance booted with a token its start minted, expiring at the join
    # deadline of the start op's expectedHost fact (the one of its launch is older: it would have
    # expired had it waited longer than join_deadline in the pool).
    join_key = read_join_key(world.sim / "client" / "join.key")
    [pool_key] = started_pool
    expected = [f for f in facts if f.kind == FactKind.EXPECTED_HOST and f.instance_key == pool_key]
    fresh = check_token(join_key, pool_key, by_key[pool_key].name, boots[pool_key])
    assert boots[pool_key] != at_fill[pool_key] and fresh == expected[-1].join_deadline, (fresh, expected)
    # The refused one: the daemon read its console's failed line, the status names it failed at
    # step join with the controller's reason, and it is returned.
    bad = by_key[bad_key]
    assert bad.state == "terminated"
    read = [
        e["hosts"][bad.name] for e in world.audit() if e["action"] == "reconcile-first-boot" and bad.name in e["hosts"]
    ]
    assert (read[-1]["outcome"], read[-1]["step"]) == ("failed", "join"), read
    failed = status["daemon"]["first_boot"]["failed"]
    assert [(f["host"], f["step"]) for f in failed] == [(bad.name, "join")], status["daemon"]["first_boot"]
    assert "tokenUsed" in failed[0]["message"]
    # Joined, and the refilled pool (stopped, never booted) is no first-boot host waiting for a result.
    assert status["daemon"]["first_boot"]["counts"]["sim"]["joined"] >= 2
    assert waiting and not waiting & {row["key"] for row in status["daemon"]["first_boot"]["hosts"]}
    names = {by_key[k].name for k in good}
    # No play for any of them: the bootstrap phase recorded each started without one.
    plays = [
        e for e in world.audit()[audit_before:] if e["action"] == "reconcile-bootstrap" and names & set(e["hosts"])
    ]
    assert plays and all(outcome.startswith("started") for e in plays for outcome in e["hosts"].values()), plays
    # What a login would have left on a console (so that its absence above means something).
    (world.site / "ssh_config").write_text(world.ok("sim", "hosts", "ssh-config"))
    probe = by_key[good[0]]
    login = ["ssh", "-F", str(world.site / "ssh_config"), "-o", "BatchMode=yes", probe.name, "true"]
    assert subprocess.run(login, capture_output=True, timeout=60, check=False).returncode == 0
    wait_until("the login on the console", lambda: "Accepted publickey" in console(world, probe.id), timeout=10)
    # No token's text in anything the toolkit keeps (state dir: audit, facts, plans; the daemon's log).
    leaks = [p for p, t in kept_texts(world) if TOKEN_FORM.search(t)]
    assert leaks == []
