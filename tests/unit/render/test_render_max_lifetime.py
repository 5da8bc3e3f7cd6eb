"""providers.<name>.max_lifetime: checked in the configuration, rendered as an owner tag and as
the in-host shutdown of cloud-init, which a site template cannot drop."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.instances import InstanceSpec
from orchestrator.render.instances import LIFETIME_FILE, RenderRequest, render_op, renderer_for

BUILTIN = Path(__file__).resolve().parents[3] / "templates"
SCRIPT = "/usr/local/libexec/xce-max-lifetime"
UNIT = "/etc/systemd/system/xce-max-lifetime.service"

SITE = """
cluster: site1
controller: {{ca: system}}
providers:
  sim: {{module: xcesim{extra}}}
templates:
  cpu:
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
"""


def site(extra: str = "", tail: str = "") -> str:
    return SITE.format(extra=extra) + tail


def config(text: str) -> Config:
    return parse_config(text, "site.yaml", Path("/srv/site")).config


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "site.yaml", Path("/srv/site"))
    return info.value.problems


def render_one(cfg: Config) -> InstanceSpec:
    specs = render_op(cfg, renderer_for(cfg, BUILTIN), RenderRequest("sim", "cpu", "op-6b0b0000-abcdef", 1))
    return next(iter(specs.values()))


def files_of(spec: InstanceSpec) -> dict[str, dict[str, str]]:
    return {f["path"]: f for f in yaml.safe_load(spec.user_data)["write_files"]}


def test_off_by_default_no_tag_and_no_shutdown() -> None:
    cfg = config(site())
    assert cfg.providers["sim"].max_lifetime is None
    spec = render_one(cfg)
    assert owner.MAX_LIFETIME not in spec.tags
    data = yaml.safe_load(spec.user_data)
    assert set(files_of(spec)) == {"/etc/xce/node-manager.json"}
    assert "runcmd" not in data


def test_a_lifetime_becomes_the_owner_tag_and_the_in_host_shutdown() -> None:
    spec = render_one(config(site(", max_lifetime: 7d")))
    assert spec.tags[owner.MAX_LIFETIME] == "604800"
    files = files_of(spec)
    # The value is data in its own file; the script and the unit carry no value.
    assert files[LIFETIME_FILE]["content"] == "604800\n"
    assert files[SCRIPT]["permissions"] == "0755"
    assert "604800" not in files[SCRIPT]["content"] and "604800" not in files[UNIT]["content"]
    assert f"ExecStart={SCRIPT}" in files[UNIT]["content"]
    assert yaml.safe_load(spec.user_data)["runcmd"] == [
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "--now", "xce-max-lifetime.service"],
    ]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("30s", "max_lifetime 30s must be whole seconds, at least 60s"),
        ("90.5s", "max_lifetime 90.5s must be whole seconds, at least 60s"),
        ("10m", "max_lifetime 600s must be longer than join_deadline 900s"),
        ("a week", "is not a duration"),
    ],
)
def test_a_bad_lifetime_is_one_line_naming_the_provider(value: str, message: str) -> None:
    found = problems(site(f", max_lifetime: {json.dumps(value)}"))
    assert len(found) == 1 and found[0].startswith("site.yaml: providers.sim"), found
    assert message in found[0]


def test_a_short_lifetime_is_fine_with_a_shorter_join_deadline() -> None:
    cfg = config(site(", max_lifetime: 10m, join_deadline: 5m"))
    assert render_one(cfg).tags[owner.MAX_LIFETIME] == "600"


def _with_site_template(tmp_path: Path, filename: str, text: str) -> Config:
    (tmp_path / filename).write_text(text)
    return config(site(", max_lifetime: 1d", f"template_dirs: [{json.dumps(str(tmp_path))}]\n"))


def test_a_site_cloud_init_without_the_lifetime_file_is_refused(tmp_path: Path) -> None:
    cfg = _with_site_template(tmp_path, "cloud-init.yaml.j2", "#cloud-config\nwrite_files: []\n")
    with pytest.raises(ConfigError, match=rf"cloud-init\.yaml\.j2: .*does not write {LIFETIME_FILE}"):
        render_one(cfg)


def test_a_site_cloud_init_with_another_lifetime_is_refused(tmp_path: Path) -> None:
    text = f'#cloud-config\nwrite_files:\n  - path: {LIFETIME_FILE}\n    content: "60"\n'
    cfg = _with_site_template(tmp_path, "cloud-init.yaml.j2", text)
    with pytest.raises(ConfigError, match=f"{LIFETIME_FILE} must hold 86400, not '60'"):
        render_one(cfg)


def test_a_site_instance_template_cannot_drop_the_lifetime_tag(tmp_path: Path) -> None:
    head = '{"name": {{ name|tojson }}, "template": "cpu", "flavor": "f", "image": "i", "tags": '
    kept = _with_site_template(tmp_path, "instance.json.j2", head + "{{ owner_tags|tojson }}}")
    assert render_one(kept).tags[owner.MAX_LIFETIME] == "86400"
    # The same entry with every owner tag but the lifetime.
    (tmp_path / "instance.json.j2").write_text(
        head + "{{ '{' }}{% for k, v in owner_tags|dictsort if k != 'xce:max_lifetime' %}"
        '{{ k|tojson }}: {{ v|tojson }}{{ "," if not loop.last }}{% endfor %}}}'
    )
    with pytest.raises(ConfigError, match="lost owner tag xce:max_lifetime='86400'"):
        render_one(kept)


def _run_script(tmp_path: Path, lifetime: str, now: int, stamp: int | None) -> tuple[str, str]:
    """The rendered script with its paths moved under tmp_path and fake date/shutdown commands."""
    files = files_of(render_one(config(site(f", max_lifetime: {lifetime}"))))
    root = tmp_path / "root"
    (root / "etc/xce").mkdir(parents=True)
    (root / "etc/xce/max-lifetime").write_text(files[LIFETIME_FILE]["content"])
    if stamp is not None:
        (root / "var/lib/xce").mkdir(parents=True)
        (root / "var/lib/xce/first-boot").write_text(f"{stamp}\n")
    script = (
        files[SCRIPT]["content"].replace("/etc/xce/", f"{root}/etc/xce/").replace("/var/lib/xce", f"{root}/var/lib/xce")
    )
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "date").write_text(f"#!/bin/sh\necho {now}\n")
    (bin_dir / "shutdown").write_text(f'#!/bin/sh\necho "$@" > {tmp_path}/shutdown.args\n')
    for tool in ("date", "shutdown"):
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "script.sh").write_text(script)
    subprocess.run(["/bin/sh", str(tmp_path / "script.sh")], check=True, env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    return (tmp_path / "shutdown.args").read_text().strip(), (root / "var/lib/xce/first-boot").read_text().strip()


def test_the_shutdown_script_counts_from_the_first_boot(tmp_path: Path) -> None:
    # First boot: the stamp is recorded, the poweroff scheduled a whole lifetime (in minutes) ahead.
    args, stamp = _run_script(tmp_path / "first", "2h", now=1_000_000, stamp=None)
    assert args == "-P +120 xce: maximum lifetime reached" and stamp == "1000000"


def test_after_a_reboot_the_script_keeps_the_first_boot_and_rounds_down(tmp_path: Path) -> None:
    args, stamp = _run_script(tmp_path / "reboot", "2h", now=1_000_000, stamp=1_000_000 - 7200 + 150)
    assert args == "-P +2 xce: maximum lifetime reached" and stamp == str(1_000_000 - 7200 + 150)


def test_past_the_lifetime_the_script_powers_off_now(tmp_path: Path) -> None:
    args, _ = _run_script(tmp_path / "late", "2h", now=1_000_000, stamp=1_000_000 - 7200 - 5)
    assert args == "-P now xce: maximum lifetime reached"
