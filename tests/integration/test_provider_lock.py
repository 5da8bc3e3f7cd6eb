"""Provider versions pinned by the site's lock, and providers from the site's own mirror.

Through the real bundled Terraform, with no network: the toolkit's ``xcesim`` provider, and a
filesystem mirror made here that serves the same Python provider under another source address
(what a site's mirror of a registry provider looks like to Terraform).
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from cli_run import xceprov

from orchestrator.clients.terraform.mirror import LocalProvider, ensure_mirror
from orchestrator.configfile import parse_config
from orchestrator.errors import TerraformError
from orchestrator.model.modules import MODULES
from orchestrator.services.terraform_lock import lock_site
from orchestrator.services.validate import validate_all
from orchestrator.workspace.shards import ProviderShards
from orchestrator.workspace.terraform import engine_for, prepared_workdir

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
LOCK = "state/terraform/locks/xcesim.terraform.lock.hcl"
XCESIM = "registry.terraform.io/xce/xcesim"

SITE = """
cluster: ltest
state_dir: state
standalone: true
controller: {{ca: system}}
{terraform}
providers:
  sim: {{module: {module}}}
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
"""


def write_site(site: Path, module: str = "xcesim", terraform: str = "") -> Path:
    (site / "xceprov.yaml").write_text(SITE.format(module=module, terraform=terraform))
    return site


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("xceprov: ")]


def test_the_lock_verb_pins_versions_every_working_directory_uses_and_a_moved_version_is_one_line(
    tmp_path: Path,
) -> None:
    site = write_site(tmp_path)
    done = xceprov(site, "terraform", "lock")
    assert done.returncode == 0, done.stderr
    assert f"locked: terraform/roots/xcesim: provider {XCESIM} 0.1.0" in done.stdout
    pinned = (site / LOCK).read_text()
    assert f'provider "{XCESIM}"' in pinned and 'version     = "0.1.0"' in pinned
    # validate no longer warns that versions may move
    checked = xceprov(site, "validate")
    assert "no provider lock" not in checked.stderr
    # Shard 0 and a new shard both hold the site's lock, byte for byte.
    loaded = parse_config((site / "xceprov.yaml").read_text(), "xceprov.yaml", site)
    engine = engine_for(loaded.config)
    shards = ProviderShards(loaded.config, "sim", ROOT)
    for index in (0, 1):
        path = prepared_workdir(engine, shards.shard(index))
        assert (path / ".terraform.lock.hcl").read_text() == pinned

    # The site's lock names a version the mirror and constraints no longer give.
    (site / LOCK).write_text(pinned.replace('"0.1.0"', '"0.0.9"'))
    moved = (site / LOCK).read_text()
    for verb in (("plan", "cpu=1"), ("validate",)):
        done = xceprov(site, *verb)
        assert done.returncode != 0
        assert errors(done.stderr) == [
            f"xceprov: terraform/roots/xcesim (provider sim): provider {XCESIM}: the site's lock holds 0.0.9, "
            "the mirror and version constraints now give 0.1.0; xceprov terraform lock --upgrade accepts it"
        ], verb
    # Nothing replaced the lock by itself: not the verbs, not the lock verb without --upgrade.
    kept = xceprov(site, "terraform", "lock")
    assert kept.returncode != 0
    assert errors(kept.stderr) == [
        f"xceprov: terraform/roots/xcesim: provider {XCESIM}: the site's lock holds 0.0.9, which the root's "
        "version constraints (>= 0.1.0, 0.1.0, < 0.2.0) no longer allow; xceprov terraform lock --upgrade selects again"
    ]
    assert (site / LOCK).read_text() == moved
    upgraded = xceprov(site, "terraform", "lock", "--upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"moved: terraform/roots/xcesim: provider {XCESIM}: 0.0.9 -> 0.1.0" in upgraded.stdout
    assert (site / LOCK).read_text() == pinned
    assert xceprov(site, "plan", "cpu=1").returncode == 0


def test_a_platform_that_is_not_os_arch_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    site = write_site(tmp_path)
    done = xceprov(site, "terraform", "lock", "--platform", "linux_amd64", "--platform", "-fs-mirror=/tmp")
    assert done.returncode == 2
    assert errors(done.stderr) == ["xceprov: --platform '-fs-mirror=/tmp': not an OS_ARCH pair such as linux_arm64"]
    assert not (site / LOCK).exists()


def test_a_package_that_is_not_the_locked_one_is_refused(tmp_path: Path) -> None:
    site = write_site(tmp_path)
    assert xceprov(site, "terraform", "lock").returncode == 0
    pinned = (site / LOCK).read_text()
    (site / LOCK).write_text(pinned.replace("h1:", "h1:X"))
    done = xceprov(site, "plan", "cpu=1")
    assert done.returncode == 4
    assert errors(done.stderr) == [
        f"xceprov: terraform/roots/xcesim (provider sim): provider {XCESIM}: the site's lock holds 0.1.0, "
        "the 0.1.0 package offered now has other checksums (replaced in the mirror?)"
    ]


def test_a_site_lock_that_is_not_a_lock_file_is_named_with_its_line(tmp_path: Path) -> None:
    site = write_site(tmp_path)
    (site / LOCK).parent.mkdir(parents=True)
    (site / LOCK).write_text('provider "registry.terraform.io/xce/xcesim" {\n  version = \n')
    done = xceprov(site, "plan", "cpu=1")
    assert done.returncode == 4
    lines = errors(done.stderr)
    assert lines, done.stderr
    for line in lines:  # Terraform's diagnostics of that line, each naming the site's file
        assert line.startswith(f"xceprov: terraform/roots/xcesim (provider sim): {site / LOCK}:2: Error: "), line
    assert not (site / "state/work/ltest/sim").exists()


def test_without_a_lock_validate_says_versions_may_move(tmp_path: Path) -> None:
    site = write_site(tmp_path)
    done = xceprov(site, "validate")
    assert done.returncode == 0, done.stderr
    assert (
        f"warning: terraform/roots/xcesim: no provider lock ({site / LOCK}), so provider versions may move; "
        "xceprov terraform lock pins them"
    ) in done.stderr.splitlines()


def test_a_registry_provider_missing_from_the_site_mirror_is_one_line_in_validate_and_plan(tmp_path: Path) -> None:
    mirror = tmp_path / "empty-mirror"
    mirror.mkdir()
    site = write_site(tmp_path, module="aws", terraform=f"terraform: {{provider_mirror: {mirror}}}")
    text = (site / "xceprov.yaml").read_text().replace("{module: aws}", "{module: aws, settings: {region: eu-west-1}}")
    (site / "xceprov.yaml").write_text(text)
    for verb in (("validate",), ("plan", "cpu=1")):
        done = xceprov(site, *verb)
        assert done.returncode != 0, verb
        [line] = errors(done.stderr)
        assert line.startswith("xceprov: terraform/roots/aws (provider sim): provider hashicorp/aws: "), line
        assert str(mirror) in line, line


def test_a_relative_or_missing_mirror_is_a_configuration_error(tmp_path: Path) -> None:
    site = write_site(tmp_path, terraform="terraform: {provider_mirror: mirrors/tf}")
    done = xceprov(site, "validate")
    assert done.returncode == 3
    [line] = errors(done.stderr)
    assert "terraform.provider_mirror" in line and "mirrors/tf" in line and "absolute" in line
    missing = tmp_path / "no-such-mirror"
    site = write_site(tmp_path, terraform=f"terraform: {{provider_mirror: {missing}}}")
    done = xceprov(site, "plan", "cpu=1")
    assert done.returncode == 3
    assert errors(done.stderr) == [f"xceprov: terraform.provider_mirror: {missing}: no such directory"]


# --- a root whose provider only the site's mirror has -----------------------------------------


def toolkit_with(tmp_path: Path, source: str, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The toolkit's terraform/ with a root ``mirrored``: xcesim under the provider source ``source``,
    registered as a module of its own for the test (CONTRIBUTING.md, "Adding a provider module")."""
    monkeypatch.setitem(MODULES, "mirrored", dataclasses.replace(MODULES["xcesim"], name="mirrored"))
    toolkit = tmp_path / "toolkit"
    (toolkit / "ansible" / "playbooks").mkdir(parents=True)
    (toolkit / "templates").symlink_to(ROOT / "templates")
    for kind in ("roots", "modules"):
        target = toolkit / "terraform" / kind / "mirrored"
        shutil.copytree(ROOT / "terraform" / kind / "xcesim", target, ignore=shutil.ignore_patterns("examples"))
        for tf in target.glob("*.tf"):
            tf.write_text(tf.read_text().replace('source  = "xce/xcesim"', f'source  = "{source}"'))
    return toolkit


