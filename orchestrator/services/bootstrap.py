"""Bootstrap (and decommission) of provisioned hosts with the shipped Ansible playbooks.

``bootstrap()`` is what both the orchestrator (after an apply) and ``xceprov bootstrap`` call:

1. instance records: given by the caller, else read from each provider's Terraform state
   (the ``instances`` output), else from the inventory file the last run wrote;
2. selection: every record, one op's (``op``), or named hosts (name, instance key, id or address);
   a record whose cloud-reported name is not a valid host name (RFC 1123), or whose address is
   neither an IP address nor such a name (``model.hostnames``), is refused with a ``failed``
   result naming the value, and never reaches Ansible, ssh or known_hosts; the other hosts go on;
3. host keys: published by the instance on its console (where the cloud shows it: the simulated
   cloud), else recorded on first contact, and pinned per instance (``clients.ansible.hostkeys``);
   hosts whose key cannot be had are not contacted and get a ``skipped`` result saying why;
4. the inventory of every known host is written to ``<state_dir>/ansible/inventory/xceprov.yml``
   (with the site's ``group_vars`` beside it) so an operator can re-run the play by hand;
5. the play runs (``clients.ansible.runner``) on an inventory of exactly the selected hosts, and
   every selected host gets a result; a ``stop`` (the daemon's SIGTERM, the command line's Ctrl-C)
   ends the play between tasks and its unfinished hosts are ``stopped`` (not bootstrapped).

Everything from host templates and the cloud reaches Ansible marked unsafe (see
``clients.ansible.inventory``); only a template's ``bootstrap.vars`` and the site's group_vars
are ordinary Ansible variables.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from orchestrator.clients.ansible.hostkeys import HostKeyStore, KeySource, KeyTarget, Scanner, keyscan
from orchestrator.clients.ansible.inventory import (
    INVENTORY_NAME,
    InstanceRecord,
    TemplateBootstrap,
    build_inventory,
    read_inventory,
    records_from_inventory,
    records_from_workdirs,
    refusal,
    write_inventory,
)
from orchestrator.clients.ansible.runner import HostResult, PlayStop, RunnerSettings, RunResult, run_playbook
from orchestrator.configfile import LoadedConfig
from orchestrator.errors import UsageError
from orchestrator.model.config import Config
from orchestrator.model.modules import labels_of
from orchestrator.model.progress import HostDone, ProgressSink, no_progress, reported_phase
from orchestrator.reconcile.offers import configured
from orchestrator.services.bootstrap_sources import SimulatedWorld, console_keys, simulated_sources
from orchestrator.services.join_tokens import join_token_vars
from orchestrator.workspace.pgconn import pg_conn_str
from orchestrator.workspace.tfstates import state_reader

Playbook = Literal["bootstrap", "decommission"]
PRE_HOOK = "pre-bootstrap.yml"
# The role's bake mode: install the node manager and the boot hook, no per-host file, no secret.
BAKE_VAR = "xce_node_manager_bake"
POST_HOOK = "post-bootstrap.yml"


@dataclass(frozen=True)
class BootstrapPaths:
    """Where the bootstrap keeps its files under the state directory."""

    root: Path

    @property
    def inventory_dir(self) -> Path:
        """The operator-usable inventory directory (``xceprov.yml`` + site ``group_vars``)."""
        return self.root / "inventory"

    @property
    def inventory(self) -> Path:
        """The inventory file."""
        return self.inventory_dir / INVENTORY_NAME

    @property
    def keys_dir(self) -> Path:
        """The toolkit's known_hosts and host key record."""
        return self.root


def paths_for(config: Config) -> BootstrapPaths:
    """The bootstrap's directory for a configuration: ``<state_dir>/ansible``."""
    return BootstrapPaths(config.state_dir / "ansible")


def runner_settings(config: Config, toolkit_root: Path) -> RunnerSettings:
    """The runner's settings from the ``ansible:`` section."""
    a = config.ansible
    return RunnerSettings(
        toolkit_root=toolkit_root,
        state_dir=config.state_dir,
        forks=a.forks,
        timeout=float(a.timeout),
        keep_artifacts=a.keep_artifacts,
        site_dir=a.site_dir,
        strategy=a.strategy,
    )


def common_vars(config: Config, known_hosts: Path) -> dict[str, Any]:
    """Inventory-wide variables: how to reach hosts and what the node manager needs."""
    a, c = config.ansible, config.controller
    ssh_args = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    out: dict[str, Any] = {
        "ansible_user": a.ssh_user,
        "ansible_ssh_common_args": ssh_args,
        "xce_node_manager_controller_addresses": list(c.worker_addresses or c.addresses),
    }
    if a.ssh_key is not None:
        out["ansible_ssh_private_key_file"] = str(a.ssh_key)
    if c.ca is not None:
        out["xce_node_manager_ca_file"] = str(c.ca)
    if c.server_name:
        out["xce_node_manager_server_name"] = c.server_name
    return out


