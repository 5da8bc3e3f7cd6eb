"""Values that are valid YAML but no valid value, through the command line as a user meets them.

Each hostile value is written into ``xceprov.yaml`` and refused by ``validate`` and by a verb
that would act on it: exit 3, one line naming the file and the key, no traceback, no "internal
error", nothing written. Before the fix ``.nan`` durations were accepted, a 400-digit integer
was ``internal error: OverflowError``, ``~nouser`` was ``internal error: RuntimeError`` and
``2026-02-30`` was ``internal error: ValueError``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from orchestrator.cli.main import cli

SITE = """\
cluster: values
state_dir: state
standalone: true
controller:
  ca: system
  lease_margin: 2s
providers:
  sim:
    module: xcesim
    idle_time: 20s
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.5}
"""

HUGE = "1" + "0" * 400
ENORMOUS = "9" * 5000  # past Python's 4300-digit limit for converting text to an integer

IDLE = "idle_time: 20s"
MARGIN = "lease_margin: 2s"
# case: (a line of SITE, what replaces it, the key the one line must name (after the value's
# "line:column: " where YAML could not build it), a word it must say)
HOSTILE = {
    "nan idle_time": (IDLE, "idle_time: .nan", "providers.sim.idle_time", "not a number"),
    "nan hold_time": (IDLE, "hold_time: .nan", "providers.sim.hold_time", "not a number"),
    "nan lease_margin": (MARGIN, "lease_margin: .nan", "controller.lease_margin", "not a number"),
    "infinite duration": (IDLE, "idle_time: .inf", "providers.sim.idle_time", "infinite"),
    "negative infinity": (MARGIN, "lease_margin: -.inf", "controller.lease_margin", "infinite"),
    "huge integer duration": (IDLE, f"idle_time: {HUGE}", "providers.sim.idle_time", "out of range"),
    "enormous integer duration": (IDLE, f"idle_time: {ENORMOUS}", "providers.sim.idle_time", "out of range"),
    "duration past the clock": (IDLE, "idle_time: 99999999999", "providers.sim.idle_time", "longest accepted"),
    "huge duration with a unit": (IDLE, 'idle_time: "99999999999999999d"', "providers.sim.idle_time", "longest"),
    "date as a duration": (IDLE, "idle_time: 2024-01-01", "providers.sim.idle_time", "YAML date"),
    "timestamp as a duration": (MARGIN, "lease_margin: 2024-01-01T10:00:00Z", "controller.lease_margin", "timestamp"),
    "boolean as a duration": (IDLE, "idle_time: yes", "providers.sim.idle_time", "boolean"),
    "negative duration": (IDLE, "idle_time: -5", "providers.sim.idle_time", "negative"),
    "zero join deadline": (IDLE, "join_deadline: 0", "providers.sim.join_deadline", "greater than 0"),
    "nan max_lifetime": (IDLE, "max_lifetime: .nan", "providers.sim.max_lifetime", "not a number"),
    "infinite max_lifetime": (IDLE, "max_lifetime: .inf", "providers.sim.max_lifetime", "infinite"),
    "huge integer count": (IDLE, f"max_instances: {HUGE}", "providers.sim.max_instances", "out of range"),
    "boolean as a count": (IDLE, "max_instances: true", "providers.sim.max_instances", "boolean"),
    "infinite cost": (
        "cost_per_hour: 0.5",
        "cost_per_hour: .inf",
        "templates.cpu.providers.sim.cost_per_hour",
        "infinite",
    ),
    "date in module settings": (IDLE, "settings: {store: 2024-01-01}", "providers.sim.settings.store", "YAML date"),
    "nan in module settings": (IDLE, "settings: {x: [1, .nan]}", "providers.sim.settings.x.1", "not a number"),
    "date as a name": ("cluster: values", "cluster: 2024-01-01", "cluster", "YAML date"),
    "nul in a path": ("state_dir: state", 'state_dir: "st\\0ate"', "state_dir", "NUL character"),
    "negative publish wait": (
        "standalone: true",
        "standalone: true\nansible: {host_key_publish_wait: -5}",
        "ansible.host_key_publish_wait",
        "negative",
    ),
    "home of no user": ("ca: system", "ca: ~xceprov-no-such-user/ca.pem", "controller.ca", "no such user"),
    "unknown ansible strategy": (
        "standalone: true",
        "standalone: true\nansible: {strategy: free}",
        "ansible.strategy",
        "'mitogen_linear' or 'linear'",
    ),
    # Values the parser accepts and YAML's constructors cannot build (issue 27 item 19: before the
    # fix, "internal error: ValueError: day is out of range for month", exit 70): the line also
    # gives the value's line and column.
    "no such day": (IDLE, "idle_time: 2026-02-30", "10:16: providers.sim.idle_time", "'2026-02-30' is no valid"),
    "no such month": (
        MARGIN,
        "lease_margin: 2026-13-01T10:00:00Z",
        "6:17: controller.lease_margin",
        "timestamp (month must be in 1..12); quote it if text is meant",
    ),
    "no such hour": ("cluster: values", "cluster: 2026-02-28 25:00:00", "1:10: cluster", "(hour must be in 0..23)"),
    "no such day as a key": (IDLE, "settings: {2026-02-31: x}", "10:16: providers.sim.settings", "key '2026-02-31'"),
    "deep in a list": (IDLE, "settings: {x: [1, 2026-04-31]}", "10:23: providers.sim.settings.x.1", "YAML date"),
    "tagged boolean": (IDLE, "settings: {x: !!bool maybe}", "10:19: providers.sim.settings.x", "no valid YAML boolean"),
    "tagged integer": (IDLE, 'settings: {x: !!int "ten"}', "10:19: providers.sim.settings.x", "YAML integer"),
    "tagged timestamp": (IDLE, "settings: {x: !!timestamp soon}", "10:19: providers.sim.settings.x", "timestamp"),
    "tagged number": (IDLE, "idle_time: !!float fast", "10:16: providers.sim.idle_time", "no valid YAML number"),
}


def hostile_site(tmp_path: Path, case: str) -> Path:
    """A site whose ``xceprov.yaml`` holds the hostile value of ``case`` and nothing else wrong."""
    old, new, _key, _word = HOSTILE[case]
    assert SITE.count(old) == 1
    (tmp_path / "xceprov.yaml").write_text(SITE.replace(old, new))
    return tmp_path


@dataclass
class Done:
    """What a user sees of one run: its exit code and what it wrote to stderr."""

    returncode: int
    stderr: str


def xceprov(site: Path, *args: str) -> Done:
    """``xceprov --config site/xceprov.yaml ARGS``, run in ``site``, as the console script runs it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(site)
        result = CliRunner().invoke(cli, ["--config", str(site / "xceprov.yaml"), *args])
    return Done(result.exit_code, result.stderr)


