"""Lease holders: one process instance of one certificate identity (docs/protocol.md §5, §10).

The certificate authenticates the role and names the identity; it does not tell apart two
processes that present it (a daemon and a command run beside it on the same machine). The join's
``leaseInstance`` does: every process makes one random instance id when it first joins, hands it
to its own helpers (the daemon's lease keeper), and the controller grants, renews, fences and
releases per ``identity/instance``. The instance id is no credential: a process that has the
certificate's key could claim any instance of that identity, and it could do anything that
identity may anyway; the id only keeps honest processes of one identity from taking, using and
releasing each other's leases by accident.
"""

from __future__ import annotations

import os
import re
import secrets
from typing import Final

# The same characters as a certificate identity (``tls.IDENTITY_PATTERN``): no "/" in either, so
# ``identity/instance`` names exactly one pair.
INSTANCE_PATTERN: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
_LABEL_CHARS: Final = re.compile(r"[^A-Za-z0-9._-]+")
_LABEL_MAX: Final = 80

_mine: tuple[int, str] | None = None


def holder_key(identity: str, instance: str) -> str:
    """The lease holder of a connection: the identity alone for a legacy join (no instance)."""
    return f"{identity}/{instance}" if instance else identity


def instance_refusal(instance: str) -> str | None:
    """Why ``instance`` cannot name a process instance (``None`` when it can; "" is legacy)."""
    if not instance or INSTANCE_PATTERN.fullmatch(instance):
        return None
    return f"leaseInstance {instance[:40]!r} must match {INSTANCE_PATTERN.pattern}"


def process_instance(label: str) -> str:
    """This process's lease instance for ``label``: ``<label>.<pid>.<16 random hex digits>``.

    The random part is made once per process (a forked child makes its own), so every link of
    one process joined with one label (the daemon's and its lease keeper's, which is handed the
    instance) is one holder, and every other process is another, even when pids are reused. The
    label (the join's informational instance id, such as ``<cluster>-daemon-<host>``) and the pid
    make the holder named in a refusal recognisable.
    """
    global _mine
    pid = os.getpid()
    if _mine is None or _mine[0] != pid:
        _mine = (pid, secrets.token_hex(8))
    clean = _LABEL_CHARS.sub("-", label).strip("-._")[:_LABEL_MAX] or "xceprov"
    return f"{clean}.{pid}.{_mine[1]}"


_PROCESS_SUFFIX: Final = re.compile(r"\.\d+\.[0-9a-f]{16}")


def holder_parts(holder: str) -> tuple[str, str]:
    """``(instance, label)`` of a lease holder ``identity/instance`` as the controller names it:
    the label is the instance without the ``.<pid>.<random>`` that :func:`process_instance` adds
    (the whole instance when it has none; both the identity for a legacy holder)."""
    identity, _, instance = holder.partition("/")
    if not instance:
        return identity, identity
    label = instance
    suffix = _PROCESS_SUFFIX.search(instance)
    if suffix is not None and suffix.end() == len(instance):
        label = instance[: suffix.start()]
    return instance, label