def mirrored_site(tmp_path: Path, mirror: Path | None) -> Path:
    terraform = f"terraform: {{provider_mirror: {mirror}}}" if mirror else ""
    site = write_site(tmp_path, module="mirrored", terraform=terraform)
    store = tmp_path / "state" / "sim" / "cloud.sqlite"
    text = (site / "xceprov.yaml").read_text()
    (site / "xceprov.yaml").write_text(
        text.replace("{module: mirrored}", f"{{module: mirrored, settings: {{store: {store}}}}}")
    )
    return site


def test_providers_come_from_the_site_filesystem_mirror_for_lock_validate_and_plan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toolkit = toolkit_with(tmp_path, "example/xcesim", monkeypatch)
    # The site's mirror: the Python provider published as example/xcesim 0.1.0 (unpacked layout).
    served = LocalProvider("example", "xcesim", "0.1.0", "orchestrator.sim.cloud.provider")
    mirror = ensure_mirror(tmp_path / "site-mirror", [served]).parent / "mirror"
    site = mirrored_site(tmp_path, mirror)
    loaded = parse_config((site / "xceprov.yaml").read_text(), "xceprov.yaml", site)
    report = lock_site(loaded, toolkit)
    assert report.locked == ["terraform/roots/mirrored: provider registry.terraform.io/example/xcesim 0.1.0"]
    assert (
        'provider "registry.terraform.io/example/xcesim"'
        in (site / "state/terraform/locks/mirrored.terraform.lock.hcl").read_text()
    )
    checked = validate_all(loaded, toolkit)
    assert checked.problems == []
    from orchestrator.services.plan import plan_burst

    plan = plan_burst(loaded, {"cpu": 2}, toolkit_root=toolkit)
    assert [p.add for p in plan.providers] == [2]


