"""`xceprov plan / apply / destroy` against the simulated cloud, through the real Terraform engine.

Everything a user would notice: the JSON document, that a preview changes nothing, that a saved
plan applies exactly or refuses, that hostile values arrive literally in the cloud, that drift
after an out-of-band delete shows up, and that bad input gives one line and leaves nothing behind.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from cli_run import xceprov

from orchestrator.configfile import load_config
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.workspace.terraform import engine_for, prepared_workdir
from orchestrator.workspace.workdir import ProviderWorkdir

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = 'q"uote ${var.x} %{ if true }y%{ endif }\nresource "null" "x" {}'

# No controller runs in these tests: apply and destroy run standalone (local lock, epoch none).
SITE = f"""
cluster: itest
state_dir: state
standalone: true
controller: {{ca: system}}
providers:
  sim:
    module: xcesim
    max_instances: 20
templates:
  cpu:
    tags: {{team: {json.dumps(HOSTILE)}}}
    providers:
      sim: {{flavor: c8.large, image: debian-12, cost_per_hour: 0.5}}
  gpu:
    providers:
      sim: {{flavor: g4.xlarge, image: debian-12, cost_per_hour: 3.0}}
"""


@pytest.fixture
def site(tmp_path: Path) -> Path:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    return tmp_path


def store(site: Path) -> CloudStore:
    return CloudStore(site / "state" / "sim" / "cloud.sqlite")


def test_plan_json_document_and_changes_nothing(site: Path) -> None:
    done = xceprov(site, "plan", "cpu=3", "gpu=1", "--json")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["cluster"] == "itest"
    assert doc["cost_per_hour"] == pytest.approx(4.5)
    [prov] = doc["providers"]
    assert (prov["name"], prov["add"], prov["change"], prov["destroy"]) == ("sim", 4, 0, 0)
    by_template: dict[str, list[dict[str, object]]] = {}
    for inst in prov["instances"]:
        by_template.setdefault(str(inst["template"]), []).append(inst)
        tags = inst["tags"]
        assert isinstance(tags, dict)
        for key in ("xce:cluster", "xce:provider", "xce:op_id", "xce:epoch", "xce:template"):
            assert key in tags
        assert tags["xce:template"] == inst["template"]
        assert str(inst["key"]).startswith(str(tags["xce:op_id"]))
    assert len(by_template["cpu"]) == 3 and len(by_template["gpu"]) == 1
    # A preview creates nothing in the cloud and records no desired instance.
    assert store(site).list_instances() == []
    assert not (site / "state" / "work" / "itest" / "sim" / "desired.tfvars.json").exists()


def test_saved_plan_applies_exactly_then_refuses_when_stale(site: Path) -> None:
    first = xceprov(site, "plan", "cpu=2", "--out", "first")
    second = xceprov(site, "plan", "gpu=1", "--out", "second")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    # Saved plans hold settings and user data: private, whatever Terraform's umask made them.
    assert stat.S_IMODE((site / "first").stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in (site / "first").iterdir()} == {
        "manifest.json": 0o600,
        "sim.tfplan": 0o600,
    }
    planned = json.loads(xceprov(site, "plan", "cpu=1", "--json").stdout)  # a plan never applied
    applied = xceprov(site, "apply", "first")
    assert applied.returncode == 0, applied.stderr
    instances = store(site).list_instances()
    # What the operator reads: one summary and one line per instance on stdout; on stderr (not a
    # terminal here) the plan and the apply counted from Terraform's own events, a line each.
    [summary, *hosts, total] = applied.stdout.splitlines()
    assert summary.endswith(": 2 cpu instances created") and total == "sim: 2 instances in all"
    assert sorted(h.split()[1] for h in hosts) == sorted(i.id for i in instances)
    [plan_line, start_line, end_line] = applied.stderr.splitlines()
    assert plan_line.startswith("plan sim op-") and plan_line.endswith(": 1/1 planned (+2 ~0 -0)")
    assert start_line.endswith(": 0/2 instances") and end_line.endswith(": 2/2 created")
    assert sorted(i.flavor for i in instances) == ["c8.large", "c8.large"]
    # Hostile values arrive literally in the cloud object.
    assert {i.tags["team"] for i in instances} == {HOSTILE}
    assert all(i.tags["xce:cluster"] == "itest" and i.tags["xce:epoch"] == "none" for i in instances)
    assert planned["providers"][0]["instances"][0]["key"] not in {i.client_token for i in instances}

    stale = xceprov(site, "apply", "second")
    assert stale.returncode == 7
    assert stale.stderr.strip().startswith("xceprov: saved plan is stale")
    assert "Traceback" not in stale.stderr
    assert len(store(site).list_instances()) == 2
    desired = json.loads((site / "state" / "work" / "itest" / "sim" / "desired.tfvars.json").read_text())
    assert len(desired["instances"]) == 2

    audit = [json.loads(line) for line in (site / "state" / "audit.log").read_text().splitlines()]
    verbs = ("apply", "applied", "apply-refused", "standalone")
    assert [a["action"] for a in audit if a["action"] in verbs] == [
        "apply",
        "standalone",
        "applied",
        "apply",
        "apply-refused",
    ]


def test_destroy_by_op_dry_run_then_real(site: Path) -> None:
    assert xceprov(site, "plan", "cpu=2", "gpu=1", "--out", "b").returncode == 0
    assert xceprov(site, "apply", "b").returncode == 0
    gpu_op = next(i.tags["xce:op_id"] for i in store(site).list_instances() if i.flavor == "g4.xlarge")
    dry = xceprov(site, "destroy", "--op", gpu_op, "--dry-run")
    assert dry.returncode == 0 and "would destroy 1 instances" in dry.stdout
    assert len(store(site).list_instances()) == 3
    capped = xceprov(site, "destroy", "--all", "--max", "2")
    assert capped.returncode == 2 and "more than --max 2" in capped.stderr
    real = xceprov(site, "destroy", "--op", gpu_op)
    assert real.returncode == 0, real.stderr
    assert sorted(i.flavor for i in store(site).list_instances()) == ["c8.large", "c8.large"]
    unknown = xceprov(site, "destroy", "--op", "op-00000000-000000")
    assert unknown.returncode == 2 and "no instances of that op" in unknown.stderr


def test_refresh_only_plan_shows_out_of_band_delete(site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert xceprov(site, "plan", "cpu=3", "--out", "b").returncode == 0
    assert xceprov(site, "apply", "b").returncode == 0
    victim = store(site).list_instances()[1]
    store(site).delete_out_of_band(victim.id)
    monkeypatch.chdir(site)
    config = load_config(str(site / "xceprov.yaml")).config
    engine = engine_for(config)
    workdir = ProviderWorkdir(config, "sim", ROOT)
    prepared_workdir(engine, workdir)
    result = engine.plan(workdir.path, var_files=[workdir.desired_file], refresh_only=True)
    assert [(d.key, d.action) for d in result.drift] == [(victim.client_token, "delete")]


def journal(site: Path) -> list[dict[str, object]]:
    """The standalone fact journal's facts (what the controller would hold)."""
    path = site / "state" / "facts" / "itest.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_preview_after_a_loss_shows_it_lost_and_adds_what_apply_adds(site: Path) -> None:
    assert xceprov(site, "plan", "cpu=2", "--out", "two").returncode == 0
    assert xceprov(site, "apply", "two").returncode == 0
    assert xceprov(site, "plan", "cpu=1", "--out", "before").returncode == 0  # saved before the loss
    victim, kept = store(site).list_instances()
    store(site).delete_out_of_band(victim.id)  # deleted behind Terraform's back
    work = site / "state" / "work" / "itest" / "sim"
    desired_before = (work / "desired.tfvars.json").read_text()
    facts_before = journal(site)

    done = xceprov(site, "plan", "cpu=1", "--json")
    assert done.returncode == 0, done.stderr
    [prov] = json.loads(done.stdout)["providers"]
    # The lost instance is shown lost, not re-created: the preview adds only the new op's host.
    assert [(i["key"], i["instance_id"], i["template"], i["reason"]) for i in prov["lost"]] == [
        (victim.client_token, victim.id, "cpu", "missing")
    ]
    assert (prov["add"], prov["change"], prov["destroy"]) == (1, 0, 0)
    [op] = prov["ops"]
    assert [(i["key"], i["action"]) for i in prov["instances"]] == [(f"{op['op_id']}-000", "create")]
    table = xceprov(site, "plan", "cpu=1")
    assert table.returncode == 0, table.stderr
    [lost_line] = [line for line in table.stdout.splitlines() if line.startswith("lost ")]
    assert f"({victim.client_token}, {victim.id}, missing)" in lost_line and "never re-creates it" in lost_line
    # Read-only: no fact, no suspect counted, no desired set changed.
    assert journal(site) == facts_before
    assert not (work / "lost-suspects.json").exists()
    assert (work / "desired.tfvars.json").read_text() == desired_before

    # A bundle saved before the loss would now also record the loss: refused, nothing changes.
    stale = xceprov(site, "apply", "before")
    assert stale.returncode == 7, stale.stderr
    [line] = stale.stderr.strip().splitlines()
    assert line.startswith("xceprov: saved plan is stale")
    assert f"showed no instance lost on provider sim, the cloud now shows {victim.client_token} lost" in line
    assert journal(site) == facts_before and (work / "desired.tfvars.json").read_text() == desired_before
    assert [i.id for i in store(site).list_instances()] == [kept.id]

    assert xceprov(site, "plan", "cpu=1", "--out", "after").returncode == 0
    assert xceprov(site, "plan", "cpu=1", "--out", "twin").returncode == 0
    applied = xceprov(site, "apply", "after")
    assert applied.returncode == 0, applied.stderr
    # The apply did what its preview showed: the loss recorded, exactly one instance created.
    alive = store(site).list_instances()
    assert len(alive) == 2 and kept.id in {i.id for i in alive}
    lost_facts = [f for f in journal(site) if f["kind"] == "lost"]
    assert [(f["instance_key"], f["instance_id"]) for f in lost_facts] == [(victim.client_token, victim.id)]
    # The twin, saved beside it, was planned against the state before that apply: refused.
    twin = xceprov(site, "apply", "twin")
    assert twin.returncode == 7 and twin.stderr.startswith("xceprov: saved plan is stale")
    assert len(store(site).list_instances()) == 2


