"""The command line's fenced session: refusals a user reads, and standalone mode."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest
from tffake import ROOT, FakeEngine, site_config

from orchestrator.clients.controller.types import LeaseDenied
from orchestrator.configfile import parse_config
from orchestrator.errors import ControllerError, LeaseHeld
from orchestrator.model import tags as owner
from orchestrator.services.ops import fenced_session, lease_refusal


def test_a_held_lease_is_refused_naming_the_holder_and_when_to_retry() -> None:
    refused = lease_refusal(LeaseDenied("sim", "sim-orchestrator/c1-cli-m1.42.ab", 12.4, "held"))
    assert str(refused) == (
        "provider sim: the lease is held by sim-orchestrator/c1-cli-m1.42.ab (wait for that command to end); "
        "retry in 12s"
    )
    assert refused.exit_code == 9 and refused.holder == "sim-orchestrator/c1-cli-m1.42.ab"
    daemon = lease_refusal(LeaseDenied("sim", "sim-orchestrator/c1-daemon-m1.41.cd", 12.4, "held"))
    assert str(daemon) == (
        "provider sim: the lease is held by sim-orchestrator/c1-daemon-m1.41.cd (let the daemon do the work, "
        "or stop it for the time of this command); retry in 12s"
    )
    # The holder's name comes from the controller: it cannot forge a second line.
    forged = lease_refusal(LeaseDenied("sim", "x\nxceprov: all clear", 3.0, "held"))
    assert "\n" not in str(forged) and "x\\nxceprov: all clear" in str(forged)
    grace = lease_refusal(LeaseDenied("sim", "", 3.0, "grace"))
    assert str(grace) == "provider sim: the lease is in the controller's grace period after a failover; retry in 3s"


def test_no_controller_and_not_standalone_changes_nothing_and_says_how(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    text = (
        f"cluster: unit\nstate_dir: {tmp_path / 'state'}\n"
        f"controller: {{ca: system, addresses: ['127.0.0.1:{port}'], connect_timeout: 1}}\n"
        "providers: {sim: {module: xcesim}}\n"
        "templates: {cpu: {providers: {sim: {flavor: c8.large, image: debian-12}}}}\n"
    )
    loaded = parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)
    engine = FakeEngine()
    with (
        pytest.raises(ControllerError, match=r"no change was made .*set standalone: true in .*xceprov.yaml"),
        fenced_session(loaded, ["sim"], ROOT, engine=engine),
    ):
        pass
    assert engine.calls == []


def test_standalone_mode_is_audited_tags_epoch_none_and_journals_facts(tmp_path: Path) -> None:
    loaded = site_config(tmp_path)
    loaded = type(loaded)(
        config=loaded.config.model_copy(update={"standalone": True}), source=loaded.source, base_dir=loaded.base_dir
    )
    engine = FakeEngine()
    with fenced_session(loaded, ["sim"], ROOT, engine=engine) as (executor, _parts):
        result = executor.create("sim", "cpu", 1)
        with (
            pytest.raises(LeaseHeld, match=r"standalone lock .* is held by process"),
            fenced_session(loaded, ["sim"], ROOT, engine=engine),
        ):
            pass
    state = loaded.config.state_dir
    [inst] = FakeEngine.state(state / "work" / "unit" / "sim")["instances"].values()
    assert inst["tags"][owner.EPOCH] == "none"
    journal = [json.loads(line) for line in (state / "facts" / "unit.jsonl").read_text().splitlines()]
    assert [f["kind"] for f in journal] == ["requestIntent", "instanceCreated", "expectedHost"]
    assert {f["op_id"] for f in journal} == {result.op_id}
    actions = [json.loads(line)["action"] for line in (state / "audit.log").read_text().splitlines()]
    assert actions[0] == "standalone"
