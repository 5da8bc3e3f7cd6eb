"""First boot (issue 30, deliverable 2): the configuration, the user data, the tokens, the branch.

The token of a first-boot host is minted exactly as the push path mints it, travels only as the
ephemeral root variable ``join_tokens`` (a private file beside the saved plan), and lands in the
simulated cloud's boot copy of the user data, never in what the API reports; the hosts get no
push play; any text of a token's form is hidden at the sinks.
"""

from __future__ import annotations

import json
import logging
import stat
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest
import yaml

from orchestrator.configfile import LoadedConfig, parse_config
from orchestrator.errors import ConfigError
from orchestrator.model import redaction
from orchestrator.model import tags as owner
from orchestrator.model.config import Config
from orchestrator.model.firstboot import JOIN_TOKEN_FILE, STARTED_OUTCOME, TOKEN_FORM
from orchestrator.model.images import KIND_BUILDER
from orchestrator.model.instances import InstanceSpec
from orchestrator.model.pool import pooled, started
from orchestrator.ops.executor import Created
from orchestrator.ops.firstboot import ephemeral_beside, mint_tokens, write_ephemeral
from orchestrator.protocol.jointoken import TokenProblem, check_token, parse_expiry
from orchestrator.render.instances import RenderRequest, render_op, renderer_for
from orchestrator.sim.cloud.bootcopy import with_join_token
from orchestrator.sim.cloud.store import CloudStore
from orchestrator.sim.hosts.cloudinit import run_cloud_init

BUILTIN = Path(__file__).resolve().parents[3] / "templates"
HOSTILE = 'a"b ${var.x} {{ 7*7 }} %{ if true }x%{ endif }\n- path: /etc/passwd\n$(reboot) `id`'
JOIN_KEY = "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"


def _site(tmp_path: Path, mode: str = "first-boot", module: str = "xcesim", join_key: bool = True) -> str:
    key = tmp_path / "join.key"
    key.write_text(JOIN_KEY + "\n")
    return f"""
cluster: fb
state_dir: state
controller: {{addresses: ["10.0.0.1:7441"], ca: system{", join_key: " + str(key) if join_key else ""}}}
providers:
  sim: {{module: {module}, join_deadline: 5m}}
templates:
  cpu:
    xce: {{model: {json.dumps(HOSTILE)}}}
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
    bootstrap: {{mode: {mode}}}
  push:
    providers:
      sim: {{flavor: c8.large, image: debian-12}}
"""


def _config(text: str, tmp_path: Path) -> Config:
    return parse_config(text, "site.yaml", tmp_path).config


def test_mode_defaults_to_push_and_takes_first_boot(tmp_path: Path) -> None:
    cfg = _config(_site(tmp_path), tmp_path)
    assert cfg.templates["push"].bootstrap.mode == "push"
    assert cfg.templates["cpu"].bootstrap.mode == "first-boot"