def test_a_tampered_lost_list_is_refused_and_a_manifest_without_one_applies(site: Path) -> None:
    assert xceprov(site, "plan", "cpu=1", "--out", "b").returncode == 0
    manifest = site / "b" / "manifest.json"
    doc = json.loads(manifest.read_text())
    assert doc["providers"][0]["lost"] == []
    doc["providers"][0]["lost"] = "op-1\nforged"
    manifest.write_text(json.dumps(doc))
    done = xceprov(site, "apply", "b")
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line == "xceprov: b/manifest.json: provider 'sim': 'lost' must be a list of instance keys"
    assert store(site).list_instances() == []
    # A manifest of an earlier version has no "lost": read as none, the bundle applies.
    del doc["providers"][0]["lost"]
    manifest.write_text(json.dumps(doc))
    applied = xceprov(site, "apply", "b")
    assert applied.returncode == 0, applied.stderr
    assert len(store(site).list_instances()) == 1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["plan", "tpu=2"], 2, "unknown template 'tpu'"),
        (["plan", "cpu=0"], 2, "count must be a positive number"),
        (["plan", "cpu=21"], 2, "beyond every provider's max_instances"),
        (["plan", "cpu=1", "--provider", "aws"], 2, "no such provider"),
        (["apply", "nothing-here"], 2, "not a plan bundle"),
    ],
)
def test_bad_input_one_line_no_traceback_nothing_written(site: Path, args: list[str], code: int, message: str) -> None:
    done = xceprov(site, *args)
    assert done.returncode == code
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0] and lines[0].startswith("xceprov: ")
    assert not (site / "state" / "work").exists()


