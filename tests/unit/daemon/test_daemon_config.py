"""The ``daemon`` section of the configuration: defaults, the metrics address, one line per problem."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.configfile import parse_config
from orchestrator.errors import ConfigError
from tests.unit.daemon.daemon_helpers import loaded, site_text


def problems(daemon: str) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_config(site_text(daemon=daemon), "site.yaml", Path("/srv/site"))
    return info.value.problems


def test_defaults_metrics_off_text_logs_documented_stop_bound() -> None:
    daemon = loaded().config.daemon
    assert daemon.metrics.listen is None
    assert daemon.metrics.address() is None
    assert daemon.log_format == "text"
    assert daemon.stop_timeout == 90.0


def test_loopback_addresses_are_accepted() -> None:
    assert loaded("{metrics: {listen: '127.0.0.1:9477'}}").config.daemon.metrics.address() == ("127.0.0.1", 9477)
    assert loaded("{metrics: {listen: '[::1]:9477'}}").config.daemon.metrics.address() == ("::1", 9477)
    assert loaded("{metrics: {listen: 'localhost:9477'}}").config.daemon.metrics.address() == ("localhost", 9477)


def test_a_remote_address_is_refused_unless_allowed() -> None:
    found = problems("{metrics: {listen: '0.0.0.0:9477'}}")
    assert len(found) == 1
    assert found[0].startswith("site.yaml: daemon.metrics.listen: not a loopback address")
    assert found[0].endswith("(got '0.0.0.0:9477')")
    assert "allow_remote: true" in found[0]
    allowed = loaded("{metrics: {listen: '0.0.0.0:9477', allow_remote: true}}")
    assert allowed.config.daemon.metrics.address() == ("0.0.0.0", 9477)


@pytest.mark.parametrize(
    ("listen", "says"),
    [
        ("9477", "must be host:port"),
        ("127.0.0.1:http", "must be host:port"),
        ("::1:9477", "IPv6 address in brackets"),
        ("127.0.0.1:70000", "port must be 0-65535"),
    ],
)
def test_malformed_addresses_name_the_value(listen: str, says: str) -> None:
    found = problems(f"{{metrics: {{listen: '{listen}'}}}}")
    assert len(found) == 1 and listen in found[0] and says in found[0], found


def test_wrong_keys_and_values_are_errors() -> None:
    found = problems("{log_fromat: json, stop_timeout: -5}")
    assert "site.yaml: daemon.log_fromat: unknown key (did you mean 'log_format'?)" in found
    assert any(p.startswith("site.yaml: daemon.stop_timeout:") for p in found)
    assert any(p.startswith("site.yaml: daemon.log_format:") for p in problems("{log_format: xml}"))
