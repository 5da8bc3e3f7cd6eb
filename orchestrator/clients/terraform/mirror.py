"""A local provider mirror, so that ``terraform init`` never needs the network.

Providers that are Python modules (the simulated cloud's ``xcesim``) are installed into
Terraform's *unpacked* filesystem-mirror layout as a tiny shell script that execs the
module with this interpreter. A CLI configuration file points Terraform at the mirror for
those namespaces, forbids direct download of them, and names a shared plugin cache. Every
other provider comes from the site's own mirror when it names one (``terraform.provider_mirror``:
a directory or an ``https://`` network mirror, and then never from a registry), else from
its registry.

Terraform documents its plugin cache as not safe for concurrent ``init``; every engine
that uses the cache takes :func:`cache_lock` around ``init`` (see ``commands.py``). An
``init`` of a working directory whose lock file does not list a provider yet rewrites that
provider's cache entry (removes it, copies it again), so another working directory's command
that starts meanwhile finds its provider missing and fails before doing anything; such a
command runs once more under the lock (``process.py``). Other commands do not take it.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from orchestrator import durable
from orchestrator.errors import ConfigError
from orchestrator.model.provider_mirror import is_network, mirror_credentials, shown, without_credentials

REGISTRY = "registry.terraform.io"
PLATFORM = "linux_amd64"
CLI_CONFIG_NAME = "terraform.rc"
# The CLI configuration Terraform reads when the site's network mirror URL carries credentials:
# the same as terraform.rc with the credentials in the URL, 0600 (terraform.rc never holds them).
PRIVATE_CLI_CONFIG_NAME = "terraform.private.rc"
MIRROR_DIR = "mirror"
CACHE_DIR = "plugin-cache"


@dataclass(frozen=True)
class LocalProvider:
    """A Terraform provider implemented by a Python module run with ``python -m module``."""

    namespace: str
    type: str
    version: str
    module: str

    @property
    def source(self) -> str:
        """The provider source address as written in ``required_providers``."""
        return f"{REGISTRY}/{self.namespace}/{self.type}"

    def executable_relpath(self) -> Path:
        """Path of the provider executable inside the mirror directory."""
        return (
            Path(REGISTRY)
            / self.namespace
            / self.type
            / self.version
            / PLATFORM
            / f"terraform-provider-{self.type}_v{self.version}"
        )


# The simulated cloud's provider; named by module path only, so the client layer never
# imports the simulated world (the import-linter contract ``sim-apart``).
XCESIM = LocalProvider("xce", "xcesim", "0.1.0", "orchestrator.sim.cloud.provider")
# Every local provider this project ships (mirrored, and attached by the bundled engine).
LOCAL_PROVIDERS: tuple[LocalProvider, ...] = (XCESIM,)


def plugin_cache_dir(root: Path) -> Path:
    """The shared plugin cache that :func:`ensure_mirror` names in the CLI configuration."""
    return root / CACHE_DIR


def cache_lock(cache_dir: Path, timeout: float = 300.0) -> FileLock:
    """An inter-process lock serialising population of one plugin cache directory.

    Held by every ``init`` that uses the cache, and by a command that failed because its
    providers went missing from the cache while it runs again (after that ``init``).
    """
    cache_dir.parent.mkdir(parents=True, exist_ok=True)
    return FileLock(str(cache_dir) + ".lock", timeout=timeout)


def ensure_mirror(root: Path, providers: Sequence[LocalProvider], site_mirror: str | None = None) -> Path:
    """Write the mirror of ``providers`` and the CLI configuration under ``root``.

    ``site_mirror`` (``terraform.provider_mirror``) serves every other provider; a directory
    that does not exist is a configuration error. Idempotent and safe to call from several
    processes at once: every file is written to a temporary name and renamed into place, and
    only when its content differs. Returns the path of the CLI configuration file (for
    ``TF_CLI_CONFIG_FILE``): ``terraform.rc``, or ``terraform.private.rc`` (0600) when the
    network mirror's URL carries credentials, which ``terraform.rc`` never holds.
    """
    if site_mirror is not None and not is_network(site_mirror) and not Path(site_mirror).is_dir():
        raise ConfigError([f"terraform.provider_mirror: {shown(site_mirror)}: no such directory"])
    root = root.resolve()
    mirror = root / MIRROR_DIR
    cache = plugin_cache_dir(root)
    mirror.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    for provider in providers:
        _write_if_changed(mirror / provider.executable_relpath(), _launcher(provider), 0o755)
    config = root / CLI_CONFIG_NAME
    public = None if site_mirror is None else without_credentials(site_mirror)
    _write_if_changed(config, _cli_config(mirror, cache, providers, public), 0o644)
    private = root / PRIVATE_CLI_CONFIG_NAME
    if mirror_credentials(site_mirror) is None:
        private.unlink(missing_ok=True)  # credentials dropped from the configuration: gone here too
        return config
    # Terraform sends a mirror HTTP basic auth only from the URL's user information (a .netrc is
    # not read for a mirror's listings; credentials blocks are bearer tokens): the URL with its
    # credentials is in this private file only, the one Terraform is then pointed at.
    _write_if_changed(private, _cli_config(mirror, cache, providers, site_mirror), 0o600)
    return private


def launcher_env(providers: Sequence[LocalProvider] = (XCESIM,)) -> dict[str, str]:
    """Environment the mirrored launchers need: this interpreter and where its packages live.

    Every Terraform engine passes it to Terraform (which passes it to the providers it starts).
    """
    env = {"XCEPROV_PYTHON": sys.executable}
    roots = [r for r in dict.fromkeys(_package_root(p.module) for p in providers) if r is not None]
    if roots:
        env["XCEPROV_PYTHONPATH"] = os.pathsep.join(str(r) for r in roots)
    return env


def _launcher(provider: LocalProvider) -> str:
    # The interpreter and import path come from the environment (launcher_env), not from this
    # file: its checksum is recorded in each working directory's .terraform.lock.hcl, so it
    # must not change when the project moves or its virtualenv is rebuilt.
    return (
        "#!/bin/sh\n"
        f"# written by xceprov: Terraform provider {provider.source} {provider.version}\n"
        'if [ -z "${XCEPROV_PYTHON:-}" ]; then\n'
        '  echo "XCEPROV_PYTHON is not set: run Terraform through the xceprov engine" >&2\n'
        "  exit 1\n"
        "fi\n"
        'if [ -n "${XCEPROV_PYTHONPATH:-}" ]; then\n'
        '  PYTHONPATH="$XCEPROV_PYTHONPATH${PYTHONPATH:+:$PYTHONPATH}"\n'
        "  export PYTHONPATH\n"
        "fi\n"
        f'exec "$XCEPROV_PYTHON" -m {shlex.quote(provider.module)} "$@"\n'
    )


def _package_root(module: str) -> Path | None:
    # Only the top-level package is looked up: finding the module itself would import its
    # parent packages (the simulated world) into this process.
    spec = importlib.util.find_spec(module.split(".", 1)[0])
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve().parent


def _hcl_string(value: str) -> str:
    # JSON string escapes are valid HCL escapes; template sequences must be doubled.
    import json

    return json.dumps(value).replace("${", "$${").replace("%{", "%%{")


def local_patterns(providers: Sequence[LocalProvider] = LOCAL_PROVIDERS) -> list[str]:
    """The provider address patterns the toolkit's own mirror serves (and no other source does)."""
    return sorted({f"{REGISTRY}/{p.namespace}/*" for p in providers})


