"""The orphan scan's decisions over a fake cloud and a fake controller view.

What a user would notice: each class is found with its evidence and gets the policy's action;
nothing without this cluster's and provider's tags is ever reported or touched; the protect
tag, an unread view, the settle window after a failover, the rate limit, the breaker and the
dry run each stop every automatic action; everything is in the audit log.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from orphan_support import NOW, CloudObj, World, world
from tffake import ROOT, SITE, FakeHosts

from orchestrator.clients.controller.types import HostInfo
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.model import tags as owner
from orchestrator.model.costs import launch_time_of
from orchestrator.model.facts import FactKind
from orchestrator.orphans.report import table
from orchestrator.orphans.scan import OrphanScanner
from orchestrator.workspace.workdir import ProviderWorkdir


def site(tmp_path: Path, orphans: str = "", provider: str = "") -> LoadedConfig:
    text = SITE.format(cluster="unit", state=tmp_path / "state")
    if provider:
        text = text.replace("max_instances: 10}", f"max_instances: 10, {provider}}}")
    if orphans:
        text += f"policy: {{orphans: {{{orphans}}}}}\n"
    return parse_config(text, str(tmp_path / "xceprov.yaml"), tmp_path)


def ours(name: str, **more: str) -> CloudObj:
    tags = {owner.CLUSTER: "unit", owner.PROVIDER: "sim", owner.OP_ID: "op-00000001-abcdef", **more}
    return CloudObj(f"i-{name}", name, tags, address=f"10.9.0.{len(name)}")


@pytest.fixture
def w(tmp_path: Path) -> World:
    return world(site(tmp_path))


def held(w: World) -> dict[str, object]:
    return dict(w.engine.state(ProviderWorkdir(w.loaded.config, "sim", ROOT).path)["instances"])


def test_class_a_a_host_that_never_joined_is_returned_with_its_evidence(w: World) -> None:
    keys = w.create(2)
    w.controller.expected(w.facts)
    w.controller.set_state(keys[1], "idle", joined_at=NOW - 60)  # this one joined
    report = w.scanner().scan(act=True)
    (finding,) = report.findings
    assert (finding.cls, finding.instance_key, finding.action, finding.outcome) == ("a", keys[0], "return", "taken")
    assert finding.evidence["controller"]["state"] == "expected" and finding.evidence["facts"]["past_deadline_by"] > 0
    assert set(held(w)) == {keys[1]}
    returned = [f.instance_key for f in w.facts.committed if f.kind == FactKind.RETURNED]
    assert returned == [keys[0]]
    acts = [e for e in w.audit() if e["action"] == "orphan-action"]
    assert acts[0]["finding"]["instance_key"] == keys[0] and acts[0]["epoch"] == "3.7"
    assert acts[0]["confirmed_by"] == "policy (automatic)"


def test_a_class_a_host_that_took_work_after_the_read_is_not_waited_for(w: World) -> None:
    keys = w.create(2)
    w.controller.expected(w.facts)  # the scan reads both as never joined

    def no_wait(_seconds: float) -> None:
        raise AssertionError("the automatic return waited for a drain: the daemon's loop is blocked")

    w.parts.sleep = no_wait
    # Between the scan's read and its return, the first host's worker joins and takes a job.
    hosts = w.parts.hosts
    assert isinstance(hosts, FakeHosts)
    hosts.states[keys[0]] = "busy"
    report = w.scanner().scan(act=True)
    outcomes = {f.instance_key: (f.outcome, f.reason) for f in report.findings}
    assert outcomes[keys[1]][0] == "taken"
    outcome, reason = outcomes[keys[0]]
    assert outcome == "failed" and reason.endswith(
        "still running work after the drain timeout (0s, drain_policy wait); the hosts stay closed: "
        "not waited for (automatic returns never wait): returned by the reclaim phase once idle"
    ), reason
    # Closed at the controller (no new work on it), not returned: its job runs on.
    assert hosts.closed == [keys[0]] and hosts.decommissioned == []
    assert set(held(w)) == {keys[0]}
    assert [f.instance_key for f in w.facts.committed if f.kind == FactKind.RETURNED] == [keys[1]]
    assert [e["action"] for e in w.audit()][-1] == "orphan-scan"  # the scan completed


def test_a_worker_known_as_joined_after_a_restart_is_never_returned(w: World) -> None:
    keys = w.create(1)
    # After a controller restart a worker that joined before is "disconnected", with its join time.
    w.controller.expected(w.facts, state="disconnected", joined_at=NOW - 600)
    w.controller.term_started = NOW - 1
    report = w.scanner().scan(act=True)
    assert report.findings == [] and set(held(w)) == set(keys)
    assert report.providers[0].settle["passed"] is False


def test_the_settle_window_holds_every_return_after_a_failover(w: World) -> None:
    keys = w.create(1)
    w.controller.expected(w.facts)
    w.controller.term_started = NOW - 10  # a new term 10 s ago; the window is 300 s
    (finding,) = w.scanner().scan(act=True).findings
    assert finding.outcome == "skipped" and "settle window" in finding.reason
    assert set(held(w)) == set(keys)
    # Past the window, but a joined worker has not rejoined yet: still held.
    w.controller.term_started = NOW - 400
    other = w.create(1)
    w.controller.hosts_list.append(HostInfo("h-x", "disconnected", "i-x", "k-x", provider="sim", joined_at=NOW - 900))
    found = w.scanner().scan(act=True).findings
    assert {f.outcome for f in found} == {"skipped"} and "not yet rejoined" in found[0].reason
    assert set(held(w)) == set(keys) | set(other)


def test_class_b_reported_once_adopted_when_it_matches_and_others_never_seen(w: World) -> None:
    w.create(1)
    w.controller.expected(w.facts, state="idle", joined_at=NOW - 60)
    w.engine.extra["i-stray"] = ours("stray")
    twin = ours("twin")
    w.engine.extra["i-twin"] = twin
    w.controller.hosts_list.append(HostInfo("twin", "idle", "", "", provider="sim", address=twin.address))
    # Not ours: another cluster's, another provider's, untagged (the module's filter may let some through).
    w.engine.extra["i-foreign"] = CloudObj("i-foreign", "foreign", {owner.CLUSTER: "other", owner.PROVIDER: "sim"})
    w.engine.extra["i-elsewhere"] = CloudObj("i-elsewhere", "x", {owner.CLUSTER: "unit", owner.PROVIDER: "aws"})
    w.engine.extra["i-bare"] = CloudObj("i-bare", "bare", {})
    report = w.scanner().scan(act=True)
    by_id = {f.object_id: f for f in report.findings}
    assert set(by_id) == {"i-stray", "i-twin"}
    assert (by_id["i-stray"].action, by_id["i-stray"].outcome) == ("report", "reported")
    assert by_id["i-stray"].reason == "orphanReported fact committed"
    assert (by_id["i-twin"].action, by_id["i-twin"].outcome) == ("adopt", "taken")
    kinds = {(f.kind, f.instance_id) for f in w.facts.committed if f.kind.startswith("orphan")}
    assert kinds == {(FactKind.ORPHAN_REPORTED, "i-stray"), (FactKind.ORPHAN_ADOPTED, "i-twin")}
    # The listed launch time goes with them: the cost ledger counts an adopted orphan from it.
    assert all(launch_time_of(f.detail) for f in w.facts.committed if f.kind.startswith("orphan"))
    # Nothing in the cloud changed: no import, no apply beyond the create.
    assert [c for c, _ in w.engine.calls].count("apply") == 1 and "i-foreign" in w.engine.extra
    # The next scan: the adopted one is known; the reported one is not reported twice.
    again = {f.object_id: f for f in w.scanner().scan(act=True).findings}
    assert set(again) == {"i-stray"} and "reported before" in again["i-stray"].reason
    assert [f.kind for f in w.facts.committed].count(FactKind.ORPHAN_REPORTED) == 1


def test_a_provider_never_used_is_listed_with_an_empty_desired_set(w: World) -> None:
    w.engine.extra["i-stray"] = ours("stray")
    report = w.scanner().scan(act=False)
    assert [f.object_id for f in report.findings] == ["i-stray"]
    assert ProviderWorkdir(w.loaded.config, "sim", ROOT).desired.read() == {}


def test_class_b_of_an_op_in_flight_is_never_an_orphan(w: World) -> None:
    # The intent is committed, the cloud has the object, the instance facts are not there yet.
    from orchestrator.model.facts import Epoch, Fact

    w.create(1)
    w.controller.expected(w.facts, state="idle", joined_at=NOW - 60)
    w.facts.commit(Fact(FactKind.REQUEST_INTENT, "sim", "op-00000001-abcdef", Epoch(3, 7), template="cpu", count=1))
    w.engine.extra["i-new"] = ours("new")
    report = w.scanner().scan(act=True)
    assert report.findings == [] and report.providers[0].in_flight == ["i-new"]


def test_class_b_terminate_only_when_opted_in_after_the_grace(tmp_path: Path) -> None:
    w = world(site(tmp_path, orphans="breaker_min: 10", provider="orphan_action: terminate, orphan_grace: 1h"))
    w.create(1)
    w.controller.expected(w.facts, state="idle", joined_at=NOW - 60)
    w.engine.extra["i-old"] = ours("old")
    young = ours("young")
    young.launch_time = "2027-01-15T08:00:00Z"  # NOW is 2027-01-15T08:00:00Z: launched just now
    w.engine.extra["i-young"] = young
    w.engine.extra["i-kept"] = ours("kept", **{owner.PROTECT: "true"})
    by_id = {f.object_id: f for f in w.scanner().scan(act=True).findings}
    assert (by_id["i-old"].action, by_id["i-old"].outcome) == ("terminate", "taken")
    assert by_id["i-young"].outcome == "skipped" and "orphan_grace" in by_id["i-young"].reason
    assert by_id["i-kept"].outcome == "skipped" and "xce:protect" in by_id["i-kept"].reason
    # The old one went through the return path: intent first, imported, destroyed, recorded.
    assert len(held(w)) == 1 and "i-young" in w.engine.extra and "i-kept" in w.engine.extra
    returning = [f for f in w.facts.committed if f.kind == FactKind.RETURNING]
    assert [f.instance_id for f in returning] == ["i-old"]
    assert w.kinds().index("returning") < w.kinds().index("returned")


def test_class_c_a_ghost_is_retired_through_the_host_loss_path_after_two_reads(w: World) -> None:
    keys = w.create(2)
    w.controller.expected(w.facts, state="idle", joined_at=NOW - 60)
    gone_id = held(w)[keys[0]]["id"]  # type: ignore[index]
    w.engine.delete_out_of_band(str(gone_id))
    before = w.engine.refresh_plans
    (finding,) = w.scanner().scan(act=True).findings
    # Missing for the first time, read again at once: two consecutive reads confirm it.
    assert w.engine.refresh_plans - before == 2
    assert (finding.cls, finding.instance_key, finding.action, finding.outcome) == ("c", keys[0], "retire", "taken")
    assert finding.evidence["cloud"]["observations_missing"] == 2
    lost = [f for f in w.facts.committed if f.kind == FactKind.LOST]
    assert [f.instance_key for f in lost] == [keys[0]]
    assert sorted(ProviderWorkdir(w.loaded.config, "sim", ROOT).desired.read()) == [keys[1]]
    assert w.scanner().scan(act=True).findings == []  # retired: not found again


def test_a_report_only_scan_and_a_dry_run_change_nothing(tmp_path: Path) -> None:
    for act, orphans in ((False, ""), (True, "dry_run: true")):
        w = world(site(tmp_path / str(act), orphans=orphans))
        keys = w.create(2)
        w.controller.expected(w.facts)
        w.engine.delete_out_of_band(str(held(w)[keys[1]]["id"]))  # type: ignore[index]
        w.engine.extra["i-stray"] = ours("stray")
        facts_before, state_before = list(w.facts.committed), held(w)
        suspects = ProviderWorkdir(w.loaded.config, "sim", ROOT).path / "lost-suspects.json"
        report = w.scanner().scan(act=act)
        assert {f.cls for f in report.findings} == {"a", "b", "c"}
        assert {f.outcome for f in report.findings} == {"would-take", "reported"}
        assert w.facts.committed == facts_before and held(w) == state_before and not suspects.exists()
        assert report.to_json()["dry_run"] is (act is True)
        text = table(report).splitlines()
        assert text[0] == "controller: read" and text[1].startswith("sim: drift read, listing read, 3 instances")
        assert any(line.startswith("(b) sim i-stray") and "report: reported" in line for line in text)
        assert any(e["action"] == "orphan-detected" for e in w.audit())


def test_an_unreadable_cloud_or_controller_produces_no_action(w: World) -> None:
    keys = w.create(1)
    w.controller.expected(w.facts)
    w.engine.fail_reads = True
    report = w.scanner().scan(act=True)
    assert report.providers[0].drift.startswith("unreadable") and "b" in report.providers[0].not_scanned
    (finding,) = report.findings
    assert finding.outcome == "skipped" and "cloud view unread" in finding.reason
    w.engine.fail_reads = False
    w.controller.reachable = False
    report = w.scanner().scan(act=True)
    assert report.findings == [] and report.controller["read"] is False
    assert set(held(w)) == set(keys) and w.kinds().count("returning") == 0


def test_a_scan_that_could_not_read_a_view_is_incomplete_never_an_all_clear(w: World) -> None:
    w.create(1)
    w.controller.reachable = False
    report = w.scanner().scan(act=False)
    doc = report.to_json()
    assert report.findings == [] and doc["complete"] is False and doc["unread"] == {"sim": ["a", "b", "c", "e"]}
    assert "no orphans found" not in table(report)
    assert report.incomplete_line().endswith("classes not scanned: sim (a, b, c, e)")
    w.controller.reachable = True
    w.engine.fail_reads = True
    doc = w.scanner().scan(act=False).to_json()
    assert doc["complete"] is False and set(doc["unread"]["sim"]) >= {"b", "c"}
    w.engine.fail_reads = False
    report = w.scanner().scan(act=False)
    assert report.complete and report.to_json()["unread"] == {} and table(report).endswith("no orphans found")


def test_views_that_do_not_exist_leave_the_scan_complete(w: World) -> None:
    # Licences (d) are never provisioned, a module may have no tagged listing (b), and standalone
    # has no controller to say which hosts joined (a): nothing there could have been read.
    w.engine.listing_supported = False
    w.create(1)
    config = w.parts.config
    standalone = OrphanScanner(config, w.ops, None, lambda: w.now, config.state_dir).scan(act=False)
    assert set(standalone.providers[0].not_scanned) == {"a", "b", "d", "e"}
    assert standalone.complete and standalone.to_json()["complete"] is True
    assert table(standalone).endswith("no orphans found")


def test_the_rate_limit_counts_across_scans_and_the_breaker_trips(tmp_path: Path) -> None:
    w = world(site(tmp_path, orphans="max_cleanup_per_interval: 1, breaker_min: 3"))
    w.create(4)
    w.controller.expected(w.facts, state="idle", joined_at=NOW - 60)
    for name in ("s1", "s2"):
        w.engine.extra[f"i-{name}"] = ours(name)
        w.controller.hosts_list.append(HostInfo(name, "idle", "", "", provider="sim"))
    first = sorted(w.scanner().scan(act=True).findings, key=lambda f: f.object_id)
    assert [f.outcome for f in first] == ["taken", "skipped"] and "rate limit" in first[1].reason
    w.now += 60  # the same interval: a new scan may not act either
    assert [f.outcome for f in w.scanner().scan(act=True).findings] == ["skipped"]
    # Five of six instances look orphaned at once: a view is wrong; nothing automatic.
    w2 = world(site(tmp_path / "b"))
    keys = w2.create(6)
    w2.controller.expected(w2.facts)
    w2.controller.set_state(keys[0], "idle", joined_at=NOW - 60)
    report = w2.scanner().scan(act=True)
    assert report.providers[0].breaker["open"] is True
    assert {f.outcome for f in report.findings} == {"skipped"}
    assert all("circuit breaker" in f.reason for f in report.findings)
    assert w2.kinds().count("returning") == 0


def test_the_listing_unsupported_says_class_b_is_not_scanned(w: World) -> None:
    w.engine.listing_supported = False
    w.engine.extra["i-stray"] = ours("stray")
    w.create(1)
    report = w.scanner().scan(act=False)
    doc = report.to_json()["providers"][0]
    assert (
        "tagged_supported false" in doc["not_scanned"]["b"] and doc["cloud"]["listing"] == "not supported by the module"
    )
    assert "not provisioned yet" in doc["not_scanned"]["d"] and report.findings == []


def test_confirm_adopt_and_return_need_a_fitting_finding(tmp_path: Path) -> None:
    from orchestrator.errors import UsageError

    w = world(site(tmp_path))
    w.create(1)
    w.controller.expected(w.facts, state="idle", joined_at=NOW - 60)
    w.engine.extra["i-stray"] = ours("stray")
    with pytest.raises(UsageError, match="matches no live host"):
        w.scanner().confirm("i-stray", "adopt")
    with pytest.raises(UsageError, match="not a current finding"):
        w.scanner().confirm("i-nothing", "return")
    finding = w.scanner().confirm("i-stray", "return")  # the administrator terminates it
    assert (finding.action, finding.outcome) == ("terminate", "taken")
    assert "i-stray" not in w.engine.extra and len(held(w)) == 1
    entry = next(e for e in w.audit() if e["action"] == "orphan-action")
    assert entry["confirmed_by"].startswith("administrator ")


def test_orphan_settings_are_checked_naming_the_key(tmp_path: Path) -> None:
    from orchestrator.errors import ConfigError

    with pytest.raises(ConfigError, match=r"orphans\.breaker_share"):
        site(tmp_path, orphans="breaker_share: 2")
    with pytest.raises(ConfigError, match="orphan_action"):
        site(tmp_path, provider="orphan_action: stop")


def test_a_ghost_in_a_later_shard_is_found_from_its_drift_alone(tmp_path: Path) -> None:
    from tffake import site_config

    w = world(site_config(tmp_path, shard_size=2))
    keys = w.create(2) + w.create(2)  # two shards of two
    w.controller.expected(w.facts, state="idle", joined_at=NOW - 60)
    shard1 = ProviderWorkdir(w.loaded.config, "sim", ROOT).path / "shards" / "1"
    (key, inst), *_ = w.engine.state(shard1)["instances"].items()
    w.engine.delete_out_of_band(inst["id"])
    shows = [c for c, _ in w.engine.calls].count("show_plan")
    report = w.scanner().scan(act=True)
    assert [(f.cls, f.instance_key, f.object_id, f.outcome) for f in report.findings] == [
        ("c", key, inst["id"], "taken")
    ]
    assert key in keys and report.providers[0].shards == 2
    # Only shard 0's plan was shown (the listing); shard 1's drift came from the plan's stream.
    assert [c for c, _ in w.engine.calls].count("show_plan") - shows == 1


def test_the_command_line_refuses_an_unknown_provider_in_one_line(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from orchestrator.cli.main import cli

    config = tmp_path / "xceprov.yaml"
    config.write_text(SITE.format(cluster="unit", state=tmp_path / "state") + "standalone: true\n")
    for args in (["orphans", "--provider", "nope"], ["orphans", "return", "i-1", "--provider", "nope"]):
        result = CliRunner().invoke(cli, ["--config", str(config), *args])
        assert result.exit_code == 2, result.output
        assert result.output.strip().splitlines() == ["xceprov: --provider nope: no such provider (known: sim)"]
