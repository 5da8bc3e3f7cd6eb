"""Ansible inventories from instance records: one host per instance, groups per template, provider, op.

The inventory is a document the toolkit writes (``write_inventory``) and the collection's
inventory plugin ``xceprov`` (``ansible/plugins/inventory/xceprov.py``) turns into Ansible hosts,
groups and variables. The plugin imports this module (the toolkit's Python environment runs
Ansible), so the rules below live in one place.

Data is never code: every value in the document except ``site_vars`` comes from a host template
(``xce``, names, tags) or from the cloud (names, ids, addresses, tags read back from Terraform
state), and the plugin hands it to Ansible marked unsafe, so Ansible never evaluates a ``{{``
in it. ``site_vars`` (a template's ``bootstrap.vars``) are the site's own Ansible variables and
stay ordinary ones. A host whose cloud-reported name is not a valid host name (RFC 1123), or
whose address is neither an IP address nor such a name, never enters an inventory
(``orchestrator.model.hostnames``); the bootstrap service reports it as that host's result.

Where instance records come from until the orchestrator keeps instance facts: the ``instances``
output of each provider's Terraform state (``<state_dir>/work/<cluster>/<provider>/
terraform.tfstate``, see ``docs/provider-modules.md``; with ``terraform.backend: pg`` the
state is in PostgreSQL and a :data:`StateReader` of the workspace layer reads it), whose
``tags`` carry the owner tags.

Groups: ``template_<t>``, ``provider_<p>``, ``module_<m>`` (the provider's Terraform module,
when known), ``op_<op_id>`` (names sanitised to ``[A-Za-z0-9_]``), plus each name in the
template's ``bootstrap.groups``. Host variables:
``ansible_host`` (and ``ansible_port`` when not 22), ``xce_instance_id``, ``xce_instance_key``,
``xce_instance_name``, ``xce_template``, ``xce_provider``, ``xce_op_id``, and ``xce_offering``
(the offering it was launched on: its ``xce:offering`` tag) when the instance has one, with
``xce_offering_slots`` when that offering gives the host other slots than its template's (the
node manager role configures those).
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import durable
from orchestrator.model import tags
from orchestrator.model.hostnames import ADDRESS_REFUSED, checked_instance
from orchestrator.model.hostnames import valid_host_name as valid_host_name  # the plugin calls it here
from orchestrator.model.labels import LabelMap

# The plugin's full name as inventory files give it, and the file name its ``verify_file`` accepts.
# The full name works wherever the collection is installed (the toolkit's ansible.cfg makes this
# checkout's ansible/ the collection), so a written inventory can be used from any directory.
PLUGIN_NAME = "xce.provisioner.xceprov"
INVENTORY_NAME = "xceprov.yml"
# A shard's directory name under <provider>/shards/ (workspace.shards lays them out).
_SHARD = re.compile(r"^[1-9][0-9]{0,5}$")


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
    # Why the cloud's address (or port) of this instance was refused ("" when it was not):
    # the address is then "" and the host is never contacted (``model.hostnames``).
    refused: str = ""
    # The offering it was launched on (its xce:offering tag; "" for an instance made before), and
    # the slots it gives the host when other than the template's (None: the template's).
    offering: str = ""
    slots: int | None = None


@dataclass(frozen=True)
class TemplateBootstrap:
    """The bootstrap section of a host template, as far as the inventory carries it.

    ``data`` are the toolkit's values for the template group (its ``xce`` side): handed to
    Ansible unsafe. ``vars`` are the template's ``bootstrap.vars``: ordinary Ansible variables.
    """

    groups: tuple[str, ...] = ()
    vars: Mapping[str, Any] = field(default_factory=dict)
    roles: tuple[str, ...] = ()
    data: Mapping[str, Any] = field(default_factory=dict)


def invalid_name_reason(name: str) -> str:
    """The per-host message for a cloud-reported name that is refused."""
    return (
        f"cloud-reported host name {name!r} is not a valid host name (RFC 1123: letters, digits and "
        "inner hyphens, dot-separated labels of at most 63 characters); not bootstrapped"
    )


def refusal(rec: InstanceRecord) -> str | None:
    """Why ``rec`` is never contacted (its name or its address was refused), or None."""
    if not valid_host_name(rec.name):
        return invalid_name_reason(rec.name)
    return f"{rec.refused}; not bootstrapped" if rec.refused else None


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
    """The inventory document (``{"all": {"vars", "hosts", "children"}}``, see the module docstring).

    Records whose name is not a valid host name are left out. Each group has ``vars`` (the
    toolkit's data: unsafe) and, for template groups, ``site_vars`` (the template's
    ``bootstrap.vars``: ordinary variables, applied after ``vars``); a site's
    ``group_vars/template_<t>.yml`` beside the inventory overrides both (Ansible ranks
    group_vars files above inventory group variables).
    """
    templates = templates or {}
    hosts: dict[str, dict[str, Any]] = {}
    children: dict[str, dict[str, Any]] = {}

    def member(group: str, host: str) -> None:
        children.setdefault(group, {}).setdefault("hosts", {})[host] = None

    for rec in sorted(records, key=lambda r: r.name):
        if refusal(rec) is not None:
            continue
        hostvars: dict[str, Any] = {
            "ansible_host": rec.address,
            "xce_instance_id": rec.instance_id,
            "xce_instance_key": rec.key,
            "xce_instance_name": rec.name,
            "xce_template": rec.template,
            "xce_provider": rec.provider,
            "xce_op_id": rec.op_id,
        }
        if rec.offering:
            hostvars["xce_offering"] = rec.offering
        if rec.slots is not None:
            hostvars["xce_offering_slots"] = rec.slots
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
        group = group_name("template", tname)
        if group not in children:
            continue
        gvars: dict[str, Any] = dict(boot.data)
        if boot.roles:
            gvars["xce_bootstrap_roles"] = list(boot.roles)
        if gvars:
            children[group]["vars"] = gvars
        if boot.vars:
            children[group]["site_vars"] = dict(boot.vars)
    for group, gv in (group_vars or {}).items():
        if group in children and gv:
            children[group]["vars"] = {**children[group].get("vars", {}), **gv}
    inventory: dict[str, Any] = {"all": {"hosts": hosts, "children": children}}
    if common_vars:
        inventory["all"]["vars"] = dict(common_vars)
    return inventory


def only_hosts(inventory: Mapping[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """The same inventory holding only the hosts named (exactly), and the groups that still have one.

    A run's inventory is this: the play targets ``all`` of it with no ``--limit``, so no host
    name is ever read as a pattern.
    """
    keep = set(names)
    body = inventory.get("all", {})
    children: dict[str, Any] = {}
    for group, gbody in (body.get("children") or {}).items():
        members = {h: None for h in (gbody.get("hosts") or {}) if h in keep}
        if members:
            children[group] = {**gbody, "hosts": members}
    out: dict[str, Any] = {
        "all": {
            "hosts": {h: hv for h, hv in (body.get("hosts") or {}).items() if h in keep},
            "children": children,
        }
    }
    if body.get("vars"):
        out["all"]["vars"] = dict(body["vars"])
    return out


def records_from_tfstate(
    state: Mapping[str, Any], provider: str | None = None, labels: LabelMap | None = None
) -> list[InstanceRecord]:
    """Instance records from a Terraform state's ``instances`` output (the provider module contract).

    ``labels``: the provider module's label map, through which the instances' tags (the cloud's
    labels) are read back (default: tags as they are).
    """
    back = labels.from_labels if labels is not None else dict
    output = state.get("outputs", {}).get("instances", {}).get("value") or {}
    records: list[InstanceRecord] = []
    for key, raw in sorted(output.items()):
        if not isinstance(raw, dict):
            continue
        inst = checked_instance(raw)
        if not inst.get("address") and not inst.get(ADDRESS_REFUSED):
            continue  # not yet addressed: nothing to bootstrap
        inst_tags = back({str(k): str(v) for k, v in (inst.get("tags") or {}).items()})
        if inst_tags.get(tags.POOL) == "warm":
            continue  # stopped in a warm pool: nothing to reach until a start takes it
        port = inst.get("port")
        records.append(
            InstanceRecord(
                key=key,
                instance_id=str(inst.get("id", "")),
                name=str(inst.get("name") or key),
                address=str(inst["address"]),
                template=str(inst_tags.get(tags.TEMPLATE, "")),
                provider=str(inst_tags.get(tags.PROVIDER, provider or "")),
                op_id=str(inst_tags.get(tags.OP_ID, key.rpartition("-")[0])),
                port=int(port) if port else None,
                refused=str(inst.get(ADDRESS_REFUSED) or ""),
                offering=str(inst_tags.get(tags.OFFERING, "")),
            )
        )
    return records


@dataclass(frozen=True)
class ShardDir:
    """One provider working directory (shard) under ``<state_dir>/work/``."""

    path: Path
    cluster: str
    provider: str
    index: int


# Reads the Terraform state of a shard: None when it has none (yet) or it cannot be read now.
StateReader = Callable[[ShardDir], Mapping[str, Any] | None]


def shard_dirs(state_dir: Path, cluster: str | None = None) -> list[ShardDir]:
    """Every shard working directory under ``<state_dir>/work/<cluster>/`` (every cluster when None).

    Shard 0 is ``<provider>/``, the others ``<provider>/shards/<n>/`` (docs/architecture.md,
    "Bursts that scale"): every shard's state holds instances of the provider.
    """
    work = state_dir / "work"
    clusters = [work / cluster] if cluster else sorted(p for p in work.glob("*") if p.is_dir())
    found: list[ShardDir] = []
    for cdir in clusters:
        for pdir in sorted(p for p in cdir.glob("*") if p.is_dir() and not p.name.startswith(".")):
            found.append(ShardDir(pdir, cdir.name, pdir.name, 0))
            numbered = sorted(int(p.name) for p in pdir.glob("shards/*") if p.is_dir() and _SHARD.match(p.name))
            found += [ShardDir(pdir / "shards" / str(n), cdir.name, pdir.name, n) for n in numbered]
    return found


def local_state(shard: ShardDir) -> Mapping[str, Any] | None:
    """The shard's local state file ``terraform.tfstate``, None when there is none or it cannot be read."""
    try:
        state = durable.parse_json((shard.path / "terraform.tfstate").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # none, a state being written, or unreadable: no hosts from it this time
    return state if isinstance(state, dict) else None


def records_from_workdirs(
    state_dir: Path,
    cluster: str | None = None,
    read_state: StateReader = local_state,
    labels: Mapping[str, LabelMap] | None = None,
) -> list[InstanceRecord]:
    """Every instance of every provider working directory (every shard) under ``<state_dir>/work/<cluster>/``.

    ``read_state`` reads one shard's state: the local file by default; a ``pg`` site's states
    are in PostgreSQL (``orchestrator.workspace.tfstates``). ``labels``: each provider's
    module label map (``model.modules.labels_of``); a provider without one: tags as they are.
    """
    records: list[InstanceRecord] = []
    for shard in shard_dirs(state_dir, cluster):
        state = read_state(shard)
        if state is not None:
            records.extend(records_from_tfstate(state, shard.provider, (labels or {}).get(shard.provider)))
    return records


def records_from_inventory(inventory: Mapping[str, Any]) -> list[InstanceRecord]:
    """Instance records back from an inventory this module built (``xceprov bootstrap`` reads it)."""
    hosts = inventory.get("all", {}).get("hosts", {}) or {}
    records = []
    for name, hv in sorted(hosts.items()):
        # A file on disk someone may have edited: its address is checked as the cloud's is.
        reach = checked_instance({"address": str(hv.get("ansible_host", name)), "port": hv.get("ansible_port")})
        records.append(
            InstanceRecord(
                key=str(hv.get("xce_instance_key", name)),
                instance_id=str(hv.get("xce_instance_id", "")),
                name=name,
                address=reach["address"],
                template=str(hv.get("xce_template", "")),
                provider=str(hv.get("xce_provider", "")),
                op_id=str(hv.get("xce_op_id", "")),
                port=int(reach["port"]) if reach["port"] else None,
                refused=str(reach.get(ADDRESS_REFUSED) or ""),
                offering=str(hv.get("xce_offering", "")),
                slots=int(hv["xce_offering_slots"]) if hv.get("xce_offering_slots") else None,
            )
        )
    return records


def inventory_from_state(
    state_dir: Path, cluster: str | None, saved: Mapping[str, Any] | None, read_state: StateReader = local_state
) -> dict[str, Any]:
    """The inventory of a hand run: hosts from Terraform state, settings from the last written one.

    ``saved`` is the inventory the toolkit last wrote (``<state_dir>/ansible/inventory/
    xceprov.yml``): its ``all.vars`` and template group variables (SSH user and key, the pinned
    known_hosts, controller addresses) apply; its hosts are used when no state has any.
    ``read_state`` as for :func:`records_from_workdirs`.
    """
    records = records_from_workdirs(state_dir, cluster, read_state)
    common: dict[str, Any] = {}
    templates: dict[str, TemplateBootstrap] = {}
    if saved:
        body = saved.get("all") or {}
        common = dict(body.get("vars") or {})
        for group, gbody in (body.get("children") or {}).items():
            if group.startswith("template_") and (gbody.get("vars") or gbody.get("site_vars")):
                data = dict(gbody.get("vars") or {})
                roles = tuple(data.pop("xce_bootstrap_roles", ()))
                templates[group[len("template_") :]] = TemplateBootstrap(
                    (), dict(gbody.get("site_vars") or {}), roles, data
                )
        if not records:
            records = records_from_inventory(saved)
    return build_inventory(records, common, templates)


def write_inventory(path: Path, inventory: Mapping[str, Any]) -> Path:
    """Write an inventory file for the ``xceprov`` plugin atomically, 0600 in a 0700 directory.

    The file is the plugin's configuration with the document inside (JSON, which is YAML too):
    ``{"plugin": "xce.provisioner.xceprov", "all": {...}}``. Ansible's plain YAML inventory refuses a file with a
    ``plugin`` key, so the document is never read without the plugin's unsafe marking.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # mkstemp: mode 0600
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump({"plugin": PLUGIN_NAME, **inventory}, fh, indent=2, sort_keys=True)
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


def read_inventory(path: Path) -> dict[str, Any]:
    """An inventory file ``write_inventory`` wrote, as the document (``{"all": ...}``)."""
    data = durable.parse_json(path.read_text(encoding="utf-8"))
    return {"all": data.get("all") or {}} if isinstance(data, dict) else {"all": {}}
