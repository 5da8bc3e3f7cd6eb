# Copyright: the xce-provisioner authors
# Apache-2.0 (see galaxy.yml)
"""Inventory plugin ``xceprov``: the hosts the XCE provisioner made, every toolkit value unsafe."""

from __future__ import annotations

DOCUMENTATION = r"""
name: xceprov
short_description: Hosts provisioned by the XCE provisioner
description:
  - Hosts and groups (template_<t>, provider_<p>, module_<m>, op_<op>, the template's
    bootstrap.groups) of the instances the toolkit provisioned.
  - With O(all) (the inventories the orchestrator writes for each run and for operators) the
    document is taken as it is; without it the hosts are read from the Terraform state under
    O(state_dir) and the settings from the inventory the toolkit wrote last. With the toolkit's
    pg backend (C(terraform.backend=pg)) those states are in PostgreSQL, read with the
    connection string in C(PG_CONN_STR).
  - Every value except a template's bootstrap.vars (C(site_vars)) comes from a host template or
    from the cloud and is marked unsafe, so Ansible never evaluates it as a template. A host
    whose name is not a valid RFC 1123 host name is left out.
  - Needs the toolkit's Python package C(xce-provisioner) (module C(orchestrator)) importable by
    the Python that runs Ansible (run the toolkit environment's ansible-playbook).
options:
  plugin:
    description:
      - The name of this plugin. The full name C(xce.provisioner.xceprov) works wherever the
        collection is installed; the short one only where this directory is on the plugin path.
    required: true
    choices: [xceprov, xce.provisioner.xceprov]
  all:
    description: The inventory document's C(all) group (hosts, vars, children), as the toolkit writes it.
    type: dict
  state_dir:
    description: The toolkit's state directory (relative to the current directory).
    type: str
    default: .xceprov
    env:
      - name: XCEPROV_STATE_DIR
  cluster:
    description: Only this cluster's Terraform state; empty for every cluster.
    type: str
    default: ""
    env:
      - name: XCEPROV_CLUSTER
"""

EXAMPLES = r"""
# xceprov.yml (the file name must be xceprov.yml or end in .xceprov.yml): the hosts of
# $XCEPROV_STATE_DIR (default ./.xceprov), with the collection installed
plugin: xce.provisioner.xceprov
"""

import os
from pathlib import Path

from ansible.errors import AnsibleParserError
from ansible.plugins.inventory import BaseInventoryPlugin

try:
    from orchestrator.clients.ansible import inventory as xceinv
    from orchestrator.errors import XceprovError
    from orchestrator.workspace import tfstates
except ImportError as exc:  # pragma: no cover - depends on how Ansible was started
    xceinv = None
    _IMPORT_ERROR = str(exc)
else:
    _IMPORT_ERROR = ""

# Marking a value unsafe. ansible-core 2.19 does not evaluate what an inventory plugin sets unless
# the plugin declares trusted_by_default, and wrap_var strips the trust a value loaded from a YAML
# file carries; before 2.19, wrap_var turns strings into AnsibleUnsafeText. Either way: data.
try:
    from ansible.utils.unsafe_proxy import wrap_var
except ImportError:  # pragma: no cover - a future ansible-core without the compatibility shim

    def wrap_var(value):
        return value


class InventoryModule(BaseInventoryPlugin):
    """Hosts of the XCE provisioner (see DOCUMENTATION)."""

    NAME = "xceprov"
    # Values come from templates and the cloud: never trusted as templates (ansible-core 2.19+).
    trusted_by_default = False

    def verify_file(self, path):
        """Only files named ``xceprov.yml`` / ``*.xceprov.yml`` (or .yaml)."""
        base = os.path.basename(path)
        named = base in ("xceprov.yml", "xceprov.yaml") or base.endswith((".xceprov.yml", ".xceprov.yaml"))
        return named and super().verify_file(path)

    def parse(self, inventory, loader, path, cache=True):
        """Add the hosts, groups and variables of the document (or of the state directory)."""
        super().parse(inventory, loader, path, cache)
        if xceinv is None:
            raise AnsibleParserError(
                f"{path}: the xce.provisioner.xceprov inventory plugin needs the toolkit's Python package "
                f"xce-provisioner (module orchestrator) in the Python that runs Ansible (run the toolkit "
                f"environment's ansible-playbook, or pip install it there): {_IMPORT_ERROR}"
            )
        self._read_config_data(path)
        body = self.get_option("all")
        document = {"all": body} if body is not None else self._from_state()
        self._populate(document)

    def _from_state(self):
        state_dir = os.path.abspath(self.get_option("state_dir"))
        saved_file = os.path.join(state_dir, "ansible", "inventory", xceinv.INVENTORY_NAME)
        saved = None
        if os.path.isfile(saved_file):
            # Through Ansible's loader, so bootstrap.vars keep the trust of a file the site wrote.
            try:
                saved = self.loader.load_from_file(saved_file, cache="none", trusted_as_template=True)
            except TypeError:  # before ansible-core 2.19 every loaded string is a template
                saved = self.loader.load_from_file(saved_file, cache="none")
        # A pg site's states are in PostgreSQL: read with Terraform's own PG_CONN_STR from the environment.
        try:
            with tfstates.state_reader(os.environ.get("PG_CONN_STR") or None) as read_state:
                return xceinv.inventory_from_state(
                    Path(state_dir), self.get_option("cluster") or None, saved, read_state
                )
        except XceprovError as exc:
            raise AnsibleParserError(f"xce.provisioner.xceprov: {exc}") from None

    def _populate(self, document):
        body = document.get("all") or {}
        for name, hostvars in (body.get("hosts") or {}).items():
            if not xceinv.valid_host_name(str(name)):
                self.display.warning(f"xceprov: host name {name!r} is not a valid host name; left out")
                continue
            self.inventory.add_host(str(name))
            for key, value in (hostvars or {}).items():
                self.inventory.set_variable(str(name), str(key), wrap_var(value))
        for key, value in (body.get("vars") or {}).items():
            self.inventory.set_variable("all", str(key), wrap_var(value))
        hosts = self.inventory.hosts
        for group, gbody in (body.get("children") or {}).items():
            group = self.inventory.add_group(str(group))
            gbody = gbody or {}
            for member in gbody.get("hosts") or {}:
                if str(member) in hosts:
                    self.inventory.add_child(group, str(member))
            for key, value in (gbody.get("vars") or {}).items():
                self.inventory.set_variable(group, str(key), wrap_var(value))
            # The template's bootstrap.vars: the site's own variables, templates allowed.
            for key, value in (gbody.get("site_vars") or {}).items():
                self.inventory.set_variable(group, str(key), value)
