"""A ``template_dirs`` entry that is not a directory is an error in ``validate`` and ``plan``.

Before, the template loader skipped it and rendered the built-in templates instead: ``validate``
exited 0 and hosts would have booted without the site's files.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tffake import ROOT, SITE, FakeEngine

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import ConfigError
from orchestrator.services.plan import plan_burst
from orchestrator.services.validate import validate_all


def site(tmp_path: Path, *dirs: str) -> LoadedConfig:
    text = SITE.format(cluster="unit", state=tmp_path / "state") + f"template_dirs: [{', '.join(dirs)}]\n"
    return parse_config(text, "site.yaml", tmp_path)


def test_a_missing_template_dir_is_a_problem_and_no_template_renders_from_the_builtins(
    tmp_path: Path, toolkit: Path
) -> None:
    (tmp_path / "kept").mkdir()
    (tmp_path / "a-file").write_text("")
    report = validate_all(site(tmp_path, "kept", "site/templates", "a-file"), toolkit, engine=FakeEngine())
    assert report.problems == [
        f"site.yaml: template_dirs.1: {tmp_path / 'site/templates'}: no such directory "
        "(the built-in templates are not used in its place)",
        f"site.yaml: template_dirs.2: {tmp_path / 'a-file'}: not a directory "
        "(the built-in templates are not used in its place)",
    ]
    assert not [c for c in report.checked if c.startswith("template ")]
    error = report.error()
    assert isinstance(error, ConfigError) and error.exit_code == 3


def test_existing_template_dirs_validate(tmp_path: Path, toolkit: Path) -> None:
    (tmp_path / "site" / "templates").mkdir(parents=True)
    report = validate_all(site(tmp_path, "site/templates"), toolkit, engine=FakeEngine())
    assert report.problems == [] and report.error() is None
    assert "template cpu on provider sim" in report.checked


def test_plan_refuses_a_missing_template_dir_before_terraform_runs(tmp_path: Path) -> None:
    engine = FakeEngine()
    with pytest.raises(ConfigError) as raised:
        plan_burst(site(tmp_path, "site/templates"), {"cpu": 1}, toolkit_root=ROOT, engine=engine)
    assert raised.value.problems == [
        f"site.yaml: template_dirs.0: {tmp_path / 'site/templates'}: no such directory "
        "(the built-in templates are not used in its place)"
    ]
    assert engine.calls == []


@pytest.mark.parametrize("verb", [["validate", "-q"], ["plan", "cpu=1"]])
def test_the_command_line_exits_3_naming_the_entry(tmp_path: Path, verb: list[str]) -> None:
    from cli_run import xceprov

    (tmp_path / "xceprov.yaml").write_text(
        SITE.format(cluster="unit", state=tmp_path / "state") + "template_dirs: [site/templates]\n"
    )
    done = xceprov(tmp_path, *verb)
    assert done.returncode == 3, done.stderr
    problems = [line for line in done.stderr.splitlines() if line.startswith("xceprov: ")]
    assert problems == [
        f"xceprov: {tmp_path / 'xceprov.yaml'}: template_dirs.0: {tmp_path / 'site/templates'}: no such directory "
        "(the built-in templates are not used in its place)"
    ]
