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
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.paths import toolkit_root

FOLDER = toolkit_root() / "contrib" / "provider-contract"
SCRIPTS = FOLDER / "scripts"
ACTIONS = ("getAvailableTemplates", "requestMachines", "getRequestStatus", "requestReturnMachines", "getReturnRequests")
# What a scheduler's management host may have in its environment that the scripts read.
SCHEDULER_VARS = ("XCEPROV", "XCEPROV_CONFIG", "XCEPROV_CONSUMER", "PRO_CONF_DIR", "HF_PROVIDER_CONFDIR")

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


def test_the_schedulers_environment_reaches_xceprov_untouched(fake: Path, tmp_path: Path) -> None:
    """Where the configuration is, and who calls, is xceprov's to tell (one place, tested below)."""
    env = {"PRO_CONF_DIR": str(tmp_path / "lsf"), "HF_PROVIDER_CONFDIR": str(tmp_path / "hf")}
    _, record = run_script(SCRIPTS / "getAvailableTemplates.sh", fake, "-f", "in.json", env=env)
    assert record is not None and record["config"] is None


# ----- the real xceprov behind the scripts, from the environment each consumer sets -------------

REAL = Path(sys.executable).parent / "xceprov"
SITE = """
cluster: scripts
state_dir: {state}
standalone: true
controller: {{ca: system}}
providers:
  sim_eu: {{module: xcesim, max_instances: 3}}
templates:
  cpu_big:
    xce: {{slots: 4, resources: {{mem: 8G, xcehost: true}}}}
    providers:
      sim_eu: {{flavor: c8.large, image: debian-12}}
"""


def consumer_call(tmp_path: Path, env: dict[str, str]) -> tuple[int, dict[str, Any]]:
    """getAvailableTemplates.sh as the consumer runs it: its environment, an unrelated working
    directory (holding an ``xceprov.yaml`` that is not the provider's), no XCEPROV_CONFIG."""
    cwd = tmp_path / "cwd"
    cwd.mkdir(exist_ok=True)
    (cwd / "xceprov.yaml").write_text("cluster: wrong\n")
    document = tmp_path / "in.json"
    document.write_text("{}")
    base = {k: v for k, v in os.environ.items() if k not in SCHEDULER_VARS and not k.startswith(("PRO_", "HF_"))}
    done = subprocess.run(
        [str(SCRIPTS / "getAvailableTemplates.sh"), "-f", str(document)],
        env={**base, "XCEPROV": str(REAL), **env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    lines = done.stdout.splitlines()
    assert len(lines) == 1, (done.stdout, done.stderr)
    return done.returncode, json.loads(lines[0])


CONSUMERS = [
    # LSF's ebrokerd: PRO_CONF_DIR is the provider's confPath, its files in conf/ below it.
    (
        "lsf",
        {"PRO_CONF_DIR": "{top}/conf/resource_connector/xceprov", "PROVIDER_NAME": "xceprov"},
        "{top}/conf/resource_connector/xceprov/conf",
    ),
    # A host factory that sets HF_PROVIDER_CONFDIR.
    (
        "hostfactory",
        {"HF_PROVIDER_CONFDIR": "{top}/hf/conf/providers/xceprovinst", "HF_PROVIDER_NAME": "xceprovinst"},
        "{top}/hf/conf/providers/xceprovinst",
    ),
    # One that does not (optional in IBM's specification): $HF_CONFDIR/providers/$HF_PROVIDER_NAME.
    (
        "hostfactory",
        {"HF_CONFDIR": "{top}/hf/conf", "HF_PROVIDER_NAME": "xceprovinst", "HF_WORKDIR": "{top}/w"},
        "{top}/hf/conf/providers/xceprovinst",
    ),
]


@pytest.mark.parametrize(("consumer", "env", "conf_dir"), CONSUMERS, ids=["lsf", "hf-confdir", "hf-default"])
def test_a_consumers_call_uses_the_configuration_where_it_keeps_it_or_refuses_naming_where_it_looked(
    tmp_path: Path, consumer: str, env: dict[str, str], conf_dir: str
) -> None:
    top = str(tmp_path)
    env = {k: v.format(top=top) for k, v in env.items()}
    where = Path(conf_dir.format(top=top))
    code, answer = consumer_call(tmp_path, env)
    # Never the built-in world's configuration, nor the working directory's.
    assert code == 3, answer
    assert answer["error"]["type"] == "failed"
    assert str(where / "xceprov.yaml") in answer["message"], answer
    assert "templates" not in answer

    where.mkdir(parents=True)
    (where / "xceprov.yaml").write_text(SITE.format(state=tmp_path / "state"))
    code, answer = consumer_call(tmp_path, env)
    assert code == 0, answer
    [offered] = answer["templates"]
    if consumer == "lsf":  # LSF's names: no underscore in the id, mem in MiB, Boolean attributes
        assert offered["templateId"] == "cpu-big.sim-eu"
        assert offered["attributes"]["mem"] == ["Numeric", "8192"]
        assert offered["attributes"]["xcehost"] == ["Boolean", "1"]
        assert offered["attributes"]["ncores"] == ["Numeric", "4"]
    else:  # Symphony's
        assert offered["templateId"] == "cpu_big.sim_eu"
        assert offered["attributes"]["nram"] == ["Numeric", "8192"]
        assert offered["attributes"]["ncpus"] == ["Numeric", "4"]


def test_both_consumers_variables_at_once_are_refused_unless_xceprov_consumer_says(tmp_path: Path) -> None:
    conf = tmp_path / "lsf" / "conf"
    conf.mkdir(parents=True)
    (conf / "xceprov.yaml").write_text(SITE.format(state=tmp_path / "state"))
    env = {"PRO_CONF_DIR": str(tmp_path / "lsf"), "HF_CONFDIR": str(tmp_path / "hf")}
    code, answer = consumer_call(tmp_path, env)
    assert code == 3 and "XCEPROV_CONSUMER" in answer["message"], answer
    code, answer = consumer_call(tmp_path, {**env, "XCEPROV_CONSUMER": "lsf"})
    assert code == 0 and answer["templates"][0]["templateId"] == "cpu-big.sim-eu", answer


@pytest.mark.parametrize("args", [(), ("in.json",), ("-f",), ("-x", "in.json"), ("-f", "in.json", "more")])
def test_a_call_without_exactly_f_file_is_a_json_error_and_runs_nothing(fake: Path, args: tuple[str, ...]) -> None:
    done, record = run_script(SCRIPTS / "requestReturnMachines.sh", fake, *args)
    assert record is None, "xceprov was run"
    assert done.returncode == 1
    assert json.loads(done.stdout) == {
        "error": {"type": "bad_input", "message": "usage: requestReturnMachines.sh -f FILE"},
        "message": "usage: requestReturnMachines.sh -f FILE",
    }


@pytest.mark.parametrize("example", sorted(p.relative_to(FOLDER) for p in FOLDER.glob("conf/**/*.json")))
def test_every_conf_example_is_json_naming_the_xceprov_provider(example: Path) -> None:
    document = json.loads((FOLDER / example).read_text())
    assert "xceprov" in json.dumps(document)