def test_an_unreachable_registry_is_one_line_naming_root_and_provider(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # .invalid never resolves: the registry of this provider cannot be reached from anywhere.
    toolkit = toolkit_with(tmp_path, "registry.xce-test.invalid/example/xcesim", monkeypatch)
    site = mirrored_site(tmp_path, None)
    loaded = parse_config((site / "xceprov.yaml").read_text(), "xceprov.yaml", site)
    expected_start = (
        "terraform/roots/mirrored (provider sim): provider registry.xce-test.invalid/example/xcesim: "
        "registry registry.xce-test.invalid unreachable ("
    )
    [problem] = validate_all(loaded, toolkit).problems
    assert problem.startswith(expected_start) and problem.endswith(
        "); an air-gapped site sets terraform.provider_mirror"
    ), problem
    from orchestrator.services.plan import plan_burst

    with pytest.raises(TerraformError) as raised:
        plan_burst(loaded, {"cpu": 1}, toolkit_root=toolkit)
    [line] = str(raised.value).splitlines()
    assert line.startswith(expected_start), line


def test_an_unreachable_registry_exits_75_in_validate_and_plan_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: validate called it a configuration problem (3), plan a Terraform error (4).
    toolkit = toolkit_with(tmp_path, "registry.xce-test.invalid/example/xcesim", monkeypatch)
    loaded = parse_config((mirrored_site(tmp_path, None) / "xceprov.yaml").read_text(), "xceprov.yaml", tmp_path)
    error = validate_all(loaded, toolkit).error()  # what xceprov validate raises
    assert error is not None and error.exit_code == 75, error
    from orchestrator.services.plan import plan_burst

    with pytest.raises(TerraformError) as raised:
        plan_burst(loaded, {"cpu": 1}, toolkit_root=toolkit)
    assert raised.value.exit_code == error.exit_code == 75
    # With a configuration problem beside it, validate says 3: the file is to be fixed first.
    (tmp_path / "site.txt").write_text("")
    text = (tmp_path / "xceprov.yaml").read_text() + "template_dirs: [site.txt]\n"
    mixed = validate_all(parse_config(text, "xceprov.yaml", tmp_path), toolkit).error()
    assert mixed is not None and mixed.exit_code == 3 and len(str(mixed).splitlines()) == 2
