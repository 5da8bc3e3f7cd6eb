"""The site's provider lock as read here, and Terraform's installer errors as one line per provider.

The error texts are Terraform 1.15's own, as the engine reports them (one line per diagnostic).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from orchestrator.clients.terraform.process import Completed
from orchestrator.clients.terraform.providers import Locked, changed, install_problems, lock, lock_env, parse_lock

LOCK = """# This file is maintained automatically by "terraform init".

provider "registry.terraform.io/acme/thing" {
  version = "1.2.3"
  hashes = [
    "h1:WJyWiQCftYYHNzYDWUC2mbc/qEv0tHDFXGGvy9FWXgI=",
    "zh:00aa",
  ]
}

provider "registry.terraform.io/xce/xcesim" {
  version     = "0.1.0"
  constraints = ">= 0.1.0, 0.1.0, < 0.2.0"
  hashes = [
    "h1:hWsCGIzfqVvaYp+JUYG4ZHyjYzvhZLahekhGTlSzvSY=",
  ]
}
"""

UNREACHABLE = (
    "Error: Failed to query available provider packages: Could not retrieve the list of available versions "
    "for provider hashicorp/aws: could not connect to registry.terraform.io: failed to request discovery "
    "document: GET https://registry.terraform.io/.well-known/terraform.json giving up after 4 attempt(s): "
    'Get "https://registry.terraform.io/.well-known/terraform.json": dial tcp: lookup registry.terraform.io '
    "on 10.0.0.53:53: no such host To see which modules are currently depending on hashicorp/aws and what "
    "versions are specified, run the following command: terraform providers"
)
NOT_MIRRORED = (
    "Error: Failed to query available provider packages: Could not retrieve the list of available versions "
    "for provider hashicorp/aws: provider registry.terraform.io/hashicorp/aws was not found in any of the "
    "search locations - /srv/tf-mirror"
)
CHECKSUM = (
    "Error: Failed to install provider: Error while installing xce/xcesim v0.1.0: the local package for "
    "registry.terraform.io/xce/xcesim 0.1.0 doesn't match any of the checksums previously recorded in the "
    "dependency lock file; for more information: https://developer.hashicorp.com/terraform/language/files/x"
)


def test_a_lock_file_is_read_as_version_and_checksums_per_provider() -> None:
    assert parse_lock(LOCK) == {
        "registry.terraform.io/acme/thing": Locked(
            "1.2.3", frozenset({"h1:WJyWiQCftYYHNzYDWUC2mbc/qEv0tHDFXGGvy9FWXgI=", "zh:00aa"})
        ),
        "registry.terraform.io/xce/xcesim": Locked(
            "0.1.0", frozenset({"h1:hWsCGIzfqVvaYp+JUYG4ZHyjYzvhZLahekhGTlSzvSY="})
        ),
    }
    assert parse_lock("") == {}


def test_only_moved_versions_are_changes() -> None:
    old = parse_lock(LOCK)
    new = {
        **old,
        "registry.terraform.io/acme/thing": Locked("1.3.0", frozenset()),
        "x/y/z": Locked("2.0.0", frozenset()),
    }
    assert list(changed(old, new)) == [("registry.terraform.io/acme/thing", "1.2.3", "1.3.0"), ("x/y/z", None, "2.0.0")]


def test_an_unreachable_registry_is_one_line_naming_the_provider_and_the_network_reason() -> None:
    assert install_problems(UNREACHABLE) == [
        "provider hashicorp/aws: registry registry.terraform.io unreachable (lookup registry.terraform.io on "
        "10.0.0.53:53: no such host); an air-gapped site sets terraform.provider_mirror"
    ]


def test_a_provider_missing_from_the_mirror_and_a_bad_checksum_name_the_provider() -> None:
    assert install_problems(f"{NOT_MIRRORED}\n{CHECKSUM}\n{NOT_MIRRORED}") == [
        "provider hashicorp/aws: provider registry.terraform.io/hashicorp/aws was not found in any of the search "
        "locations - /srv/tf-mirror",
        "provider xce/xcesim: the local package for registry.terraform.io/xce/xcesim 0.1.0 doesn't match any of "
        "the checksums previously recorded in the dependency lock file",
    ]


def test_other_errors_pass_as_they_are() -> None:
    assert install_problems("Error: Unsupported block type: x\n\n") == ["Error: Unsupported block type: x"]


def test_a_locked_version_outside_the_constraints_says_so_without_terraforms_advice() -> None:
    error = (
        "Error: Could not retrieve providers for locking: Terraform failed to fetch the requested providers for "
        "linux_amd64 in order to calculate their checksums: some providers could not be installed: - "
        "registry.terraform.io/xce/xcesim: locked provider registry.terraform.io/xce/xcesim 0.0.9 does not match "
        "configured version constraint >= 0.1.0, < 0.2.0; must use terraform init -upgrade to allow selection of "
        "new versions."
    )
    assert install_problems(error) == [
        "provider registry.terraform.io/xce/xcesim: the site's lock holds 0.0.9, which the root's version "
        "constraints (>= 0.1.0, < 0.2.0) no longer allow; xceprov terraform lock --upgrade selects again"
    ]


class _Recorder:
    """A runner that records the command lines it is given."""

    def __init__(self) -> None:
        self.argv: list[list[str]] = []

    def run(self, workdir: Path, args: Sequence[str]) -> Completed:
        self.argv.append(list(args))
        return Completed(tuple(args), 0, "", "", 0.0)


def test_a_mirror_urls_credentials_go_to_the_environment_never_on_the_command_line() -> None:
    url = "https://xce:s3cr%3Ct@mirror.example/providers/"
    runner = _Recorder()
    lock(runner, Path("/w"), ["acme/thing"], ["linux_amd64"], url)
    lock(runner, Path("/w"), ["acme/thing"], [], "https://mirror.example/providers/")
    assert [a for a in runner.argv[0] if "mirror" in a] == []  # only in TF_CLI_ARGS_providers_lock
    assert lock_env(url) == {"TF_CLI_ARGS_providers_lock": f"-net-mirror={url}"}
    assert "-net-mirror=https://mirror.example/providers/" in runner.argv[1]
    assert lock_env("https://mirror.example/providers/") == {} and lock_env("/srv/tf-mirror") == {}