def assert_refused(done: Done, key: str, word: str) -> None:
    """Exit 3 and exactly one line, naming the file and the key, saying ``word``; no traceback."""
    lines = done.stderr.splitlines()
    assert done.returncode == 3, done.stderr
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("xceprov: ") and word in lines[0], lines[0]
    # "<file>: <key>: ..." or, for a value YAML cannot build, "<file>:<line>:<column>: <key>: ..."
    assert f"xceprov.yaml{':' if key[0].isdigit() else ': '}{key}: " in lines[0], lines[0]
    assert "internal error" not in done.stderr and "Traceback" not in done.stderr
    assert len(lines[0]) < 300, lines[0]  # a 400-digit value is not echoed


@pytest.mark.parametrize("case", sorted(HOSTILE))
@pytest.mark.parametrize("verb", [("validate",), ("plan", "cpu=1")], ids=["validate", "plan"])
def test_a_hostile_value_is_one_line_naming_its_key(tmp_path: Path, case: str, verb: tuple[str, ...]) -> None:
    _old, _new, key, word = HOSTILE[case]
    site = hostile_site(tmp_path, case)
    assert_refused(xceprov(site, *verb), key, word)
    assert not (site / "state").exists()  # nothing half-done


VERBS = [
    ("apply", "bundle.json"),
    ("bootstrap",),
    ("breaker", "reset", "cpu"),
    ("daemon",),
    ("destroy", "--all"),
    ("ops",),
    ("ops", "resume"),
    ("orphans",),
    ("return", "some-host"),
    ("status",),
]


@pytest.mark.parametrize("verb", VERBS, ids=[" ".join(v) for v in VERBS])
def test_every_verb_refuses_a_nan_idle_time(tmp_path: Path, verb: tuple[str, ...]) -> None:
    site = hostile_site(tmp_path, "nan idle_time")
    assert_refused(xceprov(site, *verb), "providers.sim.idle_time", "not a number")
    assert not (site / "state").exists()