def _site_source(site_mirror: str | None, listed: str) -> str:
    """The installation method of every provider that is not the toolkit's own."""
    exclude = f"    exclude = [{listed}]\n" if listed else ""
    if site_mirror is None:
        return f"  direct {{\n{exclude}  }}\n"
    if is_network(site_mirror):
        return f"  network_mirror {{\n    url = {_hcl_string(site_mirror)}\n{exclude}  }}\n"
    return f"  filesystem_mirror {{\n    path = {_hcl_string(site_mirror)}\n{exclude}  }}\n"


def _cli_config(mirror: Path, cache: Path, providers: Sequence[LocalProvider], site_mirror: str | None) -> str:
    patterns = local_patterns(providers)
    listed = ", ".join(_hcl_string(p) for p in patterns)
    direct = _site_source(site_mirror, listed)
    mirror_block = (
        f"  filesystem_mirror {{\n    path    = {_hcl_string(str(mirror))}\n    include = [{listed}]\n  }}\n"
        if patterns
        else ""
    )
    return (
        "# written by xceprov: the toolkit's providers from its mirror; the rest from the site's mirror or registry\n"
        f"plugin_cache_dir = {_hcl_string(str(cache))}\n"
        "disable_checkpoint = true\n"
        "provider_installation {\n"
        f"{mirror_block}{direct}"
        "}\n"
    )


def _write_if_changed(path: Path, content: str, mode: int) -> None:
    data = content.encode()
    try:
        st = path.stat()
        if path.read_bytes() == data and (st.st_mode & 0o777) == mode:
            return
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        durable.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