@pytest.mark.parametrize(
    ("mode", "module", "join_key", "line"),
    [
        ("firstboot", "xcesim", True, "templates.cpu.bootstrap.mode: Input should be 'push' or 'first-boot'"),
        ("first-boot", "aws", True, "templates.cpu.bootstrap.mode: first-boot needs a provider module that delivers"),
        ("first-boot", "xcesim", False, "templates.cpu.bootstrap.mode: first-boot needs controller.join_key"),
    ],
)
def test_bad_first_boot_configuration_is_one_line(
    tmp_path: Path, mode: str, module: str, join_key: bool, line: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _config(_site(tmp_path, mode, module, join_key), tmp_path)
    lines = [p for p in caught.value.problems if "bootstrap" in p]
    assert len(lines) == 1 and line in lines[0] and "\n" not in lines[0]


def _render(cfg: Config, template: str = "cpu", count: int = 1) -> dict[str, InstanceSpec]:
    request = RenderRequest("sim", template, "op-6b0b0000-abcdef", count)
    return dict(render_op(cfg, renderer_for(cfg, BUILTIN), request))


def _files(user_data: str) -> dict[str, dict[str, object]]:
    return {str(f["path"]): f for f in yaml.safe_load(user_data)["write_files"]}


def test_first_boot_user_data_names_the_token_file_and_holds_no_token(tmp_path: Path) -> None:
    cfg = _config(_site(tmp_path), tmp_path)
    [first] = _render(cfg).values()
    [pushed] = _render(cfg, "push").values()
    files = _files(first.user_data)
    nm = json.loads(str(files["/etc/xce/node-manager.json"]["content"]))
    assert nm["join_token_file"] == JOIN_TOKEN_FILE and nm["roles"] == ["worker"]
    assert nm["controller"] == {"addresses": ["10.0.0.1:7441"], "ca_file": "/etc/xce/ca.pem"}
    assert nm["xce"]["model"] == HOSTILE  # a hostile value is data
    assert JOIN_TOKEN_FILE not in files and not TOKEN_FORM.search(first.user_data)
    push_nm = json.loads(str(_files(pushed.user_data)["/etc/xce/node-manager.json"]["content"]))
    assert "join_token_file" not in push_nm


def test_site_template_dropping_the_token_file_is_refused(tmp_path: Path) -> None:
    site = tmp_path / "site-templates"
    site.mkdir()
    (site / "node-manager.json.j2").write_text('{"roles": ["worker"], "host_name": {{ name | tojson }}}')
    cfg = _config(_site(tmp_path) + f"template_dirs: [{json.dumps(str(site))}]\n", tmp_path)
    with pytest.raises(ConfigError, match="must name join_token_file '/etc/xce/join-token', not None"):
        _render(cfg)
    _render(cfg, "push")  # a push template needs no token file


def test_tokens_minted_for_first_boot_hosts_only_bound_and_expiring_at_the_deadline(tmp_path: Path) -> None:
    cfg = _config(_site(tmp_path), tmp_path)
    specs = {**_render(cfg, count=2)}
    pushed = {k + "p": v for k, v in _render(cfg, "push").items()}
    tokens = mint_tokens(cfg, "sim", {**specs, **pushed}, now=1_800_000_000.2)
    assert sorted(tokens.tokens) == sorted(specs)
    assert tokens.deadline == 1_800_000_301 and tokens.deadlines() == dict.fromkeys(specs, 1_800_000_301)
    key = bytes.fromhex(JOIN_KEY)
    for k, token in tokens.tokens.items():
        assert parse_expiry(token) == 1_800_000_301
        assert check_token(key, k, specs[k].name, token) == 1_800_000_301
        other = next(s for s in specs if s != k)
        assert isinstance(check_token(key, other, specs[other].name, token), TokenProblem)


def test_no_token_for_a_bake_s_builder_or_a_pool_instance_launched_stopped(tmp_path: Path) -> None:
    # A builder of a first-boot template has no user data to carry one (the simulated cloud
    # refuses a token there: re-baking a first-boot template failed); a pool instance launched
    # stopped gets its token from the start that takes it.
    cfg = _config(_site(tmp_path), tmp_path)
    [(key, spec)] = _render(cfg).items()
    builder = spec.model_copy(update={"tags": {**spec.tags, owner.KIND: KIND_BUILDER}})
    assert mint_tokens(cfg, "sim", {key: builder}, now=time.time()).tokens == {}
    assert mint_tokens(cfg, "sim", {key: pooled(spec)}, now=time.time()).tokens == {}
    assert list(mint_tokens(cfg, "sim", {key: started(pooled(spec))}, now=time.time()).tokens) == [key]


def test_no_token_for_a_module_that_does_not_carry_them(tmp_path: Path) -> None:
    cfg = _config(_site(tmp_path, mode="push"), tmp_path)
    assert mint_tokens(cfg, "sim", _render(cfg), now=time.time()).tokens == {}


def test_ephemeral_file_is_private_and_read_back_beside_its_plan(tmp_path: Path) -> None:
    cfg = _config(_site(tmp_path), tmp_path)
    plan = tmp_path / "op.tfplan"
    assert write_ephemeral(plan, mint_tokens(cfg, "sim", {}, now=0)) is None and ephemeral_beside(plan) == []
    tokens = mint_tokens(cfg, "sim", _render(cfg), now=time.time())
    path = write_ephemeral(plan, tokens)
    assert path is not None and ephemeral_beside(plan) == [path]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert json.loads(path.read_text()) == {"join_tokens": dict(tokens.tokens)}


def test_first_boot_hosts_get_no_push_play(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from orchestrator.services import bootstrap as bootstrap_service
    from orchestrator.services.ops import playbook_callables

    loaded = parse_config(_site(tmp_path), "site.yaml", tmp_path)
    played: list[Sequence[str]] = []

    class Result:
        hosts: Mapping[str, object] = {}

    def play(_loaded: LoadedConfig, _root: Path, **kwargs: object) -> Result:
        played.append(list(kwargs["hosts"]))  # type: ignore[call-overload]
        return Result()

    monkeypatch.setattr(bootstrap_service, "bootstrap", play)
    boot = playbook_callables(loaded, tmp_path)[0]
    fb = Created("op-1-000", "i-1", "fb-cpu-1", "10.0.0.9", "cpu", 0.0)
    pushed = Created("op-1-001", "i-2", "fb-push-1", "10.0.0.8", "push", 0.0)
    assert boot("sim", [fb]) == {"fb-cpu-1": STARTED_OUTCOME} and played == []
    assert boot("sim", [fb, pushed])["fb-cpu-1"] == STARTED_OUTCOME and played == [["fb-push-1"]]


def test_token_form_hidden_at_every_sink(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg = _config(_site(tmp_path), tmp_path)
    token = next(iter(mint_tokens(cfg, "sim", _render(cfg), now=time.time()).tokens.values()))
    assert redaction.hide_known(f"error: {token}!") == "error: ***!"
    assert redaction.hide_known_in({"k": [f"x{token}"]}) == {"k": ["x***"]}
    record = logging.LogRecord("t", logging.INFO, __file__, 1, "joined with %s", (token,), None)
    line = redaction.HidingFormatter(logging.Formatter("%(message)s")).format(record)
    assert line == "joined with ***"


def test_boot_copy_holds_the_token_the_api_never_reports(tmp_path: Path) -> None:
    cfg = _config(_site(tmp_path), tmp_path)
    [spec] = _render(cfg).values()
    user_data = spec.user_data
    token = "v2.1800000301." + "ab" * 32
    boot = with_join_token(user_data, token)
    store = CloudStore(tmp_path / "cloud.sqlite")
    try:
        inst = store.create_instance("h1", "c8.large", "debian-12", {}, user_data, "k1", boot_user_data=boot)
        plain = store.create_instance("h2", "c8.large", "debian-12", {}, user_data, "k2")
        got = store.get(inst.id)
        assert got is not None and got.user_data == user_data
        assert all(token not in i.user_data for i in store.list_instances())
        assert store.boot_copies() == {inst.id: boot} and plain.id not in store.boot_copies()
        # What the host does with it at boot: the token file, 0600, and the hostile value literal.
        root = tmp_path / "host"
        run_cloud_init(boot, inst.id, root=root)
        written = root / JOIN_TOKEN_FILE.lstrip("/")
        assert written.read_text() == token + "\n" and stat.S_IMODE(written.stat().st_mode) == 0o600
        nm = json.loads((root / "etc/xce/node-manager.json").read_text())
        assert nm["xce"]["model"] == HOSTILE and nm["join_token_file"] == JOIN_TOKEN_FILE
        store.delete(inst.id)
        assert store.boot_copies() == {}
    finally:
        store.close()


def test_boot_copy_refuses_user_data_that_is_no_cloud_config() -> None:
    with pytest.raises(ValueError, match="must be #cloud-config"):
        with_join_token("#!/bin/sh\necho hi\n", "v2.1." + "0" * 64)


def test_bootstrap_by_hand_still_pushes_to_first_boot_hosts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``xceprov bootstrap`` (a re-run) pushes to the hosts it is given, first-boot or not."""
    from orchestrator.clients.ansible.hostkeys import HostKeyStore
    from orchestrator.clients.ansible.inventory import InstanceRecord
    from orchestrator.clients.ansible.runner import RunResult
    from orchestrator.services import bootstrap as bootstrap_service

    loaded = parse_config(_site(tmp_path), "site.yaml", tmp_path)
    ran: list[list[str]] = []

    def run_playbook(_settings: object, _playbook: Path, _document: object, hosts: list[str], **_kw: object) -> object:
        ran.append(list(hosts))
        return RunResult("id", "successful", 0, tmp_path, hosts={})

    monkeypatch.setattr(bootstrap_service, "run_playbook", run_playbook)
    monkeypatch.setattr(HostKeyStore, "ensure", lambda *_a, **_k: {})
    record = InstanceRecord("op-1-000", "i-1", "fb-cpu-1", "10.0.0.9", "cpu", "sim", "op-1")
    bootstrap_service.bootstrap(loaded, BUILTIN.parent, records=[record])
    assert ran == [["fb-cpu-1"]]


def test_a_started_first_boot_host_is_its_own_metric_outcome() -> None:
    from orchestrator.daemon.metrics import DaemonMetrics

    metrics = DaemonMetrics()
    metrics.bootstrap_played("sim", [STARTED_OUTCOME], 0.01)
    count = metrics.registry.get_sample_value(
        "xceprov_bootstrap_duration_seconds_count", {"provider": "sim", "outcome": "started"}
    )
    assert count == 1.0
