"""``xceprov orphans return ID``: every guard that blocks named in one message, ``--dry-run``,
and ``--confirm`` waiving the time guards (audited), never the tags or the protect tag.

What a user would notice: the finding's reason (the command's error line) names each guard
that refuses; a refused or dry-run confirmation leaves the cloud, the facts, the rate limit
and the host-loss suspects as they were; a waiver is in the audit log with the user and uid
before anything changes.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from orphan_support import NOW, CloudObj, World, world
from tffake import ROOT, SITE

from orchestrator.clients.controller.types import LeaseInfo
from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.model import tags as owner
from orchestrator.model.facts import Epoch
from orchestrator.orphans.classes import Finding
from orchestrator.orphans.confirm import Admin, Confirmation
from orchestrator.orphans.limits import ACTIONS_FILE
from orchestrator.workspace.workdir import ProviderWorkdir

JUST_NOW = "2027-01-15T08:00:00Z"  # NOW: launched this instant, within any orphan_grace
ADMIN = Admin("alice", 1234, "")


def site(tmp_path: Path, orphans: str = "") -> LoadedConfig:
    text = SITE.format(cluster="unit", state=tmp_path / "state").replace(
        "max_instances: 10}", "max_instances: 10, orphan_grace: 1h}"
    )
    policy = f"policy: {{orphans: {{breaker_min: 10{', ' + orphans if orphans else ''}}}}}\n"
    return parse_config(text + policy, str(tmp_path / "xceprov.yaml"), tmp_path)


@pytest.fixture
def w(tmp_path: Path) -> World:
    return world(site(tmp_path))


def stray(w: World, launched: str = "2020-01-01T00:00:00Z", **more: str) -> None:
    """A class (b) object of this cluster and provider that no fact names (``return`` terminates it)."""
    tags = {owner.CLUSTER: "unit", owner.PROVIDER: "sim", owner.OP_ID: "op-00000001-abcdef", **more}
    w.engine.extra["i-stray"] = CloudObj("i-stray", "stray", tags, address="10.9.0.9", launch_time=launched)


def never_joined(w: World, **tags: str) -> str:
    """A class (a) host (past its join deadline, never joined) whose cloud object carries ``tags`` too."""
    (key,) = w.create(1)
    w.controller.expected(w.facts)
    workdir = ProviderWorkdir(w.loaded.config, "sim", ROOT).path
    instances = w.engine.state(workdir)["instances"]
    instances[key]["tags"].update(tags)
    w.engine._write_state(workdir, instances)
    return key


def confirm(w: World, ref: str, *, dry_run: bool = False, waive: bool = False) -> Finding:
    return w.scanner().confirm(Confirmation(ref, "return", dry_run=dry_run, waive_time=waive, who=ADMIN))


def unchanged(w: World, facts: list[object]) -> bool:
    """No fact, no cloud change, no action counted, no host-loss suspect kept."""
    suspects = ProviderWorkdir(w.loaded.config, "sim", ROOT).path / "lost-suspects.json"
    state_dir = w.loaded.config.state_dir
    return (
        w.facts.committed == facts
        and "i-stray" in w.engine.extra
        and not (state_dir / ACTIONS_FILE).exists()
        and not suspects.exists()
    )


def test_each_guard_alone_is_named(tmp_path: Path) -> None:
    cases = {
        "settle_window": lambda w: (stray(w), setattr(w.controller, "term_started", NOW - 10)),
        "orphan_grace": lambda w: stray(w, launched=JUST_NOW),
        "protect": lambda w: stray(w, **{owner.PROTECT: "true"}),
    }
    for guard, make in cases.items():
        w = world(site(tmp_path / guard))
        make(w)
        before = list(w.facts.committed)
        finding = confirm(w, "i-stray")
        assert finding.outcome == "skipped" and finding.reason.startswith(f"refused by {guard}: "), finding.reason
        assert unchanged(w, before)
    # The tags guard: a class (a) host whose cloud object says it is another provider's.
    w = world(site(tmp_path / "tags"))
    key = never_joined(w, **{owner.PROVIDER: "aws"})
    before = list(w.facts.committed)
    finding = confirm(w, key)
    assert finding.reason.startswith("refused by tags: tags say cluster 'unit', provider 'aws'"), finding.reason
    assert w.facts.committed == before and w.kinds().count("returning") == 0


def test_every_blocking_guard_is_named_in_one_message(w: World) -> None:
    stray(w, launched=JUST_NOW, **{owner.PROTECT: "yes"})
    w.controller.term_started = NOW - 10
    finding = confirm(w, "i-stray")
    assert finding.reason.startswith("refused by protect, settle_window, orphan_grace: "), finding.reason
    assert "protected by the xce:protect tag" in finding.reason
    assert "settle window: term 3 started 10s ago, settle window 300s (290s left)" in finding.reason
    assert "launched 0s ago, within orphan_grace 3600s" in finding.reason
    assert finding.reason.endswith(
        "(--confirm waives settle_window and orphan_grace) (tags and the protect tag are never waived)"
    )
    entry = [e for e in w.audit() if e["action"] == "orphan-action-skipped"][-1]
    assert [r["guard"] for r in entry["refused"]] == ["protect", "settle_window", "orphan_grace"]
    assert entry["who"] == {"user": "alice", "uid": 1234, "sudo_user": ""}


def test_tags_protect_and_settle_together_on_a_host_that_never_joined(tmp_path: Path) -> None:
    w = world(site(tmp_path))
    key = never_joined(w, **{owner.PROVIDER: "aws", owner.PROTECT: "true"})
    w.controller.term_started = NOW - 10
    assert confirm(w, key).reason.startswith("refused by tags, protect, settle_window: ")


def test_confirm_waives_the_time_guards_and_the_waiver_is_audited_before_the_action(w: World) -> None:
    stray(w, launched=JUST_NOW)
    w.controller.term_started = NOW - 10
    finding = confirm(w, "i-stray", waive=True)
    assert (finding.action, finding.outcome) == ("terminate", "taken"), finding.reason
    assert "i-stray" not in w.engine.extra and w.kinds().index("returning") < w.kinds().index("returned")
    actions = [e["action"] for e in w.audit()]
    assert actions.index("orphan-guards-waived") < actions.index("op-import") < actions.index("orphan-action")
    waiver = next(e for e in w.audit() if e["action"] == "orphan-guards-waived")
    assert waiver["who"] == {"user": "alice", "uid": 1234, "sudo_user": ""} and waiver["time"]
    assert [g["guard"] for g in waiver["waived"]] == ["settle_window", "orphan_grace"]
    assert waiver["confirmed_by"] == "administrator alice (uid 1234)"
    done = next(e for e in w.audit() if e["action"] == "orphan-action")
    assert done["confirmed_by"] == "administrator alice (uid 1234), waiving settle_window, orphan_grace"
    imported = next(e for e in w.audit() if e["action"] == "op-import")
    assert "waiving settle_window, orphan_grace" in imported["reason"]


@pytest.mark.parametrize("ownership", ["protect", "tags"])
def test_confirm_never_waives_the_tags_or_the_protect_tag(tmp_path: Path, ownership: str) -> None:
    w = world(site(tmp_path))
    w.controller.term_started = NOW - 10
    if ownership == "protect":
        stray(w, launched=JUST_NOW, **{owner.PROTECT: "true"})
        ref = "i-stray"
    else:
        ref = never_joined(w, **{owner.PROVIDER: "aws"})
    before = list(w.facts.committed)
    finding = confirm(w, ref, waive=True)
    assert finding.outcome == "skipped" and finding.reason.startswith(f"refused by {ownership}: "), finding.reason
    assert "settle_window" not in finding.reason.split(":")[0]  # waived, not what refuses it
    assert finding.reason.endswith("(tags and the protect tag are never waived)")
    assert w.facts.committed == before and w.kinds().count("returning") == 0
    assert not [e for e in w.audit() if e["action"] in ("orphan-guards-waived", "orphan-action")]


def test_a_dry_run_changes_nothing_and_says_what_would_be_done(w: World) -> None:
    stray(w)
    key = never_joined(w)
    w.engine.delete_out_of_band(
        str(w.engine.state(ProviderWorkdir(w.loaded.config, "sim", ROOT).path)["instances"][key]["id"])
    )
    before = list(w.facts.committed)
    finding = confirm(w, "i-stray", dry_run=True)
    assert (finding.outcome, finding.reason) == ("would-take", "dry run: nothing changed")
    assert unchanged(w, before)
    entry = [e for e in w.audit() if e["action"] == "orphan-action-dry-run"][-1]
    assert entry["finding"]["object_id"] == "i-stray" and entry["who"]["uid"] == 1234
    # Refused in a dry run: the same guards named, the same nothing changed.
    w.controller.term_started = NOW - 10
    refused = confirm(w, "i-stray", dry_run=True)
    assert refused.outcome == "skipped" and refused.reason.startswith("refused by settle_window: ")
    # With --confirm: what it would waive, still nothing done.
    waived = confirm(w, "i-stray", dry_run=True, waive=True)
    assert (waived.outcome, waived.reason) == ("would-take", "dry run: nothing changed; --confirm waives settle_window")
    assert unchanged(w, before)
    assert not [e for e in w.audit() if e["action"] == "orphan-guards-waived"]


def test_a_dry_run_names_a_lease_another_holder_has(w: World) -> None:
    stray(w)
    w.controller.leases = (LeaseInfo("sim", "orch/daemon-1", Epoch(3, 7), 20.0),)
    finding = confirm(w, "i-stray", dry_run=True)
    assert finding.reason.startswith(
        "refused by lease: the lease of provider sim is held by orch/daemon-1 (20s left): "
        "the confirmation would be refused (exit 9)"
    ), finding.reason


def test_the_administrator_is_the_user_and_uid_of_the_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_USER", "bob")
    admin = Admin.current()
    assert admin.uid == os.getuid()
    assert admin.sudo_user == ("bob" if os.getuid() == 0 else "")
    assert admin.by.startswith(f"administrator {admin.user} (uid {os.getuid()}")


def test_with_the_policy_dry_run_on_every_confirmation_is_a_dry_run(tmp_path: Path) -> None:
    w = world(site(tmp_path, "dry_run: true"))
    stray(w)
    before = list(w.facts.committed)
    finding = confirm(w, "i-stray", waive=True)
    assert (finding.outcome, finding.reason) == ("would-take", "dry run: nothing changed")
    assert unchanged(w, before)