def test_malformed_config_and_missing_file(site: Path) -> None:
    (site / "xceprov.yaml").write_text("cluster: x\nproviders: [\n")
    done = xceprov(site, "plan", "cpu=1")
    assert done.returncode == 3 and "malformed YAML" in done.stderr and "Traceback" not in done.stderr
    done = xceprov(site, "--config", str(site / "absent.yaml"), "plan", "cpu=1")
    assert done.returncode == 3 and "absent.yaml: configuration file not found" in done.stderr


def test_cloud_error_reaches_user_as_terraform_diagnostic(site: Path) -> None:
    fault = xceprov(site, "sim", "fault", "capacity", "c8.large", "1")
    assert fault.returncode == 0, fault.stderr
    assert xceprov(site, "plan", "cpu=2", "--out", "b").returncode == 0
    done = xceprov(site, "apply", "b")
    assert done.returncode == 4
    assert "Traceback" not in done.stderr
    assert "c8.large" in done.stderr and "capacity" in done.stderr.lower()
    # The intent stays recorded: both instances remain desired, one exists, a new plan completes it.
    assert len(store(site).list_instances()) == 1
    again = json.loads(xceprov(site, "plan", "gpu=1", "--json").stdout)
    assert again["providers"][0]["add"] == 2


def test_misspelt_module_setting_is_refused_before_planning(site: Path) -> None:
    misspelt = SITE.replace("max_instances: 20\n", "max_instances: 20\n    settings: {max_retry: 2}\n")
    (site / "xceprov.yaml").write_text(misspelt)
    done = xceprov(site, "plan", "cpu=1")
    assert done.returncode == 3
    assert "providers.sim.settings.max_retry: unknown setting of module xcesim (did you mean 'max_retries'?)" in (
        done.stderr
    )
    assert not (site / "state" / "work").exists()