@pytest.mark.parametrize(
    ("manifest", "says"),
    [
        (
            '{"format": 1, "cluster": "values", "providers": [{"name": "sim", "plan_file": "a\\u0000.tfplan"}]}',
            "malformed",
        ),
        ('{"format": 1, "cluster": "values", "providers": [{"name": "sim", "plan_file": ".."}]}', "malformed"),
        ("[" * 100_000, "nested too deeply"),
    ],
    ids=["nul", "parent", "deep"],
)
def test_a_hostile_bundle_is_one_line_naming_it(tmp_path: Path, manifest: str, says: str) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    bundle = tmp_path / "bundle"
    bundle.mkdir()
    (bundle / "sim.tfplan").write_text("not read")
    (bundle / "manifest.json").write_text(manifest)
    done = xceprov(tmp_path, "apply", str(bundle))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"xceprov: {bundle / 'manifest.json'}: ") and says in line, line
    assert "\0" not in line and len(line) < 300


TEMPLATE_CODE = {
    "division by zero": ("hostname.j2", "{{ 1 / 0 }}", "hostname.j2:1: ZeroDivisionError"),
    "wrong types": ("hostname.j2", 'x\n{{ 1 + "a" }}', "hostname.j2:2: TypeError"),
    "recursive macro": ("hostname.j2", "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "recursion too deep"),
    "includes itself": ("hostname.j2", '{% include "hostname.j2" %}', "recursion too deep"),
    "not UTF-8": ("hostname.j2", "x\udcff", "hostname.j2: cannot read"),
    "enormous number": ("node-manager.json.j2", '{"a": ' + "1" * 5000 + "}", "node-manager.json.j2: rendered unusable"),
    "nested JSON": ("instance.json.j2", "[" * 100_000, "instance.json.j2: rendered unusable JSON: nested too deeply"),
    "enormous YAML number": ("cloud-init.yaml.j2", "#cloud-config\na: " + "1" * 5000, "cloud-init.yaml.j2: rendered"),
    "impossible YAML date": (
        "cloud-init.yaml.j2",
        "#cloud-config\nbootcmd:\n  - [echo, 2026-02-30]\n",
        "cloud-init.yaml.j2: rendered user data:3:12: bootcmd.0.1: '2026-02-30' is no valid YAML date",
    ),
    "tagged YAML boolean": (
        "cloud-init.yaml.j2",
        "#cloud-config\nssh_pwauth: !!bool perhaps\n",
        "cloud-init.yaml.j2: rendered user data:2:13: ssh_pwauth: 'perhaps' is no valid YAML boolean",
    ),
}


@pytest.mark.parametrize("case", sorted(TEMPLATE_CODE))
def test_a_site_template_that_fails_is_one_line_naming_it(tmp_path: Path, case: str) -> None:
    filename, text, says = TEMPLATE_CODE[case]
    (tmp_path / "xceprov.yaml").write_text(SITE + "template_dirs: [site-templates]\n")
    (tmp_path / "site-templates").mkdir()
    (tmp_path / "site-templates" / filename).write_bytes(text.encode("utf-8", "surrogateescape"))
    done = xceprov(tmp_path, "plan", "cpu=1")
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert says in line and "internal error" not in line and len(line) < 300, line


@pytest.mark.parametrize(
    ("text", "says"),
    [("[" * 100_000, "JSON nested too deeply"), ('{"format": 1, "n": ' + "1" * 5000 + "}", "digits")],
    ids=["deep", "enormous-number"],
)
def test_a_damaged_state_file_is_one_line_naming_it(tmp_path: Path, text: str, says: str) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "breakers.json").write_text(text)
    done = xceprov(tmp_path, "breaker", "reset", "cpu")
    assert done.returncode == 1, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(f"xceprov: {tmp_path / 'state' / 'breakers.json'}: not a breaker file") and says in line


@pytest.mark.parametrize("count", ["9" * 5000, "99999999999999999999", "１"], ids=["enormous", "huge", "fullwidth"])
def test_a_count_on_the_command_line_that_is_no_count_is_one_line(tmp_path: Path, count: str) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE)
    done = xceprov(tmp_path, "plan", f"cpu={count}")
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.splitlines()
    assert "count out of range" in line or "expected TEMPLATE=COUNT" in line
    assert len(line) < 200 and "internal error" not in line


def test_a_path_the_system_refuses_is_one_line_naming_its_key(tmp_path: Path) -> None:
    (tmp_path / "xceprov.yaml").write_text(SITE.replace("ca: system", "ca: " + "x" * 5000))
    done = xceprov(tmp_path, "plan", "cpu=1")
    assert done.returncode == 3, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith("xceprov: controller.ca ") and "File name too long" in line, line[:300]
