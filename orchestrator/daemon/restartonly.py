"""What a SIGHUP reload may change in a running daemon, and what waits for the next start.

The daemon's leases, controller link, working directories, Terraform engine, log handler and
metrics endpoint are made once, at start, from a few keys. A reload that changes one of them
cannot take effect without a restart, so the running daemon keeps the value it started with
(the log says so, one line per key) and everything else of the new configuration is used:

* ``cluster``, ``state_dir``, ``controller.*``, ``standalone``: the leases, the link, the
  instance id, the status file and every working directory were made from them;
* ``terraform.engine``, ``terraform.binary``: the engine is built at start;
* ``terraform.backend``, ``terraform.pg_conn_file``: every working directory was initialised
  for its backend, and the connection string was read, at start;
* ``daemon.log_format``, ``daemon.metrics.*``: the log handler and the endpoint are open;
* the set of providers (``providers.<name>`` added or removed): a lease is held for each at
  start. A provider the new file adds is not served (nor the template entries naming it); one
  it removes is still served with its last settings and template entries. The settings of a
  provider in both are reloaded.

docs/daemon.md ("Signals") and docs/configuration.md list the same keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.model.config import Config, ProviderSettings
from orchestrator.model.templateconfig import HostTemplate

# (dotted key, its section in Config, its name there); "" as section: top level.
RESTART_ONLY: tuple[tuple[str, str, str], ...] = (
    ("cluster", "", "cluster"),
    ("state_dir", "", "state_dir"),
    ("controller", "", "controller"),
    ("standalone", "", "standalone"),
    ("terraform.engine", "terraform", "engine"),
    ("terraform.binary", "terraform", "binary"),
    ("terraform.backend", "terraform", "backend"),
    ("terraform.pg_conn_file", "terraform", "pg_conn_file"),
    ("daemon.log_format", "daemon", "log_format"),
    ("daemon.metrics", "daemon", "metrics"),
)
PROVIDER_SET = "providers"


@dataclass(frozen=True)
class Kept:
    """A restart-only key the reload changed, and the value the running daemon keeps."""

    key: str
    value: Any

    def line(self, source: str) -> str:
        """The log line for it (no value for a whole section: it may hold paths and addresses)."""
        scalar = isinstance(self.value, str | bool | Path) or self.value is None
        shown = f"'{self.value}'" if scalar else "its previous settings"
        return f"SIGHUP: {self.key} changed in {source}: it takes effect at the next start; the daemon keeps {shown}"


def keep_restart_only(old: Config, new: Config) -> tuple[Config, list[Kept]]:
    """``new`` with the running value of every restart-only key, and the keys that changed.

    ``old`` is the configuration in force (its restart-only values are the start's).
    """
    kept: list[Kept] = []
    top: dict[str, Any] = {}
    sections: dict[str, dict[str, Any]] = {}
    for key, section, name in RESTART_ONLY:
        before = getattr(getattr(old, section), name) if section else getattr(old, name)
        after = getattr(getattr(new, section), name) if section else getattr(new, name)
        if before == after:
            continue
        kept.append(Kept(key, before))
        if section:
            sections.setdefault(section, {})[name] = before
        else:
            top[name] = before
    for section, values in sections.items():
        top[section] = getattr(new, section).model_copy(update=values)
    if set(old.providers) != set(new.providers):
        top["providers"], top["templates"] = _same_providers(old, new)
        kept.append(Kept(PROVIDER_SET, sorted(old.providers)))
    # model_copy does not validate: every value comes from a validated configuration, and the
    # templates were cut to the providers kept (no template names a provider it does not have).
    return (new.model_copy(update=top) if top else new), kept


def provider_set_line(kept: Kept, new: Config, source: str) -> str:
    """The log line for a changed set of providers (what is served until the next start)."""
    served = sorted(kept.value)
    added = sorted(set(new.providers) - set(served))
    removed = sorted(set(served) - set(new.providers))
    parts = [f"added {', '.join(added)}: not served"] if added else []
    parts += [f"removed {', '.join(removed)}: still served"] if removed else []
    what = "; ".join(parts)
    return (
        f"SIGHUP: the set of providers changed in {source} ({what}): it takes effect at the next start; "
        f"the daemon keeps serving {', '.join(served)}"
    )


def log_lines(kept: list[Kept], new: Config, source: str) -> list[str]:
    """One line per restart-only key the reload changed."""
    return [provider_set_line(k, new, source) if k.key == PROVIDER_SET else k.line(source) for k in kept]


def _same_providers(old: Config, new: Config) -> tuple[dict[str, ProviderSettings], dict[str, HostTemplate]]:
    """The providers of ``old`` (with ``new``'s settings where it has them) and ``new``'s
    templates cut to them (a removed provider keeps its old template entries)."""
    providers = {name: new.providers.get(name, settings) for name, settings in old.providers.items()}
    templates: dict[str, HostTemplate] = {}
    for tname, template in new.templates.items():
        entries = {p: entry for p, entry in template.providers.items() if p in providers}
        before = old.templates.get(tname)
        if before is not None:
            for p, entry in before.providers.items():
                if p not in new.providers:
                    entries.setdefault(p, entry)
        if entries:
            templates[tname] = template.model_copy(update={"providers": entries})
    return providers, templates
