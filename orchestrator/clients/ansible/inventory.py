"""Ansible inventories from instance records: one host per instance, groups per template, provider, op.

Standard library only, on purpose: ``inventories/xceprov_inventory.py`` (the dynamic inventory
script operators run without the orchestrator) loads this file by path, so it must not pull in
the rest of the package.

Where instance records come from until the orchestrator keeps instance facts: the ``instances``
output of each provider's Terraform state (``<state_dir>/work/<cluster>/<provider>/
terraform.tfstate``, see ``docs/provider-modules.md``), whose ``tags`` carry the owner tags.

Groups: ``template_<t>``, ``provider_<p>``, ``module_<m>`` (the provider's Terraform module,
when known), ``op_<op_id>`` (names sanitised to ``[A-Za-z0-9_]``), plus each name in the
template's ``bootstrap.groups``. Host variables:
``ansible_host`` (and ``ansible_port`` when not 22), ``xce_instance_id``, ``xce_instance_key``,
``xce_instance_name``, ``xce_template``, ``xce_provider``, ``xce_op_id``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The owner tag keys (orchestrator.model.tags), repeated here to stay standard-library only.
TAG_PROVIDER = "xce:provider"
TAG_OP_ID = "xce:op_id"
TAG_TEMPLATE = "xce:template"


@dataclass(frozen=True)
class InstanceRecord:
    """What the inventory needs to know about one running instance."""

    key: str  # instance key <op_id>-<index>
    instance_id: str
    name: str  # host name (the inventory host name)
    address: str
    template: str
    provider: str
    op_id: str
    port: int | None = None


@dataclass(frozen=True)
class TemplateBootstrap:
    """The bootstrap section of a host template, as far as the inventory carries it."""

    groups: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] = ()


def group_name(kind: str, value: str) -> str:
    """A valid Ansible group name ``<kind>_<value>`` (anything but [A-Za-z0-9_] becomes ``_``)."""
    return f"{kind}_{re.sub(r'[^A-Za-z0-9_]', '_', value)}"


def build_inventory(
    records: Iterable[InstanceRecord],
    common_vars: Mapping[str, Any] | None = None,
    templates: Mapping[str, TemplateBootstrap] | None = None,
    provider_modules: Mapping[str, str] | None = None,
    group_vars: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """A YAML/JSON-shaped inventory (``{"all": {"vars", "hosts", "children"}}``).

    Template variables and roles become group variables of ``template_<t>`` inside the
    inventory; a site's ``group_vars/template_<t>.yml`` beside the inventory overrides them
    (Ansible ranks group_vars files above inventory-file group variables).
    """
    templates = templates or {}
    hosts: dict[str, dict[str, Any]] = {}
    children: dict[str, dict[str, Any]] = {}

    def member(group: str, host: str) -> None:
        children.setdefault(group, {}).setdefault("hosts", {})[host] = None

    for rec in sorted(records, key=lambda r: r.name):
        hostvars: dict[str, Any] = {
            "ansible_host": rec.address,
            "xce_instance_id": rec.instance_id,
            "xce_instance_key": rec.key,
            "xce_instance_name": rec.name,
            "xce_template": rec.template,
            "xce_provider": rec.provider,
            "xce_op_id": rec.op_id,
        }
        if rec.port is not None and rec.port != 22:
            hostvars["ansible_port"] = rec.port
        hosts[rec.name] = hostvars
        member(group_name("template", rec.template), rec.name)
        member(group_name("provider", rec.provider), rec.name)
        module = (provider_modules or {}).get(rec.provider)
        if module:
            member(group_name("module", module), rec.name)
        if rec.op_id:
            member(group_name("op", rec.op_id), rec.name)
        for extra in templates.get(rec.template, TemplateBootstrap()).groups:
            member(group_name("", extra)[1:], rec.name)
    for tname, boot in templates.items():
        gvars: dict[str, Any] = dict(boot.vars)
        if boot.roles:
            gvars["xce_bootstrap_roles"] = list(boot.roles)
        group = group_name("template", tname)
        if gvars and group in children:
            children[group]["vars"] = gvars
    for group, gv in (group_vars or {}).items():
        if group in children and gv:
            children[group]["vars"] = {**children[group].get("vars", {}), **gv}
    inventory: dict[str, Any] = {"all": {"hosts": hosts, "children": children}}
    if common_vars:
        inventory["all"]["vars"] = dict(common_vars)
    return inventory


def records_from_tfstate(state: Mapping[str, Any], provider: str | None = None) -> list[InstanceRecord]:
    """Instance records from a Terraform state's ``instances`` output (the provider module contract)."""
    output = state.get("outputs", {}).get("instances", {}).get("value") or {}
    records: list[InstanceRecord] = []
    for key, inst in sorted(output.items()):
        if not isinstance(inst, dict) or not inst.get("address"):
            continue  # not yet addressed: nothing to bootstrap
        tags = inst.get("tags") or {}
        port = inst.get("port")
        records.append(
            InstanceRecord(
                key=key,
                instance_id=str(inst.get("id", "")),
                name=str(inst.get("name") or key),
                address=str(inst["address"]),
                template=str(tags.get(TAG_TEMPLATE, "")),
                provider=str(tags.get(TAG_PROVIDER, provider or "")),
                op_id=str(tags.get(TAG_OP_ID, key.rpartition("-")[0])),
                port=int(port) if port else None,
            )
        )
    return records


def records_from_workdirs(state_dir: Path, cluster: str | None = None) -> list[InstanceRecord]:
    """Every instance of every provider working directory under ``<state_dir>/work/<cluster>/``."""
    records: list[InstanceRecord] = []
    work = state_dir / "work"
    clusters = [work / cluster] if cluster else sorted(p for p in work.glob("*") if p.is_dir())
    for cdir in clusters:
        for state_file in sorted(cdir.glob("*/terraform.tfstate")):
            try:
                state = json.loads(state_file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue  # a state being written or unreadable: no hosts from it this time
            records.extend(records_from_tfstate(state, state_file.parent.name))
    return records


def records_from_inventory(inventory: Mapping[str, Any]) -> list[InstanceRecord]:
    """Instance records back from an inventory this module built (``xceprov bootstrap`` reads it)."""
    hosts = inventory.get("all", {}).get("hosts", {}) or {}
    return [
        InstanceRecord(
            key=str(hv.get("xce_instance_key", name)),
            instance_id=str(hv.get("xce_instance_id", "")),
            name=name,
            address=str(hv.get("ansible_host", name)),
            template=str(hv.get("xce_template", "")),
            provider=str(hv.get("xce_provider", "")),
            op_id=str(hv.get("xce_op_id", "")),
            port=int(hv["ansible_port"]) if hv.get("ansible_port") else None,
        )
        for name, hv in sorted(hosts.items())
    ]


def write_inventory(path: Path, inventory: Mapping[str, Any]) -> Path:
    """Write an inventory as JSON (valid YAML too) atomically; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(inventory, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    # The rename is durable only once the directory is; stdlib only, as the inventory script
    # loads this module without the orchestrator (orchestrator.durable does the same).
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return path