def template_bootstrap(config: Config) -> dict[str, TemplateBootstrap]:
    """Each template's ``bootstrap`` section (groups, vars, roles), plus its ``xce`` side (data)."""
    return {
        name: TemplateBootstrap(
            tuple(t.bootstrap.groups),
            dict(t.bootstrap.vars),
            tuple(t.bootstrap.roles),
            {"xce_node_manager_xce": t.xce.model_dump(mode="json")},
        )
        for name, t in config.templates.items()
    }


def load_records(config: Config) -> list[InstanceRecord]:
    """Instances known from Terraform state (local files or pg backend rows), else from the last written inventory."""
    with state_reader(pg_conn_str(config)) as read_state:
        labels = {name: labels_of(p.module) for name, p in config.providers.items()}
        records = records_from_workdirs(config.state_dir, config.cluster, read_state, labels)
    if records:
        return records
    inv = paths_for(config).inventory
    if inv.is_file():
        try:
            return records_from_inventory(read_inventory(inv))
        except (OSError, ValueError) as exc:
            raise UsageError(f"{inv}: unreadable inventory: {exc}") from None
    return []


def select(records: Sequence[InstanceRecord], op: str | None, hosts: Sequence[str]) -> list[InstanceRecord]:
    """The records to run on; unknown host names are a usage error listing what is known."""
    if op is not None:
        chosen = [r for r in records if r.op_id == op]
        if not chosen:
            known_ops = _known({r.op_id for r in records})
            raise UsageError(f"no running instance of op {op!r} (known ops: {known_ops})")
        return chosen
    if not hosts:
        return list(records)
    chosen, missing = [], []
    for want in hosts:
        match = [r for r in records if want in (r.name, r.key, r.instance_id, r.address)]
        if match:
            chosen.extend(m for m in match if m not in chosen)
        else:
            missing.append(want)
    if missing:
        raise UsageError(f"unknown host(s) {', '.join(missing)} (known: {_known({r.name for r in records})})")
    return chosen


def _known(names: set[str]) -> str:
    listed = sorted(n for n in names if n)
    return ", ".join(listed[:10]) + (" ..." if len(listed) > 10 else "") if listed else "none"


