#!/usr/bin/env python3
"""Dynamic Ansible inventory of the hosts the toolkit provisioned, without the orchestrator.

    ansible-playbook -i inventories/xceprov_inventory.py ansible/playbooks/bootstrap.yml

Reads the ``instances`` output of every provider's Terraform state under
``$XCEPROV_STATE_DIR/work/<cluster>/`` (default ``./.xceprov``; ``$XCEPROV_CLUSTER`` picks one
cluster, default all), and adds the settings the toolkit's own inventory carries when
``$XCEPROV_STATE_DIR/ansible/inventory/hosts.json`` exists (its ``all.vars`` and template group
variables: SSH user and key, the pinned known_hosts, controller addresses). Groups:
``template_<t>``, ``provider_<p>``, ``op_<op>``. Needs only the standard library.
"""

import importlib.util
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODULE = HERE.parent / "orchestrator" / "clients" / "ansible" / "inventory.py"


def _inventory_module():
    # Loaded by path so that the rest of the package (and its dependencies) is not needed.
    spec = importlib.util.spec_from_file_location("xceprov_inventory_lib", MODULE)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def build():
    lib = _inventory_module()
    state_dir = Path(os.environ.get("XCEPROV_STATE_DIR", ".xceprov"))
    records = lib.records_from_workdirs(state_dir, os.environ.get("XCEPROV_CLUSTER") or None)
    written = state_dir / "ansible" / "inventory" / "hosts.json"
    common, templates = {}, {}
    if written.is_file():
        data = json.loads(written.read_text(encoding="utf-8"))
        common = data.get("all", {}).get("vars", {}) or {}
        for group, body in (data.get("all", {}).get("children", {}) or {}).items():
            if group.startswith("template_") and body.get("vars"):
                gvars = dict(body["vars"])
                roles = tuple(gvars.pop("xce_bootstrap_roles", ()))
                templates[group[len("template_"):]] = lib.TemplateBootstrap((), gvars, roles)
        if not records:
            records = lib.records_from_inventory(data)
    inv = lib.build_inventory(records, common, templates)
    # The --list format: groups at the top level, host variables under _meta.
    out = {"_meta": {"hostvars": inv["all"]["hosts"]}}
    out["all"] = {"hosts": sorted(inv["all"]["hosts"]), "vars": inv["all"].get("vars", {}),
                  "children": sorted(inv["all"]["children"])}
    for group, body in inv["all"]["children"].items():
        out[group] = {"hosts": sorted(body.get("hosts", {})), "vars": body.get("vars", {})}
    return out


def main(argv):
    inv = build()
    if len(argv) > 1 and argv[1] == "--host":
        print(json.dumps(inv["_meta"]["hostvars"].get(argv[2] if len(argv) > 2 else "", {})))
    else:
        print(json.dumps(inv, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
