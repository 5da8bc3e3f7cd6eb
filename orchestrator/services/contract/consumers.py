"""Who calls the provider scripts, told by the environment each consumer sets, and where that
consumer keeps the provider's configuration.

- **LSF's resource connector** (``ebrokerd``) runs a provider's scripts with ``PRO_CONF_DIR``
  (the provider's ``confPath`` of ``hostProviders.json``), ``PROVIDER_NAME``, ``PRO_LSF_TOP``,
  ``PRO_DATA_DIR`` and ``PRO_LSF_LOGDIR``. Its providers keep their files in
  ``$PRO_CONF_DIR/conf/`` (``<LSF_TOP>/conf/resource_connector/<name>/conf/``).
- **A Symphony host factory** runs them with ``HF_PROVIDER_CONFDIR`` (the provider instance's
  ``confPath``; optional in IBM's specification), else the instance's configuration is
  ``$HF_CONFDIR/providers/$HF_PROVIDER_NAME/``; it also sets ``HF_WORKDIR`` and ``HF_LOGDIR``.

``XCEPROV_CONSUMER`` (``lsf``, ``hostfactory``, ``none``) overrides the guess, e.g. on a host
whose environment carries both consumers' variables. A consumer's call never falls back to
``./xceprov.yaml`` nor to the built-in configuration (the simulated world, whose controller
port anything may listen on): with no configuration where the consumer keeps it, the call is
refused naming where it looked.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from orchestrator.configfile import DEFAULT_NAME, ENV_VAR, LoadedConfig, load_config
from orchestrator.errors import ConfigError

Consumer = Literal["lsf", "hostfactory", "generic"]
LSF: Consumer = "lsf"
HOST_FACTORY: Consumer = "hostfactory"
GENERIC: Consumer = "generic"

OVERRIDE_VAR = "XCEPROV_CONSUMER"
# Variables only the consumer sets for the scripts it runs (not a site's login profile).
LSF_VARS = ("PRO_CONF_DIR", "PRO_LSF_TOP", "PRO_DATA_DIR")
HOST_FACTORY_VARS = ("HF_PROVIDER_CONFDIR", "HF_CONFDIR", "HF_PROVIDER_NAME", "HF_WORKDIR")
_OVERRIDES: dict[str, Consumer] = {"lsf": LSF, "hostfactory": HOST_FACTORY, "none": GENERIC}
LABELS: dict[Consumer, str] = {
    LSF: "LSF's resource connector",
    HOST_FACTORY: "a Symphony host factory",
    GENERIC: "a generic caller",
}


def consumer_of(environ: Mapping[str, str]) -> Consumer:
    """The consumer whose environment ``environ`` is; ``ConfigError`` when it cannot be told."""
    override = environ.get(OVERRIDE_VAR, "")
    if override:
        if override not in _OVERRIDES:
            raise ConfigError([f"{OVERRIDE_VAR}={override[:40]!r}: not one of {', '.join(_OVERRIDES)}"])
        return _OVERRIDES[override]
    lsf = [v for v in LSF_VARS if environ.get(v)]
    hf = [v for v in HOST_FACTORY_VARS if environ.get(v)]
    if lsf and hf:
        raise ConfigError(
            [
                f"both LSF's ({lsf[0]}) and a host factory's ({hf[0]}) variables are set: "
                f"set {OVERRIDE_VAR} to lsf or hostfactory"
            ]
        )
    return LSF if lsf else HOST_FACTORY if hf else GENERIC


def config_candidates(consumer: Consumer, environ: Mapping[str, str]) -> list[Path]:
    """Where ``consumer`` keeps the provider's configuration, in the order looked at."""
    out: list[Path] = []
    if consumer == LSF:
        top = environ.get("PRO_LSF_TOP", "")
        if conf := environ.get("PRO_CONF_DIR", ""):
            # ebrokerd gives confPath as written; a relative one is under <LSF_TOP>/conf.
            base = Path(conf) if os.path.isabs(conf) or not top else Path(top) / "conf" / conf
            out.append(base / "conf" / DEFAULT_NAME)
        elif top and (name := environ.get("PROVIDER_NAME", "")):
            out.append(Path(top) / "conf" / "resource_connector" / name / "conf" / DEFAULT_NAME)
    elif consumer == HOST_FACTORY:
        if conf := environ.get("HF_PROVIDER_CONFDIR", ""):
            out.append(Path(conf) / DEFAULT_NAME)
        if (top := environ.get("HF_CONFDIR", "")) and (name := environ.get("HF_PROVIDER_NAME", "")):
            out.append(Path(top) / "providers" / name / DEFAULT_NAME)
    return out


def consumer_config(consumer: Consumer, environ: Mapping[str, str]) -> Path | None:
    """The configuration file of a consumer's call; None for a generic caller (xceprov's own
    search); ``ConfigError`` naming every place looked at when there is none."""
    if consumer == GENERIC:
        return None
    looked = config_candidates(consumer, environ)
    for path in looked:
        if path.is_file():
            return path
    where = ", ".join(str(p) for p in looked) or (
        "nowhere: PRO_CONF_DIR is not set"
        if consumer == LSF
        else "nowhere: neither HF_PROVIDER_CONFDIR nor HF_CONFDIR with HF_PROVIDER_NAME is set"
    )
    raise ConfigError(
        [
            f"called by {LABELS[consumer]} and no configuration found (looked in {where}); "
            f"put {DEFAULT_NAME} there or set XCEPROV_CONFIG"
        ]
    )


def contract_config(explicit: str | None, environ: Mapping[str, str]) -> tuple[LoadedConfig, Consumer]:
    """The configuration of a contract call and who calls: ``--config`` or ``XCEPROV_CONFIG``
    when given, else where the consumer keeps it (refused when it is not there), else, for a
    generic caller, xceprov's own search (``./xceprov.yaml``, then the built-in one)."""
    consumer = consumer_of(environ)
    chosen = explicit or environ.get(ENV_VAR) or None
    if chosen is None and (found := consumer_config(consumer, environ)) is not None:
        chosen = str(found)
    return load_config(chosen), consumer
