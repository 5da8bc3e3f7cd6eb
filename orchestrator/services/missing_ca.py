"""The one line about a ``controller.ca`` file that does not exist yet, shared by ``validate`` and ``plan``.

A missing CA file is a warning for both, never an error: a preview renders the hosts' user data
without it (it shows counts, names, tags and cost; ``apply`` renders every op again and needs
the file). On the built-in configuration the file is the simulated world's, which ``xceprov sim
up`` makes, so a newcomer's first ``plan`` in an empty directory says so instead of failing.
"""

from __future__ import annotations

from orchestrator.configfile import BUILTIN_LABEL, LoadedConfig
from orchestrator.render.trust import ca_file_present


def missing_ca(loaded: LoadedConfig) -> str | None:
    """``controller.ca <path>: file not found yet`` and what makes it, or None when it exists (or is ``system``)."""
    ca = loaded.config.controller.ca
    if ca is None or ca_file_present(ca):  # a name the system refuses is reported when read
        return None
    line = f"controller.ca {ca}: file not found yet"
    if loaded.source == BUILTIN_LABEL:
        line += (
            " (the built-in configuration is the simulated world's: `xceprov sim up` makes its CA;"
            " for a site, give --config FILE, $XCEPROV_CONFIG or ./xceprov.yaml)"
        )
    return line
