"""What a run leaves on disk: no process environment, no credential, 0600 files in 0700 directories.

ansible-runner seeds the environment of ``ansible-playbook`` with a copy of ours and writes it,
with the command line, to the run's ``command`` artifact. The orchestrator runs with cloud
credentials in its environment (``AWS_SECRET_ACCESS_KEY`` and the like), and ``ansible-playbook``
needs none of them, so the runner's environment is cut down to ``run_environment`` before the
run starts: the names Ansible and ssh need, what the toolkit sets, and what ansible-runner adds
itself. Everything the run writes is then made private (``seal``), and old runs are rotated.

Per-run files and where they go (ansible-runner 2.4): the private data directory (``env/envvars``,
``env/extravars``, ``env/settings``, ``env/cmdline``, the run's inventory) is a temporary
directory removed after the run; the artifact directory keeps ``command``, ``stdout``,
``stderr``, ``status``, ``rc`` and the selected ``job_events/`` (no fact cache: the toolkit sets
none).
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

# Everything a run writes is made private by the same rule as the rest of the state directory.
from orchestrator.durable import seal as seal

# Inherited from our environment because Ansible, ssh or Python need them; nothing else is.
_INHERITED = frozenset(
    {
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "SHELL",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "TERM",
        # A path to the operator's agent socket, not a key: ssh needs it when the key lives there.
        "SSH_AUTH_SOCK",
    }
)
_PASSED_PREFIXES = ("LC_", "XCEPROV_")


def run_environment(
    prepared: Mapping[str, str], ours: Mapping[str, str], inherited: Mapping[str, str]
) -> dict[str, str]:
    """The environment a run gets: ``prepared`` (ansible-runner's) without what it copied blindly.

    A name stays when the toolkit set it (``ours``), when ansible-runner added or changed it
    (its callback plugin, ``AWX_ISOLATED_DATA_DIR``, ...), when it is one Ansible and ssh need
    (``_INHERITED``, ``LC_*``), or when it is in the toolkit's own namespace ``XCEPROV_*``, which
    a site's plays may read (``lookup('env', ...)``; documented to hold no secret). Anything
    else in ``inherited`` (our process environment) is dropped, credentials included, whatever
    they are called.
    """
    out: dict[str, str] = {}
    for name, value in prepared.items():
        if name in ours or name in _INHERITED or name.startswith(_PASSED_PREFIXES) or inherited.get(name) != value:
            out[name] = value
    return out


def rotate_artifacts(directory: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` run directories; returns what was deleted."""
    if not directory.is_dir():
        return []
    runs = sorted((p for p in directory.iterdir() if p.is_dir()), key=lambda p: (p.stat().st_mtime, p.name))
    doomed = runs[: max(0, len(runs) - keep)]
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed
