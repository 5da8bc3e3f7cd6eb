"""Site configuration: every problem at once, with file and key path, and suggestions."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from orchestrator.configfile import ENV_VAR, load_config, parse_config
from orchestrator.errors import ConfigError

GOOD = """
cluster: site1
controller: {ca: system}
providers:
  sim: {module: xcesim, max_instances: 10}
templates:
  cpu:
    providers:
      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.34}
"""


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(text, "site.yaml", Path("/srv/site"))
    return info.value.problems


def test_valid_configuration_resolves_relative_paths() -> None:
    loaded = parse_config(GOOD + "state_dir: state\n", "site.yaml", Path("/srv/site"))
    assert loaded.config.state_dir == Path("/srv/site/state")
    assert loaded.config.sim_state_dir() == Path("/srv/site/state/sim")
    assert loaded.config.providers["sim"].max_instances == 10


def test_every_error_reported_at_once_with_key_paths() -> None:
    found = problems(
        """
cluster: Site!
stat_dir: x
providers:
  sim: {module: xcesim, max_instances: -1, priorty: 3, lead_time: soon}
templates:
  cpu:
    xce: {slots: two}
    providers:
      aws: {flavor: m5.large, image: ami-1, cost_per_hour: -1}
"""
    )
    text = "\n".join(found)
    assert "site.yaml: cluster: " in text
    assert "site.yaml: stat_dir: unknown key (did you mean 'state_dir'?)" in found
    assert "site.yaml: providers.sim.priorty: unknown key (did you mean 'priority'?)" in found
    assert any(p.startswith("site.yaml: providers.sim.max_instances:") and "-1" in p for p in found)
    assert any(p.startswith("site.yaml: providers.sim.lead_time:") and "soon" in p for p in found)
    assert any(p.startswith("site.yaml: templates.cpu.xce.slots:") for p in found)
    assert any(p.startswith("site.yaml: templates.cpu.providers.aws.cost_per_hour:") for p in found)
    assert "site.yaml: templates.cpu.providers.aws: no provider named 'aws' (known: sim)" in found
    assert all("\n" not in p for p in found)


def test_template_without_provider_is_an_error() -> None:
    found = problems(
        GOOD.replace(
            "    providers:\n      sim: {flavor: c8.large, image: debian-12, cost_per_hour: 0.34}\n",
            "    providers: {}\n",
        )
    )
    assert any("a template needs at least one provider" in p for p in found)


def test_malformed_yaml_names_file_and_line() -> None:
    found = problems("cluster: a\nproviders: [\n")
    assert len(found) == 1 and found[0].startswith("site.yaml:") and "malformed YAML" in found[0]


def test_durations_accept_units() -> None:
    loaded = parse_config(
        GOOD.replace("max_instances: 10", "max_instances: 10, lead_time: 2m, hold_time: 1h"), "s", Path("/")
    )
    assert loaded.config.providers["sim"].lead_time == 120.0
    assert loaded.config.providers["sim"].hold_time == 3600.0


def test_search_order_explicit_env_cwd_builtin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert load_config().source == "<built-in>"
    (tmp_path / "xceprov.yaml").write_text(GOOD)
    assert load_config().source.endswith("xceprov.yaml")
    other = tmp_path / "other.yaml"
    other.write_text(GOOD.replace("site1", "site2"))
    monkeypatch.setenv(ENV_VAR, str(other))
    assert load_config().config.cluster == "site2"
    assert load_config(str(tmp_path / "xceprov.yaml")).config.cluster == "site1"
    with pytest.raises(ConfigError, match="configuration file not found"):
        load_config(str(tmp_path / "missing.yaml"))


def test_builtin_configuration_is_the_simulated_world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(ENV_VAR, raising=False)
    config = load_config().config
    assert config.cluster == "demo"
    assert config.providers["sim"].module == "xcesim"
    assert set(config.templates) >= {"cpu", "gpu"}


def test_controller_ca_must_be_said() -> None:
    for controller in ("", "controller: {addresses: ['c:7441']}\n", "controller: {ca: }\n", "controller: {ca: ''}\n"):
        text = GOOD.replace("controller: {ca: system}\n", controller)
        found = problems(text)
        assert (
            "site.yaml: controller.ca: required: the CA file that signed the controller's certificate, "
            "or 'system' to trust the system store"
        ) in found, controller


def test_controller_ca_system_or_a_file_relative_to_the_configuration() -> None:
    assert parse_config(GOOD, "site.yaml", Path("/srv/site")).config.controller.ca is None
    loaded = parse_config(GOOD.replace("{ca: system}", "{ca: tls/ca.pem}"), "site.yaml", Path("/srv/site"))
    assert loaded.config.controller.ca == Path("/srv/site/tls/ca.pem")


@pytest.mark.parametrize(("given", "missing"), [("client_key", "client_cert"), ("client_cert", "client_key")])
def test_client_certificate_and_key_come_as_a_pair(given: str, missing: str) -> None:
    found = problems(GOOD.replace("{ca: system}", f"{{ca: system, {given}: tls/x.pem}}"))
    assert found == [f"site.yaml: controller: {given} is set but {missing} is not: give both or neither"]
    both = GOOD.replace("{ca: system}", "{ca: system, client_cert: c.pem, client_key: k.pem}")
    assert parse_config(both, "site.yaml", Path("/srv")).config.controller.client_key == Path("/srv/k.pem")


BILLION_LAUGHS = "".join(
    [
        'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n',
        *(
            f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
            for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
        ),
    ]
)


def test_a_billion_laughs_document_fails_fast_with_one_line() -> None:
    assert len(BILLION_LAUGHS) < 1000  # 9^9 values once expanded
    found = problems(BILLION_LAUGHS)
    assert found == ["site.yaml: YAML aliases expand to more than 100000 values; write the values out instead"]


def test_a_recursive_alias_is_refused() -> None:
    assert problems("a: &a [1, *a]\n") == ["site.yaml: YAML alias refers to a value that contains it (recursive alias)"]


def test_ordinary_aliases_still_work() -> None:
    text = GOOD.replace(
        "  sim: {module: xcesim, max_instances: 10}\n", "  sim: &p {module: xcesim, max_instances: 10}\n  other: *p\n"
    )
    assert parse_config(text, "s.yaml", Path("/")).config.providers["other"].max_instances == 10


def test_the_simulated_clouds_store_is_defaulted_and_a_site_value_wins() -> None:
    from orchestrator.render.instances import render_settings

    config = parse_config(GOOD + "state_dir: /var/lib/x\n", "site.yaml", Path("/srv")).config
    assert render_settings(config, "sim") == {"store": "/var/lib/x/sim/cloud.sqlite"}
    own = GOOD.replace("max_instances: 10}", "max_instances: 10, settings: {store: /data/c.sqlite}}")
    config = parse_config(own, "site.yaml", Path("/srv")).config
    assert render_settings(config, "sim") == {"store": "/data/c.sqlite"}


def test_values_that_cannot_be_used_are_reported_at_once_each_once() -> None:
    found = problems(
        GOOD.replace("max_instances: 10", "max_instances: 10, idle_time: .nan, hold_time: 2024-01-01, priorty: 3")
        + "daemon: {stop_timeout: .inf}\n"
    )
    assert found.count("site.yaml: providers.sim.idle_time: not a number (.nan): give a finite number") == 1
    assert [p for p in found if ".hold_time:" in p] == [
        "site.yaml: providers.sim.hold_time: a YAML date (2024-01-01) is no value here: quote it if text is meant"
    ]
    assert [p for p in found if ".stop_timeout:" in p] == [
        "site.yaml: daemon.stop_timeout: an infinite number (.inf, or too large for a number): give a finite number"
    ]
    assert "site.yaml: providers.sim.priorty: unknown key (did you mean 'priority'?)" in found
    assert len(found) == 4


def test_the_model_itself_refuses_what_the_file_cannot_hold() -> None:
    from pydantic import ValidationError

    from orchestrator.model.config import ControllerSettings, ProviderSettings

    for bad in ({"lease_margin": math.nan}, {"connect_timeout": 0}, {"max_frame_bytes": 2**40}):
        with pytest.raises(ValidationError):
            ControllerSettings.model_validate(bad)
    for bad_provider in ({"idle_time": math.inf}, {"max_instances": True}, {"settings": {"x": math.nan}}):
        with pytest.raises(ValidationError):
            ProviderSettings.model_validate({"module": "xcesim", **bad_provider})


def test_a_home_of_no_user_names_every_key() -> None:
    found = problems(
        GOOD.replace("controller: {ca: system}", "controller: {ca: ~xceprov-no-such-user/ca.pem}")
        + "state_dir: ~xceprov-no-such-user/state\n"
    )
    assert found == [
        "site.yaml: state_dir: '~xceprov-no-such-user': no such user, or no home directory known",
        "site.yaml: controller.ca: '~xceprov-no-such-user': no such user, or no home directory known",
    ]


def test_the_provider_mirror_is_an_absolute_directory_or_an_https_url() -> None:
    for mirror in ("/srv/tf-mirror", "https://mirror.example/providers/"):
        loaded = parse_config(GOOD + f"terraform: {{provider_mirror: '{mirror}'}}\n", "site.yaml", Path("/srv/site"))
        assert loaded.config.terraform.provider_mirror == mirror
    for mirror in ("mirrors/tf", "http://mirror.example/providers/"):
        [found] = problems(GOOD + f"terraform: {{provider_mirror: '{mirror}'}}\n")
        assert found.startswith("site.yaml: terraform.provider_mirror: "), found
        assert f"'{mirror}' is neither an absolute directory nor an https:// URL of a network mirror" in found


def test_a_mirror_url_with_credentials_is_taken_and_one_terraform_refuses_is_one_line_without_them() -> None:
    good = "https://xce:s3cr%3Ct%23pw@mirror.example/providers/"
    loaded = parse_config(GOOD + f"terraform: {{provider_mirror: '{good}'}}\n", "site.yaml", Path("/srv/site"))
    assert loaded.config.terraform.provider_mirror == good
    for bad in (
        "https://xce:s3cr<t@mirror.example/",
        "https://xce:s3cr%t@mirror.example/",
        "https://xce:s3/cr@m.example/",
    ):
        [found] = problems(GOOD + f"terraform: {{provider_mirror: '{bad}'}}\n")
        assert found.startswith("site.yaml: terraform.provider_mirror: ") and "percent-encode" in found, found
        assert "s3" not in found and "\n" not in found, found