def write_operator_inventory(
    config: Config,
    records: Sequence[InstanceRecord],
    known_hosts: Path,
    group_vars: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Write the inventory of every known host (and link the site's group_vars beside it)."""
    return publish_inventory(config, inventory_document(config, records, known_hosts, group_vars))


def publish_inventory(config: Config, document: Mapping[str, Any]) -> Path:
    """Write ``document`` as the operator's inventory, the site's group_vars linked beside it."""
    p = paths_for(config)
    path = write_inventory(p.inventory, document)
    link = p.inventory_dir / "group_vars"
    target = site_group_vars(config)
    if link.is_symlink() and (target is None or Path(os.readlink(link)) != target):
        link.unlink()
    if target is not None and not link.exists():
        link.symlink_to(target, target_is_directory=True)
    return path


def inventory_document(
    config: Config,
    records: Sequence[InstanceRecord],
    known_hosts: Path,
    group_vars: Mapping[str, Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The inventory document of ``records`` under this configuration."""
    modules = {name: prov.module for name, prov in config.providers.items()}
    placed = [replace(r, slots=offering_slots(config, r)) for r in records]
    return build_inventory(placed, common_vars(config, known_hosts), template_bootstrap(config), modules, group_vars)


def offering_slots(config: Config, record: InstanceRecord) -> int | None:
    """The slots ``record``'s offering gives its host when other than its template's (None: the
    template's, or an offering not listed: a ``select:`` one carries its slots in the user data)."""
    found = configured(config, record.template, record.provider) if record.offering else []
    named = next((o for o in found if o.name == record.offering), None)
    if named is None or named.slots == config.templates[record.template].xce.slots:
        return record.slots
    return named.slots


def site_group_vars(config: Config) -> Path | None:
    """The site's ``group_vars`` directory, resolved, when it has one."""
    site = config.ansible.site_dir
    if site is None or not (site / "group_vars").is_dir():
        return None
    return (site / "group_vars").resolve()


def hook_vars(config: Config) -> dict[str, str]:
    """Extra vars pointing bootstrap.yml at the site's pre/post playbooks, when they exist."""
    site = config.ansible.site_dir
    out: dict[str, str] = {}
    if site is None:
        return out
    for var, name in (("xce_bootstrap_pre_playbook", PRE_HOOK), ("xce_bootstrap_post_playbook", POST_HOOK)):
        if (site / name).is_file():
            out[var] = str((site / name).resolve())
    return out


def publish_wait(setting: float | None, ssh_wait: float) -> float | None:
    """How long published host keys are looked for: ``None`` (never) when the setting is 0; the
    SSH wait when it is unset, so the whole key step keeps the bound it had (a scan after it gets
    what is left of that wait)."""
    if setting is None:
        return ssh_wait
    return None if setting == 0 else setting


def bootstrap(
    loaded: LoadedConfig,
    toolkit_root: Path,
    *,
    op: str | None = None,
    hosts: Sequence[str] = (),
    records: Sequence[InstanceRecord] | None = None,
    extra_vars: Mapping[str, Any] | None = None,
    progress: ProgressSink | None = None,
    playbook: Playbook = "bootstrap",
    group_vars: Mapping[str, Mapping[str, Any]] | None = None,
    ssh_wait: float | None = None,
    scanner: Scanner = keyscan,
    published: KeySource | None = None,
    world: SimulatedWorld | None = None,
    scope: str | None = None,
    stop: PlayStop | None = None,
    join_deadlines: Mapping[str, float] | None = None,
    bake: bool = False,
) -> RunResult:
    """Run ``playbook`` on the selected instances; a result per host (see the module docstring).

    ``progress`` gets the phase (``bootstrap`` or ``decommission`` of ``scope``, by default
    ``op OP`` or nothing) naming the selected hosts, one ``HostDone`` per selected host, and a
    ``TaskStarted`` and ``TaskDone`` per task and host.

    ``group_vars`` adds variables to inventory groups; ``world`` lets hosts of the simulated
    cloud get its key and node manager (``bootstrap_sources``). A site's group_vars files still
    override both. ``stop`` ends the play early (``clients.ansible.runner.PlayStop``).
    ``published`` reads host keys instances published (default: the simulated cloud's consoles
    when ``world`` is given). ``join_deadlines`` (instance key -> unix time) are the expiries
    of the hosts' join tokens (``services/join_tokens.py``). ``bake``: the role's bake mode
    (``xce_node_manager_bake: true``, a builder of ``xceprov image bake``, docs/images.md): no
    join token is minted, since the image it makes must hold no secret.
    """
    loaded, sim_vars = simulated_sources(loaded, world)
    group_vars = {**sim_vars, **(group_vars or {})}
    config = loaded.config
    known = list(records) if records is not None else load_records(config)
    if not known:
        raise UsageError(
            f"no instances to bootstrap: no Terraform state under {config.state_dir / 'work'} "
            f"and no inventory at {paths_for(config).inventory}"
        )
    chosen = select(known, op, hosts)
    report = progress or no_progress
    scope = scope if scope is not None else (f"op {op}" if op else "")
    with reported_phase(report, playbook, scope, len(chosen), [r.name for r in chosen]):
        refused = {r.name: reason for r in chosen if (reason := refusal(r)) is not None}
        for name, reason in refused.items():
            report(HostDone(playbook, scope, name, "failed", reason))
        chosen = [r for r in chosen if r.name not in refused]
        p = paths_for(config)
        store = HostKeyStore(p.keys_dir, scanner=scanner)
        wait = float(config.ansible.timeout) / 2 if ssh_wait is None else ssh_wait
        problems = store.ensure(
            (KeyTarget(r.name, r.instance_id, r.address, r.port or 22, r.provider) for r in chosen),
            config.ansible.host_key_policy,
            wait=wait,
            workers=config.ansible.forks,
            source=published if published is not None else console_keys(config, world),
            publish_wait=publish_wait(config.ansible.host_key_publish_wait, wait),
        )
        for name, reason in problems.items():
            report(HostDone(playbook, scope, name, "unreachable", f"at task 'record SSH host key': {reason}"))
        document = inventory_document(config, known, store.known_hosts, group_vars)
        publish_inventory(config, document)
        reachable = [r.name for r in chosen if r.name not in problems]
        evars: dict[str, Any] = hook_vars(config)
        evars.update(extra_vars or {})
        if bake:
            evars[BAKE_VAR] = True
        settings = runner_settings(config, toolkit_root)
        # Join tokens: only a file path reaches Ansible; the file is gone after the run.
        tokens: contextlib.AbstractContextManager[dict[str, str]] = (
            contextlib.nullcontext({})
            if bake
            else join_token_vars(config, [r for r in chosen if r.name in reachable], join_deadlines)
        )
        with tokens as token_vars:
            result = run_playbook(
                settings,
                settings.ansible_dir / "playbooks" / f"{playbook}.yml",
                document,
                reachable,
                extravars={**evars, **token_vars},
                progress=progress,
                label=op or playbook,
                group_vars=site_group_vars(config),
                phase=playbook,
                scope=scope,
                stop=stop,
            )
    for r in chosen:
        # A host that could not be reached over SSH may present another key than the pinned one: say so.
        host = result.hosts.get(r.name)
        unreached = host is not None and (host.status == "unreachable" or "ssh" in (host.message or "").lower())
        reason = store.mismatch(KeyTarget(r.name, r.instance_id, r.address, r.port or 22)) if unreached else None
        if host is not None and reason:
            result.hosts[r.name] = HostResult(r.name, status="unreachable", task=host.task, message=reason)
    for name, reason in problems.items():
        result.hosts[name] = HostResult(name, status="unreachable", task="record SSH host key", message=reason)
    for name, reason in refused.items():
        result.hosts[name] = HostResult(name, status="failed", task="check the host name and address", message=reason)
    return result
