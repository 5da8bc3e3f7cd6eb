"""The node manager configuration file (JSON, ``/etc/xce/node-manager.json``); stdlib only.

This module is shipped inside the node manager artifact, so it imports nothing but the
standard library and its own package (relative imports).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_PATH = Path("/etc/xce/node-manager.json")
# cloud-init's record of the instance id the cloud gave this host (``/var/lib/cloud/data/instance-id``).
CLOUD_INSTANCE_ID = Path("/var/lib/cloud/data/instance-id")
# The longest instance id believed from that file (EC2's are 19 characters, the simulated cloud's 14).
MAX_INSTANCE_ID = 128
KNOWN_ROLES = ("worker", "provisioner", "reverse-proxy")


class ConfigProblem(Exception):
    """The configuration file is missing, unreadable or invalid (one line)."""


@dataclass(frozen=True)
class NodeConfig:
    """What the node manager and the worker role need from the configuration."""

    roles: tuple[str, ...]
    addresses: tuple[str, ...]
    ca_file: str
    template: str
    host_name: str
    instance_id: str
    instance_key: str = ""
    op_id: str = ""
    server_name: str = ""
    client_cert: str = ""
    client_key: str = ""
    join_token_file: str = ""  # the host's join token (docs/protocol.md, "Authentication and roles")
    heartbeat_interval: float = 2.0
    max_frame_bytes: int = 4 * 1024 * 1024
    xce: dict[str, Any] = field(default_factory=dict)


def parse(text: str, origin: str = "node manager configuration", cloud_instance_id: str = "") -> NodeConfig:
    """Parse and validate the JSON text of a configuration; ``ConfigProblem`` names what is wrong.

    ``cloud_instance_id``: the id cloud-init recorded, used when the file names none (a
    first-boot host's user data is rendered before the cloud assigns the id)."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigProblem(f"{origin}: not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigProblem(f"{origin}: the top level must be an object")

    def text_of(obj: dict[str, Any], key: str, where: str, default: str | None = None) -> str:
        value = obj.get(key, default)
        if not isinstance(value, str) or (default is None and not value):
            raise ConfigProblem(f"{origin}: {where}{key} must be a non-empty string")
        return value

    roles = raw.get("roles", [])
    if not isinstance(roles, list) or not all(isinstance(r, str) for r in roles):
        raise ConfigProblem(f"{origin}: roles must be a list of strings")
    controller = raw.get("controller")
    if not isinstance(controller, dict):
        raise ConfigProblem(f"{origin}: controller must be an object")
    addresses = controller.get("addresses")
    if not isinstance(addresses, list) or not addresses or not all(isinstance(a, str) for a in addresses):
        raise ConfigProblem(f"{origin}: controller.addresses must be a non-empty list of host:port")
    for address in addresses:
        split_address(address)
    xce = raw.get("xce", {})
    if not isinstance(xce, dict):
        raise ConfigProblem(f"{origin}: xce must be an object")
    instance_key = text_of(raw, "instance_key", "", "")
    heartbeat = raw.get("heartbeat_interval", 2.0)
    if not isinstance(heartbeat, int | float) or not 0.05 <= heartbeat <= 3600:
        raise ConfigProblem(f"{origin}: heartbeat_interval must be a number of seconds in [0.05, 3600]")
    return NodeConfig(
        roles=tuple(roles),
        addresses=tuple(addresses),
        ca_file=text_of(controller, "ca_file", "controller."),
        server_name=text_of(controller, "server_name", "controller.", ""),
        client_cert=text_of(controller, "client_cert", "controller.", ""),
        client_key=text_of(controller, "client_key", "controller.", ""),
        template=text_of(raw, "template", ""),
        host_name=text_of(raw, "host_name", ""),
        # The bootstrap role adds the id the cloud assigned; a first-boot host has cloud-init's
        # record of it; before either the instance key stands in.
        instance_id=text_of(raw, "instance_id", "", cloud_instance_id or instance_key),
        instance_key=instance_key,
        op_id=text_of(raw, "op_id", "", ""),
        join_token_file=text_of(raw, "join_token_file", "", ""),
        heartbeat_interval=float(heartbeat),
        xce=xce,
    )


def load(path: Path) -> NodeConfig:
    """Read and validate the configuration file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigProblem(f"{path}: cannot read: {exc.strerror or exc}") from None
    return parse(text, str(path), cloud_instance_id(CLOUD_INSTANCE_ID))


def cloud_instance_id(path: Path) -> str:
    """The instance id cloud-init recorded at ``path`` ("" when there is none or it is no plain id)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return ""
    plain = text.replace("-", "").replace("_", "").replace(".", "").isalnum() and text.isascii()
    return text if plain and len(text) <= MAX_INSTANCE_ID else ""


def read_join_token(path: str) -> str:
    """The join token in ``path`` ("" when no file is configured); ``ConfigProblem`` when unreadable."""
    if not path:
        return ""
    try:
        return Path(path).read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise ConfigProblem(f"{path}: cannot read the join token: {exc.strerror or exc}") from None


def split_address(address: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too) as ``(host, port)``."""
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigProblem(f"controller address {address!r} is not host:port")
    return host.strip("[]"), int(port)
