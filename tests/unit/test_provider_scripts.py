"""The shipped provider scripts (contrib/provider-contract/): the files and the call a scheduler makes.

LSF's resource connector and a Symphony host factory run ``scripts/ACTION.sh -f FILE`` and read
stdout and the exit code. Each script is run here against a fake ``XCEPROV`` that records the
arguments and the configuration it was given, so what the scripts pass to ``xceprov`` is seen
exactly as ``xceprov`` would see it.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from orchestrator.paths import toolkit_root

FOLDER = toolkit_root() / "contrib" / "provider-contract"
SCRIPTS = FOLDER / "scripts"
ACTIONS = ("getAvailableTemplates", "requestMachines", "getRequestStatus", "requestReturnMachines", "getReturnRequests")
# What a scheduler's management host may have in its environment that the scripts read.
SCHEDULER_VARS = ("XCEPROV", "XCEPROV_CONFIG", "PRO_CONF_DIR", "HF_PROVIDER_CONFDIR")

FAKE_XCEPROV = """#!/usr/bin/env python3
import json, os, sys
with open(os.environ["RECORD"], "w") as out:
    json.dump({"argv": sys.argv[1:], "config": os.environ.get("XCEPROV_CONFIG")}, out)
print('{"answer": "from the fake"}')
sys.exit(int(os.environ.get("FAKE_EXIT", "0")))
"""


@pytest.fixture
def fake(tmp_path: Path) -> Path:
    path = tmp_path / "fake xceprov"  # a space: the scripts must quote the executable
    path.write_text(FAKE_XCEPROV)
    path.chmod(0o755)
    return path


def run_script(
    script: Path, fake: Path, *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[subprocess.CompletedProcess[str], dict[str, object] | None]:
    record = fake.parent / "record.json"
    record.unlink(missing_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARS}
    environment = {**base, "XCEPROV": str(fake), "RECORD": str(record), **(env or {})}
    done = subprocess.run(
        [str(script), *args], env=environment, cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )
    return done, json.loads(record.read_text()) if record.exists() else None


@pytest.mark.parametrize("action", ACTIONS)
def test_every_action_script_is_an_executable_bash_script_that_parses(action: str) -> None:
    script = SCRIPTS / f"{action}.sh"
    assert script.read_text().startswith("#!/bin/bash\n")
    assert script.stat().st_mode & stat.S_IXUSR, f"{script.name} is not executable"
    done = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_the_shared_body_parses_and_is_executable() -> None:
    body = SCRIPTS / "provider-action.sh"
    assert body.stat().st_mode & stat.S_IXUSR
    assert subprocess.run(["bash", "-n", str(body)], check=False).returncode == 0
    assert sorted(p.name for p in SCRIPTS.iterdir()) == sorted([*(f"{a}.sh" for a in ACTIONS), "provider-action.sh"])


@pytest.mark.parametrize("action", ACTIONS)
def test_a_script_runs_the_verb_with_the_file_the_scheduler_gave(action: str, fake: Path, tmp_path: Path) -> None:
    document = tmp_path / "rc input" / "in.json"  # LSF's own paths have no space; a site's may
    document.parent.mkdir()
    document.write_text("{}")
    done, record = run_script(SCRIPTS / f"{action}.sh", fake, "-f", str(document), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert record == {"argv": ["provider", action, "-f", str(document)], "config": None}
    assert json.loads(done.stdout) == {"answer": "from the fake"}


def test_the_exit_code_of_the_verb_is_the_scripts(fake: Path, tmp_path: Path) -> None:
    done, _ = run_script(SCRIPTS / "requestMachines.sh", fake, "-f", "in.json", env={"FAKE_EXIT": "9"})
    assert done.returncode == 9


def test_xceprov_config_from_the_environment_is_passed_on(fake: Path, tmp_path: Path) -> None:
    site = str(tmp_path / "site.yaml")
    _, record = run_script(SCRIPTS / "getRequestStatus.sh", fake, "-f", "in.json", env={"XCEPROV_CONFIG": site})
    assert record is not None and record["config"] == site


@pytest.mark.parametrize(
    ("variable", "conf_dir"),
    [("PRO_CONF_DIR", "lsf/xceprov/conf"), ("HF_PROVIDER_CONFDIR", "hf/providers/xceprovinst")],
)
def test_without_xceprov_config_the_providers_conf_directory_is_looked_in(
    fake: Path, tmp_path: Path, variable: str, conf_dir: str
) -> None:
    value = tmp_path / ("lsf/xceprov" if variable == "PRO_CONF_DIR" else conf_dir)
    (tmp_path / conf_dir).mkdir(parents=True)
    _, record = run_script(SCRIPTS / "getAvailableTemplates.sh", fake, "-f", "in.json", env={variable: str(value)})
    assert record is not None and record["config"] is None, "a configuration that is not there was named"
    (tmp_path / conf_dir / "xceprov.yaml").write_text("cluster: c\n")
    _, record = run_script(SCRIPTS / "getAvailableTemplates.sh", fake, "-f", "in.json", env={variable: str(value)})
    assert record is not None and record["config"] == str(tmp_path / conf_dir / "xceprov.yaml")


@pytest.mark.parametrize("args", [(), ("in.json",), ("-f",), ("-x", "in.json"), ("-f", "in.json", "more")])
def test_a_call_without_exactly_f_file_is_a_json_error_and_runs_nothing(fake: Path, args: tuple[str, ...]) -> None:
    done, record = run_script(SCRIPTS / "requestReturnMachines.sh", fake, *args)
    assert record is None, "xceprov was run"
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "error": {"type": "bad_input", "message": "usage: requestReturnMachines.sh -f FILE"}
    }


@pytest.mark.parametrize("example", sorted(p.relative_to(FOLDER) for p in FOLDER.glob("conf/**/*.json")))
def test_every_conf_example_is_json_naming_the_xceprov_provider(example: Path) -> None:
    document = json.loads((FOLDER / example).read_text())
    assert "xceprov" in json.dumps(document)
