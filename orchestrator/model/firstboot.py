"""The first-boot join's fixed names, shared by the renderer, the ops and the simulated cloud.

A template with ``bootstrap: {mode: first-boot}`` starts hosts that configure and join by
themselves (docs/bootstrap.md, "First boot"): the rendered user data names the token file in the
node manager configuration, and the provider module writes the host's token there at boot from
the ephemeral root variable :data:`TOKENS_VARIABLE`, which no plan file, state or bundle holds.
"""

from __future__ import annotations

import re
from typing import Final

FIRST_BOOT: Final = "first-boot"
# Where the host's join token is (node-manager.json's ``join_token_file``), mode 0600.
JOIN_TOKEN_FILE: Final = "/etc/xce/join-token"
JOIN_TOKEN_MODE: Final = "0600"
# The root variable (ephemeral, sensitive) of a module that delivers tokens: instance key -> token.
TOKENS_VARIABLE: Final = "join_tokens"
# The outcome a first-boot host is given at creation in place of a push play's: started, its
# success is its join (matched by the controller before its join deadline).
STARTED: Final = "started"
STARTED_OUTCOME: Final = f"{STARTED}: first boot, no push: the host joins by itself by its join deadline"
# What a join token looks like (docs/protocol.md §10): the sinks hide any text of this form
# (model.redaction), so no token minted anywhere reaches a log, the audit or an error line.
TOKEN_FORM: Final = re.compile(r"v2\.[0-9]{1,11}\.[0-9a-f]{64}")
